"""The DSM target's covariance and the random-feature readout's V-kernel in closed form (ridgexr.training.vkernel)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgexr.empirical import SmoothedEmpirical
from ridgexr.process import OU
from ridgexr.training import draw_training_sample, fit_random_features, fit_sweep
from ridgexr.training.sample import posterior_index
from ridgexr.training.vkernel import dsm_target_covariance, readout_gain, readout_kernel
from ridgexr.models.random_features.denoiser import RandomFeatureDenoiser

THREE = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0.2, 4.0), x=st.floats(-5.0, 5.0), t=st.floats(0.01, 2.0),
       par=st.sampled_from(["posterior_mean", "score"]))
def test_target_covariance_two_points_closed_form(a, x, t, par):
    """Two points +-a in 1-D: x0 | x_t is +-a with P(+) = sigmoid(2 alpha a x / h), so Var[x0 | x_t] =
    a^2 (1 - tanh^2(alpha a x / h)); the target's is alpha^2 (/ h^2 for the score) times that."""
    p = OU()
    al, h = float(p.alpha(np.array(t))), float(p.h(np.array(t)))
    var = a * a * (1.0 - math.tanh(al * a * x / h) ** 2)
    want = al * al * var / (h * h if par == "score" else 1.0)
    got = dsm_target_covariance(np.array([[-a], [a]]), np.array([[x]]), np.array([t]), par)[0, 0, 0]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12 * max(1.0, al * al * a * a / (h * h)))


def test_target_covariance_against_monte_carlo_over_the_noise():
    """The tower property with the DSM sample itself: for x0 uniform over the points and z ~ N(0, I),
    E[(y - f*(x_t)) (y - f*(x_t))^T g(x_t)] = E[Cov(y | x_t) g(x_t)] for any g.  The left side is a Monte-Carlo
    average over the training noise with the rows' own targets y = alpha x0; the right side the closed form at
    the same x_t.  Their paired difference has mean 0: checked within 5 standard errors for a few bumps g, at
    two times; the posterior covariance without the target's scale alpha^2 must fail it."""
    rng = np.random.default_rng(0)
    p = OU()
    n = 200_000
    fails = 0
    for t in (0.1, 0.6):
        al, h = float(p.alpha(np.array(t))), float(p.h(np.array(t)))
        x0 = THREE[rng.integers(0, 3, n)]
        xt = al * x0 + math.sqrt(h) * rng.standard_normal((n, 2))
        tt = np.full(n, t)
        cov = dsm_target_covariance(THREE, xt, tt)
        mean = SmoothedEmpirical(THREE, t).posterior_mean(xt)
        e = al * (x0 - np.asarray(mean))  # y - f*, f* = alpha E[x0 | x_t]
        outer = e[:, :, None] * e[:, None, :]
        wrong = cov / al ** 2  # Cov[x0 | x_t] itself: the wrong scale
        for c in ([0.5, 0.5], [1.0, 0.2], [0.2, 1.0], [1.0, 1.0]):
            g = np.exp(-((xt - np.asarray(c)) ** 2).sum(1) / (2 * 0.3 ** 2))
            for a, b in ((0, 0), (0, 1), (1, 1)):
                diff = (outer[:, a, b] - cov[:, a, b]) * g
                se = diff.std() / math.sqrt(n)
                assert abs(diff.mean()) < 5 * se, (t, c, a, b, diff.mean(), se)
                bad = (outer[:, a, b] - wrong[:, a, b]) * g
                fails += abs(bad.mean()) > 5 * bad.std() / math.sqrt(n)
    assert fails >= 12  # the control: the wrong scale is caught in at least half of the 24 checks


def test_posterior_index_frequencies():
    """posterior_index draws x0 with its posterior probabilities: binomial test of each index's frequency."""
    rng = np.random.default_rng(1)
    xt = np.array([[0.7, 0.6]])
    al, h = 0.9, 0.8
    n = 40_000
    idx = posterior_index(THREE, np.repeat(xt, n, 0), al, h, rng.random(n))
    logit = -((xt - al * THREE) ** 2).sum(1) / (2 * h)
    prob = np.exp(logit - logit.max())
    prob /= prob.sum()
    freq = np.bincount(idx, minlength=3) / n
    assert np.all(np.abs(freq - prob) < 5 * np.sqrt(prob * (1 - prob) / n))


def test_redrawn_targets_keep_the_rows():
    """A target seed keeps x_t, t and the weights and redraws x0 (and z = (x_t - alpha x0) / sqrt(h))."""
    base = draw_training_sample(THREE, t_min=0.05, T=3.0, n_time=4, n_noise=8, seed=3, quadrature="gauss-legendre-log-t")
    red = base.with_target_seed(5)
    np.testing.assert_array_equal(red.xt, base.xt)
    np.testing.assert_array_equal(red.weight, base.weight)
    p = base.process
    al, sh = p.alpha(red.t)[:, None], np.sqrt(p.h(red.t))[:, None]
    np.testing.assert_allclose(al * red.x0 + sh * red.z, red.xt, atol=1e-12)
    assert (np.abs(red.x0 - base.x0).sum(1) > 0).any()  # some labels changed
    assert {tuple(r) for r in red.x0} <= {tuple(r) for r in THREE}
    again = draw_training_sample(THREE, t_min=0.05, T=3.0, n_time=4, n_noise=8, seed=3, target_seed=5,
                                 quadrature="gauss-legendre-log-t")
    np.testing.assert_array_equal(again.x0, red.x0)  # reproducible, also split over point blocks
    split = np.concatenate([b.x0 for b in red.blocks(8)])
    np.testing.assert_array_equal(split, red.x0)


def test_readout_gain_is_the_fits_map():
    """A(tau) = V G + A(0) R reproduces the fit's readouts (finite and infinite tau, with a penalty)."""
    kw = dict(n_frequencies=2, feature_period=3.0, seed=3)
    model = RandomFeatureDenoiser(2, 12, **kw)
    for penalty in (0.0, 1e-2):
        fit = fit_random_features(model, THREE, schedule="h", t_min=0.05, T=3.0, quadrature="gauss-legendre-log-t",
                                  n_time=4, n_noise=2, seed=1, taus=[0.5, math.inf], penalty=penalty)
        A0 = fit.A.new_tensor(np.random.default_rng(0).standard_normal((12, 2)).T.copy())
        for i, tau in enumerate(fit.taus):
            G, R = readout_gain(fit.U, penalty=penalty, tau=float(tau))
            torch.testing.assert_close(fit.V @ G + A0 @ R, fit.A[i], rtol=1e-7, atol=1e-9)


def test_penalty_is_ridge_regression():
    """With a penalty the converged readout is V (U + rho I)^-1, rho = penalty tr(U) / p."""
    model = RandomFeatureDenoiser(2, 24, n_frequencies=2, feature_period=3.0, seed=0)
    fit = fit_random_features(model, THREE, schedule="1", t_min=0.05, T=3.0, quadrature="gauss-legendre-log-t",
                              n_time=3, n_noise=1, seed=1, penalty=0.05)  # 9 rows, 24 features: U singular
    U, V = fit.U, fit.V
    rho = 0.05 * float(torch.trace(U)) / 24
    want = torch.linalg.solve(U + rho * torch.eye(24, dtype=U.dtype), V.T).T
    torch.testing.assert_close(fit.A[-1], want, rtol=1e-8, atol=1e-10)


def _ensemble(n_draws: int, redraw: str, **over):
    common = dict(widths=[8], schedules=["h"], model_kwargs=dict(n_frequencies=2, feature_period=3.0, seed=3),
                  t_min=0.05, T=3.0, quadrature="gauss-legendre-log-t", n_time=4, n_noise=8, seed=11, init="normal",
                  init_seed=2)
    common.update(over)
    ideal = fit_sweep(THREE, target="ideal", **common)[("h", 8)]
    out = []
    for m in range(n_draws):
        if redraw == "targets":
            f = fit_sweep(THREE, target="dsm", target_seed=m, **common)
        else:
            f = fit_sweep(THREE, target="dsm", **(common | {"seed": 1000 + m}))
        out.append(f[("h", 8)].A[-1].numpy().reshape(-1))
    return ideal, np.stack(out)


def _whitened(K: np.ndarray, C: np.ndarray) -> np.ndarray:
    """K^-1/2 C K^-1/2 on K's range."""
    e, E = np.linalg.eigh(K)
    keep = e > 1e-10 * e.max()
    P = E[:, keep] / np.sqrt(e[keep])
    return P.T @ C @ P


@pytest.mark.slow
def test_v_kernel_against_1000_fits():
    """The analytic readout covariance against the empirical covariance of 1 000 fits in the ensemble's design
    (rows fixed, x0 redrawn from the posterior: ``training.redraw: targets``) on 3 points, p = 8 features against
    P = 96 rows (p / P = 1/12): whitened by the kernel, the empirical covariance is the identity on its range to
    within 0.2 (entries' sd ~ 1/sqrt(1000) = 0.03-0.05), the empirical mean is the ideal fit's readout within 5
    standard errors, and the score's variance at four points and its cross-covariance match the V-kernel.  The
    rows-redrawn ensemble (``redraw: noise``) has a covariance the kernel does not describe."""
    ideal, A = _ensemble(1000, "targets")
    k = readout_kernel(ideal)
    K, C = k.matrix(), np.cov(A.T)
    W = _whitened(K, C)
    assert W.shape[0] >= 10
    assert np.abs(W - np.eye(W.shape[0])).max() < 0.2
    live = np.diag(K) > 1e-12 * np.diag(K).max()
    z = (A.mean(0) - k.mean.reshape(-1))[live] / np.sqrt(np.diag(C)[live] / A.shape[0])
    assert np.abs(z).max() < 5
    np.testing.assert_array_equal(A[:, ~live], np.broadcast_to(A[0, ~live], A[:, ~live].shape))  # dead features
    x = np.array([[1.0, 0.5], [0.5, 1.0], [1.0, 1.0], [-0.5, 0.3]])
    V = k.score_covariance(x, 0.1)
    s = np.stack([k.model.with_A(a.reshape(2, 8)).score(x, 0.1) for a in A])  # (draw, point, dim)
    ratio = s.var(0, ddof=1) / np.einsum("nnaa->na", V)
    assert np.all(np.abs(ratio - 1) < 0.2), ratio
    cross = np.cov(s[:, 0, 0], s[:, 2, 1])[0, 1]
    assert cross == pytest.approx(V[0, 2, 0, 1], abs=0.2 * math.sqrt(V[0, 0, 0, 0] * V[2, 2, 1, 1]))
    # the control built to fail: redrawing the rows too changes the ensemble's covariance
    _, B = _ensemble(1000, "noise")
    assert np.abs(_whitened(K, np.cov(B.T)) - np.eye(W.shape[0])).max() > 0.5


@pytest.mark.slow
def test_v_kernel_against_fits_penalized():
    """The same check at 300 fits with a penalty and a finite tau (the kernel's gain G, A(0) fixed)."""
    ideal, A = _ensemble(300, "targets", taus=[2.0], penalty=1e-3)
    k = readout_kernel(ideal, tau=2.0)
    W = _whitened(k.matrix(), np.cov(A.T))
    assert np.abs(W - np.eye(W.shape[0])).max() < 0.35


def test_readout_kernel_refuses_the_dsm_fit():
    kw = dict(widths=[8], schedules=["h"], model_kwargs=dict(n_frequencies=2, feature_period=3.0, seed=3),
              t_min=0.05, T=3.0, quadrature="gauss-legendre-log-t", n_time=2, n_noise=1, seed=1)
    dsm = fit_sweep(THREE, target="dsm", **kw)[("h", 8)]
    with pytest.raises(ValueError, match="ideal"):
        readout_kernel(dsm)


def test_sample_readouts_moments():
    """Gaussian readouts from the kernel: their mean and covariance are the kernel's (4 000 draws)."""
    kw = dict(widths=[6], schedules=["1"], model_kwargs=dict(n_frequencies=2, feature_period=3.0, seed=5),
              t_min=0.05, T=3.0, quadrature="gauss-legendre-log-t", n_time=4, n_noise=4, seed=2)
    k = readout_kernel(fit_sweep(THREE, target="ideal", **kw)[("1", 6)])
    R = k.sample_readouts(4000, seed=1).reshape(4000, -1)
    W = _whitened(k.matrix(), np.cov(R.T))
    assert np.abs(W - np.eye(W.shape[0])).max() < 0.15
    np.testing.assert_array_equal(k.sample_readouts(3, seed=1), k.sample_readouts(3, seed=1))
