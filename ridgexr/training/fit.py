"""Fitted random-feature denoisers: one (schedule, width) cell at several training times tau."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .._backend import as_tensor, check_finite
from .._validation import check_int, check_option
from ..models import RandomFeatureDenoiser
from .dynamics import GradientFlow, gradient_descent
from .quadratic import TARGETS, QuadraticLoss, exact_outputs, quadratic_loss, targets
from .sample import TrainingSample, batches, draw_training_sample
from .schedules import schedule_name, schedule_weight

__all__ = ["METHODS", "RandomFeatureFit", "fit_random_features", "fit_sweep"]

METHODS = ("flow", "gd")


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
    quadratic : QuadraticLoss -- U, V, C, the sample, lambda, y and f* (also readable as
        ``fit.U``, ``fit.V``, ``fit.C``, ``fit.sample``, ``fit.lam``, ``fit.y``, ``fit.f_star``)
    method : "flow" or "gd"
    seed : int, seed of the training sample
    schedule_spec : the schedule as given (name or callable)
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
    _stats: dict = field(default_factory=dict, repr=False)

    # the quadratic form's parts, under the names of release 0.1
    U = property(lambda self: self.quadratic.U, doc="(p, p) feature second moments")
    V = property(lambda self: self.quadratic.V, doc="(d, p) target-feature moments")
    C = property(lambda self: self.quadratic.C, doc="constant term of the loss")
    sample = property(lambda self: self.quadratic.sample, doc="the TrainingSample")
    lam = property(lambda self: self.quadratic.lam, doc="(S,) loss weights")
    y = property(lambda self: self.quadratic.y, doc="(S, d) targets")
    f_star = property(lambda self: self.quadratic.f_star, doc="(S, d) exact-denoiser outputs")
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
        """L(A(tau)) from the quadratic form."""
        return self.quadratic.loss(self.readout(tau))

    def evaluate(self, sample: TrainingSample | None = None, d_star: int | None = None) -> dict:
        """Losses of every A(tau) on ``sample`` (default: the training sample), one batched pass.

        Returns a dict of arrays over taus: ``loss``, ``excess_loss`` (paired with the exact
        denoiser), ``excess_loss_se`` (Monte-Carlo SE from the noise draws; NaN when
        n_noise = 1), and with ``d_star`` the split ``excess_tangent``/``excess_normal`` of
        E lambda |f - f*|^2 / d by the ridge frame at (x_t, t); plus the scalar
        ``optimal_loss``.  Use :meth:`heldout_sample` for an estimate that is not biased by
        fitting the sample.  Results are cached per (sample, d_star).
        """
        key = (None if sample is None else sample.key, d_star)
        if key in self._stats:
            return self._stats[key]
        s = self.sample if sample is None else sample
        proc = self.model.process
        if sample is None:
            lam, y, f_star = self.lam, self.y, self.f_star
        else:
            lam, y = targets(s, self.model.parametrization, self.schedule_spec, proc)
            f_star = exact_outputs(self.train, s, self.model.parametrization, proc)
        tang = None if d_star is None else s.tangent_frames(self.train, d_star, proc)
        dev, dt = self.model.A.device, self.model.A.dtype
        d = self.model.d
        n_tau = len(self.taus)
        l_model = np.empty((n_tau, s.size))
        l_tan = np.empty((n_tau, s.size))
        l_err = np.empty((n_tau, s.size))
        with torch.no_grad():
            for sl in batches(s.size, 2048):
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
            for k in range(n_tau):  # a handful of taus; each is one vectorised pass
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
        return float(self.evaluate()["excess_loss_se"][self.tau_index(tau)])

    def excess_loss_split(self, tau: float = math.inf, d_star: int = 1,
                          sample: TrainingSample | None = None) -> tuple[float, float]:
        """(tangent, normal) parts of E lambda |f - f*|^2 / d, frame from ``ridge_frame`` at (x_t, t)."""
        ev = self.evaluate(sample, int(d_star))
        i = self.tau_index(tau)
        return float(ev["excess_tangent"][i]), float(ev["excess_normal"][i])


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


def _solve(model: RandomFeatureDenoiser, train: np.ndarray, schedule, taus: np.ndarray, method: str,
           quad: QuadraticLoss, lr, A0: torch.Tensor, seed: int) -> RandomFeatureFit:
    if method == "flow":
        path = GradientFlow(quad.U, quad.V, A0).path(taus.tolist())
    else:
        path = gradient_descent(quad.U, quad.V, A0, taus.tolist(), lr)
    return RandomFeatureFit(model=model, train=train, schedule=schedule_name(schedule), taus=path.taus, A=path.A,
                            quadratic=quad, method=method, seed=int(seed), schedule_spec=schedule)


def fit_random_features(model: RandomFeatureDenoiser, train: Any, *, schedule: str | Callable = "1",
                        taus: Sequence[float] = (math.inf,), method: str = "flow", t_min: float = 1e-3,
                        T: float | None = None, n_time: int = 32, n_noise: int = 16, seed: int = 0,
                        lr: float | None = None, init: Any = "zeros", batch_size: int = 2048,
                        target: str = "dsm") -> RandomFeatureFit:
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
    batch_size : int
        Sample points per feature batch when accumulating U and V.
    target : {"dsm", "ideal"}
        Fit the noisy DSM target or its conditional expectation, the exact denoiser's output
        (see :func:`ridgexr.training.quadratic_loss`).  Held-out diagnostics always use the
        DSM loss, so fits with either target compare directly.

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
        raise TypeError(f"`model` must be a RandomFeatureDenoiser; got {type(model).__name__}")
    check_option(method, "method", METHODS)
    check_option(target, "target", TARGETS)
    schedule_weight(schedule, np.array([0.5]), model.process)  # validates the schedule
    taus = _check_taus(taus)
    batch_size = check_int(batch_size, "batch_size", min_val=1)
    train_np = _check_train(train, model.d)
    T = model.T / 2 if T is None else T
    sample = draw_training_sample(train_np, t_min=t_min, T=T, n_time=n_time, n_noise=n_noise, seed=seed,
                                  process=model.process)
    quad = quadratic_loss(model, train_np, sample, schedule, batch_size=batch_size, target=target)
    return _solve(model, train_np, schedule, taus, method, quad, lr, _initial_A(model, init, seed), seed)


def _initial_A(model: RandomFeatureDenoiser, init: Any, seed: int) -> torch.Tensor:
    kw = dict(dtype=model.A.dtype, device=model.A.device)
    if isinstance(init, str):
        check_option(init, "init", ("zeros", "normal"))
        if init == "zeros":
            return torch.zeros(model.d, model.width, **kw)
        g = np.random.default_rng(np.random.SeedSequence([seed, 7]))
        return torch.tensor(g.standard_normal((model.d, model.width)), **kw)
    a = as_tensor(init, name="init", **kw)
    if a.shape != (model.d, model.width):
        raise ValueError(f"`init` must have shape ({model.d}, {model.width}); got {tuple(a.shape)}")
    return a


def fit_sweep(train: Any, *, widths: Sequence[int], schedules: Sequence[str | Callable],
              taus: Sequence[float] = (math.inf,), model_kwargs: dict | None = None, method: str = "flow",
              t_min: float = 1e-3, T: float | None = None, n_time: int = 32, n_noise: int = 16, seed: int = 0,
              lr: float | None = None, batch_size: int = 2048, device: Any = None,
              progress: Callable[[str], None] | None = None, target: str = "dsm") -> dict:
    """Fit every (schedule, width) cell on nested features and one shared sample.

    The raw feature moments are accumulated once per schedule at the largest width; the
    moments of width p are the leading p x p (resp. d x p) blocks, scaled by 1/p (1/sqrt(p)).
    Every fit starts from A(0) = 0.

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
    train_np = _check_train(train)
    d = train_np.shape[1]
    pmax = max(widths)
    big = RandomFeatureDenoiser(d, pmax, device=device, **model_kwargs)
    T = big.T / 2 if T is None else T
    taus = _check_taus(taus)
    sample = draw_training_sample(train_np, t_min=t_min, T=T, n_time=n_time, n_noise=n_noise, seed=seed,
                                  process=big.process)
    f_star = exact_outputs(train_np, sample, big.parametrization, big.process)
    fits = {}
    for schedule in schedules:
        raw = quadratic_loss(big, train_np, sample, schedule, batch_size=batch_size, normalized=False, f_star=f_star,
                             target=target)
        for p in widths:
            model = RandomFeatureDenoiser(d, p, device=device, **model_kwargs)
            quad = raw.width_block(p)
            A0 = torch.zeros(d, p, dtype=quad.U.dtype, device=quad.U.device)
            fits[(schedule_name(schedule), p)] = _solve(model, train_np, schedule, taus, method, quad, lr, A0, seed)
            if progress is not None:
                progress(f"{schedule_name(schedule)}/{p}")
    return fits
