"""Time laws in n from times known within intervals (ridgexr.analysis.scaling) and their labelled wrappers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ridgexr.analysis.arrays import slope_range
from ridgexr.analysis.scaling import (collapse_exponent, interval_loglik, interval_slope, separation_time,
                                     simulate_interval_times)
from ridgexr.analysis.timescales import interval_law, memorization_collapse
from ridgexr.claims.timescale_law import TIMESCALE_LAW_RUNS
from ridgexr.claims.timescale_slope import TIMESCALE_RUNS, law_claims

#: the U-Net entry's size (catalogs/timescales.yaml, timescales-unet): five n over 16x, three seeds, checkpoints
#: 8 per decade
ENTRY_N = np.repeat([16.0, 32.0, 64.0, 128.0, 256.0], 3)
ENTRY_CHECKPOINTS = np.round(np.logspace(1, 4.5, 29))


@settings(max_examples=30, deadline=None)
@given(a=st.floats(-2, 2), b=st.floats(-1, 2), sigma=st.floats(0.05, 2.0), seed=st.integers(0, 10_000))
def test_the_interval_likelihood_against_scipy(a, b, sigma, seed):
    """Each point's term is log(Phi((hi - mu) / sigma) - Phi((lo - mu) / sigma)), a censored end is an infinite one,
    an observed point (lo = hi) enters through its normal density."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 5, 6)
    mu = a + b * x
    lo = rng.normal(mu, sigma)
    hi = lo + sigma * rng.uniform(0.1, 2, 6)
    lo[0], hi[1], hi[2] = -np.inf, np.inf, lo[2]
    direct = np.log(stats.norm.cdf((hi[:2] - mu[:2]) / sigma) - stats.norm.cdf((lo[:2] - mu[:2]) / sigma)).sum()
    direct += stats.norm.logpdf(lo[2], mu[2], sigma)
    direct += np.log(stats.norm.cdf((hi[3:] - mu[3:]) / sigma) - stats.norm.cdf((lo[3:] - mu[3:]) / sigma)).sum()
    assert interval_loglik(a, b, sigma, x, lo, hi) == pytest.approx(direct, rel=1e-7, abs=1e-7)


def test_the_interval_fit_recovers_b_one_within_its_interval_at_the_entry_size():
    """Times drawn from log tau = log 10 + log n + 0.15 e, five n over 16x with three seeds each, read off
    checkpoints 8 per decade: the fitted b is near 1 and its interval holds 1; a law twice as steep is fitted at 2."""
    for b_true in (1.0, 2.0):
        low, high = simulate_interval_times(ENTRY_N, ENTRY_CHECKPOINTS if b_true == 1 else np.logspace(1, 7, 49),
                                            a=math.log(10.0), b=b_true, sigma=0.15, seed=3)
        a, b, b_low, b_high, sigma, used = interval_slope(ENTRY_N, low, high)
        assert used == 15 and b_low < b_true < b_high and abs(b - b_true) < 0.15
        assert 0.2 < b_high - b_low < 0.8


def test_the_interval_fit_when_one_line_meets_every_interval_is_the_range_of_such_lines():
    """Identical replicates whose intervals admit a common line: sigma goes to its floor and b's interval is the
    range of the lines through every interval (slope_range), widened only by the likelihood's tails."""
    n = np.repeat([16.0, 64.0, 256.0], 3)
    low, high = 10 * n / 1.1, 10 * n * 1.1
    out = interval_slope(n, low, high)
    lo, hi = slope_range(n, low, high)
    assert out[4] < 0.01
    assert out[2] == pytest.approx(lo, abs=0.01) and out[3] == pytest.approx(hi, abs=0.01)


def test_a_right_censored_time_enters_as_a_lower_bound():
    """Censoring the largest n at a bound below its true time leaves the fit near the true slope; dropping it
    would be no different here, but treating the bound as the time pulls b down."""
    n = np.repeat([16.0, 32.0, 64.0, 128.0], 3)
    low, high = simulate_interval_times(n, np.logspace(1, 4, 25), a=math.log(8.0), b=1.0, sigma=0.1, seed=5)
    cen = n == 128
    low_c, high_c = low.copy(), high.copy()
    low_c[cen], high_c[cen] = 600.0, np.inf  # the run stopped at 600 < 8 * 128
    fit = interval_slope(n, low_c, high_c)
    as_time = interval_slope(n, np.where(cen, 540.0, low), np.where(cen, 600.0, high))
    assert fit[2] < 1.0 < fit[3]
    assert as_time[1] < fit[1]


@pytest.mark.slow
def test_the_interval_fits_95_percent_interval_covers_at_least_90_percent_at_the_entry_size():
    """Coverage by simulation: 200 data sets of the entry's size (15 points, seed scatter 0.15 in log tau, checkpoint
    intervals 1/8 decade), the true b = 1 inside the 95 % interval in at least 90 % of them."""
    hits = 0
    for s in range(200):
        low, high = simulate_interval_times(ENTRY_N, ENTRY_CHECKPOINTS, a=math.log(10.0), b=1.0, sigma=0.15, seed=s)
        out = interval_slope(ENTRY_N, low, high)
        hits += out[2] <= 1.0 <= out[3]
    assert hits / 200 >= 0.90


def test_the_separation_time_against_brute_force():
    """The first checkpoint where upper - lower >= amount, its predecessor as the interval's lower end, censored when
    never reached (brute force over random curves)."""
    c = np.logspace(0, 4, 17)
    rng = np.random.default_rng(0)
    for _ in range(30):
        lower, upper = rng.uniform(0, 1, 17), rng.uniform(0, 1.3, 17)
        out = separation_time(c, lower, upper, 0.5)
        hit = np.flatnonzero(upper - lower >= 0.5)
        if hit.size:
            k = hit[0]
            assert out.tolist() == [c[k], c[k - 1] if k else 0.0, c[k], 0.0]
        else:
            assert out.tolist() == [c[-1], c[-1], np.inf, 1.0]


def _logistic_shares(b_true, samples, seed, n=(16.0, 32.0, 64.0, 128.0, 256.0), seeds=3):
    """f_mem(tau) = 1 / (1 + (tau_n / tau)^4), tau_n = 40 n^b, read at checkpoints 8 per decade by binomial samples."""
    rng = np.random.default_rng(seed)
    c = np.round(np.logspace(1, 5, 33))
    taus, sizes, shares, counts = [], [], [], []
    for m in n:
        p = 1 / (1 + (40 * m ** b_true / c) ** 4)
        for _ in range(seeds):
            taus.append(c)
            sizes.append(m)
            shares.append(rng.binomial(samples, p) / samples)
            counts.append(np.full(c.size, samples))
    return taus, np.array(sizes), shares, counts


@pytest.mark.parametrize("b_true", [1.0, 0.5])
def test_the_collapse_estimator_recovers_a_known_exponent(b_true):
    """Shares that depend on tau / n^b only, sampled with 512 draws per checkpoint (the entry's), five n over 16x and
    three seeds: the collapse exponent is within 0.1 of b and its interval holds it; for b = 0.5 it excludes 1.  Curves
    of one n on different checkpoints cannot be pooled."""
    taus, n, shares, counts = _logistic_shares(b_true, 512, seed=11)
    b, lo, hi, dropped = collapse_exponent(taus, n, shares, counts, n_boot=60, seed=1)
    assert abs(b - b_true) < 0.1 and lo < b_true < hi and dropped == 0
    if b_true == 0.5:
        assert hi < 1.0
    with pytest.raises(ValueError, match="share their checkpoints"):
        collapse_exponent([taus[0], taus[1][:-1]], np.array([16.0, 16.0]), [shares[0], shares[1][:-1]], [512, 512])


def test_memorization_collapse_reads_f_mem_over_epoch_n_and_seed():
    """The labelled wrapper: f_mem over (seed, n_train, epoch) with its sample counts, b near 1; the registry's
    claim on it agrees when its 15 runs are counted as the kind's minimum, and is untestable on 15."""
    taus, n, shares, counts = _logistic_shares(1.0, 512, seed=2)
    c = taus[0]
    f = np.array(shares).reshape(5, 3, c.size).transpose(1, 0, 2)
    ds = xr.Dataset({"f_mem": (("seed", "n_train", "epoch"), f),
                     "f_mem_n_valid": (("seed", "n_train", "epoch"), np.full(f.shape, 512.0))},
                    coords={"seed": [0, 1, 2], "n_train": [16, 32, 64, 128, 256], "epoch": c})
    out = memorization_collapse(ds, n_boot=40)
    assert abs(float(out["f_mem_collapse"]) - 1.0) < 0.1
    assert int(out["f_mem_collapse_runs"]) == 15
    (claim,) = law_claims(out, {"f_mem_collapse": "collapse"})
    assert claim.verdict.startswith("untestable") and TIMESCALE_RUNS > 15
    assert dataclasses.replace(claim, n=TIMESCALE_RUNS).verdict == "agrees"
    with pytest.raises(ValueError, match="time_dim"):
        memorization_collapse(ds, time_dim="step")


def test_interval_law_pools_seeds_and_judges_the_slope():
    """interval_law over (seed, n_train): 15 points, b near the truth, the registry's slope criterion on it; a
    missing interval variable is named."""
    low, high = simulate_interval_times(ENTRY_N, ENTRY_CHECKPOINTS, a=math.log(10.0), b=1.0, sigma=0.1, seed=8)
    shape = (5, 3)
    times = xr.Dataset({"tau_mem": (("n_train", "seed"), np.sqrt(low * high).reshape(shape)),
                        "tau_mem_low": (("n_train", "seed"), low.reshape(shape)),
                        "tau_mem_high": (("n_train", "seed"), high.reshape(shape))},
                       coords={"n_train": [16, 32, 64, 128, 256], "seed": [0, 1, 2]})
    out = interval_law(times, "tau_mem")
    direct = interval_slope(ENTRY_N, low, high)
    assert float(out["tau_mem_slope"]) == pytest.approx(direct[1], abs=1e-6)
    assert int(out["tau_mem_points"]) == 15
    (claim,) = law_claims(out, {"tau_mem": "checkpoint intervals"})
    assert dataclasses.replace(claim, n=TIMESCALE_RUNS).verdict == "agrees"
    with pytest.raises(ValueError, match="tau_gen"):
        interval_law(times, "tau_gen")


@pytest.mark.parametrize("b, verdict", [(1.0, "agrees"), (2.0, "disagrees"), (1.45, "inconclusive")])
def test_law_claims_judge_interval_laws_by_the_registry_kind(b, verdict):
    """The registry's timescale-law rows on an interval-censored law of 5 n x 12 seeds: a true b = 1 agrees, b = 2
    (outside 1 +- 0.5) disagrees, b = 1.45 (its interval straddles 1.5) is neither; 5 n x 3 seeds (15 runs) is the
    kind's minimum, 5 n x 2 seeds is untestable however tight its interval."""
    n = np.repeat([16.0, 32.0, 64.0, 128.0, 256.0], 12)
    grid = np.exp(np.arange(np.log(5.0), np.log(1e7), np.log(1.1)))  # fine checkpoints: the interval from scatter
    low, high = simulate_interval_times(n, grid, a=math.log(10.0), b=b, sigma=0.15, seed=3)
    coords = {"n_train": [16, 32, 64, 128, 256], "seed": np.arange(12)}
    times = xr.Dataset({"tau_mem": (("n_train", "seed"), np.sqrt(low * high).reshape(5, 12)),
                        "tau_mem_low": (("n_train", "seed"), low.reshape(5, 12)),
                        "tau_mem_high": (("n_train", "seed"), high.reshape(5, 12))}, coords=coords)
    law = interval_law(times, "tau_mem")
    (claim,) = law_claims(law, {"tau_mem": "synthetic"})
    assert claim.n == 60 and claim.kind == "timescale-law"
    assert claim.verdict == verdict, (float(law.tau_mem_slope_low), float(law.tau_mem_slope_high))
    (least,) = law_claims(interval_law(times.isel(seed=slice(0, 3)), "tau_mem"), {"tau_mem": "synthetic"})
    assert least.n == TIMESCALE_LAW_RUNS == 15 and not least.verdict.startswith("untestable")
    (few,) = law_claims(interval_law(times.isel(seed=slice(0, 2)), "tau_mem"), {"tau_mem": "synthetic"})
    assert few.verdict.startswith("untestable") and few.n == 10
