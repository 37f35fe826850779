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
from ridgexr.analysis.timescales import separation_timescales
from ridgexr.training.single_time import (FIRST_COMMIT_LAMBDA, FIRST_COMMIT_LR_FACTOR, THEIR_LR_FACTOR, feature_forms,
                                          flow_losses, fresh_noise_descent, gaussian_equivalent_coefficients,
                                          gaussian_equivalent_forms, readout_flow, single_time_losses, spectral_times)


def _rows(x, t, reps, seed):
    """The rows feature_forms draws for these points (one chunk): z and eta, in float64."""
    a = math.exp(-t)
    eta = torch.randn(x.shape[0] * reps, x.shape[1], generator=torch.Generator().manual_seed(seed),
                      dtype=torch.float64)
    return a * x.repeat_interleave(reps, 0) + math.sqrt(1 - a * a) * eta, eta


def test_gradient_descent_on_fixed_rows_follows_the_closed_form_flow_of_their_form():
    """The algebra of the flow: autograd gradient descent on fixed explicit rows (the L2 term / (rows d) + Delta lam
    |A|^2 / d, A(0) = 0, their first commit's lam and lr = 1e-4 d / Delta) after k steps has the train, held-out and
    score-error losses that flow_losses gives at tau = k lr from the rows' forms alone (its steps at that lr)."""
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
    lr = FIRST_COMMIT_LR_FACTOR * d / delta
    A = torch.zeros(d, p, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([A], lr=lr)
    checks = {300: None, 1500: None, 4000: None}
    for k in range(1, max(checks) + 1):
        loss = ((math.sqrt(delta) * phi @ A.T + eta) ** 2).sum() / (phi.shape[0] * d) \
            + delta * FIRST_COMMIT_LAMBDA * (A ** 2).sum() / d
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k in checks:
            with torch.no_grad():
                checks[k] = (float(((math.sqrt(delta) * phi @ A.T + eta) ** 2).mean() * 1),
                             float(((math.sqrt(delta) * phih @ A.T + etah) ** 2).mean()),
                             float(((phip @ A.T + z_pop) ** 2).mean()))
    taus = np.array(sorted(checks)) * lr
    flow = flow_losses(U, V, t, taus, FIRST_COMMIT_LAMBDA, {"fit": (U, V, c, "noise"), "held": (*held, "noise"),
                                                            "score": (*score, "score")}, lr=lr)
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


def _small_instance(d=4, p=64, n=8, t=0.1, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(p, d, generator=g, dtype=torch.float64)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    x_test = torch.randn(65536, d, generator=g, dtype=torch.float64)
    z_pop = torch.randn(65536, d, generator=g, dtype=torch.float64)
    evaluate = {
        "train": (*feature_forms(x, W, t, 16384, torch.Generator().manual_seed(6), antithetic=True)[:2], float(d),
                  "noise"),
        "test": (*feature_forms(x_test, W, t, 1, torch.Generator().manual_seed(5))[:2], float(d), "noise"),
        "score": (*feature_forms(z_pop, W, None, 1)[:2], float(d), "score"),
    }
    return W, x, evaluate


def test_their_fresh_noise_descent_follows_the_noise_averaged_dynamics_and_a_16_draw_form_does_not():
    """Their estimator -- gradient descent with a fresh noise draw per point at every step, at their current learning
    rate 1e-2 d / Delta, no ridge -- run 64 times on d = 4, p = 64, n = 8: the loss of the runs' mean readout E[A]
    (unbiased from pairs of runs, jackknife error) matches the noise-averaged steps of a form with 16 384 antithetic
    draws per point within 4 standard errors at tau = 10, 100, 1 000, for the train, test and score-error forms.  The
    form with 16 fixed draws per point (the finite-m model the timescales-rf run once used) misses it by many
    standard errors.  Each run's own loss sits above E[A]'s by the fluctuation term, of order lr."""
    d, t = 4, 0.1
    W, x, evaluate = _small_instance(d=d, t=t)
    delta = 1 - math.exp(-2 * t)
    lr = THEIR_LR_FACTOR * d / delta
    taus = np.array([10.0, 100.0, 1000.0])
    gd = fresh_noise_descent(x, W, t, taus, lr=lr, evaluate=evaluate, n_runs=64,
                             generator=torch.Generator().manual_seed(7))
    averaged = feature_forms(x, W, t, 16384, torch.Generator().manual_seed(8), antithetic=True)
    fixed16 = feature_forms(x, W, t, 16, torch.Generator().manual_seed(8))
    for forms, agree in ((averaged, True), (fixed16, False)):
        mean = readout_flow(forms[0], forms[1], t).losses(taus, evaluate, lr=lr)
        z = np.array([(gd["mean"][k] - mean[k]) / gd["mean_se"][k] for k in evaluate])
        if agree:
            assert np.abs(z).max() < 4, z
        else:
            assert np.abs(z).max() > 10, z
    for k in evaluate:  # a run's loss = E[A]'s loss + its fluctuation's
        assert np.all(gd["runs"][k].mean(0) > gd["mean"][k])
    # the flow (lr -> 0) and the steps at their learning rate are the same dynamics at these tau
    flow = readout_flow(averaged[0], averaged[1], t)
    np.testing.assert_allclose(flow.losses(taus, evaluate)["test"][1:], flow.losses(taus, evaluate, lr=lr)["test"][1:],
                               rtol=2e-3)


def test_the_gaussian_equivalent_coefficients_against_monte_carlo_and_its_spectrum_against_the_features():
    """The Hermite coefficients by quadrature against Monte Carlo over (u, v); b = sqrt(Delta) a (Stein); the
    Gaussian-equivalent U has the feature form's population bulk (the d largest eigenvalues) within 10 % and a
    sample bulk of the same scale (median within a factor 1.5) on d = 32, p = 1024, n = 128."""
    t = 0.05
    k = gaussian_equivalent_coefficients(t)
    rng = np.random.default_rng(0)
    u, v, w = rng.standard_normal((3, 2_000_000))
    e, sd = math.exp(-t), math.sqrt(k["delta"])
    h, h2 = e * u + sd * v, e * u + sd * w
    assert k["a"] == pytest.approx(np.mean(np.tanh(h) * u) / e, abs=3e-3)
    assert k["b"] == pytest.approx(np.mean(np.tanh(h) * v), abs=3e-3) and k["b"] == pytest.approx(sd * k["a"])
    assert k["v2"] == pytest.approx(np.mean(np.tanh(h) * np.tanh(h2)) - (k["a"] * e) ** 2, abs=2e-3)
    assert k["s2"] == pytest.approx(np.mean(np.tanh(h) ** 2) - (k["a"] * e) ** 2 - k["v2"] - k["b"] ** 2, abs=2e-3)
    d, p, n = 32, 1024, 128
    g = torch.Generator().manual_seed(1)
    W = torch.randn(p, d, generator=g, dtype=torch.float64)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    U = feature_forms(x, W, t, 128, torch.Generator().manual_seed(2), antithetic=True)[0]
    Ue = gaussian_equivalent_forms(x, W, t, torch.Generator().manual_seed(3))["train"][0]
    lam, lam_e = (np.sort(torch.linalg.eigvalsh(M).numpy())[::-1] for M in (U, Ue))
    np.testing.assert_allclose(lam_e[:d], lam[:d], rtol=0.1)
    ratio = np.median(lam_e[d:n]) / np.median(lam[d:n])
    assert 1 / 1.5 < ratio < 1.5


def test_spectral_times_split_the_bulks_by_rank():
    """On a spectrum built of three blocks the population, sample and rest are found by rank, the times are
    1 / (c median) with c = 2 Delta / d, and the gaps are the ratios of the blocks' edges."""
    d, n, t = 3, 10, 0.2
    lam = np.r_[[50.0, 60.0, 70.0], np.linspace(1.0, 2.0, 7), np.full(20, 0.01)]
    out = spectral_times(np.random.default_rng(0).permutation(lam), d, n, t)
    c = 2 * (1 - math.exp(-2 * t)) / d
    assert out[0] == pytest.approx(1 / (c * 60.0)) and out[1] == pytest.approx(1 / (c * 1.5))
    assert out[-2] == pytest.approx(50.0 / 2.0) and out[-1] == pytest.approx(1.0 / 0.01)
    with pytest.raises(ValueError, match="d < n < p"):
        spectral_times(lam, 10, 5, t)


def test_the_separation_time_follows_the_spectral_time_where_the_two_bulks_are_clean():
    """On d = 16, p = 1 024, n = 64 and 128 at t = 0.01 (their regime: psi_p = 64 > psi_n = 4, 8 > 1) the
    noise-averaged U has two clean bulks (each gap above 2), and the measured tau_mem -- the first tau at which the
    test loss exceeds the train loss by 0.1 -- lies within a factor 2 of the spectral time 1 / (c median sample
    eigenvalue) at each n and grows with n as it does (ratio of ratios within a factor 1.5); tau_gen stays put."""
    ds = single_time_losses([64, 128], d=16, p=1024, t=0.01, rows=16384, n_test=16384, taus=np.logspace(0, 6, 61),
                            equivalent=False, seed=0)
    assert (ds["population_gap"] > 2).all() and (ds["sample_gap"] > 2).all()
    ts = separation_timescales(ds)
    assert not ts["tau_mem_censored"].any()
    ratio = ts["tau_mem_ratio"].values
    assert np.all((ratio > 0.5) & (ratio < 2)), ratio
    growth = ts["tau_mem"].values[1] / ts["tau_mem"].values[0]
    spectral_growth = ds["tau_mem_spectral"].values[1] / ds["tau_mem_spectral"].values[0]
    assert 1 / 1.5 < growth / spectral_growth < 1.5
    assert ts["tau_gen"].values[1] / ts["tau_gen"].values[0] < 1.5


def test_the_single_time_losses_start_at_one_and_more_data_delays_the_separation():
    """At tau -> 0 (A = 0) every loss is exactly 1 (E|eta|^2 / d); the train loss falls below the test loss; with
    four times the data the losses separate later; the spectrum is recorded per n, descending."""
    ds = single_time_losses([16, 64], d=4, p=256, t=0.1, rows=2048, n_test=4096, seed=0, equivalent=True,
                            taus=np.logspace(-5, 6, 45))
    assert set(ds["train_loss"].dims) == {"n_train", "tau"} and ds.attrs["p"] == 256
    first = ds.isel(tau=0)
    np.testing.assert_allclose(first["test_loss"], 1.0, atol=2e-3)
    np.testing.assert_allclose(first["score_error"], 1.0, atol=2e-3)
    assert (ds["train_loss"].isel(tau=-1) < ds["test_loss"].isel(tau=-1)).all()
    assert (ds["eigenvalue"].diff("mode") <= 0).all() and (ds["eigenvalue_equivalent"].diff("mode") <= 0).all()
    ts = separation_timescales(ds, amount=0.05)
    assert float(ts["tau_mem"].sel(n_train=64)) > float(ts["tau_mem"].sel(n_train=16))
    np.testing.assert_allclose(ds["gap"], ds["test_loss"] - ds["train_loss"])


@pytest.mark.parametrize("kwargs, name", [(dict(n_trains=[4]), "n_trains"), (dict(d=0), "`d`"),
                                          (dict(t=0.0), "`t`"), (dict(lam=-1.0), "`lam`"),
                                          (dict(taus=[2.0, 1.0]), "`taus`"), (dict(n_test=1), "`n_test`"),
                                          (dict(rows=0), "`rows`")])
def test_single_time_losses_name_the_bad_argument(kwargs, name):
    args = dict(n_trains=[4], d=2, p=8, n_test=16) | kwargs
    if name == "n_trains":
        args["d"] = 4
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
