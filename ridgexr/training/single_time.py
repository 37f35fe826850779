"""Random features trained at one diffusion time: Bonnaire et al.'s model, its losses along training time.

The model of Bonnaire, Urfin, Biroli & Mezard (2025), section 4 and their ``Theory/src/Training_random_features``:
the score at one OU time t is s_A(z) = A tanh(W z / sqrt(d)), W (p, d) ~ N(0, 1) fixed, A (d, p) trained from
A(0) = 0 by gradient descent on

    L(A) = 1/(n d) sum_i E_eta |sqrt(Delta) s_A(a x_i + sqrt(Delta) eta) + eta|^2 + (Delta lam / d) |A|_F^2,

a = alpha_t = e^{-t}, Delta = h_t = 1 - a^2, with fresh noise eta at every step, learning rate 1e-4 d / Delta and
training time tau = steps x learning rate (their units, kept here).  Averaged over the noise the loss is
quadratic in A,

    L(A) = (1/d) [Delta tr(A U A^T) + 2 sqrt(Delta) tr(A V) + d] + (Delta lam / d) |A|_F^2,

U = E[phi phi^T] (p, p) and V = E[phi eta^T] (p, d) over the training points and the noise, phi = tanh(W z /
sqrt(d)).  Its gradient flow dA/dtau = -grad L (the limit of their small steps; each step's fresh noise averages
out) is closed-form: with M = U + lam I = Q diag(mu) Q^T, c = 2 Delta / d and A* = -V^T M^{-1} / sqrt(Delta),

    A(tau) = A* (I - exp(-c M tau)),     A(tau) Q = B diag(g(tau)),  B = A* Q,  g_j = 1 - exp(-c mu_j tau),

so every quadratic form of A along tau costs O(p^2) per tau after one eigendecomposition:
tr(A U' A^T) = g^T [(B^T B) o (Q^T U' Q)] g and tr(A V') = sum_j g_j (Q^T V' B)_jj.

Measured along tau (each a noise-averaged Monte-Carlo form of its own draws, :func:`feature_forms`):

- ``train_loss``: the L2 term on the training points with noise draws other than the fit's (their ``train_loss``);
- ``test_loss``: the same on fresh draws of the law with fresh noise (their ``test_loss``);
- ``score_error``: (1/d) E|s_A(z) + z|^2 for z ~ N(0, I): for x ~ N(0, I) the noised law is N(0, I) at every t,
  whose score is -z (their ``test_loss_macris``).

Array kernels (torch in, numpy out) and one function, :func:`single_time_losses`, that builds the labelled
Dataset over (n_train, tau).  The timescales are :func:`ridgexr.analysis.loss_timescales`.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
import xarray as xr

from .._validation import check_float, check_int

__all__ = ["feature_forms", "flow_losses", "single_time_losses", "THEIR_LAMBDA", "THEIR_LR_FACTOR"]

#: their ridge penalty lambda_reg
THEIR_LAMBDA = 1e-3
#: their learning rate is THEIR_LR_FACTOR x d / Delta
THEIR_LR_FACTOR = 1e-4


def _features(z: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return torch.tanh(z @ W.T / math.sqrt(W.shape[1]))


def feature_forms(x: torch.Tensor, W: torch.Tensor, t: float | None, n_noise: int,
                  generator: torch.Generator | None = None, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Monte-Carlo forms U = E[phi phi^T] (p, p), V = E[phi y^T] (p, d) and c = E|y|^2 over rows z.

    Rows: with ``t`` given, each point of ``x`` with ``n_noise`` noise draws, z = a x + sqrt(Delta) eta and
    y = eta (the denoising loss's forms); with ``t=None`` the rows are the points themselves, z = y = x (the
    score error's forms, x ~ N(0, I)).  The features are computed in float32 chunk by chunk and summed in
    float64 (memory: ``chunk`` x p floats).

    Parameters
    ----------
    x : (n, d) float64 tensor
    W : (p, d) float64 tensor
    t : float or None (OU time)
    n_noise : int >= 1 (ignored with ``t=None``)
    generator : torch.Generator, the noise's stream (needed with ``t``)
    chunk : int, rows per chunk

    Returns
    -------
    U (p, p) float64, V (p, d) float64, c float
    """
    n, d = x.shape
    p = W.shape[0]
    reps = 1 if t is None else int(n_noise)
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
            eta = torch.randn(xb.shape[0] * reps, d, generator=generator, dtype=torch.float64)
            z = a * xb.repeat_interleave(reps, 0) + math.sqrt(1.0 - a * a) * eta
            y = eta
        phi = _features(z.float(), W32)
        U += (phi.T @ phi).double()
        V += (phi.T @ y.float()).double()
        c += float((y * y).sum())
    rows = n * reps
    return U / rows, V / rows, c / rows


def flow_losses(U: torch.Tensor, V: torch.Tensor, t: float, taus, lam: float,
                evaluate: dict[str, tuple[torch.Tensor, torch.Tensor, float, str]]) -> dict[str, np.ndarray]:
    """Each ``evaluate`` form's loss along the closed-form gradient flow of the fit form (U, V) at time t.

    ``evaluate`` maps a name to (U', V', c', kind): kind "noise" gives (1/d) E|sqrt(Delta) s_A + eta|^2 from the
    forms of noisy rows, kind "score" gives (1/d) E|s_A(z) + z|^2 from those of clean rows z.  ``taus`` in
    their units (steps x learning rate); tau = inf is the minimizer A*.  Returns name -> (n_tau,) float64 array.
    """
    d = V.shape[1]
    delta = 1.0 - math.exp(-2.0 * t)
    M = U + lam * torch.eye(U.shape[0], dtype=torch.float64)
    mu, Q = torch.linalg.eigh(M)
    B = -(V.T @ Q) / mu / math.sqrt(delta)  # A* Q, (d, p)
    taus = np.asarray(taus, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf x 0 does not occur: mu > 0
        g = -np.expm1(-(2.0 * delta / d) * np.outer(taus, mu.numpy()))  # (n_tau, p)
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


def single_time_losses(n_trains, *, d: int = 16, p: int = 4096, t: float = 0.1, taus=None,
                       lam: float = THEIR_LAMBDA, n_noise: int = 16, n_test: int = 16384, seed: int = 0,
                       progress: Callable[[str], None] | None = None) -> xr.Dataset:
    """Train, test and score-error losses of Bonnaire et al.'s single-time random-feature model along tau, per n.

    One draw of W (p, d) and of the data x ~ N(0, I_d) (the largest n; each ``n_train`` takes the first n rows,
    nested as every n_train sweep of ridgexr), one eigendecomposition per n.

    Parameters
    ----------
    n_trains : sequence of int >= 1
        Training-set sizes n.
    d, p : int
        Data dimension and number of features (their psi_n = n / d, psi_p = p / d).
    t : float > 0
        The OU diffusion time of the loss (their ``t``; a = e^{-t}, Delta = 1 - e^{-2t}).
    taus : sequence of float > 0, optional
        Training times in their units (steps x learning rate, learning rate 1e-4 d / Delta); default 81 points
        log-spaced from 1e-2 to 1e6.
    lam : float >= 0
        Their ridge penalty lambda_reg (1e-3).
    n_noise : int
        Noise draws per training point for the fit's form (their gradient descent draws fresh noise at every
        step: the flow of the noise-averaged loss is its limit); the train loss takes its own draws, at least
        ``n_noise`` and at least ``n_test`` rows in all, so train and test losses carry the same Monte-Carlo error.
    n_test : int
        Fresh draws of the law for the test loss (one noise draw each) and for the score error.
    seed : int
        W, the data, the test draws and the noise streams.
    progress : callable(str), optional

    Returns
    -------
    xarray.Dataset over (n_train, tau): ``train_loss``, ``test_loss``, ``score_error`` (1 per coordinate,
    their normalisation: divided by d), and ``gap`` = test - train; attrs record every setting.
    """
    n_trains = sorted({check_int(n, "n_trains[i]", min_val=1) for n in n_trains})
    d = check_int(d, "d", min_val=1)
    p = check_int(p, "p", min_val=1)
    t = check_float(t, "t", min_val=0, include_boundaries="neither")
    lam = check_float(lam, "lam", min_val=0)
    n_noise = check_int(n_noise, "n_noise", min_val=1)
    n_test = check_int(n_test, "n_test", min_val=2)
    taus = np.logspace(-2, 6, 81) if taus is None else np.asarray(taus, dtype=np.float64)
    if taus.ndim != 1 or taus.size == 0 or not (np.all(taus > 0) and np.all(np.diff(taus) > 0)):
        raise ValueError(f"`taus` must be positive and increasing; got {taus!r}")
    if lam == 0 and n_trains[-1] * n_noise < p:
        raise ValueError(f"`lam` = 0 needs at least p = {p} noisy rows (n x n_noise) for a positive-definite form")
    say = progress or (lambda msg: None)
    g = torch.Generator().manual_seed(int(seed))
    W = torch.randn(p, d, generator=g, dtype=torch.float64)
    x = torch.randn(n_trains[-1], d, generator=g, dtype=torch.float64)
    x_test = torch.randn(n_test, d, generator=g, dtype=torch.float64)
    z_pop = torch.randn(n_test, d, generator=g, dtype=torch.float64)
    noise_fit = torch.Generator().manual_seed(int(seed) + 1)
    noise_eval = torch.Generator().manual_seed(int(seed) + 2)
    say(f"forms of {n_test} fresh draws (test loss, score error)")
    test = (*feature_forms(x_test, W, t, 1, noise_eval), "noise")
    score = (*feature_forms(z_pop, W, None, 1), "score")
    curves = {"train_loss": [], "test_loss": [], "score_error": []}
    for n in n_trains:
        say(f"n = {n}: forms of {n} x {n_noise} noisy rows, eigendecomposition of {p} x {p}")
        U, V, _ = feature_forms(x[:n], W, t, n_noise, noise_fit)
        reps = max(n_noise, -(-n_test // n))  # as many noisy rows as the test loss has: equal Monte-Carlo error
        train = (*feature_forms(x[:n], W, t, reps, noise_eval), "noise")
        res = flow_losses(U, V, t, taus, lam, {"train_loss": train, "test_loss": test, "score_error": score})
        for k in curves:
            curves[k].append(res[k])
    coords = {"n_train": np.asarray(n_trains, dtype=np.int64), "tau": taus}
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
    }, coords=coords)
    out["gap"] = (out["test_loss"] - out["train_loss"]).assign_attrs(long_name="test_loss - train_loss", units="1")
    out["tau"].attrs.update(long_name="training time: gradient-descent steps x learning rate (1e-4 d / Delta), "
                            "their units; the gradient flow of the noise-averaged loss", units="1")
    out["n_train"].attrs.update(long_name="training-set size n (nested: the first n draws)", units="1")
    return out.assign_attrs(
        title="random features at one diffusion time (Bonnaire et al. 2025, section 4)",
        model="s_A(z) = A tanh(W z / sqrt(d)), W ~ N(0, 1), A(0) = 0; data x ~ N(0, I_d)",
        t=t, alpha=math.exp(-t), delta=1.0 - math.exp(-2.0 * t), d=d, p=p, lam=lam, n_noise=n_noise,
        n_test=n_test, seed=int(seed), lr_factor=THEIR_LR_FACTOR,
        references="Bonnaire, Urfin, Biroli & Mezard (2025), Why diffusion models don't memorize; their "
                   "Theory/src/Training_random_features")
