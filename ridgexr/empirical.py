"""The smoothed empirical density p_t and its posterior moments.

For training points x_1..x_N with weights w_i (sum 1) and the OU process,

    p_t(x) = sum_i w_i N(x; alpha_t x_i, h_t I).

Everything the ridge needs follows from the posterior over which training point
generated x ("responsibilities" r_i(x) = softmax_i(log w_i - |x - alpha_t x_i|^2 / (2 h_t))):

    score(x)          = (alpha_t E[x0 | x] - x) / h_t
    posterior_mean(x) = E[x0 | x_t = x] = sum_i r_i x_i
    posterior_cov(x)  = Cov[x0 | x_t = x]
    hessian(x)        = (alpha_t^2 Cov[x0 | x] - h_t I) / h_t^2     (Hessian of log p_t)

All moments are computed with one streamed pass over the training set: logits by a
matrix product, an online log-sum-exp across training chunks, and first and second
moments as matrix products of the (queries x train) weights with the training points
and their outer products.  Memory is bounded by ``memory_budget`` bytes.  Posteriors
concentrated on one point (where E[xx^T] - m m^T cancels), and every query of a training
set of at most ``SMALL_N`` points, use a shifted, scaled form without cancellation.

Kernel interface.  Besides the public methods (numpy or torch in, the same kind out),
:class:`SmoothedEmpirical` offers three documented entry points for the geometry
kernels of :mod:`ridgexr.scms`, which work on flat, already validated torch tensors:
:meth:`SmoothedEmpirical.validate_queries`, :meth:`SmoothedEmpirical.moments_flat` and
:attr:`SmoothedEmpirical.radius`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ._backend import as_tensor, broadcast_time, check_finite, check_positive_time, to_like
from ._deprecation import warn_renamed
from ._validation import check_float, check_int, check_optional_int
from .process import OU

__all__ = ["SmoothedEmpirical", "Moments"]

DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of scratch space per call
#: training sets of up to this many points take the cancellation-free form for every query (SmoothedEmpirical._small)
SMALL_N = 16


@dataclass
class Moments:
    """Posterior moments at a batch of queries (torch tensors, leading shape ``batch``).

    Attributes
    ----------
    log_prob : (*batch,) log p_t(x), natural log of a density in 1 / data units^d
    mean : (*batch, d) E[x0 | x_t = x]
    cov : (*batch, d, d) Cov[x0 | x_t = x] (None when not requested), a property formed from
        ``cov_unit`` on each access; may underflow to 0 when the posterior is concentrated on
        one training point
    cov_unit : (*batch, d, d) the same covariance divided by exp(log_cov_scale); O(1) in
        size, so its eigenvectors are resolved even where ``cov`` underflows
    log_cov_scale : (*batch,) cov = exp(log_cov_scale) * cov_unit
    alpha, h : (*batch,) alpha_t and h_t at each query
    dropped_mass : (*batch,) posterior mass left out by top-k truncation (zeros without it)
    cov_error : (*batch,) estimated bound on the absolute error of each entry of ``cov_unit``
        (rounding in the second-moment subtraction, plus dropped mass times the squared
        data diameter under truncation); used to decide when an eigengap is resolved
    """

    log_prob: torch.Tensor
    mean: torch.Tensor
    alpha: torch.Tensor
    h: torch.Tensor
    dropped_mass: torch.Tensor
    cov_unit: torch.Tensor | None = None
    log_cov_scale: torch.Tensor | None = None
    cov_error: torch.Tensor | None = None

    @property
    def cov(self) -> torch.Tensor | None:
        """Cov[x0 | x_t = x] = exp(log_cov_scale) cov_unit, (*batch, d, d), squared data units.

        Formed on each access (the log ridge needs only ``cov_unit``, so SCMS never holds a
        second (Q, d, d) array); None when the covariance was not computed.
        """
        if self.cov_unit is None:
            return None
        return torch.exp(self.log_cov_scale)[..., None, None] * self.cov_unit

    def hessian(self) -> torch.Tensor:
        """Hessian of log p_t: (alpha^2 C - h I) / h^2, shape (*batch, d, d)."""
        cov = self.cov  # a property that forms the array: once
        if cov is None:
            raise ValueError("covariance was not computed")
        a2 = (self.alpha**2)[..., None, None]
        hh = self.h[..., None, None]
        eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
        return (a2 * cov - hh * eye) / hh**2


def _scaled_form(x1: torch.Tensor, delta: torch.Tensor, v: torch.Tensor, gap: torch.Tensor, cov: bool):
    """Posterior mean and covariance relative to the most responsible point x_1, without cancellation.

    With logits l_1 >= l_2 >= ... (l_1 at x_1), ``v`` (q, k) = exp(l_i - l_2) of the other points
    (0 where a point is x_1 itself), ``delta`` (q, k, d) = x_i - x_1 and ``gap`` (q,) = l_2 - l_1 <= 0:
    w = sum v_i Delta_i, log s = gap - log1p(exp(gap) sum v_i), mean = x_1 + s w and
    C = s [sum v_i Delta_i Delta_i^T - s w w^T].  The bracket (``cu``, symmetrised) is O(1) even
    where C underflows.  Returns mean (q, d), log s (q,), and with ``cov`` cu and the second moment
    about x_1 it was formed from (q, d, d) (None, None without).
    """
    log_s = gap - torch.log1p(torch.exp(gap) * v.sum(1))
    s = torch.exp(log_s)
    w = torch.einsum("qk,qkd->qd", v, delta)
    mean = x1 + s[:, None] * w
    if not cov:
        return mean, log_s, None, None
    sec = torch.einsum("qkd,qke->qde", v[:, :, None] * delta, delta)
    cu = sec - s[:, None, None] * w[:, :, None] * w[:, None, :]
    return mean, log_s, 0.5 * (cu + cu.transpose(1, 2)), sec


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

    Notes
    -----
    Methods take ``x`` of shape (..., d) as numpy or torch and return the same kind,
    on the device and in the floating dtype of ``x`` (float64 for numpy input).
    Training data are centred internally (covariances are shift-invariant), which
    keeps the second-moment subtraction well conditioned.

    Examples
    --------
    >>> import numpy as np
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> np.round(p.posterior_mean(np.array([[0.0, 1.0]])), 6).tolist()
    [[0.0, 0.0]]
    """

    def __init__(self, train: Any, t: Any, *, process: OU | None = None, weights: Any = None,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, drop_tol: float = 1e-6):
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
        self.process = process if process is not None else OU()
        self.train = tr
        self.t = tt
        self.weights = w
        self.memory_budget = memory_budget
        self._cache: dict = {}
        self.refine_k = 64  # components used to recompute ill-conditioned covariances
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
    def dim(self) -> int:
        """Deprecated spelling of :attr:`d`."""
        warn_renamed("SmoothedEmpirical.dim", "SmoothedEmpirical.d")
        return self.d

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
        """Training data prepared for one dtype/device (cached).

        Points with zero weight are dropped (they carry no mass); the rest are centred
        at their weighted mean.  ``aug`` = [x_c, |x_c|^2, log w] lets one matrix product
        give every logit.
        """
        key = (dtype, str(device))
        if key not in self._cache:
            keep = self.weights > 0
            w = self.weights[keep].to(device=device, dtype=torch.float64)
            x64 = self.train[keep.to(self.train.device)].to(device=device, dtype=torch.float64)
            center = (w[:, None] * x64).sum(0)
            xc64 = x64 - center
            sq64 = (xc64 * xc64).sum(1)
            aug = torch.cat([xc64, sq64[:, None], torch.log(w)[:, None]], 1).to(dtype)
            xc = xc64.to(dtype)
            n, d = xc.shape
            xx = None
            if n * d * d * xc.element_size() <= self.memory_budget // 4:
                xx = (xc[:, :, None] * xc[:, None, :]).reshape(n, d * d)
            # aug_t: the logits' right factor stored contiguous (a product with the transposed view
            # aug.T ran 6x slower: 5.8 vs 0.9 ms for 2000 queries x 1000 points)
            self._cache[key] = dict(xc=xc, center=center.to(dtype), aug_t=aug.T.contiguous(), xx=xx,
                                    radius2=float(sq64.max()))
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
        a_all, h_all = self.process.alpha(tf), self.process.h(tf)
        parts = [self._chunk(xf[q0:q0 + qc], a_all[q0:q0 + qc], h_all[q0:q0 + qc], tr, nc, cov, top_k, eps)
                 for q0 in range(0, max(q, 1), qc)]  # an empty batch: one empty chunk
        # one query chunk (the usual case, and every small active set of SCMS) is used as it is
        out = parts[0] if len(parts) == 1 else {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
        return Moments(alpha=a_all, h=h_all, **out)

    def _chunk(self, x, a, h, tr, nc, cov, top_k, eps) -> dict:
        """The fields of :class:`Moments` (but alpha and h) for one chunk of queries."""
        d = x.shape[1]
        y = x - a[:, None] * tr["center"]  # query relative to the scaled centre
        # logits = [y a/h, -a^2/(2h), 1] . [x_c, |x_c|^2, log w]
        yaug = torch.cat([y * (a / h)[:, None], (-0.5 * a * a / h)[:, None], torch.ones_like(h)[:, None]], 1)
        drop = None
        if top_k is None:
            lse, m1, cu = self._full(yaug, tr, nc, cov, eps)
        else:
            ref = self._topk(yaug, tr, nc, top_k, cov)
            lse, m1 = ref["lse"], ref["mean"]
            drop = ref["dropped_mass"]
            cu = (ref["cov_unit"], ref["log_cov_scale"], ref["cov_error"]) if cov else None
            # truncation is used only where its certified dropped mass is <= drop_tol;
            # the other queries are recomputed exactly (dropped mass 0)
            bad = drop > self.drop_tol
            if bool(bad.any()):
                lse_b, m1_b, cu_b = self._full(yaug[bad], tr, nc, cov, eps)
                lse, m1, drop = lse.clone(), m1.clone(), drop.clone()
                lse[bad], m1[bad], drop[bad] = lse_b, m1_b, 0.0
                if cov:
                    for part, part_b in zip(cu, cu_b):
                        part[bad] = part_b
        out = dict(mean=m1 + tr["center"],
                   log_prob=lse - (y * y).sum(1) / (2 * h) - 0.5 * d * (math.log(2 * math.pi) + torch.log(h)),
                   dropped_mass=torch.zeros_like(h) if drop is None else drop)
        if cov:
            out["cov_unit"], out["log_cov_scale"], out["cov_error"] = cu
        return out

    def _full(self, yaug, tr, nc, cov, eps):
        """Exact moments of a query chunk: lse, mean (centred) and (cov_unit, log_cov_scale, cov_error)."""
        if tr["xc"].shape[0] <= SMALL_N:
            return self._small(yaug, tr, cov, eps)
        lse, m1, second, conc, shifted = self._streamed(yaug, tr, nc, cov)
        if not cov:
            return lse, m1, None
        # E[xx^T] - mm^T cancels when the posterior is concentrated on one point: its
        # rounding error is ~ eps E|x|^2.  Such queries (flagged before the product, or found
        # unresolved to 1e-6 relative after it: the trace of the difference, the diagonal of c
        # below) get their covariance in the shifted, scaled form of _topk instead, first, so
        # that the one-pass logits they reuse are freed before c is formed
        diag = torch.diagonal(second, dim1=1, dim2=2)
        err = 64 * eps * diag.sum(-1)
        ill = conc | ((diag - m1 * m1).sum(-1) < 1e6 * err)
        resolved = None
        if bool(ill.any()):
            rows = torch.nonzero(ill).squeeze(1)
            resolved = self._cov_resolved(yaug[rows], tr, nc, None if shifted is None else (*shifted, rows))
        del shifted
        c = second - m1[:, :, None] * m1[:, None, :]
        c = 0.5 * (c + c.transpose(1, 2))
        ls = torch.zeros_like(err)
        if resolved is not None:
            c[ill], ls[ill], err[ill] = resolved
        return lse, m1, (c, ls, err)

    def _small(self, yaug, tr, cov, eps):
        """Exact moments for a small training set (N <= SMALL_N), every query in the
        cancellation-free form of :meth:`_topk` with k = N.

        :func:`_scaled_form` over all N points (l_1 the largest logit, at x_1; l_2 the second
        largest; v = exp(l_i - l_2), 0 at x_1), as :meth:`_topk` with nothing dropped, but without
        its selection, sort and gathers, and without the concentrated/non-concentrated split of
        :meth:`_streamed` (a handful of passes over (Q, N, d) arrays instead of two paths and their
        merge).
        """
        xc = tr["xc"]
        n, d = xc.shape
        logits = yaug @ tr["aug_t"]  # (q, n)
        if n == 1:
            q = logits.shape[0]
            zeros = torch.zeros(q, dtype=yaug.dtype, device=yaug.device)
            mean = xc.expand(q, d)
            cu = (torch.zeros(q, d, d, dtype=yaug.dtype, device=yaug.device), zeros, zeros) if cov else None
            return logits[:, 0], mean, cu
        top2, idx2 = torch.topk(logits, 2, dim=1)
        l1, l2 = top2[:, 0], top2[:, 1]
        first = torch.nn.functional.one_hot(idx2[:, 0], n).bool()
        v = torch.where(first, 0.0, torch.exp(logits - l2[:, None]))  # (q, n), <= 1; 0 at x_1
        x1 = xc[idx2[:, 0]]  # (q, d)
        delta = xc[None] - x1[:, None]  # (q, n, d)
        mean, log_s, cu, sec = _scaled_form(x1, delta, v, l2 - l1, cov)
        lse = l2 - log_s  # = l_1 + log(1 + sum_{i != 1} exp(l_i - l_1))
        if not cov:
            return lse, mean, None
        # the subtraction's rounding, as in _full: relative to the second moment it started from
        err = 64 * eps * torch.diagonal(sec, dim1=1, dim2=2).sum(-1)
        return lse, mean, (cu, log_s, err)

    def _streamed(self, yaug, tr, nc, cov):
        """Online log-sum-exp pass over training chunks.

        Returns lse (up to the per-query constant), mean and E[x x^T] of the centred data,
        a mask of queries whose posterior is concentrated (1 - r_max < 1e-6), for which
        the second moment is not formed when the training set fits one chunk, and in that case
        the logits (Q, N) and their log-sum-exp (Q,), both less each query's largest logit
        (None when the training set was streamed in several chunks).
        """
        xc, xx_all = tr["xc"], tr["xx"]
        n, d = xc.shape
        qn = yaug.shape[0]
        dtype, device = yaug.dtype, yaug.device
        if nc >= n:  # one chunk: decide concentration before the O(N d^2) product
            logits = yaug @ tr["aug_t"]
            m_run = logits.max(1).values
            e = torch.exp(logits.sub_(m_run[:, None]))
            s0 = e.sum(1)
            s1 = e @ xc
            second = conc = None
            if cov:
                conc = (s0 - 1) < 1e-6 * s0
                xx = xx_all if xx_all is not None else (xc[:, :, None] * xc[:, None, :]).reshape(n, d * d)
                n_conc = int(conc.sum())
                if 2 * n_conc <= qn:  # concentrated rows get their covariance elsewhere; a few of them
                    s2 = e @ xx       # cost less in the one product than gathering the others would
                else:  # mostly concentrated: skip their product
                    s2 = torch.zeros(qn, d * d, dtype=dtype, device=device)
                    rows = ~conc
                    if n_conc < qn:
                        s2[rows] = e[rows] @ xx
                second = s2.reshape(-1, d, d) / s0[:, None, None]
            return m_run + torch.log(s0), s1 / s0[:, None], second, conc, (logits, torch.log(s0))
        m_run = torch.full((qn,), -math.inf, dtype=dtype, device=device)
        s0 = torch.zeros(qn, dtype=dtype, device=device)
        s1 = torch.zeros(qn, d, dtype=dtype, device=device)
        s2 = torch.zeros(qn, d * d, dtype=dtype, device=device) if cov else None
        for n0 in range(0, n, nc):
            n1 = min(n, n0 + nc)
            xcn = xc[n0:n1]
            logits = yaug @ tr["aug_t"][:, n0:n1]
            m_new = torch.maximum(m_run, logits.max(1).values)
            scale = torch.exp(m_run - m_new)
            e = torch.exp(logits.sub_(m_new[:, None]))
            s0 = s0 * scale + e.sum(1)
            s1 = s1 * scale[:, None] + e @ xcn
            if cov:
                xxn = xx_all[n0:n1] if xx_all is not None else \
                    (xcn[:, :, None] * xcn[:, None, :]).reshape(n1 - n0, d * d)
                s2 = s2 * scale[:, None] + e @ xxn
            m_run = m_new
        second = (s2.reshape(-1, d, d) / s0[:, None, None]) if cov else None
        conc = ((s0 - 1) < 1e-6 * s0) if cov else None
        return m_run + torch.log(s0), s1 / s0[:, None], second, conc, None

    def _cov_resolved(self, yaug, tr, nc, shifted=None):
        """Covariance of concentrated posteriors in the shifted, scaled top-k form.

        k = min(N, refine_k).  The certified truncation error goes into ``cov_error``, so
        an eigengap it cannot resolve is reported as degenerate rather than trusted.
        ``shifted`` = (logits (Q', N), log-sum-exp (Q',), rows (q,)): the one-pass logits of
        :meth:`_streamed` and the rows of them that ``yaug`` holds, when it has them (then they
        are not computed again; the rows are gathered a sub-chunk at a time, within the memory
        budget).  Returns (cov_unit, log_cov_scale, cov_error).
        """
        n, d = tr["xc"].shape
        if n <= self.refine_k:  # nothing to truncate: the same form without top-k selection
            return self._small(yaug, tr, True, torch.finfo(yaug.dtype).eps)[2]
        k = min(n, self.refine_k)
        elems = max(self.memory_budget // yaug.element_size(), 1024)
        sub = max(1, elems // (4 * k * (d + 2) + (n if shifted is not None else 0)))
        parts = []
        for i in range(0, yaug.shape[0], sub):
            given = (None, None)
            if shifted is not None:
                logits, lse, rows = shifted
                given = (logits[rows[i:i + sub]], lse[rows[i:i + sub]])
            parts.append(self._topk(yaug[i:i + sub], tr, nc, k, True, *given))
        return tuple(torch.cat([p[key] for p in parts]) for key in ("cov_unit", "log_cov_scale", "cov_error"))

    def _topk(self, yaug, tr, nc, k, cov, logits=None, lse=None):
        """Moments over the k most responsible components, without cancellation.

        With kept logits l_1 >= l_2 >= ... and Delta_i = x_i - x_1, the covariance is
        C = s [sum_{i>=2} v_i Delta_i Delta_i^T - s w w^T] with v_i = exp(l_i - l_2),
        w = sum v_i Delta_i and s = exp(l_2 - l_1) / U, U = sum_i exp(l_i - l_1).  The
        bracket (``cov_unit``) is O(1) even when C underflows; ``log_cov_scale`` = log s.
        ``cov_error`` bounds the truncation error of cov_unit's entries with the certified
        dropped mass (every dropped logit is <= the smallest kept one).

        The logits are computed chunk by chunk over the training set, keeping the k best, unless
        the caller passes ``logits`` (q, N) of these queries and their log-sum-exp ``lse`` (q,),
        both relative to the same per-query constant (the returned ``lse`` is then relative to it).
        """
        xc = tr["xc"]
        n, d = xc.shape
        qn = yaug.shape[0]
        dtype, device = yaug.dtype, yaug.device
        if logits is not None:  # the caller's logits of these queries (one chunk of all N points)
            best_val, best_idx = torch.topk(logits, k, dim=1)  # sorted, descending
            lse_rel, shift = lse, None
        else:
            best_val = best_idx = None
            m_run = torch.full((qn,), -math.inf, dtype=dtype, device=device)
            s0 = torch.zeros(qn, dtype=dtype, device=device)
            for n0 in range(0, n, nc):
                n1 = min(n, n0 + nc)
                chunk = yaug @ tr["aug_t"][:, n0:n1]
                m_new = torch.maximum(m_run, chunk.max(1).values)
                s0 = s0 * torch.exp(m_run - m_new) + torch.exp(chunk - m_new[:, None]).sum(1)
                m_run = m_new
                # the chunk's own top k, merged with the best so far (sorted, descending)
                val, idx = torch.topk(chunk, min(k, n1 - n0), dim=1)
                idx = idx + n0
                if best_val is not None:
                    both = torch.cat([best_val, val], 1)
                    val, pos = torch.topk(both, min(k, both.shape[1]), dim=1)
                    idx = torch.gather(torch.cat([best_idx, idx], 1), 1, pos)
                best_val, best_idx = val, idx
            lse_rel, shift = torch.log(s0), m_run
        k = best_val.shape[1]
        # the dropped mass from logits relative to the largest (lse_rel): the absolute ones can be
        # ~1e5 at small t, whose rounding would swamp a small difference lse_kept - lse_all
        rel = best_val if shift is None else best_val - shift[:, None]
        lse_kept_rel = torch.logsumexp(rel, 1)
        out = dict(lse=lse_rel if shift is None else shift + lse_rel,
                   dropped_mass=(-torch.expm1(lse_kept_rel - lse_rel)).clamp_min(0.0))
        xk = xc[best_idx]  # (q, k, d)
        x1 = xk[:, 0]
        diam2 = 4.0 * tr["radius2"]
        log_drop = (math.log(n - k) + rel[:, -1] - lse_rel) if n > k else None
        if k == 1:
            out["mean"] = x1
            if cov:
                out["cov_unit"] = torch.zeros(qn, d, d, dtype=dtype, device=device)
                out["log_cov_scale"] = torch.zeros(qn, dtype=dtype, device=device)
                out["cov_error"] = torch.zeros(qn, dtype=dtype, device=device) if log_drop is None \
                    else torch.exp(log_drop) * diam2
            return out
        l1, l2 = best_val[:, 0], best_val[:, 1]
        v = torch.exp(best_val[:, 1:] - l2[:, None])  # (q, k-1), <= 1
        delta = xk[:, 1:] - x1[:, None, :]  # (q, k-1, d)
        out["mean"], log_s, cu, _ = _scaled_form(x1, delta, v, l2 - l1, cov)
        if cov:
            err = 64 * torch.finfo(dtype).eps * torch.diagonal(cu, dim1=1, dim2=2).sum(-1)
            if log_drop is not None:
                err = err + torch.exp(log_drop - log_s) * diam2
            out["cov_unit"], out["log_cov_scale"], out["cov_error"] = cu, log_s, err
        return out

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
