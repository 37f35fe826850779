"""The public density object :class:`SmoothedEmpirical`: validation, caching, chunk planning.

It validates its arguments and the queries, prepares the training set once per dtype/device,
splits a batch into chunks that fit its memory budget and hands each to
:func:`ridgexr.empirical.kernels.chunk_moments`; the public methods (numpy or torch in, the
same kind out) are views of the resulting :class:`~ridgexr.empirical.Moments`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._backend import as_tensor, broadcast_time, check_finite, check_positive_time, to_like
from .._validation import check_float, check_int, check_option, check_optional_int
from ..choices import LOGIT_DTYPES
from ..process import OU
from .kernels import chunk_moments, prepare_training_set
from .lowrank import RANDOMIZED_MIN_D, LowRankSpectrum, lowrank_chunk, support_path
from .moments import Moments

__all__ = ["SmoothedEmpirical", "DEFAULT_MEMORY_BUDGET", "SMALL_N", "LOWRANK_MAX_ITER"]

DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of scratch space per call
#: training sets of up to this many points take the cancellation-free form for every query
#: (the default of SmoothedEmpirical.small_n; ridgexr.empirical.kernels.small_moments)
SMALL_N = 16
#: applications of the covariance per query chunk on the randomized low-rank path before the
#: uncertified queries are handed to the dense path (:meth:`SmoothedEmpirical.spectrum_flat`)
LOWRANK_MAX_ITER = 60


class SmoothedEmpirical:
    """The smoothed empirical density p_t = sum_i w_i N(alpha_t x_i, h_t I).

    Parameters
    ----------
    train : array (N, d)
        Training points (numpy or torch), finite, N >= 1.
    t : float or array
        Diffusion time(s) > 0.  A scalar, or an array that broadcasts against the
        leading (batch) dims of the queries ``x`` passed to the methods, so one call
        can evaluate a whole block of sampler steps, each at its own time.
    process : OU, optional
        Forward process (default ``OU()``).
    weights : array (N,), optional
        Non-negative mixture weights (normalised to sum 1); uniform by default.
    memory_budget : int, optional
        Bytes of scratch memory one call may use (default 1 GiB); queries and
        training points are processed in chunks that fit.
    drop_tol : float, optional
        With ``top_k``, queries whose dropped posterior mass exceeds this bound (default
        1e-6) are recomputed without truncation, so every reported ``dropped_mass`` is
        <= drop_tol.
    logits : {"float64", "float32"}, optional
        Precision of the streamed top-k pass (``top_k``): ``"float64"`` (default), or float32
        products with float64 accumulation (about half the time of that pass on CPU), certified by a
        rounding bound (:func:`ridgexr.empirical.kernels.logit_error_bound`): the kept points' logits
        and moments are float64, the reported ``dropped_mass`` is an upper bound, and queries it does
        not certify below ``drop_tol`` are computed exactly in float64.  Applies to float64 queries;
        the exact paths are float64 either way.

    Notes
    -----
    Methods take ``x`` of shape (..., d) as numpy or torch and return the same kind,
    on the device and in the floating dtype of ``x`` (float64 for numpy input).
    Training data are centred internally (covariances are shift-invariant), which
    keeps the second-moment subtraction well conditioned.

    Three tuning attributes are set by the constructor: ``refine_k`` (64), the components used
    to recompute ill-conditioned covariances, ``small_n`` (:data:`SMALL_N`), the largest
    training set whose every query takes the cancellation-free form, and ``randomized_min_d``
    (:data:`~ridgexr.empirical.lowrank.RANDOMIZED_MIN_D`), the dimension above which
    :meth:`spectrum_flat` gets spread posteriors' eigenpairs by randomized subspace iteration
    instead of forming their covariance over the certified support.

    Examples
    --------
    >>> import numpy as np
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> np.round(p.posterior_mean(np.array([[0.0, 1.0]])), 6).tolist()
    [[0.0, 0.0]]
    """

    def __init__(self, train: Any, t: Any, *, process: OU | None = None, weights: Any = None,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, drop_tol: float = 1e-6, logits: str = "float64"):
        tr = as_tensor(train, name="train")
        if tr.ndim != 2:
            raise ValueError(f"train must have shape (N, d), got shape {tuple(tr.shape)}")
        if tr.shape[0] == 0:
            raise ValueError("train is empty: need at least one training point")
        if tr.shape[1] == 0:
            raise ValueError("train has zero features (d = 0)")
        check_finite(tr, "train")
        tt = as_tensor(t, name="t")
        check_positive_time(tt, "t")
        if weights is None:
            w = torch.full((tr.shape[0],), 1.0 / tr.shape[0], dtype=torch.float64)
        else:
            w = as_tensor(weights, name="weights", dtype=torch.float64).cpu()
            if w.shape != (tr.shape[0],):
                raise ValueError(f"weights must have shape ({tr.shape[0]},), got {tuple(w.shape)}")
            check_finite(w, "weights")
            if bool((w < 0).any()) or float(w.sum()) <= 0:
                raise ValueError("weights must be non-negative with a positive sum")
            w = w / w.sum()
        drop_tol = check_float(drop_tol, "drop_tol", min_val=0, max_val=1)
        memory_budget = check_int(memory_budget, "memory_budget", min_val=1 << 16)
        self.logits = check_option(logits, "logits", LOGIT_DTYPES)
        self.process = process if process is not None else OU()
        self.train = tr
        self.t = tt
        self.weights = w
        self.memory_budget = memory_budget
        self._cache: dict = {}
        self.refine_k = 64  # components used to recompute ill-conditioned covariances
        self.small_n = SMALL_N  # training sets up to this size: the cancellation-free form for every query
        self.randomized_min_d = RANDOMIZED_MIN_D  # spread posteriors above this d: the randomized path
        self.drop_tol = drop_tol
        keep = w > 0
        x64 = tr[keep.to(tr.device)].to(torch.float64)
        centred = x64 - (w[keep].to(x64.device)[:, None] * x64).sum(0)
        self._radius = math.sqrt(float((centred * centred).sum(1).max()))

    # ------------------------------------------------------------------ helpers
    @property
    def n_train(self) -> int:
        """Number of training points N."""
        return int(self.train.shape[0])

    @property
    def d(self) -> int:
        """Ambient dimension d."""
        return int(self.train.shape[1])

    @property
    def radius(self) -> float:
        """Largest distance of a (weighted) training point from the weighted training mean, data units."""
        return self._radius

    def with_time(self, t: Any) -> "SmoothedEmpirical":
        """The same training set at another time (shares cached training data)."""
        new = SmoothedEmpirical.__new__(SmoothedEmpirical)
        new.__dict__.update(self.__dict__)
        tt = as_tensor(t, name="t")
        check_positive_time(tt, "t")
        new.t = tt
        return new

    def _train_on(self, dtype: torch.dtype, device: torch.device) -> dict:
        """Training data prepared for one dtype/device by :func:`~ridgexr.empirical.kernels.prepare_training_set` (cached)."""
        key = (dtype, str(device))
        if key not in self._cache:
            self._cache[key] = prepare_training_set(self.train, self.weights, dtype, device, self.memory_budget,
                                                    self.logits)
        return self._cache[key]

    def validate_queries(self, x: Any, name: str = "x") -> tuple[torch.Tensor, torch.Tensor]:
        """Kernel interface: ``x`` as a finite tensor (..., d) and this density's t broadcast to (...).

        Raises ``ValueError`` naming ``name`` for a wrong shape, non-finite values or times
        that do not broadcast against the batch shape.
        """
        xt = as_tensor(x, name=name)
        if xt.ndim < 1 or xt.shape[-1] != self.d:
            raise ValueError(f"`{name}` must have shape (..., {self.d}) to match train; "
                             f"got shape {tuple(xt.shape)}")
        check_finite(xt, name)
        tb = broadcast_time(self.t.to(device=xt.device, dtype=xt.dtype), xt.shape[:-1], name)
        return xt, tb

    # ------------------------------------------------------------------ core
    def moments(self, x: Any, *, cov: bool = True, top_k: int | None = None) -> Moments:
        """Log-density and posterior moments at ``x`` in one pass (torch tensors out).

        Parameters
        ----------
        x : array (..., d)
        cov : bool
            Also compute the posterior covariance (the O(N d^2) part).
        top_k : int, optional
            Keep only the k most responsible training points per query for the mean
            and covariance; ``dropped_mass`` then holds the exact posterior mass left
            out (computed from all N logits), an upper bound on the error weight.
            Queries whose dropped mass would exceed ``drop_tol`` are computed exactly.
        """
        xt, tb = self.validate_queries(x)
        batch = xt.shape[:-1]
        d = self.d
        top_k = check_optional_int(top_k, "top_k", min_val=1)
        if top_k is not None and top_k >= self.n_train:
            top_k = None
        out = self.moments_flat(xt.reshape(-1, d), tb.reshape(-1), cov=cov, top_k=top_k)
        shapes = dict(mean=(d,), cov_unit=(d, d))
        return Moments(**{key: (None if getattr(out, key) is None else
                                getattr(out, key).reshape((*batch, *shapes.get(key, ()))))
                          for key in Moments.__dataclass_fields__})

    def _chunk_sizes(self, q: int, itemsize: int, cov: bool, top_k: int | None):
        """Queries per chunk and training points per chunk (qc, nc) that fit the memory budget."""
        d = self.d
        n = self.n_train
        elems = max(self.memory_budget // itemsize, 1024)
        per_pair = 3  # logits, exp, temporaries per (query, train) pair
        if top_k is not None:
            nc = min(n, max(1, elems // (8 * max(d, 1))))
            per_query = per_pair * nc + top_k * (d + 3) * 2 + (d * d if cov else 0) * 2
            qc = max(1, min(q, elems // per_query))
            return qc, nc
        nc = min(n, max(1, (elems // 4) // (d * d if cov else d)))
        per_query = per_pair * nc + (d * d if cov else 0) * 2 + 4 * d
        qc = max(1, min(q, elems // per_query))
        return qc, nc

    def moments_flat(self, xf: torch.Tensor, tf: torch.Tensor, *, cov: bool,
                     top_k: int | None = None) -> Moments:
        """Kernel interface: :class:`Moments` at flat queries, no validation.

        Parameters
        ----------
        xf : tensor (Q, d)
            Finite queries (as returned by :meth:`validate_queries`, flattened).
        tf : tensor (Q,)
            Their diffusion times (> 0), same dtype and device.
        cov : bool
            Also compute the covariance fields.
        top_k : int >= 1, optional
            Keep the k most responsible training points (already validated; unlike
            :meth:`moments`, k >= N still takes the truncated, cancellation-free path).

        Returns
        -------
        Moments with leading shape (Q,).
        """
        dtype, device = xf.dtype, xf.device
        tr = self._train_on(dtype, device)
        q = xf.shape[0]
        eps = torch.finfo(dtype).eps
        qc, nc = self._chunk_sizes(q, xf.element_size(), cov, top_k)
        # the exact recomputation of queries that top-k cannot certify streams the training set in the
        # exact path's own chunks: the top-k chunk (~memory_budget / (64 d) points) would build (nc, d^2)
        # outer-product blocks (105 GB at d = 784 with the default budget)
        nc_exact = nc if top_k is None else self._chunk_sizes(qc, xf.element_size(), cov, None)[1]
        a_all, h_all = self.process.alpha(tf), self.process.h(tf)
        settings = dict(drop_tol=self.drop_tol, small_n=self.small_n, refine_k=self.refine_k,
                        memory_budget=self.memory_budget, nc_exact=nc_exact)
        parts = [chunk_moments(xf[q0:q0 + qc], a_all[q0:q0 + qc], h_all[q0:q0 + qc], tr, nc, cov, top_k, eps,
                               **settings)
                 for q0 in range(0, max(q, 1), qc)]  # an empty batch: one empty chunk
        # one query chunk (the usual case, and every small active set of SCMS) is used as it is
        out = parts[0] if len(parts) == 1 else {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
        return Moments(alpha=a_all, h=h_all, **out)

    def spectrum_flat(self, xf: torch.Tensor, tf: torch.Tensor, *, n_eig: int, need: int,
                      top_k: int | None = None, start: torch.Tensor | None = None,
                      max_iter: int = LOWRANK_MAX_ITER, force: str | None = None, seed: int = 0,
                      gap_floor: float | None = None) -> LowRankSpectrum:
        """Kernel interface: the top ``n_eig`` eigenpairs of the O(1)-scaled posterior covariance.

        The low-rank paths of :mod:`ridgexr.empirical.lowrank` (Gram where the posterior is carried
        by few points; where it is spread, the covariance formed over each query's certified support
        up to d = ``randomized_min_d`` (one (d, d) matrix per query, never a (chunk, d^2) block) and
        certified randomized subspace iteration above it, dense for the queries the latter cannot
        certify), following the dense path's decisions, so that the
        eigenpairs are those of :meth:`moments_flat`'s ``cov_unit``.

        Parameters
        ----------
        xf : tensor (Q, d)
            Finite queries, data units.
        tf : tensor (Q,)
            Their diffusion times (> 0), same dtype and device.
        n_eig : int
            Eigenpairs to return, 1 <= n_eig <= d (the randomized block size).
        need : int
            Leading eigenpairs the randomized path must certify (d* + 1 for a frame), <= n_eig.
        top_k : int, optional
            As in :meth:`moments_flat` (already validated).
        start : tensor (Q, d, n_eig), optional
            A warm start of the randomized path's block (e.g. the previous SCMS iteration's vectors).
        max_iter : int
            Covariance applications before uncertified queries go to the dense path.
        force : {None, "randomized"}
            ``"randomized"``: every query that is not on the small-N path goes through the randomized
            path, whatever d (tests and benchmarks).
        seed : int
            Of the random starts, completions and certificate vectors (results are deterministic).
        gap_floor : float, optional
            Relative floor c of the frame's eigenvalues (``ridge.gap_floor``; default sqrt(eps)): the rank
            count and the randomized path's certificate use it, as the dense frame does (already validated).

        Returns
        -------
        LowRankSpectrum with leading shape (Q,).
        """
        dtype, device = xf.dtype, xf.device
        tr = self._train_on(dtype, device)
        q, d = xf.shape
        n = int(tr["xc"].shape[0])
        itemsize = xf.element_size()
        elems = max(self.memory_budget // itemsize, 1024)
        k = top_k if top_k is not None else self.refine_k
        # per query: its logits, responsibilities and their exponentials (3 N), the kept points
        # (k (d + 3), twice), the Gram matrix, and the block with its products (~6 d n_eig); on the
        # support path (d <= randomized_min_d) also the formed covariance and eigh's vectors (2 d^2)
        per_query = 3 * n + 2 * k * (d + 3) + k * k + 6 * d * n_eig
        if support_path(d, force, self.randomized_min_d):
            per_query += 2 * d * d
        qc = max(1, min(q, elems // per_query))
        nc = self._chunk_sizes(qc, itemsize, False, top_k)[1]
        nc_exact = self._chunk_sizes(1, itemsize, True, None)[1]
        a_all, h_all = self.process.alpha(tf), self.process.h(tf)
        parts = []
        for q0 in range(0, max(q, 1), qc):
            x, a, h = xf[q0:q0 + qc], a_all[q0:q0 + qc], h_all[q0:q0 + qc]
            y = x - a[:, None] * tr["center"]
            yaug = torch.cat([y * (a / h)[:, None], (-0.5 * a * a / h)[:, None], torch.ones_like(h)[:, None]], 1)
            part = lowrank_chunk(yaug, tr, nc, n_eig, need, top_k, drop_tol=self.drop_tol, small_n=self.small_n,
                                 refine_k=self.refine_k, memory_budget=self.memory_budget, nc_exact=nc_exact,
                                 max_iter=max_iter, seed=seed, force=force, randomized_min_d=self.randomized_min_d,
                                 start=None if start is None else start[q0:q0 + qc], gap_floor=gap_floor)
            lse = part.pop("lse")
            part["log_prob"] = lse - (y * y).sum(1) / (2 * h) - 0.5 * d * (math.log(2 * math.pi) + torch.log(h))
            part["mean"] = part["mean"] + tr["center"]
            parts.append(part)
        out = parts[0] if len(parts) == 1 else {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
        return LowRankSpectrum(alpha=a_all, h=h_all, **out)

    # ------------------------------------------------------------------ public API
    def log_prob(self, x: Any) -> Any:
        """log p_t(x); x (..., d) -> (...)."""
        return to_like(self.moments(x, cov=False).log_prob, x)

    def posterior_mean(self, x: Any, *, top_k: int | None = None) -> Any:
        """E[x0 | x_t = x]; x (..., d) -> (..., d), in data units."""
        return to_like(self.moments(x, cov=False, top_k=top_k).mean, x)

    def posterior_cov(self, x: Any, *, top_k: int | None = None) -> Any:
        """Cov[x0 | x_t = x]; x (..., d) -> (..., d, d), in squared data units."""
        return to_like(self.moments(x, cov=True, top_k=top_k).cov, x)

    def score(self, x: Any, *, top_k: int | None = None) -> Any:
        """grad log p_t(x) = (alpha_t E[x0|x] - x) / h_t; x (..., d) -> (..., d)."""
        xt = as_tensor(x, name="x")
        m = self.moments(xt, cov=False, top_k=top_k)
        xt = xt.to(m.mean.dtype)
        return to_like((m.alpha[..., None] * m.mean - xt) / m.h[..., None], x)

    def hessian(self, x: Any, *, top_k: int | None = None) -> Any:
        """Hessian of log p_t: (alpha_t^2 Cov[x0|x] - h_t I) / h_t^2; x (..., d) -> (..., d, d)."""
        return to_like(self.moments(x, cov=True, top_k=top_k).hessian(), x)

    def __repr__(self) -> str:
        t = self.t
        ts = f"{float(t):g}" if t.numel() == 1 else f"array{tuple(t.shape)}"
        return f"SmoothedEmpirical(N={self.n_train}, d={self.d}, t={ts})"
