"""Random features trained at one diffusion time: Bonnaire et al.'s model, its losses along training time.

The model of Bonnaire, Urfin, Biroli & Mezard (2025), section 4, as their ``Theory/src/Training_random_features.py``
trains it (commit :data:`THEIR_COMMIT`): the score at one OU time t is s_A(z) = A tanh(W z / sqrt(d)),
W (p, d) ~ N(0, 1) fixed, A (d, p) trained from A(0) = 0 by gradient descent with **fresh noise at every step**
(one draw eta per training point per step) on

    L(A) = 1/(n d) sum_i |sqrt(Delta) s_A(a x_i + sqrt(Delta) eta_i) + eta_i|^2 (+ (Delta lam / d) |A|_F^2),

a = alpha_t = e^{-t}, Delta = h_t = 1 - a^2, no ridge term (lam = 0) and learning rate 1e-2 d / Delta in their
current code; training time tau = steps x learning rate (their units, kept here).

**The noise-averaged dynamics.**  The loss is quadratic in A; averaged over the noise,

    L(A) = (1/d) [Delta tr(A U A^T) + 2 sqrt(Delta) tr(A V) + d] + (Delta lam / d) |A|_F^2,

U = (1/n) sum_i E_eta[phi phi^T] (p, p) and V = (1/n) sum_i E_eta[phi eta^T] (p, d), phi = tanh(W z / sqrt(d)).
Because each step's noise is drawn afresh and independently of A, the *mean* of A under their gradient descent
follows exactly the gradient descent of this noise-averaged loss: with M = U + lam I = Q diag(mu) Q^T,
c = 2 Delta / d and A* = -V^T M^{-1} / sqrt(Delta),

    A_k = A* (I - (I - lr c M)^k)                    (their steps, k = tau / lr)
    A(tau) = A* (I - exp(-c M tau))                  (the flow, lr -> 0)

(:class:`ReadoutFlow`); every quadratic form of A along tau then costs O(p^2) per tau after one
eigendecomposition.  U and V have no closed form for tanh: they are estimated by Monte Carlo over the noise with
many draws per point (:func:`feature_forms`, antithetic pairs eta, -eta), and the convergence in the number of
rows is checked by the caller (docs/timescales.md).  A form built from a *fixed* handful of draws per point
(16, say) is another model -- gradient descent on fixed noisy rows, which can memorize the draws themselves --
and does not follow their fresh-noise descent (``tests/test_single_time.py``).

**Their Gaussian-equivalent U** (the lemma behind their ``plot_spectrum_U.py``): with the Hermite coefficients of
:func:`gaussian_equivalent_coefficients`, U ~ G G^T / n + b^2 W W^T / d + s^2 I, G = a e^{-t} W X^T / sqrt(d) +
v Omega, Omega (p, n) ~ N(0, 1) (:func:`gaussian_equivalent_forms`).  Its spectrum has a bulk of d population
modes at scale psi_p = p / d, a bulk of sample-specific modes at scale v^2 p / n = v^2 psi_p / psi_n, and the
rest at s^2.  Gradient descent relaxes a mode of eigenvalue mu at the rate c mu, so the population bulk sets
tau_gen ~ 1 / (c mu_pop) and the sample bulk tau_mem ~ 1 / (c mu_sample), proportional to n at fixed p
(:func:`spectral_times`).

Measured along tau (each a quadratic form of its own draws):

- ``train_loss``: the noise-averaged loss on the training points, from noise draws other than the fit's;
- ``test_loss``: the same on fresh draws of the law with fresh noise;
- ``score_error``: (1/d) E|s_A(z) + z|^2 for z ~ N(0, I): for x ~ N(0, I) the noised law is N(0, I) at every t,
  whose score is -z (their ``compute_error_score``).

Array kernels (torch in, numpy out) and one function, :func:`single_time_losses`, that builds the labelled
Dataset over (n_train, tau).  The timescales are :func:`ridgexr.analysis.separation_timescales`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import xarray as xr

from .._validation import check_bool, check_float, check_int

__all__ = ["feature_forms", "flow_losses", "readout_flow", "ReadoutFlow", "fresh_noise_descent",
           "gaussian_equivalent_coefficients", "gaussian_equivalent_forms", "spectral_times", "single_time_losses",
           "THEIR_COMMIT", "THEIR_LAMBDA", "THEIR_LR_FACTOR", "FIRST_COMMIT_LAMBDA", "FIRST_COMMIT_LR_FACTOR"]

#: the commit of tbonnair/Why-Diffusion-Models-Don-t-Memorize whose Theory/src settings are followed
THEIR_COMMIT = "6a4c59a7f8cb63801cdd7be72ab4d16ade54d555"
#: their current code has no ridge term
THEIR_LAMBDA = 0.0
#: their current learning rate is THEIR_LR_FACTOR x d / Delta
THEIR_LR_FACTOR = 1e-2
#: the ridge penalty of their first commit of the script (419195e)
FIRST_COMMIT_LAMBDA = 1e-3
#: the learning-rate factor of their first commit of the script (419195e)
FIRST_COMMIT_LR_FACTOR = 1e-4


def _features(z: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return torch.tanh(z @ W.T / math.sqrt(W.shape[1]))


def _delta(t: float) -> float:
    return -math.expm1(-2.0 * t)


def feature_forms(x: torch.Tensor, W: torch.Tensor, t: float | None, n_noise: int,
                  generator: torch.Generator | None = None, chunk: int = 4096,
                  antithetic: bool = False) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Monte-Carlo forms U = E[phi phi^T] (p, p), V = E[phi y^T] (p, d) and c = E|y|^2 over rows z.

    Rows: with ``t`` given, each point of ``x`` with ``n_noise`` noise draws, z = a x + sqrt(Delta) eta and
    y = eta (the denoising loss's forms); with ``t=None`` the rows are the points themselves, z = y = x (the
    score error's forms, x ~ N(0, I)).  With ``antithetic`` the draws come in pairs (eta, -eta) (``n_noise``
    even): the same expectation, with the terms odd in eta cancelled in every pair.  The features are computed
    in float32 chunk by chunk and summed in float64 (memory: ``chunk`` x p floats).

    Parameters
    ----------
    x : (n, d) float64 tensor
    W : (p, d) float64 tensor
    t : float or None (OU time)
    n_noise : int >= 1 (ignored with ``t=None``)
    generator : torch.Generator, the noise's stream (needed with ``t``)
    chunk : int, rows per chunk
    antithetic : bool

    Returns
    -------
    U (p, p) float64, V (p, d) float64, c float

    Examples
    --------
    >>> W = torch.randn(8, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> x = torch.zeros(3, 2, dtype=torch.float64)
    >>> U, V, c = feature_forms(x, W, 0.5, 4, torch.Generator().manual_seed(1), antithetic=True)
    >>> tuple(U.shape), tuple(V.shape), bool(torch.allclose(U, U.T))
    ((8, 8), (8, 2), True)
    """
    n, d = x.shape
    p = W.shape[0]
    reps = 1 if t is None else int(n_noise)
    if t is not None and antithetic and reps % 2:
        raise ValueError(f"`n_noise` must be even with antithetic draws; got {n_noise}")
    U = torch.zeros(p, p, dtype=torch.float64)
    V = torch.zeros(p, d, dtype=torch.float64)
    c = 0.0
    W32 = W.float()
    per = max(1, chunk // reps)
    for start in range(0, n, per):  # a chunk of points with all their noise draws: one matmul each
        xb = x[start:start + per]
        if t is None:
            z = y = xb
        else:
            a = math.exp(-t)
            if antithetic:
                half = torch.randn(xb.shape[0], reps // 2, d, generator=generator, dtype=torch.float64)
                eta = torch.cat([half, -half], 1).reshape(-1, d)
            else:
                eta = torch.randn(xb.shape[0] * reps, d, generator=generator, dtype=torch.float64)
            z = a * xb.repeat_interleave(reps, 0) + math.sqrt(_delta(t)) * eta
            y = eta
        phi = _features(z.float(), W32)
        U += (phi.T @ phi).double()
        V += (phi.T @ y.float()).double()
        c += float((y * y).sum())
    rows = n * reps
    return U / rows, V / rows, c / rows


@dataclass(frozen=True)
class ReadoutFlow:
    """The noise-averaged dynamics of the readout A from A(0) = 0, in the eigenbasis of M = U + lam I.

    Attributes
    ----------
    eigenvalues : (p,) float64 ndarray, mu ascending (of M)
    basis : (p, p) float64 tensor Q (columns: eigenvectors)
    target : (d, p) float64 tensor B = A* Q, A* = -V^T M^{-1} / sqrt(Delta)
    t, delta, d : the OU time, Delta = 1 - e^{-2t}, the data dimension
    """

    eigenvalues: np.ndarray
    basis: torch.Tensor
    target: torch.Tensor
    t: float
    delta: float
    d: int

    @property
    def rate(self) -> float:
        """c = 2 Delta / d: a mode of eigenvalue mu relaxes as exp(-c mu tau)."""
        return 2.0 * self.delta / self.d

    def factors(self, taus, lr: float | None = None) -> np.ndarray:
        """g (n_tau, p): A(tau) Q = B diag(g).  ``lr=None``: the flow, g = 1 - exp(-c mu tau); else gradient
        descent at learning rate ``lr``, k = round(tau / lr) steps, g = 1 - (1 - lr c mu)^k (tau = inf: 1)."""
        taus = np.asarray(taus, dtype=np.float64)
        mu = self.eigenvalues
        if lr is None:
            with np.errstate(invalid="ignore"):
                return -np.expm1(-self.rate * np.outer(taus, mu))
        steps = np.where(np.isfinite(taus), np.round(taus / lr), np.inf)
        step = 1.0 - lr * self.rate * mu
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            g = 1.0 - np.sign(step)[None, :] ** steps[:, None] * np.abs(step)[None, :] ** steps[:, None]
        return np.where(np.isinf(steps)[:, None], 1.0, g)

    def losses(self, taus, evaluate: dict[str, tuple[torch.Tensor, torch.Tensor, float, str]],
               lr: float | None = None) -> dict[str, np.ndarray]:
        """Each ``evaluate`` form's loss along the dynamics (see :func:`flow_losses`)."""
        d, delta, Q, B = self.d, self.delta, self.basis, self.target
        g = self.factors(taus, lr)
        BtB = B.T @ B
        out = {}
        for name, (Ue, Ve, ce, kind) in evaluate.items():
            if kind not in ("noise", "score"):
                raise ValueError(f"evaluate[{name!r}]: kind must be 'noise' or 'score'; got {kind!r}")
            K = (BtB * (Q.T @ Ue @ Q)).numpy()
            v = torch.diagonal(Q.T @ Ve @ B).numpy()
            quad, lin = (delta, math.sqrt(delta)) if kind == "noise" else (1.0, 1.0)
            out[name] = (quad * np.einsum("tj,jk,tk->t", g, K, g) + 2.0 * lin * (g @ v) + ce) / d
        return out


def readout_flow(U: torch.Tensor, V: torch.Tensor, t: float, lam: float = 0.0) -> ReadoutFlow:
    """The eigendecomposition behind the noise-averaged dynamics of the fit form (U, V) at time t.

    Parameters
    ----------
    U : (p, p) float64 tensor, V : (p, d) float64 tensor
        The noise-averaged forms on the training points (:func:`feature_forms`).
    t : float > 0
    lam : float >= 0, ridge penalty

    Returns
    -------
    :class:`ReadoutFlow`

    Examples
    --------
    >>> U = torch.eye(3, dtype=torch.float64); V = torch.ones(3, 1, dtype=torch.float64)
    >>> flow = readout_flow(U, V, 0.5)
    >>> flow.eigenvalues.tolist()
    [1.0, 1.0, 1.0]
    """
    d = V.shape[1]
    delta = _delta(t)
    M = U + lam * torch.eye(U.shape[0], dtype=torch.float64)
    mu, Q = torch.linalg.eigh(M)
    B = -(V.T @ Q) / mu / math.sqrt(delta)  # A* Q, (d, p)
    return ReadoutFlow(mu.numpy().copy(), Q, B, float(t), delta, int(d))


def flow_losses(U: torch.Tensor, V: torch.Tensor, t: float, taus, lam: float,
                evaluate: dict[str, tuple[torch.Tensor, torch.Tensor, float, str]],
                lr: float | None = None) -> dict[str, np.ndarray]:
    """Each ``evaluate`` form's loss along the noise-averaged dynamics of the fit form (U, V) at time t.

    ``evaluate`` maps a name to (U', V', c', kind): kind "noise" gives (1/d) E|sqrt(Delta) s_A + eta|^2 from the
    forms of noisy rows, kind "score" gives (1/d) E|s_A(z) + z|^2 from those of clean rows z.  ``taus`` in
    their units (steps x learning rate); tau = inf is the minimizer A*.  ``lr=None`` follows the flow; a learning
    rate follows their gradient descent's mean, step by step (:meth:`ReadoutFlow.factors`).

    Returns
    -------
    dict name -> (n_tau,) float64 array
    """
    return readout_flow(U, V, t, lam).losses(taus, evaluate, lr)


def fresh_noise_descent(x: torch.Tensor, W: torch.Tensor, t: float, taus, *, lr: float,
                        evaluate: dict[str, tuple[torch.Tensor, torch.Tensor, float, str]], n_runs: int = 16,
                        lam: float = 0.0, generator: torch.Generator | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Their estimator: gradient descent on A from A(0) = 0 with a fresh noise draw per point at every step.

    Each step draws eta (n, d), forms z = a x + sqrt(Delta) eta and takes one step of learning rate ``lr`` on
    (1/(n d)) ``|sqrt(Delta) A phi(z) + eta|^2`` (+ ``Delta lam |A|^2 / d``), as their ``Training_random_features.py``
    does with torch.optim.SGD; ``n_runs`` independent runs advance together (batched).  At each tau (k = round(tau
    / lr) steps) every run's A is scored on the ``evaluate`` forms exactly as :func:`flow_losses` scores the
    noise-averaged dynamics.

    A run's loss is the loss of the mean readout E[A] plus the loss of its fluctuation about the mean, a term of
    order ``lr`` (the steps' noise); E[A] itself follows the noise-averaged steps exactly.  So besides each run's
    losses the loss of E[A] is estimated without bias from the runs -- the U-statistic over pairs of distinct runs
    of the bilinear form, Q(E A) = mean_{r != s} [quad tr(A_r U A_s^T)] + 2 lin mean_r tr(A_r V) + c -- with its
    jackknife standard error.

    Parameters
    ----------
    x : (n, d) float64 tensor, W : (p, d) float64 tensor
    t : float > 0
    taus : increasing positive training times (their units)
    lr : float > 0, the learning rate
    evaluate : as for :func:`flow_losses`
    n_runs : int >= 3
    lam : float >= 0
    generator : torch.Generator, the noise's stream

    Returns
    -------
    dict: ``runs`` name -> (n_runs, n_tau) each run's loss; ``mean`` name -> (n_tau,) the loss of E[A];
    ``mean_se`` name -> (n_tau,) its jackknife standard error.
    """
    taus = np.asarray(taus, dtype=np.float64)
    n_runs = check_int(n_runs, "n_runs", min_val=3)
    steps = np.round(taus / lr).astype(np.int64)
    n, d = x.shape
    p = W.shape[0]
    delta = _delta(t)
    a, sd = math.exp(-t), math.sqrt(delta)
    A = torch.zeros(n_runs, d, p, dtype=torch.float64)
    recorded = []
    k = 0
    for target in steps:
        while k < target:
            eta = torch.randn(n_runs, n, d, generator=generator, dtype=torch.float64)
            phi = _features(a * x + sd * eta, W)  # (runs, n, p)
            resid = sd * phi @ A.transpose(1, 2) + eta  # (runs, n, d)
            grad = (2.0 * sd / (n * d)) * resid.transpose(1, 2) @ phi + (2.0 * delta * lam / d) * A
            A = A - lr * grad
            k += 1
        recorded.append(A.clone())
    As = torch.stack(recorded, 1)  # (runs, n_tau, d, p)
    R = n_runs
    S = As.sum(0)  # (n_tau, d, p)
    runs, mean, mean_se = {}, {}, {}
    for name, (Ue, Ve, ce, kind) in evaluate.items():
        quad, lin = (delta, sd) if kind == "noise" else (1.0, 1.0)
        AU = As @ Ue  # (runs, n_tau, d, p)
        q_rr = torch.einsum("rtip,rtip->rt", AU, As)
        li = torch.einsum("rtip,pi->rt", As, Ve)
        runs[name] = ((quad * q_rr + 2.0 * lin * li + ce) / d).numpy()
        cross = torch.einsum("rtip,tip->rt", AU, S)  # tr(A_r U S^T)
        full = cross.sum(0)  # tr(S U S^T)
        q_tot = q_rr.sum(0)
        li_tot = li.sum(0)
        est = (quad * (full - q_tot) / (R * (R - 1)) + 2.0 * lin * li_tot / R + ce) / d
        loo_pairs = full[None] - 2.0 * cross - q_tot[None] + 2.0 * q_rr  # pairs among the other runs
        loo = (quad * loo_pairs / ((R - 1) * (R - 2)) + 2.0 * lin * (li_tot[None] - li) / (R - 1) + ce) / d
        var = (R - 1) / R * ((loo - loo.mean(0, keepdim=True)) ** 2).sum(0)
        mean[name], mean_se[name] = est.numpy(), var.sqrt().numpy()
    return {"runs": runs, "mean": mean, "mean_se": mean_se}


def gaussian_equivalent_coefficients(t: float, *, sigma_x: float = 1.0, n_nodes: int = 96) -> dict[str, float]:
    """The Hermite coefficients of tanh behind their Gaussian-equivalent U, by Gauss-Hermite quadrature.

    With the pre-activation of a feature h = e^{-t} sigma_x u + sqrt(Delta) v (u the data's part, v the noise's,
    independent N(0, 1)):

    - a = E[tanh'(h)]: the coefficient of e^{-t} w.x / sqrt(d) (their a_t);
    - b = E[v tanh(h)] = sqrt(Delta) a: the coefficient of w.eta / sqrt(d) (their b_t);
    - v2 = Var_u(E_v tanh(h)) - a^2 e^{-2t} sigma_x^2: the data-dependent nonlinear part (their v_t^2);
    - s2 = E tanh(h)^2 - a^2 e^{-2t} sigma_x^2 - v2 - b^2: the rest, noise-dependent and nonlinear (their s_t^2);
    - mu1 = E[tanh'(z)], mu_star2 = E tanh(z)^2 - mu1^2, z ~ N(0, 1): the same for the score error's clean rows.

    Parameters
    ----------
    t : float > 0, sigma_x : float > 0 (the data's standard deviation per coordinate), n_nodes : int

    Returns
    -------
    dict: a, b, v2, s2, mu1, mu_star2, delta

    Examples
    --------
    >>> c = gaussian_equivalent_coefficients(0.1)
    >>> round(c["b"] / c["a"], 6) == round(math.sqrt(c["delta"]), 6)
    True
    """
    t = check_float(t, "t", min_val=0, include_boundaries="neither")
    sigma_x = check_float(sigma_x, "sigma_x", min_val=0, include_boundaries="neither")
    n_nodes = check_int(n_nodes, "n_nodes", min_val=8)
    nodes, weights = np.polynomial.hermite_e.hermegauss(n_nodes)
    weights = weights / weights.sum()
    delta = _delta(t)
    ax = math.exp(-t) * sigma_x
    u, v = nodes[:, None], nodes[None, :]
    wuv = weights[:, None] * weights[None, :]
    h = ax * u + math.sqrt(delta) * v
    th = np.tanh(h)
    a = float((wuv * (1.0 - th ** 2)).sum())
    b = float((wuv * th * v).sum())
    cond = (th * weights[None, :]).sum(1)  # E_v tanh(h) at each u
    v2 = float((weights * cond ** 2).sum()) - a * a * ax * ax
    total = float((wuv * th ** 2).sum())
    s2 = total - a * a * ax * ax - v2 - b * b
    tz = np.tanh(nodes)
    mu1 = float((weights * (1.0 - tz ** 2)).sum())
    mu_star2 = float((weights * tz ** 2).sum()) - mu1 ** 2
    return {"a": a, "b": b, "v2": v2, "s2": s2, "mu1": mu1, "mu_star2": mu_star2, "delta": delta}


def gaussian_equivalent_forms(x: torch.Tensor, W: torch.Tensor, t: float,
                              generator: torch.Generator | None = None) -> dict[str, tuple]:
    """Their closed-form Gaussian-equivalent forms: the training points' U, V and the population's.

    With the coefficients of :func:`gaussian_equivalent_coefficients` and Omega (p, n) ~ N(0, 1) drawn from
    ``generator``:

    - ``train``: U = G G^T / n + b^2 W W^T / d + s^2 I, G = a e^{-t} W x^T / sqrt(d) + v Omega; V = b W / sqrt(d)
      (the lemma of their ``plot_spectrum_U.py``);
    - ``test``: the same averaged over the data, U = (a^2 e^{-2t} + b^2) W W^T / d + (v^2 + s^2) I, V = b W / sqrt(d);
    - ``score``: the clean rows' forms, U = mu1^2 W W^T / d + mu_star^2 I, V = mu1 W / sqrt(d).

    Returns
    -------
    dict name -> (U (p, p), V (p, d), c = d, kind) float64 tensors, the tuples :func:`flow_losses` evaluates.
    """
    n, d = x.shape
    p = W.shape[0]
    k = gaussian_equivalent_coefficients(t)
    e = math.exp(-t)
    omega = torch.randn(p, n, generator=generator, dtype=torch.float64)
    G = k["a"] * e * (W @ x.T) / math.sqrt(d) + math.sqrt(max(k["v2"], 0.0)) * omega
    WW = W @ W.T / d
    eye = torch.eye(p, dtype=torch.float64)
    Vn = k["b"] * W / math.sqrt(d)
    return {
        "train": (G @ G.T / n + k["b"] ** 2 * WW + k["s2"] * eye, Vn, float(d), "noise"),
        "test": ((k["a"] ** 2 * e * e + k["b"] ** 2) * WW + (k["v2"] + k["s2"]) * eye, Vn, float(d), "noise"),
        "score": (k["mu1"] ** 2 * WW + k["mu_star2"] * eye, k["mu1"] * W / math.sqrt(d), float(d), "score"),
    }


#: the statistics of :func:`spectral_times`, in order
SPECTRAL_STATS = ("tau_gen_spectral", "tau_mem_spectral", "population_low", "population_median",
                  "population_high", "sample_low", "sample_median", "sample_high", "rest_high",
                  "population_gap", "sample_gap")


def spectral_times(eigenvalues: np.ndarray, d: int, n: int, t: float) -> np.ndarray:
    """The two bulks of U's spectrum and the relaxation times they predict.

    Ranked from the largest, the first d eigenvalues are the population bulk (scale psi_p), the next n - d the
    sample-specific bulk (scale psi_p / psi_n), the rest the floor.  A mode of eigenvalue mu relaxes as
    exp(-c mu tau), c = 2 Delta / d, so the bulks predict tau_gen = 1 / (c median(population)) and
    tau_mem = 1 / (c median(sample)).  The gaps say whether the bulks are separated: ``population_gap`` = the
    population's least over the sample's largest eigenvalue, ``sample_gap`` = the sample's least over the
    largest of the rest (a ratio above 1: no overlap).

    Parameters
    ----------
    eigenvalues : (..., p) eigenvalues of U (any order)
    d, n : int, the data dimension and the number of training points (d < n < p)
    t : float > 0

    Returns
    -------
    (..., 11) array in the order of :data:`SPECTRAL_STATS`

    Examples
    --------
    >>> lam = np.r_[np.full(2, 100.0), np.full(6, 1.0), np.full(8, 0.01)]
    >>> out = spectral_times(lam, 2, 8, 0.5)
    >>> c = 2 * (1 - math.exp(-1.0)) / 2
    >>> bool(np.isclose(out[0], 1 / (100 * c))), bool(np.isclose(out[1], 1 / c)), out[-2:].tolist()
    (True, True, [100.0, 100.0])
    """
    lam = -np.sort(-np.asarray(eigenvalues, dtype=np.float64), axis=-1)
    p = lam.shape[-1]
    if not 0 < d < n < p:
        raise ValueError(f"spectral_times needs 0 < d < n < p; got d = {d}, n = {n}, p = {p}")
    c = 2.0 * _delta(t) / d
    pop, sample, rest = lam[..., :d], lam[..., d:n], lam[..., n:]
    stats = [1.0 / (c * np.median(pop, -1)), 1.0 / (c * np.median(sample, -1)),
             pop[..., -1], np.median(pop, -1), pop[..., 0], sample[..., -1], np.median(sample, -1), sample[..., 0],
             rest[..., 0], pop[..., -1] / sample[..., 0], sample[..., -1] / rest[..., 0]]
    return np.stack(stats, -1)


def single_time_losses(n_trains, *, d: int = 32, p: int = 4096, t: float = 0.01, taus=None,
                       lam: float = THEIR_LAMBDA, rows: int = 65536, n_test: int = 65536, antithetic: bool = True,
                       equivalent: bool = True, seed: int = 0,
                       progress: Callable[[str], None] | None = None) -> xr.Dataset:
    """Train, test and score-error losses of Bonnaire et al.'s random features along tau, per n, with U's spectrum.

    One draw of W (p, d) and of the data x ~ N(0, I_d) (the largest n; each ``n_train`` takes the first n rows,
    nested as every n_train sweep of ridgexr); per n the noise-averaged forms from ``rows`` noisy rows
    (ceil(rows / n) draws per point, :func:`feature_forms`), one eigendecomposition (:func:`readout_flow`), the
    losses along the flow and the spectrum's bulks and times (:func:`spectral_times`); with ``equivalent`` the
    same spectrum of their Gaussian-equivalent U (:func:`gaussian_equivalent_forms`) beside it.

    Parameters
    ----------
    n_trains : sequence of int
        Training-set sizes n (d < n < p).
    d, p : int
        Data dimension and number of features (their psi_n = n / d, psi_p = p / d).
    t : float > 0
        The OU diffusion time of the loss (their ``t``; a = e^{-t}, Delta = 1 - e^{-2t}).
    taus : sequence of float > 0, optional
        Training times in their units (steps x learning rate); default 161 points log-spaced from 1e-1 to 1e7.
    lam : float >= 0
        Ridge penalty (their current code: none).
    rows : int
        Noisy rows of the fit form per n (the noise average's Monte Carlo); the train loss takes as many rows of
        its own draws.
    n_test : int
        Fresh draws of the law for the test loss (one noise draw each) and for the score error.
    antithetic : bool
        Noise draws in pairs (eta, -eta).
    equivalent : bool
        Also the spectrum of their Gaussian-equivalent U (one more eigenvalue computation per n).
    seed : int
        W, the data, the test draws and the noise streams.
    progress : callable(str), optional

    Returns
    -------
    xarray.Dataset over (n_train, tau): ``train_loss``, ``test_loss``, ``score_error`` (1 per coordinate, their
    normalisation: divided by d) and ``gap`` = test - train; over (n_train, mode): ``eigenvalue`` (of U, descending)
    and with ``equivalent`` ``eigenvalue_equivalent``; over n_train: the statistics of :data:`SPECTRAL_STATS`
    (and ``<stat>_equivalent``); attrs record every setting.
    """
    n_trains = sorted({check_int(n, "n_trains[i]", min_val=1) for n in n_trains})
    d = check_int(d, "d", min_val=1)
    p = check_int(p, "p", min_val=1)
    t = check_float(t, "t", min_val=0, include_boundaries="neither")
    lam = check_float(lam, "lam", min_val=0)
    rows = check_int(rows, "rows", min_val=1)
    n_test = check_int(n_test, "n_test", min_val=2)
    antithetic = check_bool(antithetic, "antithetic")
    equivalent = check_bool(equivalent, "equivalent")
    if not (d < n_trains[0] and n_trains[-1] < p):
        raise ValueError(f"`n_trains` must lie strictly between d = {d} and p = {p}; got {n_trains}")
    taus = np.logspace(-1, 7, 161) if taus is None else np.asarray(taus, dtype=np.float64)
    if taus.ndim != 1 or taus.size == 0 or not (np.all(taus > 0) and np.all(np.diff(taus) > 0)):
        raise ValueError(f"`taus` must be positive and increasing; got {taus!r}")
    say = progress or (lambda msg: None)
    g = torch.Generator().manual_seed(int(seed))
    W = torch.randn(p, d, generator=g, dtype=torch.float64)
    x = torch.randn(n_trains[-1], d, generator=g, dtype=torch.float64)
    x_test = torch.randn(n_test, d, generator=g, dtype=torch.float64)
    z_pop = torch.randn(n_test, d, generator=g, dtype=torch.float64)
    noise_fit = torch.Generator().manual_seed(int(seed) + 1)
    noise_eval = torch.Generator().manual_seed(int(seed) + 2)
    omega = torch.Generator().manual_seed(int(seed) + 3)
    say(f"forms of {n_test} fresh draws (test loss, score error)")
    test_U, test_V, _ = feature_forms(x_test, W, t, 1, noise_eval)
    score_U, score_V, _ = feature_forms(z_pop, W, None, 1)
    test, score = (test_U, test_V, float(d), "noise"), (score_U, score_V, float(d), "score")  # E|eta|^2 = E|z|^2 = d
    curves = {"train_loss": [], "test_loss": [], "score_error": []}
    spectra, stats, spectra_eq, stats_eq, draws = [], [], [], [], []
    for n in n_trains:
        reps = -(-rows // n)
        reps += reps % 2 if antithetic else 0
        draws.append(reps)
        say(f"n = {n}: forms of {n} x {reps} noisy rows, eigendecomposition of {p} x {p}")
        U, V, _ = feature_forms(x[:n], W, t, reps, noise_fit, antithetic=antithetic)
        Ut, Vt, _ = feature_forms(x[:n], W, t, reps, noise_eval, antithetic=antithetic)
        flow = readout_flow(U, V, t, lam)
        res = flow.losses(taus, {"train_loss": (Ut, Vt, float(d), "noise"), "test_loss": test,
                                 "score_error": score})
        for k in curves:
            curves[k].append(res[k])
        lam_u = np.sort(flow.eigenvalues - lam)[::-1]
        spectra.append(lam_u)
        stats.append(spectral_times(lam_u, d, n, t))
        if equivalent:
            Ue = gaussian_equivalent_forms(x[:n], W, t, omega)["train"][0]
            lam_e = np.sort(torch.linalg.eigvalsh(Ue).numpy())[::-1]
            spectra_eq.append(lam_e)
            stats_eq.append(spectral_times(lam_e, d, n, t))
    coords = {"n_train": np.asarray(n_trains, dtype=np.int64), "tau": taus, "mode": np.arange(p)}
    dims = ("n_train", "tau")
    out = xr.Dataset({
        "train_loss": (dims, np.stack(curves["train_loss"]), {
            "long_name": "(1/d) E|sqrt(Delta) s_A(x_t) + eta|^2 on the training points, noise other than the fit's",
            "units": "1"}),
        "test_loss": (dims, np.stack(curves["test_loss"]), {
            "long_name": f"the same on {n_test} fresh draws of the law, one noise draw each", "units": "1"}),
        "score_error": (dims, np.stack(curves["score_error"]), {
            "long_name": "(1/d) E|s_A(z) + z|^2, z ~ N(0, I): the error to the true score of the noised law",
            "units": "1"}),
        "eigenvalue": (("n_train", "mode"), np.stack(spectra), {
            "long_name": "eigenvalues of the noise-averaged feature form U, descending", "units": "1"}),
        "noise_draws": ("n_train", np.asarray(draws), {"long_name": "noise draws per training point of the fit form",
                                                       "units": "1"}),
    }, coords=coords)
    out["gap"] = (out["test_loss"] - out["train_loss"]).assign_attrs(long_name="test_loss - train_loss", units="1")
    _spectral_vars(out, np.stack(stats), "", "U (Monte Carlo over the noise)")
    if equivalent:
        out["eigenvalue_equivalent"] = (("n_train", "mode"), np.stack(spectra_eq), {
            "long_name": "eigenvalues of their Gaussian-equivalent U, descending", "units": "1"})
        _spectral_vars(out, np.stack(stats_eq), "_equivalent", "their Gaussian-equivalent U")
    out["tau"].attrs.update(long_name="training time: gradient-descent steps x learning rate, their units; the "
                            "flow of the noise-averaged loss", units="1")
    out["n_train"].attrs.update(long_name="training-set size n (nested: the first n draws)", units="1")
    return out.assign_attrs(
        title="random features at one diffusion time (Bonnaire et al. 2025, section 4)",
        model="s_A(z) = A tanh(W z / sqrt(d)), W ~ N(0, 1), A(0) = 0; data x ~ N(0, I_d); the noise-averaged flow",
        t=t, alpha=math.exp(-t), delta=_delta(t), d=d, p=p, lam=lam, rows=rows, antithetic=int(antithetic),
        n_test=n_test, seed=int(seed), rate=2.0 * _delta(t) / d, their_commit=THEIR_COMMIT,
        references="Bonnaire, Urfin, Biroli & Mezard (2025), Why diffusion models don't memorize; their "
                   f"Theory/src/Training_random_features.py and plot_spectrum_U.py at {THEIR_COMMIT[:7]}")


_SPECTRAL_TEXT = {
    "tau_gen_spectral": "1 / (c median eigenvalue of the population bulk): the spectral tau_gen",
    "tau_mem_spectral": "1 / (c median eigenvalue of the sample bulk): the spectral tau_mem",
    "population_low": "least eigenvalue of the population bulk (the d largest)",
    "population_median": "median eigenvalue of the population bulk",
    "population_high": "largest eigenvalue",
    "sample_low": "least eigenvalue of the sample bulk (ranks d + 1 .. n)",
    "sample_median": "median eigenvalue of the sample bulk",
    "sample_high": "largest eigenvalue of the sample bulk",
    "rest_high": "largest eigenvalue below the sample bulk",
    "population_gap": "population_low / sample_high (> 1: the bulks do not overlap)",
    "sample_gap": "sample_low / rest_high (> 1: the sample bulk is separated from the rest)",
}


def _spectral_vars(out: xr.Dataset, stats: np.ndarray, suffix: str, of: str) -> None:
    for i, name in enumerate(SPECTRAL_STATS):
        units = "1" if not name.startswith("tau") else "tau"
        out[f"{name}{suffix}"] = ("n_train", stats[:, i], {"long_name": f"{_SPECTRAL_TEXT[name]}, of {of}",
                                                           "units": units})
