"""Random features at one diffusion time (Bonnaire et al.'s model) and the timescales read off its loss curves."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgexr.analysis import loss_timescales
from ridgexr.analysis.arrays import loss_gen_time, loss_min_time
from ridgexr.training.single_time import THEIR_LAMBDA, THEIR_LR_FACTOR, feature_forms, flow_losses, single_time_losses


def _rows(x, t, reps, seed):
    """The rows feature_forms draws for these points (one chunk): z and eta, in float64."""
    a = math.exp(-t)
    eta = torch.randn(x.shape[0] * reps, x.shape[1], generator=torch.Generator().manual_seed(seed),
                      dtype=torch.float64)
    return a * x.repeat_interleave(reps, 0) + math.sqrt(1 - a * a) * eta, eta


def test_their_gradient_descent_at_their_learning_rate_follows_the_closed_form_flow():
    """Autograd gradient descent on the explicit rows (their loss: L2 term / (rows d) + Delta lam |A|^2 / d, A(0) = 0,
    lr = 1e-4 d / Delta) after k steps has the train, held-out and score-error losses that flow_losses gives at
    tau = k lr from the forms alone."""
    d, p, n, reps, t = 3, 24, 6, 40, 0.3
    delta = 1 - math.exp(-2 * t)
    g = torch.Generator().manual_seed(0)
    W = torch.randn(p, d, generator=g, dtype=torch.float64)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    z_pop = torch.randn(500, d, generator=g, dtype=torch.float64)
    U, V, c = feature_forms(x, W, t, reps, torch.Generator().manual_seed(1))
    held = feature_forms(x, W, t, reps, torch.Generator().manual_seed(2))
    score = feature_forms(z_pop, W, None, 1)
    z, eta = _rows(x, t, reps, 1)
    zh, etah = _rows(x, t, reps, 2)
    phi, phih, phip = (torch.tanh(v @ W.T / math.sqrt(d)) for v in (z, zh, z_pop))
    lr = THEIR_LR_FACTOR * d / delta
    A = torch.zeros(d, p, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([A], lr=lr)
    checks = {500: None, 3000: None, 12000: None}
    for k in range(1, max(checks) + 1):
        loss = ((math.sqrt(delta) * phi @ A.T + eta) ** 2).sum() / (phi.shape[0] * d) \
            + delta * THEIR_LAMBDA * (A ** 2).sum() / d
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k in checks:
            with torch.no_grad():
                checks[k] = (float(((math.sqrt(delta) * phi @ A.T + eta) ** 2).mean() * 1),
                             float(((math.sqrt(delta) * phih @ A.T + etah) ** 2).mean()),
                             float(((phip @ A.T + z_pop) ** 2).mean()))
    taus = np.array(sorted(checks)) * lr
    flow = flow_losses(U, V, t, taus, THEIR_LAMBDA, {"fit": (U, V, c, "noise"), "held": (*held, "noise"),
                                                     "score": (*score, "score")})
    for j, k in enumerate(sorted(checks)):
        np.testing.assert_allclose([flow["fit"][j], flow["held"][j], flow["score"][j]], checks[k], rtol=2e-4)
    assert flow["fit"][-1] < flow["fit"][0]  # it trained


@settings(max_examples=15, deadline=None)
@given(t=st.floats(0.02, 2.0), lam=st.floats(1e-3, 1.0), seed=st.integers(0, 1000))
def test_the_flow_ends_at_the_ridge_solution_and_starts_at_zero(t, lam, seed):
    """tau = inf gives the minimizer A* = -V^T (U + lam I)^{-1} / sqrt(Delta) (its losses computed directly), and
    tau -> 0 gives A = 0, whose loss is c / d."""
    d, p = 2, 16
    delta = 1 - math.exp(-2 * t)
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(p, d, generator=g, dtype=torch.float64)
    x = torch.randn(5, d, generator=g, dtype=torch.float64)
    U, V, c = feature_forms(x, W, t, 8, torch.Generator().manual_seed(seed + 1))
    out = flow_losses(U, V, t, [1e-12, np.inf], lam, {"fit": (U, V, c, "noise")})["fit"]
    A = -torch.linalg.solve(U + lam * torch.eye(p, dtype=torch.float64), V).T / math.sqrt(delta)
    direct = (delta * torch.trace(A @ U @ A.T) + 2 * math.sqrt(delta) * torch.trace(A @ V) + c) / d
    assert out[1] == pytest.approx(float(direct), rel=1e-8, abs=1e-10)
    assert out[0] == pytest.approx(c / d, rel=1e-8)


def test_the_single_time_losses_start_at_one_and_more_data_delays_the_rise_of_the_test_loss():
    """At tau -> 0 (A = 0) every loss is E|eta|^2 / d ~ 1 within Monte-Carlo error; the train loss falls below the
    test loss; with four times the data the test loss turns up later (the memorization time grows with n)."""
    ds = single_time_losses([16, 64], d=4, p=256, t=0.1, n_noise=8, n_test=4096, seed=0)
    assert set(ds.dims) == {"n_train", "tau"} and ds.attrs["p"] == 256
    first = ds.isel(tau=0)
    np.testing.assert_allclose(first["test_loss"], 1.0, atol=0.05)
    np.testing.assert_allclose(first["score_error"], 1.0, atol=0.05)
    assert (ds["train_loss"].isel(tau=-1) < ds["test_loss"].isel(tau=-1)).all()
    ts = loss_timescales(ds, n_boot=50)
    assert float(ts["tau_mem"].sel(n_train=64)) > float(ts["tau_mem"].sel(n_train=16))
    np.testing.assert_allclose(ds["gap"], ds["test_loss"] - ds["train_loss"])


@pytest.mark.parametrize("kwargs, name", [(dict(n_trains=[0]), "n_trains"), (dict(d=0), "`d`"),
                                          (dict(t=0.0), "`t`"), (dict(lam=-1.0), "`lam`"),
                                          (dict(taus=[2.0, 1.0]), "`taus`"), (dict(n_test=1), "`n_test`")])
def test_single_time_losses_name_the_bad_argument(kwargs, name):
    args = dict(n_trains=[4], d=2, p=8, n_test=16) | kwargs
    with pytest.raises(ValueError, match=name):
        single_time_losses(args.pop("n_trains"), **args)


def test_loss_times_on_curves_with_known_minima_and_a_censored_one():
    """tau_mem at the minimum with its neighbours as the interval, censored when the curve still falls; tau_gen the
    first checkpoint within tol of the fall from the first value (brute force); the slope of a law tau = 10 n."""
    c = np.logspace(0, 5, 11)
    assert loss_min_time(c, np.array([5, 4, 3, 2, 1, 0.5, 0.7, 1, 2, 3, 4.0])).tolist() == [c[5], c[4], c[6], 0.0]
    assert loss_min_time(c, -np.arange(11.0)).tolist() == [c[-1], c[-2], np.inf, 1.0]
    rng = np.random.default_rng(1)
    for _ in range(20):
        e = rng.uniform(0, 2, 11)
        e[0] = 3.0
        share = (e - e.min()) / (e[0] - e.min())
        k = int(np.flatnonzero(share <= 0.1)[0])
        out = loss_gen_time(c, e, tol=0.1)
        assert out[0] == c[k] and out[3] == float(k == 10)
    assert np.isnan(loss_gen_time(c, np.arange(11.0))).all()  # never below the untrained value: no time

    n = np.array([8.0, 32.0, 128.0, 512.0])
    test = (np.log(c)[None, :] - np.log(10 * n)[:, None]) ** 2  # lowest at the checkpoint nearest tau = 10 n
    test[-1] = -np.arange(11.0)  # the largest n still falls at the end: censored
    err = np.tile(np.exp(-c / 30.0), (4, 1)) + 1e-3 * c / c[-1]  # falls by tau ~ 100 for every n, then rises
    ds = xr.Dataset({"test_loss": (("n_train", "tau"), test), "score_error": (("n_train", "tau"), err)},
                    coords={"n_train": n, "tau": c})
    ts = loss_timescales(ds, n_boot=200)
    assert ts["tau_mem_censored"].values.tolist() == [False, False, False, True]
    expect = [c[np.argmin(np.abs(np.log(c) - np.log(10 * m)))] for m in n[:3]]
    assert ts["tau_mem"].values[:3].tolist() == expect
    assert ts["tau_gen"].values.tolist() == [c[4]] * 4 and int(ts["tau_gen_slope_points"]) == 4
    # pooled over a further dimension (seeds) placed before n_train: the same points twice, the same law
    seeds = xr.concat([ds, ds], dim="seed")
    pooled = loss_timescales(seeds, n_boot=200)
    assert pooled["tau_mem"].dims == ("seed", "n_train")
    assert float(pooled["tau_mem_slope"]) == pytest.approx(float(ts["tau_mem_slope"]))
    uncensored = ~ts["tau_mem_censored"].values
    b_ols = np.polyfit(np.log(n[uncensored]), np.log(ts["tau_mem"].values[uncensored]), 1)[0]
    assert b_ols == pytest.approx(1.0, abs=0.2)
    drop = loss_timescales(xr.concat([ds, ds], dim="seed"), n_boot=200, censored_fit="drop")
    assert float(drop["tau_mem_slope"]) == pytest.approx(b_ols)  # least squares on the uncensored points
    with pytest.raises(ValueError, match="time_dim"):
        loss_timescales(ds, time_dim="epoch")
    with pytest.raises(ValueError, match="tol"):
        loss_timescales(ds, tol=1.5)
