"""Training random-feature denoisers by weighted denoising score matching.

**The loss.**  With x_t = alpha_t x0 + sqrt(h_t) z, the weighted score-matching loss is

    L_SM(s) = E_t E_{x0, z} w(t) |s(x_t, t) + z / sqrt(h_t)|^2 / d,

t uniform on [t_min, T], x0 uniform over the training set, z ~ N(0, I).  The weight
w(t) multiplies the *score-matching* loss (as in the paper).  Schedules: ``"1"`` (w = 1),
``"h"`` (w = h_t), ``"h2"`` (w = h_t^2), or any callable w(t) -> array.

- ``parametrization="score"``: s = f, so L = E w |f + z / sqrt(h)|^2 / d.
- ``parametrization="posterior_mean"``: s = (f - x_t) / h and
  s + z/sqrt(h) = (f - alpha_t x0) / h, so L = E (w / h^2) |f - alpha_t x0|^2 / d: the
  same loss is a *denoising* loss with weight w / h^2 (tested in ``tests/test_training.py``).

In both cases the per-sample loss is lambda(t) |A psi - y|^2 / d with features
psi = act(...)/sqrt(p), target y (alpha_t x0, or -z/sqrt(h)) and lambda = w/h^2 or w.

**Quadratic form.**  L(A) = tr(A^T A U)/d - 2 tr(V A^T)/d + C with

    U = sum_s c_s lambda_s psi_s psi_s^T   (p x p),   V = sum_s c_s lambda_s y_s psi_s^T  (d x p),
    C = sum_s c_s lambda_s |y_s|^2 / d,

over a fixed sample s = (training point i, time node j, noise draw k): Gauss-Legendre
nodes in log t (``n_time``), ``n_noise`` Monte-Carlo draws per (i, j), and
c_s = (quadrature weight_j / (T - t_min)) (1/N) (1/n_noise).  U and V are accumulated in
batches by matrix products (no Python loop over times or data points).

**Gradient flow.**  dA/dtau = -grad L = -(2/d)(A U - V).  With U = Q diag(mu) Q^T,
B = A Q and Vt = V Q, each column evolves independently:
B_j(tau) = B_j(0) e^{-2 mu_j tau/d} + (Vt_j / mu_j)(1 - e^{-2 mu_j tau/d}); columns with
mu_j <= rcond mu_max (the null space) keep B_j(0).  tau = inf gives the minimum-norm
minimizer plus the untouched null-space part of A(0).  One eigendecomposition serves every
tau.  ``method="gd"`` runs plain full-batch gradient descent A <- A - lr grad L on the same
objective, with tau = lr x steps.

**Excess loss.**  The exact denoiser (posterior mean of p_t) minimises the loss; L* is its
loss on the same sample, and excess(tau) = L(A(tau)) - L* is estimated with paired
differences, with a Monte-Carlo standard error from the noise draws.  The excess splits
into tangent and normal parts: with f* the exact output, E lambda |f - f*|^2 / d =
E lambda |T^T (f - f*)|^2 / d + E lambda |N^T (f - f*)|^2 / d, the frame (T, N) given by
:func:`ridgexr.ridge_frame` at (x_t, t) (tangent = top-d* posterior-covariance
eigenvectors).  This direct estimate equals the excess loss in expectation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from ._backend import as_tensor, check_finite
from .empirical import SmoothedEmpirical
from .models import RandomFeatureDenoiser
from .process import OU
from .ridge import ridge_frame

__all__ = ["SCHEDULES", "schedule_weight", "TrainingSample", "draw_training_sample", "accumulate_moments",
           "GradientFlow", "RandomFeatureFit", "fit_random_features", "fit_sweep", "fits_to_dataset"]

SCHEDULES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "1": lambda t, h: np.ones_like(t),
    "h": lambda t, h: h,
    "h2": lambda t, h: h**2,
}
METHODS = ("flow", "gd")


def schedule_weight(schedule: str | Callable, t: np.ndarray, process: OU | None = None) -> np.ndarray:
    """Loss weight w(t) of a named schedule ("1", "h", "h2") or a callable, as float64 array."""
    process = process or OU()
    t = np.asarray(t, dtype=float)
    if callable(schedule):
        w = np.asarray(schedule(t), dtype=float)
        if w.shape != t.shape:
            w = np.broadcast_to(w, t.shape).astype(float)
    elif schedule in SCHEDULES:
        w = SCHEDULES[schedule](t, process.h(t))
    else:
        raise ValueError(f"schedule must be one of {tuple(SCHEDULES)} or a callable, got {schedule!r}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"schedule {schedule!r} gives negative or non-finite weights")
    return w


def _schedule_name(schedule: str | Callable) -> str:
    return schedule if isinstance(schedule, str) else getattr(schedule, "__name__", "custom")


# ---------------------------------------------------------------------------- sample
@dataclass
class TrainingSample:
    """A fixed Monte-Carlo/quadrature sample of (x0, t, z) (numpy float64).

    Attributes
    ----------
    x0 : (S, d) training point of each sample
    t : (S,) time node
    z : (S, d) standard normal noise
    xt : (S, d) alpha_t x0 + sqrt(h_t) z
    weight : (S,) c_s, the measure weight (sums to the time average, ~1)
    group : (S,) index of the (point, time) cell; noise draws share it
    n_noise : int
    cache : per-sample results that do not depend on the model (exact posterior means,
        ridge frames), filled on first use and shared by every fit evaluated on this
        sample; valid for the training set the sample was drawn from
    """

    x0: np.ndarray
    t: np.ndarray
    z: np.ndarray
    xt: np.ndarray
    weight: np.ndarray
    group: np.ndarray
    n_noise: int
    t_min: float
    T: float
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> int:
        return int(self.t.shape[0])


def draw_training_sample(train: Any, *, t_min: float, T: float, n_time: int, n_noise: int, seed: int,
                         process: OU | None = None) -> TrainingSample:
    """Draw the sample over which U, V, C and the losses are computed.

    Time: ``n_time`` Gauss-Legendre nodes in log t on [t_min, T], weights normalised to the
    uniform time average.  Noise: ``n_noise`` draws per (training point, time node) from
    ``numpy.random.default_rng(seed)``.
    """
    process = process or OU()
    x = np.asarray(as_tensor(train, name="train", dtype=torch.float64).cpu().numpy())
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"train must have shape (N, d) with N >= 1, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("train contains non-finite values")
    for name, v in (("n_time", n_time), ("n_noise", n_noise)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if not (isinstance(t_min, (int, float)) and math.isfinite(t_min) and t_min > 0):
        raise ValueError(f"t_min must be a finite number > 0, got {t_min!r}")
    if not (isinstance(T, (int, float)) and math.isfinite(T) and T > t_min):
        raise ValueError(f"t_min must be < T; got t_min={t_min!r}, T={T!r}")
    n, d = x.shape
    xi, gw = np.polynomial.legendre.leggauss(n_time)
    lo, hi = math.log(t_min), math.log(T)
    u = 0.5 * (lo + hi) + 0.5 * (hi - lo) * xi
    tn = np.exp(u)
    qw = gw * 0.5 * (hi - lo) * tn / (T - t_min)  # int f dt / (T - t_min) ~ sum qw f(t_j)
    ii, jj, kk = np.meshgrid(np.arange(n), np.arange(n_time), np.arange(n_noise), indexing="ij")
    ii, jj = ii.ravel(), jj.ravel()
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((ii.size, d))
    t = tn[jj]
    x0 = x[ii]
    xt = process.alpha(t)[:, None] * x0 + np.sqrt(process.h(t))[:, None] * z
    weight = qw[jj] / (n * n_noise)
    return TrainingSample(x0=x0, t=t, z=z, xt=xt, weight=weight, group=ii * n_time + jj,
                          n_noise=int(n_noise), t_min=float(t_min), T=float(T))


def _targets(sample: TrainingSample, parametrization: str, schedule, process: OU):
    """Per-sample loss weight lambda_s (S,) and target y_s (S, d)."""
    w = schedule_weight(schedule, sample.t, process)
    h = process.h(sample.t)
    if parametrization == "posterior_mean":
        return w / h**2, process.alpha(sample.t)[:, None] * sample.x0
    return w, -sample.z / np.sqrt(h)[:, None]


def _exact_outputs(train: np.ndarray, sample: TrainingSample, parametrization: str, process: OU) -> np.ndarray:
    """Output f* of the exact denoiser at every sample (S, d) in the model's parametrization."""
    if "posterior_mean" not in sample.cache:
        sample.cache["posterior_mean"] = SmoothedEmpirical(train, sample.t, process=process).posterior_mean(sample.xt)
    m = sample.cache["posterior_mean"]
    a = process.alpha(sample.t)[:, None]
    if parametrization == "posterior_mean":
        return a * m
    return (a * m - sample.xt) / process.h(sample.t)[:, None]


def _tangent_frames(train: np.ndarray, sample: TrainingSample, d_star: int, process: OU) -> np.ndarray:
    """Tangent bases (S, d, d*) of the ridge frame at every sample point (cached on the sample)."""
    key = ("tangent", int(d_star))
    if key not in sample.cache:
        sample.cache[key] = ridge_frame(SmoothedEmpirical(train, sample.t, process=process), sample.xt,
                                        int(d_star)).tangent
    return sample.cache[key]


def _batches(n: int, size: int) -> Iterable[slice]:
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


def accumulate_moments(model: RandomFeatureDenoiser, sample: TrainingSample, lam: np.ndarray, y: np.ndarray,
                       *, batch_size: int = 2048, normalized: bool = True):
    """U (p, p), V (d, p), C (scalar) of the quadratic loss, accumulated in batches.

    With ``normalized=False`` the features are the raw activations (no 1/sqrt(p)), which
    lets a sweep derive every nested width's moments from the largest width's.
    """
    dev, dt = model.A.device, model.A.dtype
    p, d = model.width, model.dim
    U = torch.zeros(p, p, dtype=dt, device=dev)
    V = torch.zeros(d, p, dtype=dt, device=dev)
    cl = torch.as_tensor(sample.weight * lam, dtype=dt, device=dev)
    yt = torch.as_tensor(y, dtype=dt, device=dev)
    scale = 1.0 if normalized else math.sqrt(p)
    with torch.no_grad():
        for sl in _batches(sample.size, batch_size):
            psi = model.features(torch.as_tensor(sample.xt[sl], dtype=dt, device=dev),
                                 torch.as_tensor(sample.t[sl], dtype=dt, device=dev)) * scale
            wpsi = psi * cl[sl, None]
            U.addmm_(psi.T, wpsi)
            V.addmm_(yt[sl].T, wpsi)
    C = float((cl * (yt * yt).sum(1)).sum()) / d
    return 0.5 * (U + U.T), V, C


# ---------------------------------------------------------------------------- dynamics
class GradientFlow:
    """Closed-form gradient flow of L(A) = tr(A U A^T)/d - 2 tr(V A^T)/d + C.

    Parameters
    ----------
    U : (p, p) symmetric PSD, V : (d, p), A0 : (d, p)
    rcond : float, optional
        Eigenvalues mu <= rcond * mu_max are treated as the null space (default p * eps).
    """

    def __init__(self, U: torch.Tensor, V: torch.Tensor, A0: torch.Tensor, rcond: float | None = None):
        self.d, self.p = V.shape
        mu, Q = torch.linalg.eigh(U)
        eps = torch.finfo(U.dtype).eps
        rcond = self.p * eps if rcond is None else rcond
        self.mu, self.Q = mu, Q
        self.range = mu > rcond * max(float(mu.max()), 0.0)
        self.Vt = V @ Q
        self.B0 = A0 @ Q
        mu_safe = torch.where(self.range, mu, torch.ones_like(mu))
        self.B_inf = torch.where(self.range, self.Vt / mu_safe, self.B0)
        # part of V outside the range of U (should be ~0); reported, not used
        self.null_residual = float(self.Vt[:, ~self.range].norm()) if bool((~self.range).any()) else 0.0

    def A(self, taus: Sequence[float]) -> torch.Tensor:
        """A(tau) for each tau, stacked (n_tau, d, p); tau = inf allowed."""
        out = []
        for tau in taus:
            if math.isinf(tau):
                out.append(self.B_inf)
                continue
            rate = 2.0 * self.mu.clamp_min(0) * tau / self.d
            decay = torch.exp(-rate)
            B = torch.where(self.range, self.B0 * decay - self.B_inf * torch.expm1(-rate), self.B0)
            out.append(B)
        B = torch.stack(out)
        return B @ self.Q.T


def gradient_descent(U: torch.Tensor, V: torch.Tensor, A0: torch.Tensor, taus: Sequence[float], lr: float):
    """Full-batch gradient descent A <- A - lr (2/d)(A U - V); returns A at tau = lr * steps."""
    d = V.shape[0]
    if lr is None or not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0 for method='gd', got {lr!r}")
    if any(math.isinf(t) for t in taus):
        raise ValueError("taus must be finite for method='gd' (tau = inf needs method='flow')")
    mu_max = float(torch.linalg.matrix_norm(U, ord=2)) if U.shape[0] <= 4096 else float(U.diagonal().sum())
    if lr * 2 * mu_max / d >= 2:
        raise ValueError(f"lr={lr} is unstable: need lr < d / mu_max = {d / mu_max:.4g}")
    steps = [int(round(t / lr)) for t in taus]
    order = np.argsort(steps)
    A = A0.clone()
    out = [None] * len(taus)
    k = 0
    for idx in order:
        while k < steps[idx]:
            A = A - lr * (2.0 / d) * (A @ U - V)
            k += 1
        out[idx] = A.clone()
    return torch.stack(out), [s * lr for s in steps]


# ---------------------------------------------------------------------------- fit
@dataclass
class RandomFeatureFit:
    """A trained random-feature denoiser at several training times tau.

    Attributes
    ----------
    model : the untrained model (fixed features, A(0))
    train : (N, d) training data
    schedule : name of the loss-weight schedule
    taus : (n_tau,) training times (gradient-flow time of L)
    A : (n_tau, d, p) readouts
    U, V, C : quadratic-form coefficients
    sample : the TrainingSample
    lam, y : (S,) loss weights lambda_s and (S, d) targets y_s on the sample
    f_star : (S, d) exact-denoiser outputs on the sample
    optimal_loss : L* of the exact denoiser on the same sample
    method : "flow" or "gd"
    """

    model: RandomFeatureDenoiser
    train: np.ndarray
    schedule: str
    taus: np.ndarray
    A: torch.Tensor
    U: torch.Tensor
    V: torch.Tensor
    C: float
    sample: TrainingSample
    lam: np.ndarray
    y: np.ndarray
    f_star: np.ndarray
    optimal_loss: float
    method: str
    seed: int = 0
    schedule_spec: Any = None
    _stats: dict = field(default_factory=dict, repr=False)

    def _index(self, tau: float) -> int:
        hits = np.flatnonzero((self.taus == tau) | (np.isinf(self.taus) & np.isinf(tau)))
        if hits.size == 0:
            raise ValueError(f"tau={tau!r} is not one of the fitted taus {self.taus.tolist()}")
        return int(hits[0])

    def denoiser(self, tau: float = math.inf) -> RandomFeatureDenoiser:
        """A model carrying A(tau)."""
        return self.model.with_A(self.A[self._index(tau)])

    def loss(self, tau: float = math.inf) -> float:
        """L(A(tau)) from the quadratic form."""
        A = self.A[self._index(tau)]
        d = self.model.dim
        return float(torch.trace(A @ self.U @ A.T) / d - 2 * torch.trace(self.V @ A.T) / d) + self.C

    def evaluate(self, sample: TrainingSample | None = None, d_star: int | None = None) -> dict:
        """Losses of every A(tau) on ``sample`` (default: the training sample), one batched pass.

        Returns a dict of arrays over taus: ``loss``, ``excess_loss`` (paired with the exact
        denoiser), ``excess_loss_se`` (Monte-Carlo SE from the noise draws; NaN when
        n_noise = 1), and with ``d_star`` the split ``excess_tangent``/``excess_normal`` of
        E lambda |f - f*|^2 / d by the ridge frame at (x_t, t); plus the scalar
        ``optimal_loss``.  Use :meth:`heldout_sample` for an estimate that is not biased by
        fitting the sample.
        """
        key = (id(sample) if sample is not None else None, d_star)
        if key in self._stats:
            return self._stats[key]
        s = self.sample if sample is None else sample
        proc = self.model.process
        if sample is None:
            lam, y, f_star = self.lam, self.y, self.f_star
        else:
            lam, y = _targets(s, self.model.parametrization, self.schedule_spec, proc)
            f_star = _exact_outputs(self.train, s, self.model.parametrization, proc)
        tang = None if d_star is None else _tangent_frames(self.train, s, d_star, proc)
        dev, dt = self.model.A.device, self.model.A.dtype
        d = self.model.dim
        n_tau = len(self.taus)
        l_model = np.empty((n_tau, s.size))
        l_tan = np.empty((n_tau, s.size))
        l_err = np.empty((n_tau, s.size))
        with torch.no_grad():
            for sl in _batches(s.size, 2048):
                psi = self.model.features(torch.as_tensor(s.xt[sl], dtype=dt, device=dev),
                                          torch.as_tensor(s.t[sl], dtype=dt, device=dev))
                f = (psi @ self.A.transpose(1, 2)).cpu().numpy()  # (n_tau, B, d)
                l_model[:, sl] = ((f - y[sl]) ** 2).sum(-1) / d
                e = f - f_star[sl]
                l_err[:, sl] = (e**2).sum(-1) / d
                if tang is not None:
                    l_tan[:, sl] = (np.einsum("kbd,bdj->kbj", e, tang[sl]) ** 2).sum(-1) / d
        l_star = ((f_star - y) ** 2).sum(-1) / d
        c = s.weight * lam
        delta = lam * (l_model - l_star)  # per-sample loss difference to the exact denoiser
        # Var(sum_s c_s delta_s), noise draws iid within each (point, time) group
        g = s.group
        ng = int(g.max()) + 1
        se = np.full(n_tau, np.nan)
        if s.n_noise > 1:
            cg = np.bincount(g, weights=s.weight, minlength=ng)
            for k in range(n_tau):
                mean = np.bincount(g, weights=delta[k], minlength=ng) / s.n_noise
                var = np.bincount(g, weights=(delta[k] - mean[g]) ** 2, minlength=ng) / (s.n_noise - 1)
                se[k] = math.sqrt(float(np.sum(cg**2 * var / s.n_noise)))
        out = dict(loss=l_model @ c, optimal_loss=float(l_star @ c), excess_loss=delta @ s.weight,
                   excess_loss_se=se)
        if tang is not None:
            out["excess_tangent"] = l_tan @ c
            out["excess_normal"] = (l_err - l_tan) @ c
        self._stats[key] = out
        return out

    def heldout_sample(self, seed: int | None = None) -> TrainingSample:
        """A fresh sample with the same sizes and time nodes and new noise (default seed: training seed + 1)."""
        s = self.sample
        return draw_training_sample(self.train, t_min=s.t_min, T=s.T, n_time=int(np.unique(s.t).size),
                                    n_noise=s.n_noise, seed=(self.seed + 1) if seed is None else seed,
                                    process=self.model.process)

    def excess_loss(self, tau: float = math.inf) -> float:
        """L(A(tau)) - L* on the training sample (in-sample; can be < 0 when p ~ sample size)."""
        return self.loss(tau) - self.optimal_loss

    def excess_loss_se(self, tau: float = math.inf) -> float:
        """Monte-Carlo standard error of :meth:`excess_loss` (NaN when n_noise = 1)."""
        return float(self.evaluate()["excess_loss_se"][self._index(tau)])

    def excess_loss_split(self, tau: float = math.inf, d_star: int = 1,
                          sample: TrainingSample | None = None) -> tuple[float, float]:
        """(tangent, normal) parts of E lambda |f - f*|^2 / d, frame from ``ridge_frame`` at (x_t, t)."""
        ev = self.evaluate(sample, int(d_star))
        i = self._index(tau)
        return float(ev["excess_tangent"][i]), float(ev["excess_normal"][i])


def _check_taus(taus) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(taus, dtype=float))
    if arr.ndim != 1 or arr.size == 0 or np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError(f"taus must be a non-empty list of numbers >= 0 (inf allowed), got {taus!r}")
    return arr


def _fit_from_moments(model, train, schedule, taus, method, U, V, C, sample, lam, y, f_star, lr, A0, seed):
    d = model.dim
    optimal = float(np.sum(sample.weight * lam * ((f_star - y) ** 2).sum(1)) / d)
    if method == "flow":
        A = GradientFlow(U, V, A0).A(taus.tolist())
        taus_out = taus
    else:
        A, taus_list = gradient_descent(U, V, A0, taus.tolist(), lr)
        taus_out = np.asarray(taus_list, dtype=float)
    fit = RandomFeatureFit(model=model, train=train, schedule=_schedule_name(schedule), taus=taus_out, A=A,
                           U=U, V=V, C=C, sample=sample, lam=lam, y=y, f_star=f_star, optimal_loss=optimal,
                           method=method, seed=int(seed), schedule_spec=schedule)
    return fit


def fit_random_features(model: RandomFeatureDenoiser, train: Any, *, schedule: str | Callable = "1",
                        taus: Sequence[float] = (math.inf,), method: str = "flow", t_min: float = 1e-3,
                        T: float | None = None, n_time: int = 32, n_noise: int = 16, seed: int = 0,
                        lr: float | None = None, init: Any = "zeros", batch_size: int = 2048) -> RandomFeatureFit:
    """Fit the readout A of a random-feature denoiser by weighted denoising score matching.

    Parameters
    ----------
    model : RandomFeatureDenoiser
        Fixed features; its A is not modified.
    train : array (N, d)
    schedule : {"1", "h", "h2"} or callable
        Loss weight w(t) of the score-matching loss.
    taus : sequence of float
        Training times (gradient-flow time of L); ``inf`` = converged.
    method : {"flow", "gd"}
        Closed-form gradient flow, or full-batch gradient descent with ``lr``.
    t_min, T : float
        Time range of the loss (default T = model.T / 2).
    n_time, n_noise : int
        Gauss-Legendre nodes in log t; noise draws per (point, node).
    seed : int
        Seed of the noise draws (and of A(0) when ``init="normal"``).
    lr : float
        Learning rate for ``method="gd"``.
    init : "zeros", "normal" or array (d, p)
        A(0).

    Returns
    -------
    RandomFeatureFit

    Examples
    --------
    >>> import numpy as np
    >>> m = RandomFeatureDenoiser(2, 64, n_frequencies=4, T=4.0, seed=1)
    >>> fit = fit_random_features(m, np.array([[-3.0, 0.0], [3.0, 0.0]]), t_min=0.01, T=2.0,
    ...                           n_time=8, n_noise=4, taus=[1.0, float("inf")])
    >>> fit.loss(1.0) >= fit.loss(float("inf"))
    True
    """
    if not isinstance(model, RandomFeatureDenoiser):
        raise TypeError(f"model must be a RandomFeatureDenoiser, got {type(model).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    schedule_weight(schedule, np.array([0.5]), model.process)  # validates the schedule
    taus = _check_taus(taus)
    tr = as_tensor(train, name="train", dtype=torch.float64)
    check_finite(tr, "train")
    if tr.ndim != 2 or tr.shape[1] != model.dim:
        raise ValueError(f"train must have shape (N, {model.dim}), got {tuple(tr.shape)}")
    train_np = tr.cpu().numpy()
    T = model.T / 2 if T is None else T
    sample = draw_training_sample(train_np, t_min=t_min, T=T, n_time=n_time, n_noise=n_noise, seed=seed,
                                  process=model.process)
    lam, y = _targets(sample, model.parametrization, schedule, model.process)
    U, V, C = accumulate_moments(model, sample, lam, y, batch_size=batch_size)
    f_star = _exact_outputs(train_np, sample, model.parametrization, model.process)
    A0 = _initial_A(model, init, seed)
    return _fit_from_moments(model, train_np, schedule, taus, method, U, V, C, sample, lam, y, f_star, lr, A0,
                             seed)


def _initial_A(model: RandomFeatureDenoiser, init: Any, seed: int) -> torch.Tensor:
    kw = dict(dtype=model.A.dtype, device=model.A.device)
    if isinstance(init, str):
        if init == "zeros":
            return torch.zeros(model.dim, model.width, **kw)
        if init == "normal":
            g = np.random.default_rng(np.random.SeedSequence([seed, 7]))
            return torch.tensor(g.standard_normal((model.dim, model.width)), **kw)
        raise ValueError(f"init must be 'zeros', 'normal' or an array, got {init!r}")
    a = as_tensor(init, name="init", **kw)
    if a.shape != (model.dim, model.width):
        raise ValueError(f"init must have shape ({model.dim}, {model.width}), got {tuple(a.shape)}")
    return a


def fit_sweep(train: Any, *, widths: Sequence[int], schedules: Sequence[str | Callable],
              taus: Sequence[float] = (math.inf,), model_kwargs: dict | None = None, method: str = "flow",
              t_min: float = 1e-3, T: float | None = None, n_time: int = 32, n_noise: int = 16, seed: int = 0,
              lr: float | None = None, batch_size: int = 2048, device: Any = None,
              progress: Callable[[str], None] | None = None) -> dict:
    """Fit every (schedule, width) cell on nested features and one shared sample.

    The raw feature moments are accumulated once per schedule at the largest width; the
    moments of width p are the leading p x p (resp. d x p) blocks, scaled by 1/p (1/sqrt(p)).

    Returns
    -------
    dict mapping (schedule name, width) -> RandomFeatureFit
    """
    model_kwargs = dict(model_kwargs or {})
    widths = [int(w) for w in widths]
    if not widths or min(widths) < 1:
        raise ValueError(f"widths must be a non-empty list of integers >= 1, got {widths!r}")
    if not schedules:
        raise ValueError("schedules must be a non-empty list")
    tr = as_tensor(train, name="train", dtype=torch.float64)
    check_finite(tr, "train")
    train_np = tr.cpu().numpy()
    d = train_np.shape[1]
    pmax = max(widths)
    big = RandomFeatureDenoiser(d, pmax, device=device, **model_kwargs)
    T = big.T / 2 if T is None else T
    taus = _check_taus(taus)
    sample = draw_training_sample(train_np, t_min=t_min, T=T, n_time=n_time, n_noise=n_noise, seed=seed,
                                  process=big.process)
    f_star = _exact_outputs(train_np, sample, big.parametrization, big.process)
    fits = {}
    for schedule in schedules:
        name = _schedule_name(schedule)
        lam, y = _targets(sample, big.parametrization, schedule, big.process)
        U_raw, V_raw, C = accumulate_moments(big, sample, lam, y, batch_size=batch_size, normalized=False)
        for p in widths:
            model = RandomFeatureDenoiser(d, p, device=device, **model_kwargs)
            U = U_raw[:p, :p] / p
            V = V_raw[:, :p] / math.sqrt(p)
            A0 = torch.zeros(d, p, dtype=U.dtype, device=U.device)
            fits[(name, p)] = _fit_from_moments(model, train_np, schedule, taus, method, U, V, C, sample, lam,
                                                y, f_star, lr, A0, seed)
            if progress is not None:
                progress(f"{name}/{p}")
    return fits


def fits_to_dataset(fits: dict, *, d_star: int | None = None, heldout: bool = True):
    """Labelled training diagnostics over (schedule, width, tau) as an xarray Dataset.

    ``loss`` is the in-sample training loss.  With ``heldout=True`` (default) the excess
    loss, its SE and its tangent/normal split are estimated on a fresh held-out sample (one
    shared by every cell), so they are not biased downward by fitting the training sample;
    ``excess_loss_insample`` keeps L(A) - L* on the training sample.
    """
    import xarray as xr

    keys = list(fits)
    schedules = list(dict.fromkeys(k[0] for k in keys))
    widths = sorted({k[1] for k in keys})
    first = next(iter(fits.values()))
    taus = first.taus
    shape = (len(schedules), len(widths), len(taus))
    hold = first.heldout_sample() if heldout else None
    names = ["loss", "excess_loss_insample", "excess_loss", "excess_loss_se"] + \
        (["excess_tangent", "excess_normal"] if d_star is not None else [])
    data = {n: np.full(shape, np.nan) for n in names}
    optimal = np.full((len(schedules), len(widths)), np.nan)
    for (s, w), fit in fits.items():
        i, j = schedules.index(s), widths.index(w)
        ev = fit.evaluate(hold, d_star)
        optimal[i, j] = ev["optimal_loss"]
        data["loss"][i, j] = [fit.loss(tau) for tau in fit.taus]
        data["excess_loss_insample"][i, j] = [fit.excess_loss(tau) for tau in fit.taus]
        data["excess_loss"][i, j] = ev["excess_loss"]
        data["excess_loss_se"][i, j] = ev["excess_loss_se"]
        if d_star is not None:
            data["excess_tangent"][i, j] = ev["excess_tangent"]
            data["excess_normal"][i, j] = ev["excess_normal"]
    dims = ("schedule", "width", "tau")
    ds = xr.Dataset({n: (dims, v) for n, v in data.items()},
                    coords={"schedule": schedules, "width": widths, "tau": taus})
    ds["optimal_loss"] = (("schedule", "width"), optimal)
    where = "held-out sample" if heldout else "training sample"
    attrs = {
        "loss": "weighted score-matching training loss L(A(tau)) (training sample)",
        "excess_loss_insample": "L(A(tau)) - L* on the training sample",
        "excess_loss": f"L(A(tau)) - L*, {where}",
        "excess_loss_se": f"Monte-Carlo standard error of the excess loss, {where}",
        "excess_tangent": f"tangent part of the excess loss (ridge frame at x_t), {where}",
        "excess_normal": f"normal part of the excess loss (ridge frame at x_t), {where}",
        "optimal_loss": f"loss L* of the exact (memorizing) denoiser, {where}",
    }
    for n, ln in attrs.items():
        if n in ds:
            ds[n].attrs.update(long_name=ln, units="loss units (weighted squared error / d)")
    ds["tau"].attrs.update(long_name="training time (gradient-flow time of L)", units="1")
    if d_star is not None:
        ds.attrs["d_star"] = int(d_star)
    return ds
