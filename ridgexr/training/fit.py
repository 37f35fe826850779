"""Fitted random-feature denoisers: one (schedule, width) cell at several training times tau."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .._backend import as_tensor, check_finite
from .._validation import check_float, check_int, check_option
from .. import defaults
from ..choices import INITS, TRAINING_METHODS as METHODS
from ..features import RandomFeatureDenoiser
from ..process import OU
from .dynamics import GradientFlow, gradient_descent
from .quadratic import TARGETS, QuadraticLoss, accumulate, outputs_from_mean, targets
from .quadrature import DEFAULT_QUADRATURE, PAPER_N_NOISE, PAPER_N_TIME
from .sample import TrainingSample, block_mean_and_tangent, draw_training_sample
from .schedules import schedule_name, schedule_weight

__all__ = ["METHODS", "INITS", "PAPER_N_TIME", "PAPER_N_NOISE", "RandomFeatureFit", "evaluate_fits", "evaluate_denoiser", "initial_readout",
           "fit_random_features", "fit_sweep"]



@dataclass
class RandomFeatureFit:
    """A trained random-feature denoiser at several training times tau.

    Attributes
    ----------
    model : the untrained model (fixed features, A(0))
    train : (N, d) training data
    schedule : name of the loss-weight schedule
    taus : (n_tau,) training times (gradient-flow time of the paper's L)
    A : (n_tau, d, p) readouts
    quadratic : QuadraticLoss -- U, V, C, the sample, lambda, y and f* (also readable as
        ``fit.U``, ``fit.V``, ``fit.C``, ``fit.sample``, ``fit.lam``, ``fit.y``, ``fit.f_star``)
    method : "flow" or "gd"
    seed : int, seed of the training sample
    init : how A(0) was set ("normal", "zeros" or "array")
    schedule_spec : the schedule as given (name or callable)
    penalty : relative L2 penalty of the readout (:func:`penalized_form`; 0: none)
    """

    model: RandomFeatureDenoiser
    train: np.ndarray
    schedule: str
    taus: np.ndarray
    A: torch.Tensor
    quadratic: QuadraticLoss
    method: str
    seed: int = 0
    schedule_spec: Any = None
    init: str = "normal"
    penalty: float = 0.0
    _stats: dict = field(default_factory=dict, repr=False)

    # the quadratic form's parts, under the names of release 0.1
    U = property(lambda self: self.quadratic.U, doc="(p, p) feature second moments")
    V = property(lambda self: self.quadratic.V, doc="(d, p) target-feature moments")
    C = property(lambda self: self.quadratic.C, doc="constant term of the loss")
    sample = property(lambda self: self.quadratic.sample, doc="the TrainingSample")
    lam = property(lambda self: self.quadratic.lam, doc="(S,) loss weights (materialises the sample)")
    y = property(lambda self: self.quadratic.y, doc="(S, d) targets (materialises the sample)")
    f_star = property(lambda self: self.quadratic.f_star, doc="(S, d) exact outputs (materialises the sample)")
    optimal_loss = property(lambda self: self.quadratic.optimal_loss, doc="L* on the training sample")

    def tau_index(self, tau: float) -> int:
        """Position of ``tau`` in :attr:`taus` (``ValueError`` when it was not fitted)."""
        hits = np.flatnonzero((self.taus == tau) | (np.isinf(self.taus) & np.isinf(tau)))
        if hits.size == 0:
            raise ValueError(f"`tau` must be one of the fitted taus {self.taus.tolist()}; got {tau!r}")
        return int(hits[0])

    def readout(self, tau: float = math.inf) -> torch.Tensor:
        """A(tau), (d, p)."""
        return self.A[self.tau_index(tau)]

    def denoiser(self, tau: float = math.inf) -> RandomFeatureDenoiser:
        """A model carrying A(tau)."""
        return self.model.with_A(self.readout(tau))

    def loss(self, tau: float = math.inf) -> float:
        """L(A(tau)) (paper units), >= 0: the quadratic form, or where it cancels below its rounding floor
        (:meth:`QuadraticLoss.loss` is NaN: large data, an interpolating fit) the sum of squares
        ``sum c lambda |f - y|^2`` over the training sample (one streamed pass, :meth:`evaluate`; NaN for
        ``target="ideal"`` or a tau that was not fitted)."""
        value = self.quadratic.loss(self.readout(tau))
        if math.isnan(value) and self.quadratic.target == "dsm" and np.isin(tau, self.taus):
            value = float(self.evaluate()["loss"][self.tau_index(tau)])
        return value

    def evaluate(self, sample: TrainingSample | None = None, d_star: int | None = None) -> dict:
        """Losses of every A(tau) on ``sample`` (default: the training sample), one streamed pass.

        See :func:`evaluate_fits` for the returned statistics; results are cached per
        (sample, d_star).  Use :meth:`heldout_sample` for an estimate that is not biased by
        fitting the sample.
        """
        key = (None if sample is None else sample.key, d_star)
        if key not in self._stats:
            self._stats[key] = evaluate_fits({0: self}, sample, d_star)[0]
        return self._stats[key]

    def heldout_sample(self, seed: int | None = None) -> TrainingSample:
        """A fresh sample with the same nodes and sizes and new noise (default seed: training seed + 1)."""
        return self.sample.with_seed((self.seed + 1) if seed is None else seed)

    def excess_loss(self, tau: float = math.inf) -> float:
        """L(A(tau)) - L* on the training sample (in-sample; can be < 0 when p ~ sample size)."""
        return self.loss(tau) - self.optimal_loss

    def excess_loss_se(self, tau: float = math.inf) -> float:
        """Monte-Carlo standard error of :meth:`excess_loss` (NaN when n_noise = 1)."""
        return float(self.evaluate()["excess_loss_se"][self.tau_index(tau)])

    def excess_loss_split(self, tau: float = math.inf, d_star: int = 1,
                          sample: TrainingSample | None = None) -> tuple[float, float]:
        """(tangent, normal) parts of ``sum c lambda |f - f*|^2``, frame from ``ridge_frame`` at (x_t, t)."""
        ev = self.evaluate(sample, int(d_star))
        i = self.tau_index(tau)
        return float(ev["excess_tangent"][i]), float(ev["excess_normal"][i])


def evaluate_fits(fits: dict, sample: TrainingSample | None = None, d_star: int | None = None,
                  batch_size: int = 8192, progress: Callable[[int, int], None] | None = None) -> dict:
    """Losses of every fit's A(tau) on one sample, in one streamed pass shared by all fits.

    Per block of the sample the exact outputs f*, the DSM targets and (with ``d_star``) the
    ridge tangent frames are computed once; the features once per distinct feature set at
    its largest width (nested widths are leading columns), and every fit's outputs at every tau
    by one product with their stacked readouts (the same numbers as the per-fit products up to
    float64 reduction order: relative differences ~1e-15).  Held-out diagnostics always use
    the DSM loss, so fits with either target compare directly.

    Parameters
    ----------
    fits : dict key -> RandomFeatureFit, all trained on the same training set
    sample : TrainingSample, optional (default: the first fit's training sample)
    d_star : int, optional; ridge dimension of the tangent/normal split
    progress : callable(done, total), optional; called after each time node of the sample

    Returns
    -------
    dict key -> dict of arrays over taus (paper units): ``loss`` = ``sum c lambda |f - y|^2``,
    ``excess_loss`` (paired with the exact denoiser), ``excess_loss_se`` (Monte-Carlo SE from
    the noise draws; NaN when n_noise = 1), with ``d_star`` ``excess_tangent`` /
    ``excess_normal`` = the split of ``sum c lambda |f - f*|^2`` by the ridge frame at (x_t, t);
    and the scalar ``optimal_loss``.
    """
    first = next(iter(fits.values()))
    s = first.sample if sample is None else sample
    proc = first.model.process
    n_tau = {k: len(f.taus) for k, f in fits.items()}
    acc = {k: dict(loss=np.zeros(n), excess=np.zeros(n), var=np.zeros(n), tan=np.zeros(n), err=np.zeros(n),
                   opt=0.0) for k, n in n_tau.items()}
    groups: dict[tuple, list] = {}
    for k, f in fits.items():  # fits sharing features (same seed and settings) share one feature pass
        m = f.model
        groups.setdefault((m.d, m.n_frequencies, m.feature_period, m.activation, m.seed, str(m.A.device)),
                          []).append(k)
    with torch.no_grad():
        # every readout of a group as the columns of one (P, K) matrix over the group's largest width P:
        # psi_w = raw[:, :w] / sqrt(w) = psi_P[:, :w] sqrt(P / w), so A(tau) psi_w = psi_P (A(tau) padded
        # with zeros to P columns, times sqrt(P / w)); one GEMM per block reads the features once for
        # every fit and tau (within float64 reduction order of the per-fit products)
        stacked = {}
        for g, keys in groups.items():
            big = max((fits[k].model for k in keys), key=lambda m: m.width)
            cols, parts, at = {}, [], 0
            for k in keys:
                A, w = fits[k].A, fits[k].model.width  # (n_tau, d, w)
                pad = torch.zeros(A.shape[0], A.shape[1], big.width, dtype=A.dtype, device=A.device)
                pad[:, :, :w] = A * math.sqrt(big.width / w)
                parts.append(pad.reshape(-1, big.width))
                cols[k] = (at, A.shape[0], A.shape[1])
                at += A.shape[0] * A.shape[1]
            stacked[g] = (big, torch.cat(parts).T.contiguous(), cols)
        for block in s.blocks(batch_size, by_node=True):
            m_star, tang = block_mean_and_tangent(s, block, d_star)  # one moments pass for both
            tj = float(s.t_nodes[block.node])
            for g, keys in groups.items():
                big, readouts, cols = stacked[g]
                dev, dt = big.A.device, big.A.dtype
                psi = big.features(torch.as_tensor(block.xt, dtype=dt, device=dev),
                                   torch.tensor(tj, dtype=dt, device=dev))
                out = (psi @ readouts).cpu().numpy()  # (B, K)
                for k in keys:
                    fit = fits[k]
                    par = fit.model.parametrization
                    c0, n_t, dd = cols[k]
                    f = out[:, c0:c0 + n_t * dd].reshape(-1, n_t, dd).transpose(1, 0, 2)  # (n_tau, B, d)
                    lam, y = targets(block, par, fit.schedule_spec, proc)
                    f_star = outputs_from_mean(m_star, block, par, proc)
                    _accumulate_stats(acc[k], f, f_star, y, lam, block, s.n_noise, tang)
            if progress is not None:
                progress(block.node + 1, s.n_time)
    out = {}
    for k, a in acc.items():
        se = np.sqrt(a["var"]) if s.n_noise > 1 else np.full(n_tau[k], np.nan)
        res = dict(loss=a["loss"], optimal_loss=a["opt"], excess_loss=a["excess"], excess_loss_se=se)
        if d_star is not None:
            res["excess_tangent"] = a["tan"]
            res["excess_normal"] = a["err"] - a["tan"]
        out[k] = res
    return out


def evaluate_denoiser(denoise: Callable, sample: TrainingSample, *, schedule: str | Callable = "1",
                      d_star: int | None = None, batch_size: int = 8192,
                      progress: Callable[[int, int], None] | None = None) -> dict:
    """The per-cell diagnostics of :func:`evaluate_fits` for any denoiser, on one sample.

    ``denoise(x, t)`` -> E[x0 | x_t = x] (B, d) for x (B, d) and a scalar t (a torch tensor
    in, numpy or torch out): a trained MLP, a user's module, a random-feature model.  The
    loss is read in the ``posterior_mean`` form f = alpha_t denoise(x_t, t), which is the
    same number in every parametrization (:mod:`ridgexr.training`).  ``progress(done, total)``
    is called after each time node.  The cost is one ``denoise`` call, one exact posterior mean
    and (with ``d_star``) one ridge frame per row: size the sample accordingly
    (``diagnostics: {n_time, n_noise}`` in a catalog's model block).  The means and frames are kept on
    the sample (:meth:`TrainingSample.block_moments`), so a second denoiser evaluated on the same sample
    pays only its own calls.

    Returns
    -------
    dict of floats (paper units): ``loss`` = ``sum c lambda norm(f - y)^2``, ``optimal_loss``,
    ``excess_loss`` (paired with the exact denoiser), ``excess_loss_se`` (NaN when
    n_noise = 1), and with ``d_star`` ``excess_tangent`` / ``excess_normal``.
    """
    proc = OU()
    a = dict(loss=np.zeros(1), excess=np.zeros(1), var=np.zeros(1), tan=np.zeros(1), err=np.zeros(1), opt=0.0)
    per_node = sample.n_points * sample.n_noise
    done = 0
    with torch.no_grad():
        # consecutive small nodes share one block (the exact posterior mean and the frames take a time per
        # row); the denoiser is called once per node, on that node's rows, with its scalar time
        for index, block in enumerate(sample.blocks(batch_size, by_node=False)):
            m_star, tang = sample.block_moments(block, index, batch_size, d_star)  # shared by every model
            first = done if block.node is None else block.node
            nodes = range(first, first + max(1, block.size // per_node)) if block.node is None else [block.node]
            xt = torch.as_tensor(block.xt, dtype=torch.float64)
            m = np.empty_like(block.xt)
            for k, j in enumerate(nodes):  # a python loop over time nodes (not over rows)
                rows = slice(k * per_node, min(block.size, (k + 1) * per_node))
                out = denoise(xt[rows], torch.tensor(float(sample.t_nodes[j]), dtype=torch.float64))
                m[rows] = out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, np.float64)
            f = (proc.alpha(block.t)[:, None] * m)[None]
            lam, y = targets(block, "posterior_mean", schedule, proc)
            f_star = outputs_from_mean(m_star, block, "posterior_mean", proc)
            _accumulate_stats(a, f, f_star, y, lam, block, sample.n_noise, tang)
            done = nodes[-1] + 1
            if progress is not None:
                progress(done, sample.n_time)
    res = dict(loss=float(a["loss"][0]), optimal_loss=float(a["opt"]), excess_loss=float(a["excess"][0]),
               excess_loss_se=float(np.sqrt(a["var"][0])) if sample.n_noise > 1 else math.nan)
    if d_star is not None:
        res["excess_tangent"] = float(a["tan"][0])
        res["excess_normal"] = float(a["err"][0] - a["tan"][0])
    return res


def _accumulate_stats(a: dict, f: np.ndarray, f_star: np.ndarray, y: np.ndarray, lam: np.ndarray, block,
                      n_noise: int, tang: np.ndarray | None) -> None:
    """Add one block's weighted sums to the running statistics ``a`` of one fit."""
    c = block.weight * lam
    l_model = ((f - y) ** 2).sum(-1)  # (n_tau, B)
    l_star = ((f_star - y) ** 2).sum(-1)
    e = f - f_star
    a["loss"] += l_model @ c
    a["opt"] += float(l_star @ c)
    delta = lam * (l_model - l_star)  # per-row loss difference to the exact denoiser
    a["excess"] += delta @ block.weight
    if n_noise > 1:  # Var(sum c delta): draws iid within each (point, node) group of n_noise consecutive rows
        dg = delta.reshape(delta.shape[0], -1, n_noise)
        cg = block.weight.reshape(-1, n_noise).sum(1)
        a["var"] += (cg**2 * dg.var(-1, ddof=1) / n_noise).sum(-1)
    a["err"] += (e**2).sum(-1) @ c
    if tang is not None:
        a["tan"] += (np.einsum("kbd,bdj->kbj", e, tang) ** 2).sum(-1) @ c


def _check_taus(taus) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(taus, dtype=float))
    if arr.ndim != 1 or arr.size == 0 or np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError(f"`taus` must be a non-empty list of numbers >= 0 (inf allowed); got {taus!r}")
    return arr


def _check_train(train: Any, d: int | None = None) -> np.ndarray:
    tr = as_tensor(train, name="train", dtype=torch.float64)
    check_finite(tr, "train")
    if tr.ndim != 2 or (d is not None and tr.shape[1] != d):
        raise ValueError(f"`train` must have shape (N, {d if d is not None else 'd'}); got {tuple(tr.shape)}")
    return tr.cpu().numpy()


class FitError(ValueError):
    """A fit that fails numerically (a loss form that is not finite, an eigensolver that does not
    converge); the message names the schedule, the width and the arguments that set the form."""


def penalized_form(U: torch.Tensor, penalty: float) -> torch.Tensor:
    """U + penalty (tr U / p) I: the quadratic part of L(A) + penalty (tr U / p) tr(A A^T), (p, p).

    The readout's L2 penalty is relative to U's mean eigenvalue, so one value means the same conditioning under
    every loss weight and width; ``penalty = 0`` returns ``U`` itself.
    """
    if penalty == 0:
        return U
    p = U.shape[0]
    return U + (float(penalty) * float(torch.trace(U)) / p) * torch.eye(p, dtype=U.dtype, device=U.device)


def _solve(model: RandomFeatureDenoiser, train: np.ndarray, schedule, taus: np.ndarray, method: str,
           quad: QuadraticLoss, lr, A0: torch.Tensor, seed: int, init: str,
           null_cutoff: str = "relative", penalty: float = 0.0) -> RandomFeatureFit:
    where = (f"the random-feature fit of schedule {schedule_name(schedule)!r}, width {model.width} failed "
             f"numerically")
    if not (bool(torch.isfinite(quad.U).all()) and bool(torch.isfinite(quad.V).all())):
        raise FitError(f"{where}: its loss form U, V is not finite (t_min {quad.sample.t_min:g})")
    U = penalized_form(quad.U, penalty)
    try:
        if method == "flow":
            path = GradientFlow(U, quad.V, A0, null_cutoff=null_cutoff).path(taus.tolist())
        else:
            path = gradient_descent(U, quad.V, A0, taus.tolist(), lr)
    except torch.linalg.LinAlgError as exc:
        raise FitError(f"{where}: {str(exc).splitlines()[0]} (t_min {quad.sample.t_min:g})") from None
    return RandomFeatureFit(model=model, train=train, schedule=schedule_name(schedule), taus=path.taus, A=path.A,
                            quadratic=quad, method=method, seed=int(seed), schedule_spec=schedule, init=init,
                            penalty=float(penalty))




def initial_readout(d: int, width: int, init: Any = "normal", init_seed: int = 0, *, dtype=torch.float64,
                    device: Any = None) -> torch.Tensor:
    """A(0) (d, width): ``"normal"`` -- entries iid N(0, 1) (the paper's), ``"zeros"``, or an array.

    ``"normal"`` draws a (width, d) array from ``numpy.random.default_rng(init_seed)`` in row
    order and transposes it, so A(0) of width p is the first p columns of A(0) of any larger
    width (nested like the features).
    """
    kw = dict(dtype=dtype, device=device)
    if isinstance(init, str):
        check_option(init, "init", INITS)
        if init == "zeros":
            return torch.zeros(d, width, **kw)
        init_seed = check_int(init_seed, "init_seed", min_val=0)
        return torch.tensor(np.random.default_rng(init_seed).standard_normal((width, d)).T.copy(), **kw)
    a = as_tensor(init, name="init", **kw)
    if a.shape != (d, width):
        raise ValueError(f"`init` must have shape ({d}, {width}); got {tuple(a.shape)}")
    return a


def _init_label(init: Any) -> str:
    return init if isinstance(init, str) else "array"


def fit_random_features(model: RandomFeatureDenoiser, train: Any, *, schedule: str | Callable = "1",
                        taus: Sequence[float] = (math.inf,), method: str = defaults.METHOD,
                        t_min: float = defaults.T_MIN,
                        T: float | None = None, quadrature: str = DEFAULT_QUADRATURE, n_time: int = PAPER_N_TIME,
                        n_noise: int = PAPER_N_NOISE, seed: int = 0, lr: float | None = None,
                        init: Any = defaults.INIT, init_seed: int = 0, batch_size: int = 8192,
                        target: str = defaults.TARGET, null_cutoff: str = "relative", penalty: float = 0.0,
                        target_seed: int | None = None) -> RandomFeatureFit:
    """Fit the readout A of a random-feature denoiser by weighted denoising score matching.

    The loss is the paper's, ``L(A) = int_{t_min}^T lambda(t) E|A psi(x_t, t) - y|^2 dt`` summed over
    coordinates (see :mod:`ridgexr.training`), and tau its gradient-flow time.  The defaults
    are the authors' choices: Simpson's rule in t on 2001 nodes, 2000 noise draws per
    (point, node), A(0) ~ N(0, 1), T = the features' period.

    Parameters
    ----------
    model : RandomFeatureDenoiser
        Fixed features; its A is not modified.
    train : array (N, d)
    schedule : {"1", "h", "h2"} or callable
        Loss weight w(t) of the score-matching loss (lambda = w / h_t^2 on the denoising loss).
    taus : sequence of float
        Training times (the paper's units); ``inf`` = converged.
    method : {"flow", "gd"}
        Closed-form gradient flow, or full-batch gradient descent with ``lr``.
    t_min, T : float
        Time range of the loss, OU time (default T = ``model.feature_period``, the paper's).
    quadrature : {"simpson-t", "trapezoid-log-t", "gauss-legendre-log-t"}
        Time rule (:func:`ridgexr.training.time_nodes`).
    n_time, n_noise : int
        Time nodes; noise draws per (point, node).
    seed : int
        Seed of the noise draws.
    lr : float
        Learning rate for ``method="gd"``.
    init : "normal", "zeros" or array (d, p)
        A(0); ``"normal"`` draws N(0, 1) entries from ``init_seed`` (:func:`initial_readout`).
    init_seed : int
    batch_size : int
        Sample rows per block when accumulating U and V.
    target : {"dsm", "ideal"}
        Fit the noisy DSM target or its conditional expectation, the exact denoiser's output
        (see :func:`ridgexr.training.quadratic_loss`).
    null_cutoff : {"relative", "absolute"}
        The null space of U in the closed-form flow (:class:`ridgexr.training.GradientFlow`): eigenvalues
        <= p eps mu_max (ours) or <= 1 / (p 1e4) (the authors').
    penalty : float >= 0
        Relative L2 penalty on the readout: the flow runs on L(A) + penalty (tr U / p) tr(A A^T)
        (:func:`penalized_form`); the fit's losses are those of L.  Default 0 (the paper's).
    target_seed : int >= 0, optional
        Keep the rows (x_t, t) of ``seed`` and redraw each row's x0 from its posterior given x_t with this seed
        (:class:`ridgexr.training.TrainingSample`): the DSM target's noise alone redrawn.

    Returns
    -------
    RandomFeatureFit

    Examples
    --------
    >>> import numpy as np
    >>> m = RandomFeatureDenoiser(2, 64, n_frequencies=4, feature_period=2.0, seed=1)
    >>> fit = fit_random_features(m, np.array([[-3.0, 0.0], [3.0, 0.0]]), t_min=0.01, n_time=9,
    ...                           n_noise=4, taus=[1.0, float("inf")])
    >>> fit.loss(1.0) >= fit.loss(float("inf"))
    True
    """
    if not isinstance(model, RandomFeatureDenoiser):
        raise TypeError(f"`model` must be a RandomFeatureDenoiser; got {type(model).__name__}")
    check_option(method, "method", METHODS)
    check_option(target, "target", TARGETS)
    schedule_weight(schedule, np.array([0.5]), model.process)  # validates the schedule
    taus = _check_taus(taus)
    batch_size = check_int(batch_size, "batch_size", min_val=1)
    train_np = _check_train(train, model.d)
    T = model.feature_period if T is None else T
    penalty = check_float(penalty, "penalty", min_val=0)
    A0 = initial_readout(model.d, model.width, init, init_seed, dtype=model.A.dtype, device=model.A.device)
    sample = draw_training_sample(train_np, t_min=t_min, T=T, n_time=n_time, n_noise=n_noise, seed=seed,
                                  process=model.process, quadrature=quadrature, target_seed=target_seed)
    quad = accumulate(model, sample, [schedule], target=target, batch_size=batch_size)[schedule_name(schedule)]
    return _solve(model, train_np, schedule, taus, method, quad, lr, A0, seed, _init_label(init), null_cutoff,
                  penalty)


def fit_sweep(train: Any, *, widths: Sequence[int], schedules: Sequence[str | Callable],
              taus: Sequence[float] = (math.inf,), model_kwargs: dict | None = None, method: str = defaults.METHOD,
              t_min: float = defaults.T_MIN, T: float | None = None, quadrature: str = DEFAULT_QUADRATURE,
              n_time: int = PAPER_N_TIME, n_noise: int = PAPER_N_NOISE, seed: int = 0, lr: float | None = None,
              init: str = defaults.INIT, init_seed: int = 0, batch_size: int = 8192, device: Any = None,
              progress: Callable[[str], None] | None = None, target: str = defaults.TARGET,
              null_cutoff: str = "relative", penalty: float = 0.0, target_seed: int | None = None) -> dict:
    """Fit every (schedule, width) cell on nested features, one shared sample and one streamed pass.

    The raw feature moments of every schedule are accumulated together at the largest width
    (one Gram matrix per time node, reweighted per schedule); the moments of width p are the
    leading p x p (resp. d x p) blocks, scaled by 1/p (1/sqrt(p)).  A(0) is nested too
    (:func:`initial_readout`).  Arguments as in :func:`fit_random_features`; ``progress`` is
    called with a short text after each stage.

    Returns
    -------
    dict mapping (schedule name, width) -> RandomFeatureFit
    """
    model_kwargs = dict(model_kwargs or {})
    if isinstance(widths, (str, bytes)) or not len(widths):
        raise ValueError(f"`widths` must be a non-empty list of integers >= 1; got {widths!r}")
    widths = [check_int(w, "widths[i]", min_val=1) for w in widths]
    if not schedules:
        raise ValueError("`schedules` must be a non-empty list")
    check_option(method, "method", METHODS)
    check_option(target, "target", TARGETS)
    if isinstance(init, str):
        check_option(init, "init", INITS)
    train_np = _check_train(train)
    penalty = check_float(penalty, "penalty", min_val=0)
    d = train_np.shape[1]
    pmax = max(widths)
    big = RandomFeatureDenoiser(d, pmax, device=device, **model_kwargs)
    T = big.feature_period if T is None else T
    taus = _check_taus(taus)
    sample = draw_training_sample(train_np, t_min=t_min, T=T, n_time=n_time, n_noise=n_noise, seed=seed,
                                  process=big.process, quadrature=quadrature, target_seed=target_seed)
    A0_big = initial_readout(d, pmax, init, init_seed, dtype=big.A.dtype, device=big.A.device)
    tick = None if progress is None else (lambda j, n: progress(f"time node {j}/{n}") if j % 100 == 0 or j == n
                                          else None)
    raw = accumulate(big, sample, schedules, target=target, normalized=False, batch_size=batch_size, progress=tick)
    fits = {}
    for schedule in schedules:
        name = schedule_name(schedule)
        for p in widths:
            model = RandomFeatureDenoiser(d, p, device=device, **model_kwargs)
            fits[(name, p)] = _solve(model, train_np, schedule, taus, method, raw[name].width_block(p), lr,
                                     A0_big[:, :p].clone(), seed, init, null_cutoff, penalty)
            if progress is not None:
                progress(f"{name}/{p}")
    return fits
