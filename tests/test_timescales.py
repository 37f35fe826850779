"""Training time scales (ridgexr.analysis.timescales and its kernels in ridgexr.analysis.arrays): f_mem against a
brute-force count and brute-force resampling, tau estimators on synthetic curves with known crossings (one
censored), the censored slope fit against synthetic laws with known b, the verdict table, and the labelled
function and accessor against the kernels."""

import itertools

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import ridgexr  # noqa: F401  (registers the accessor)
from ridgexr import defaults
from ridgexr.analysis import arrays, memorized_share, resolved, training_timescales

# ------------------------------------------------------------------------------------------- f_mem


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 60), st.floats(0.05, 0.95))
def test_memorized_share_is_the_brute_force_count(seed, S, ratio):
    rng = np.random.default_rng(seed)
    r = rng.uniform(0, 1, size=(3, S))
    r[rng.uniform(size=r.shape) < 0.2] = np.nan  # diverged / not observed: out of the share, counted
    out = arrays.memorized_share_ci(r, ratio, n_boot=50, seed=seed)
    for i in range(3):
        valid = [x for x in r[i] if x == x]
        k = sum(1 for x in valid if x < ratio)
        assert out[i, 3] == len(valid)
        if valid:
            assert out[i, 0] == pytest.approx(k / len(valid), abs=1e-15)
            assert out[i, 1] <= out[i, 0] + 1e-12 and out[i, 0] <= out[i, 2] + 1e-12
        else:
            assert np.isnan(out[i, :3]).all()


def test_memorized_share_interval_matches_resampling_the_samples():
    # the binomial draws are the bootstrap distribution of the share: compare with resampling indices
    rng = np.random.default_rng(1)
    r = rng.uniform(0, 1, size=300)
    share, lo, hi, _ = arrays.memorized_share_ci(r, 0.3, n_boot=20000, seed=2)
    flags = (r < 0.3).astype(float)
    boot = flags[rng.integers(0, r.size, size=(20000, r.size))].mean(1)
    blo, bhi = np.quantile(boot, [0.025, 0.975])
    assert abs(lo - blo) <= 0.01 and abs(hi - bhi) <= 0.01
    assert share == pytest.approx(flags.mean())


def test_memorized_share_labelled_reads_the_last_step_and_is_lazy():
    rng = np.random.default_rng(3)
    r = rng.uniform(0, 1, size=(4, 30, 3))  # (cell, sample, step)
    ds = xr.Dataset({"nearest_ratio": (("epoch", "sample", "step"), r)},
                    coords={"epoch": [1, 2, 4, 8], "step": [0, 5, 9], "t": ("step", [1.0, 0.1, 0.01])})
    lazy = memorized_share(ds.chunk({"epoch": 2}), n_boot=100, seed=4)
    assert lazy["f_mem"].chunks is not None
    np.testing.assert_allclose(lazy["f_mem"].values, (r[..., -1] < 1 / 3).mean(-1))
    np.testing.assert_allclose(lazy["f_mem_low"].values,
                               arrays.memorized_share_ci(r[..., -1], n_boot=100, seed=4)[:, 1])
    assert lazy.attrs["step"] == 9
    assert float(ds.ridge.memorized_share(step=0, n_boot=100)["f_mem"][0]) == pytest.approx((r[0, :, 0] < 1 / 3).mean())


# ---------------------------------------------------------------------------- tau on synthetic curves

@settings(max_examples=60, deadline=None)
@given(st.integers(2, 20), st.data())
def test_first_reached_finds_the_known_crossing(K, data):
    c = np.cumsum(np.asarray(data.draw(st.lists(st.floats(0.1, 10), min_size=K, max_size=K))))
    k = data.draw(st.integers(0, K - 1))
    j = data.draw(st.integers(0, k))
    sure, possible = np.arange(K) >= k, np.arange(K) >= j
    tau, lo, hi, cen = arrays.first_reached(c, sure, possible)
    assert (tau, hi, cen) == (c[k], c[k], 0.0)
    assert lo == (0.0 if j == 0 else c[j - 1])


def test_first_reached_censored_and_last_checkpoint():
    c = np.array([1.0, 3.0, 10.0, 30.0])
    never = np.zeros(4, bool)
    assert arrays.first_reached(c, never, np.array([0, 0, 1, 1], bool)).tolist() == [30.0, 3.0, np.inf, 1.0]
    last = np.array([0, 0, 0, 1], bool)
    assert arrays.first_reached(c, last).tolist() == [30.0, 10.0, 30.0, 0.0]
    assert arrays.first_reached(c, last, last_is_censored=True).tolist() == [30.0, 10.0, np.inf, 1.0]


@settings(max_examples=40, deadline=None)
@given(st.floats(2.0, 200.0), st.floats(0.05, 0.3), st.floats(0.1, 5.0))
def test_tau_gen_of_an_exponential_quality_curve(tau0, tol, best):
    # q(c) = best + exp(-c / tau0) on log-spaced checkpoints: gap share exp(-c/tau0) / exp(-c0/tau0) <= tol
    # first at c >= c0 + tau0 log(1 / tol)
    c = np.geomspace(1, 1e4, 40)
    q = best + np.exp(-c / tau0)
    sure, possible = arrays.quality_reached(q, tol=tol)
    tau = arrays.first_reached(c, sure, possible)[0]
    gap = (q - q.min()) / (q.max() - q.min())
    expect = c[np.argmax(gap <= tol)]
    assert tau == expect
    cross = c[0] + tau0 * np.log(1 / tol)
    assert tau >= cross * (1 - 1e-9) or np.isclose(q.min(), best)
    # higher-is-better: the mirrored curve gives the same time
    s2, p2 = arrays.quality_reached(-q, tol=tol, higher_is_better=True)
    assert arrays.first_reached(c, s2, p2)[0] == tau


def test_quality_interval_widens_tau_gen():
    c = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    q = np.array([10.0, 5.0, 1.5, 1.0, 1.0])
    lo, hi = q - np.array([0, 0, 0.6, 0, 0]), q + np.array([0, 0, 0.6, 0, 0])
    sure, possible = arrays.quality_reached(q, lo, hi, tol=0.1)  # threshold 1.9: lo 0.9 in, hi 2.1 out at c = 4
    assert arrays.first_reached(c, sure, possible).tolist() == [8.0, 2.0, 8.0, 0.0]


@settings(max_examples=40, deadline=None)
@given(st.floats(2.0, 200.0), st.floats(0.5, 50.0), st.floats(0.1, 5.0), st.floats(1.1, 4.0))
def test_ratio_rules_of_an_exponential_quality_curve(tau0, amp, best, factor):
    """Issue 41's tau_gen rules 'best' and 'null': q(c) = best (1 + amp exp(-c / tau0)) is within a factor of its
    best first at the checkpoint a direct scan finds, at or after the closed-form crossing
    c = tau0 log(amp / (factor q_min / best - 1)); the null rule with null = q_min gives the same time; the
    mirrored measure 1 / q (higher is better) gives the same times."""
    c = np.geomspace(1, 1e4, 40)
    q = best * (1 + amp * np.exp(-c / tau0))
    tau = arrays.first_reached(c, *arrays.quality_reached(q, rule="best", factor=factor))[0]
    expect = next((ck for ck, qk in zip(c, q) if qk <= factor * q.min()), np.nan)
    assert tau == expect
    ratio = factor * q.min() / best - 1
    if ratio < amp:
        assert tau >= tau0 * np.log(amp / ratio) * (1 - 1e-9)
    same = arrays.first_reached(c, *arrays.quality_reached(q, rule="null", factor=factor, null=np.array(q.min())))[0]
    assert same == tau
    mirrored = arrays.quality_reached(1 / q, rule="best", factor=factor, higher_is_better=True)
    assert arrays.first_reached(c, *mirrored)[0] == tau


def test_ratio_rules_use_the_interval_and_a_null_per_checkpoint():
    c = np.array([1.0, 2.0, 4.0, 8.0])
    q = np.array([10.0, 2.2, 1.5, 1.0])
    lo, hi = q - np.array([0, 0.4, 0, 0]), q + np.array([0, 0.4, 0.6, 0])
    # best rule, factor 2: threshold 2.0; c = 2: lo 1.8 in, hi 2.6 out; c = 4: hi 2.1 out; c = 8: in
    assert arrays.first_reached(c, *arrays.quality_reached(q, lo, hi, rule="best", factor=2.0)).tolist() == [
        8.0, 1.0, 8.0, 0.0]
    # null rule with a null per checkpoint (..., K): thresholds 2 x [5, 1, 1, 0.4]
    null = np.array([5.0, 1.0, 1.0, 0.4])
    sure, possible = arrays.quality_reached(q, rule="null", factor=2.0, null=null)
    assert sure.tolist() == [True, False, True, False] and possible.tolist() == sure.tolist()
    with pytest.raises(ValueError, match="null"):
        arrays.quality_reached(q, rule="null")
    with pytest.raises(ValueError, match="rule"):
        arrays.quality_reached(q, rule="plateau")


@pytest.mark.parametrize("gen_low, gen_high, mem_low, mem_high, censored, expect", [
    ([5, 5], [10, 10], [50, 80], [60, 100], [False, True], "agrees"),  # every uncensored tau_mem after tau_gen
    ([5, 5], [10, 10], [50, 80], [np.inf, np.inf], [True, True], "inconclusive"),  # no uncensored tau_mem
    ([5, 50], [10, 100], [50, 80], [60, 120], [False, False], "inconclusive"),  # n 2: intervals overlap
    ([5, 200], [10, 300], [50, 80], [60, 120], [False, False], "disagrees"),  # n 2: tau_mem's below tau_gen's
])
def test_order_verdict_by_the_written_criterion(gen_low, gen_high, mem_low, mem_high, censored, expect):
    assert arrays.order_verdict(*(np.array(a, float) for a in (gen_low, gen_high, mem_low, mem_high)),
                                np.array(censored)) == expect


# ------------------------------------------------------------------------------------------ slope fit

@settings(max_examples=30, deadline=None)
@given(st.floats(-0.5, 2.0), st.floats(-2.0, 5.0))
def test_censored_slope_recovers_an_exact_law(b, a):
    n = np.array([64.0, 128.0, 256.0, 512.0, 1024.0])
    tau = np.exp(a) * n ** b
    out = arrays.censored_slope_ci(n, tau, np.zeros(5, bool), n_boot=50)
    assert out[1] == pytest.approx(b, abs=1e-9) and out[0] == pytest.approx(a, abs=1e-8)
    assert out[2] == pytest.approx(b, abs=1e-9) and out[3] == pytest.approx(b, abs=1e-9)


def test_tobit_recovers_b_where_dropping_censored_points_is_biased():
    # 30 synthetic runs of log tau = 1 + log n + N(0, 0.5^2), ended at tau = 2000 (about a third censored)
    fits = []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        n = np.repeat(np.geomspace(32, 4096, 8), 4)
        log_tau = 1.0 + np.log(n) + rng.normal(0, 0.5, n.size)
        cap = np.log(2000.0)
        cen = log_tau > cap
        tau = np.exp(np.minimum(log_tau, cap))
        fits.append([arrays.censored_slope(n, tau, cen, method="tobit")[1],
                     arrays.censored_slope(n, tau, cen, method="drop")[1],
                     arrays.censored_slope(n, tau, np.zeros_like(cen))[1]])  # bounds taken as times
    tobit, drop, ignored = np.mean(fits, 0)
    assert abs(tobit - 1.0) < 0.05  # sd of one fit ~0.1: the mean of 30 is within ~0.02
    assert drop < tobit - 0.05 and ignored < 0.8


def test_slope_interval_covers_the_true_slope_in_most_synthetic_runs():
    rng = np.random.default_rng(6)
    n = np.geomspace(64, 1024, 5)
    hits = 0
    for r in range(40):
        tau = 3.0 * n * np.exp(rng.normal(0, 0.15, n.size))
        out = arrays.censored_slope_ci(n, tau, np.zeros(5, bool), n_boot=300, seed=r)
        hits += out[2] <= 1.0 <= out[3]
    assert hits >= 30  # a pairs bootstrap on 5 points under-covers; far below would mean a broken interval


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 5))
def test_slope_range_is_the_span_of_lines_through_every_interval(seed, k):
    """The least and largest slope of a line through every (low, high] box in log-log space, against a brute-force
    scan of lines through pairs of box corners (an extreme feasible line touches two constraints)."""
    rng = np.random.default_rng(seed)
    n = np.sort(rng.choice([8.0, 16.0, 32.0, 64.0, 128.0, 256.0], size=k, replace=False))
    b_true = rng.uniform(-0.5, 1.5)
    tau = 100.0 * n ** b_true  # the true line passes through every box
    low, high = tau / rng.uniform(1.05, 2.0, k), tau * rng.uniform(1.05, 1.6, k)
    if rng.random() < 0.3:
        high[-1] = np.inf  # a censored largest n
    got = arrays.slope_range(n, low, high)
    x, lo, hi = np.log(n), np.log(low), np.log(high)
    feasible = []
    ends = [(i, y) for i in range(k) for y in (lo[i], hi[i]) if np.isfinite(y)]
    for (i, yi), (j, yj) in itertools.combinations(ends, 2):
        if i == j:
            continue
        b = (yj - yi) / (x[j] - x[i])
        a = yi - b * x[i]
        line = a + b * x
        if np.all(line >= lo - 1e-9) and np.all(line <= hi + 1e-9):
            feasible.append(b)
    assert feasible  # the true line is feasible, so extreme lines exist
    assert got[0] <= b_true + 1e-9 <= got[1] + 2e-9
    np.testing.assert_allclose(got[0], min(feasible), atol=1e-7)
    if np.isfinite(high[-1]):
        np.testing.assert_allclose(got[1], max(feasible), atol=1e-7)
    else:
        assert got[1] >= max(feasible) - 1e-7


def test_slope_range_without_a_line_through_every_interval_is_nan():
    assert np.isnan(arrays.slope_range(np.array([16.0, 32.0, 64.0]), np.array([100.0, 1000.0, 100.0]),
                                       np.array([200.0, 2000.0, 200.0]))).all()
    assert np.isnan(arrays.slope_range(np.array([16.0]), np.array([1.0]), np.array([2.0]))).all()


def test_slope_needs_two_uncensored_sizes():
    n = np.array([64.0, 128.0, 256.0])
    out = arrays.censored_slope_ci(n, np.array([10.0, 100.0, 100.0]), np.array([False, True, True]), n_boot=20)
    assert np.isnan(out[1:4]).all() and out[5] == 20


@pytest.mark.parametrize("low, high, verdict", [
    (0.7, 1.3, "agrees"), (0.69, 1.0, "inconclusive"), (1.51, 2.0, "disagrees"), (-1.0, 0.49, "disagrees"),
    (1.2, 1.6, "inconclusive"), (np.nan, 1.0, "untestable: no resolved state")])
def test_the_registry_slope_criterion_table(low, high, verdict):
    """The timescale slopes' verdict is the claims registry's kind (one verdict kernel, ridgexr.verdicts), with the
    margins of ridgexr.defaults."""
    from ridgexr.claims import KINDS
    from ridgexr.verdicts import interval_verdict

    assert interval_verdict(low, high, KINDS["timescale-slope"].criterion(expected=1.0)) == verdict
    assert (defaults.TIMESCALE_SLOPE_AGREE, defaults.TIMESCALE_SLOPE_DISAGREE) == (0.3, 0.5)
    assert not hasattr(arrays, "slope_verdict")  # no second verdict function


# ------------------------------------------------------------------------------------------ labelled

def _store(tau_mem_of_n, tau_gen, epochs, sizes, S=200, seed=0):
    """A store-shaped Dataset: at checkpoint c every sample of the n cell is memorized (ratio 0.1) when
    c >= tau_mem_of_n(n), else not (0.8); the quality is 5 before tau_gen and 1 from it on."""
    rng = np.random.default_rng(seed)
    c = np.asarray(epochs, float)[:, None, None]
    nn = np.asarray(sizes, float)[None, :, None]
    memo = c >= tau_mem_of_n(nn)
    r = np.where(memo, 0.1, 0.8) + rng.uniform(-0.05, 0.05, size=(len(epochs), len(sizes), S))
    q = np.where(np.asarray(epochs)[:, None] >= tau_gen, 1.0, 5.0) * np.ones((1, len(sizes)))
    return xr.Dataset({"nearest_ratio": (("epoch", "n_train", "sample", "step"), r[..., None]),
                       "quality_sliced_wasserstein": (("epoch", "n_train"), q)},
                      coords={"epoch": epochs, "n_train": sizes, "step": [0], "t": ("step", [0.001])})


def test_training_timescales_on_a_synthetic_store_with_a_linear_law():
    epochs = np.unique(np.geomspace(1, 20000, 40).round()).astype(int)
    sizes = [64, 128, 256, 512, 1024]
    ds = _store(lambda n: 4.0 * n, 30, epochs, sizes).chunk({"epoch": 7, "n_train": 2})
    out = training_timescales(ds, n_boot=300)
    assert out["tau_mem"].chunks is not None  # lazy
    out = out.compute()
    expect = [epochs[np.argmax(epochs >= 4 * n)] for n in sizes]
    assert out["tau_mem"].values.tolist() == expect
    assert not out["tau_mem_censored"].any()
    assert out["tau_gen"].values.tolist() == [epochs[np.argmax(epochs >= 30)]] * 5
    assert out["tau_mem_slope_low"] <= 1.0 + 0.1 and out["tau_mem_slope_high"] >= 1.0 - 0.1
    assert float(out["tau_gen_slope"]) == 0.0
    # the registry's verdicts: five (n) runs are fewer than the slope's interval needs for its coverage; the
    # interval itself lies within the margins of both expected slopes
    import dataclasses

    from ridgexr.claims.timescale_slope import TIMESCALE_RUNS, slope_claims

    claims = {c.labels["time scale"]: c for c in slope_claims(out)}
    assert claims["tau_mem"].verdict == "untestable: too few resolved draws (5 of 5)" and TIMESCALE_RUNS > 5
    assert claims["tau_mem"].criterion.agrees == (0.7, 1.3) and claims["tau_gen"].criterion.agrees == (-0.3, 0.3)
    assert all(dataclasses.replace(c, n=TIMESCALE_RUNS).verdict == "agrees" for c in claims.values())
    same = ds.ridge.training_timescales(n_boot=300).compute()
    xr.testing.assert_identical(same, out)


def test_training_timescales_censors_a_time_not_reached():
    epochs = [1, 10, 100, 1000]
    ds = _store(lambda n: n, 10, epochs, [64, 512, 4096])  # n = 4096 memorizes after the run's last epoch
    out = training_timescales(ds, n_boot=100).compute()
    assert out["tau_mem_censored"].values.tolist() == [False, False, True]
    assert out["tau_mem"].values.tolist() == [100.0, 1000.0, 1000.0]
    assert out["tau_mem_high"].values[2] == np.inf and out["tau_mem_low"].values[2] == 1000.0


def _near_store(k0, n0=1000, S=200):
    """Epochs 1, 10, 100 x n_train 4, 8 of 8 training points 10 apart on a line: at epoch 1 every final sample sits
    half-way between points 0 and 1 (d1/d2 = 1), from epoch 10 on sample j sits 1e-3 from training point j mod
    n_train (memorized); the memorized-share null of the n_train cells is ``k0`` (per n_train) of ``n0``."""
    train = np.stack([10.0 * np.arange(8), np.zeros(8)], 1)
    epochs, sizes = [1, 10, 100], [4, 8]
    x = np.empty((3, 2, S, 1, 2))
    for i, e in enumerate(epochs):
        for j, n in enumerate(sizes):
            x[i, j, :, 0] = [5.0, 0.0] if e == 1 else train[np.arange(S) % n] + [0.0, 1e-3]
    cells = ("epoch", "n_train")
    return xr.Dataset({"trajectory": (cells + ("sample", "step", "dim"), x),
                       "train_data": (("train", "dim"), train),
                       "quality_sliced_wasserstein": (cells, np.ones((3, 2))),
                       "quality_memorized_null_count": (cells, np.broadcast_to(np.asarray(k0, float), (3, 2))),
                       "quality_memorized_null_draws": (cells, np.full((3, 2), float(n0)))},
                      coords={"epoch": epochs, "n_train": sizes, "step": [0], "t": ("step", [0.001]),
                              "alpha": ("step", [1.0]), "train": np.arange(8)})


def test_tau_mem_reads_the_claims_excess_where_the_store_has_the_null():
    """Fresh draws of the law that are themselves memorized (950 of 1000 at n_train = 4): the raw f_mem = 1 crosses
    the threshold at epoch 10, the excess 1 - 0.95 never does (tau_mem censored), and at every checkpoint
    does-not-memorize's verdict on the same counts is what tau_mem says (disagrees exactly from tau_mem on).  At
    n_train = 8 (no fresh draw memorized) both rules give epoch 10.  Without the null, or at another ratio, the
    raw rule, said in the attributes."""
    from ridgexr.analysis import memorized_excess
    from ridgexr.claims import KINDS
    from ridgexr.verdicts import interval_verdict, share_difference_ci

    ds = _near_store([950.0, 0.0])
    out = training_timescales(ds, n_boot=100).compute()
    assert out.attrs["tau_mem_measure"] == "f_mem - f_fresh"
    assert out["tau_mem_censored"].values.tolist() == [True, False]
    assert out["tau_mem"].values.tolist() == [100.0, 10.0]
    ex = memorized_excess(ds)
    assert ex["memorized_count"].values.tolist() == [[0, 0], [200, 200], [200, 200]]
    for e in ds.epoch.values:
        for n, k0 in ((4, 950), (8, 0)):
            cell = ex.sel(epoch=e, n_train=n)
            est, lo, hi = share_difference_ci(int(cell["memorized_count"]), 200, k0, 1000)
            np.testing.assert_allclose([cell["f_mem_excess"], cell["f_mem_excess_low"], cell["f_mem_excess_high"]],
                                       [est, lo, hi])
            verdict = interval_verdict(lo, hi, KINDS["does-not-memorize"].criterion())
            tau = out.sel(n_train=n)
            reached = bool(~tau["tau_mem_censored"] & (e >= tau["tau_mem"]))
            assert verdict == ("disagrees" if reached else "agrees"), (e, n, verdict)
    raw = training_timescales(ds.drop_vars(["quality_memorized_null_count", "quality_memorized_null_draws"]),
                              n_boot=100).compute()
    assert raw.attrs["tau_mem_measure"] == "f_mem" and "no memorized-share null" in raw.attrs["tau_mem_why"]
    assert raw["tau_mem"].values.tolist() == [10.0, 10.0] and not raw["tau_mem_censored"].any()
    assert "f_mem_excess" not in raw
    other = training_timescales(ds, ratio=0.3, n_boot=100)
    assert other.attrs["tau_mem_measure"] == "f_mem" and "ratio 0.3" in other.attrs["tau_mem_why"]
    nowhere = training_timescales(ds.assign(quality_memorized_null_draws=ds["quality_memorized_null_draws"] * np.nan),
                                  n_boot=100)
    assert nowhere.attrs["tau_mem_measure"] == "f_mem" and "no fresh draws" in nowhere.attrs["tau_mem_why"]


def test_training_timescales_rules_and_the_order_verdict_on_synthetic_stores():
    """tau_gen by each rule on a store whose quality falls 5 -> 1 at epoch 30 with a stored null of 0.6 (factor 2:
    1 <= 1.2, reached at 30; factor 1.5: never, censored), and the tau_gen < tau_mem verdict: agrees where tau_mem
    (4 n) follows tau_gen, disagrees where it precedes it (or tau_gen is never reached)."""
    epochs = np.unique(np.geomspace(1, 20000, 40).round()).astype(int)
    sizes = [64, 128, 256]
    ds = _store(lambda n: 4.0 * n, 30, epochs, sizes)
    ds["quality_sliced_wasserstein_null"] = xr.full_like(ds.quality_sliced_wasserstein, 0.6)
    at30 = epochs[np.argmax(epochs >= 30)]
    for rule in ("gap", "best", "null"):
        out = training_timescales(ds, rule=rule, n_boot=50).compute()
        assert out.tau_gen.values.tolist() == [at30] * 3, rule
        assert out.attrs["rule"] == rule
        assert str(out.tau_order_verdict.values) == "agrees"
    never = training_timescales(ds, rule="null", factor=1.5, n_boot=50).compute()
    # tau_gen never reached (a lower bound at the last checkpoint) while every tau_mem is: memorized first
    assert never.tau_gen_censored.all() and str(never.tau_order_verdict.values) == "disagrees"
    late = training_timescales(_store(lambda n: 4.0 * n, 5000, epochs, sizes), n_boot=50).compute()
    assert str(late.tau_order_verdict.values) == "disagrees"  # tau_mem at 256 .. 1024 before tau_gen ~ 5000
    with pytest.raises(ValueError, match="quality_sliced_wasserstein_null"):
        training_timescales(ds.drop_vars("quality_sliced_wasserstein_null"), rule="null")
    # the null read from a variable of another name (a Frechet distance's floor): the same taus; the null
    # halved (0.3: 1 > 2 x 0.3) moves tau_gen to never, so the named variable is the one read
    floor = ds.rename({"quality_sliced_wasserstein_null": "floor"})
    named = training_timescales(floor, rule="null", quality_null="floor", n_boot=50).compute()
    assert named.tau_gen.values.tolist() == [at30] * 3
    floor["floor"] = floor["floor"] / 2
    assert training_timescales(floor, rule="null", quality_null="floor", n_boot=50).tau_gen_censored.all()
    with pytest.raises(ValueError, match="missing"):
        training_timescales(floor, rule="null", quality_null="missing")
    with pytest.raises(TypeError, match="quality_null"):
        training_timescales(floor, rule="null", quality_null=0.6)


@pytest.mark.parametrize("kwargs, error", [
    ({"rule": "plateau"}, ValueError), ({"factor": 0.5}, ValueError),
    ({"time_dim": "width"}, ValueError), ({"level": 1.0}, ValueError), ({"tol": -0.1}, ValueError),
    ({"censored_fit": "ols"}, ValueError), ({"quality": "quality_frechet"}, ValueError),
    ({"higher_is_better": 1}, TypeError), ({"n_boot": 0}, ValueError)])
def test_training_timescales_refuses_bad_arguments_at_the_call(kwargs, error):
    ds = _store(lambda n: n, 10, [1, 10, 100], [64, 128]).chunk({"epoch": 1})
    with pytest.raises(error):
        training_timescales(ds, **kwargs)


TIMESCALE_CATALOG = """
experiments:
  ts:
    dataset:
      mixture: {dim: 2, mean: 1.0, sigma: 0.3, n: 32, seed: 0, n_population: 200}
      n_train: [8, 32]
    process: {T: 3.0, t_min: 0.01, n_steps: 10}
    model: {kind: mlp, widths: [32], epochs: [1, 4, 16], batch_size: 64, lr: 3.0e-3,
            diagnostics: {n_time: 2, n_noise: 1, n_points: 8}}
    training: {quadrature: gauss-legendre-log-t, n_time: 2, n_noise: 1}
    schedules: ["h"]
    sampler: {record_every: 10, block_steps: 2}
    n_samples: 24
    d_star: 1
    store: ts.zarr
"""


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory):
    """A run of TIMESCALE_CATALOG (epochs x n_train), opened."""
    from ridgexr.catalog import experiment_from_file
    from ridgexr.run import run_experiment

    tmp = tmp_path_factory.mktemp("sweep")
    cat = tmp / "cat.yaml"
    cat.write_text(TIMESCALE_CATALOG)
    return ridgexr.open_dataset(run_experiment(experiment_from_file(cat), data_dir=tmp / "data").store)


@pytest.mark.slow
def test_both_memorization_measures_read_the_stored_ratio_which_equals_the_computed_one(sweep_store):
    """Issue 43, item 5: memorization_fraction recomputed d1/d2 while the store holds it.  Both measures now
    read the stored nearest_ratio (a ratio edited in the store changes them), and the ratio computed from the
    trajectory where a Dataset has none equals the stored one."""
    from ridgexr.analysis import memorization_fraction, nearest_ratio_at

    ds = sweep_store
    stored = nearest_ratio_at(ds).compute()
    computed = nearest_ratio_at(ds.drop_vars("nearest_ratio")).compute()
    assert np.isfinite(stored).all() and float(stored.min()) < float(stored.max())
    np.testing.assert_allclose(computed.transpose(*stored.dims).values, stored.values, rtol=1e-9)
    edited = ds.assign(nearest_ratio=xr.where(ds.sample < 5, 0.0, 1.0))  # 5 samples memorized in every cell
    np.testing.assert_allclose(memorization_fraction(edited)["memorized"].values, 5 / ds.sizes["sample"])
    np.testing.assert_allclose(memorized_share(edited, n_boot=50)["f_mem"].values, 5 / ds.sizes["sample"])
    np.testing.assert_array_equal(memorization_fraction(ds)["memorized"].values,
                                  memorized_share(ds, n_boot=50)["f_mem"].values)


@pytest.mark.slow
def test_the_report_draws_training_time_curves_and_the_law_of_a_store_that_sweeps_both(sweep_store, tmp_path,
                                                                                      figure_layout_problems):
    """A store sweeping epochs and n_train gets two report figures: the memorized share tau_mem reads (f_mem less
    fresh draws', the store having its null) and quality along training per n (the drawn values are
    training_timescales'), and tau against n; both laid out with nothing clipped."""
    import holoviews as hv

    from ridgexr import plot
    from ridgexr.report import make_report, training_time_series

    ds = sweep_store
    (cell, tt), = training_time_series(ds)
    assert cell == {}  # one schedule and width: nothing to name
    expected = ridgexr.analysis.training_timescales(ds, quality="quality_sliced_wasserstein").compute()
    np.testing.assert_array_equal(tt["f_mem"].values, expected["f_mem"].squeeze().values)
    curves = plot.training_time_curves(tt)
    drawn = [el for el in curves.traverse(lambda e: e, [hv.Curve])]
    assert tt.attrs["tau_mem_measure"] == "f_mem - f_fresh"  # a mixture: fresh draws of its law
    f_mem_curves = [c for c in drawn if c.vdims[0].name == "f_mem_excess"]
    assert len(f_mem_curves) == ds.sizes["n_train"]
    for c, n in zip(f_mem_curves, ds.n_train.values):
        np.testing.assert_array_equal(c.dimension_values(1), tt["f_mem_excess"].sel(n_train=n).values)
    raw = plot.training_time_curves(tt.assign_attrs(tau_mem_measure="f_mem"))  # a store without the null
    raw_curves = [el for el in raw.traverse(lambda e: e, [hv.Curve]) if el.vdims[0].name == "f_mem"]
    for c, n in zip(raw_curves, ds.n_train.values):
        np.testing.assert_array_equal(c.dimension_values(1), tt["f_mem"].sel(n_train=n).values)
    assert len(raw_curves) == ds.sizes["n_train"]
    for obj in (curves, plot.timescale_law(tt)):
        assert figure_layout_problems(plot.matplotlib_figure(obj)) == []
    # the quality axis names the quality tau_gen was read from, whole (it was a long name cut at 40 characters)
    from ridgexr.choices import QUALITY_LABELS

    ylabels = [ax.get_ylabel() for ax in plot.matplotlib_figure(curves).axes]
    assert QUALITY_LABELS["quality_sliced_wasserstein"] in ylabels
    # tau_gen's and tau_mem's markers: each tau drawn at its n shifted left (gen) or right (mem), so that two equal
    # taus at one n (both censored at the last checkpoint) do not hide each other
    drawn = {(round(float(x), 6), round(float(y), 6)) for el in plot.timescale_law(tt).traverse(lambda e: e, [hv.Scatter])
             for x, y in zip(el.dimension_values(0), el.dimension_values(1))}
    n = tt.n_train.values.astype(float)
    for name, shift in (("tau_gen", 1 / plot.LAW_OFFSET), ("tau_mem", plot.LAW_OFFSET)):
        tau = tt[name].values
        want = {(round(float(x), 6), round(float(y), 6)) for x, y in zip(n * shift, tau) if np.isfinite(y)}
        assert want and want <= drawn, (name, want - drawn)
    paths = make_report(ds, tmp_path / "rep", title="ts", n_frames=2)
    assert {"training_time_0", "timescale_law_0"} <= set(paths)
    with pytest.raises(ValueError, match="select one label"):
        plot.training_time_curves(xr.concat([tt, tt], "schedule"))


@pytest.mark.slow
def test_the_report_reads_tau_gen_by_the_rule_its_entry_wrote(sweep_store):
    """tau_gen's quality and rule come from the entry's `timescales` field (written before the run): recorded in
    the store's configuration, else the catalog entry of the store's name (a store older than the field), else
    the defaults; the report's series are training_timescales under that rule."""
    import json

    from ridgexr.claims import timescale_rule
    from ridgexr.report import training_time_series

    def with_config(**changes):
        cfg = json.loads(sweep_store.attrs["config"]) | changes
        return sweep_store.assign_attrs(config=json.dumps(cfg))

    gap = with_config(timescales={"quality": "quality_sliced_wasserstein", "rule": "gap", "written": "here"})
    spec, how = timescale_rule(gap)
    assert (spec.rule, spec.factor, "recorded in the store" in how) == ("gap", 2.0, True)
    (_, tt), = training_time_series(gap)
    direct = training_timescales(gap, rule="gap").compute()
    assert tt.attrs["rule"] == "gap"
    np.testing.assert_array_equal(tt.tau_gen.values, direct.tau_gen.squeeze().values)
    best3 = with_config(timescales={"quality": "quality_sliced_wasserstein", "rule": "best", "factor": 3.0})
    (_, tt3), = training_time_series(best3)
    np.testing.assert_array_equal(tt3.tau_gen.values,
                                  training_timescales(best3, rule="best", factor=3.0).tau_gen.squeeze().values)
    spec, how = timescale_rule(with_config(name="timescales-fashion"))  # older store: the catalog entry's rule
    assert (spec.quality, spec.rule, "from catalog entry 'timescales-fashion'" in how) == ("quality_frechet", "null", True)
    spec, how = timescale_rule(sweep_store)  # no field, no catalog entry of that name: the defaults
    assert (spec.quality, spec.rule, spec.factor) == ("quality_sliced_wasserstein", defaults.TIMESCALE_GEN_RULE,
                                                      defaults.TIMESCALE_GEN_FACTOR) and "the defaults" in how


def test_the_timescales_field_is_validated_by_name(tmp_path):
    """A quality tau_gen cannot be read from, a rule that does not exist or a factor below 1: a catalog error
    naming the field."""
    from ridgexr.catalog import CatalogError, load_catalog_file

    for bad, field in (("{quality: fid}", "timescales.quality"), ("{rule: plateau}", "timescales.rule"),
                       ("{factor: 0.5}", "timescales.factor")):
        cat = tmp_path / "cat.yaml"
        cat.write_text(TIMESCALE_CATALOG.replace("    store:", f"    timescales: {bad}\n    store:", 1))
        with pytest.raises(CatalogError, match=field.replace(".", r"\.")):
            load_catalog_file(cat)


# ------------------------------------------------------------------------- the ridge account of the window
def test_the_null_of_two_points_lies_at_its_closed_form_ridge_distance():
    """Fresh draws observed as the store observes samples: for two points (-3, 0), (3, 0) at t = 0.5 the 1-d
    log ridge between them is the axis x_2 = 0 (the projection of the ridge doctest), so every resolved
    state x_t = alpha_t x0 + sqrt(h_t) z with |x_1| < 1 lies at ridge distance |x_2|: a closed form."""
    import json

    from ridgexr.analysis.timescales import reference_observation

    rng = np.random.default_rng(0)
    x0 = np.column_stack([rng.uniform(-2, 2, 200), rng.normal(0, 0.3, 200)])
    ds = xr.Dataset({"train_data": (("train", "dim"), [[-3.0, 0.0], [3.0, 0.0]])},
                    coords={"step": [7], "t": ("step", [0.5])},
                    attrs={"config": json.dumps({"d_star": 1, "ridge": {"max_iter": 500}})})
    obs = reference_observation(ds, xr.DataArray(x0, dims=("population", "dim")), n=150, seed=3)
    t = 0.5
    xt = np.exp(-t) * x0[:150] + np.sqrt(1 - np.exp(-2 * t)) * np.random.default_rng(3).standard_normal((150, 2))
    np.testing.assert_array_equal(obs["trajectory"].isel(step=0).values, xt)
    dist = resolved(obs, "ridge_distance").isel(step=0).values
    inner = np.abs(xt[:, 0]) < 1
    assert np.isfinite(dist[inner]).mean() > 0.9
    ok = inner & np.isfinite(dist)
    np.testing.assert_allclose(dist[ok], np.abs(xt[ok, 1]), atol=1e-6)
    assert obs["t"].item() == 0.5 and int(obs["step"][0]) == 7 and "given reference draws" in obs.attrs["null"]
    # d1 of the null states: brute force against the scaled training points
    scaled = np.exp(-t) * np.array([[-3.0, 0.0], [3.0, 0.0]])
    d1 = np.linalg.norm(xt[:, None, :] - scaled[None], axis=-1).min(axis=1)
    np.testing.assert_allclose(obs["nearest_distance"].isel(step=0).values, d1, rtol=1e-10)
    with pytest.raises(ValueError, match="`reference` must be given"):
        reference_observation(ds)
    with pytest.raises(ValueError, match="`reference` must be"):
        reference_observation(ds, xr.DataArray(np.zeros((5, 3)), dims=("population", "dim")))


def test_f_mem_of_a_store_that_did_not_observe_is_computed_from_its_final_states():
    """ridge.observe false stores nearest_ratio at its fill value (NaN): nearest_ratio_at and memorized_share then
    compute d1/d2 from the stored final states against the scaled training points (brute force), as for a store
    without the variable."""
    import json

    from ridgexr.analysis import nearest_ratio_at

    rng = np.random.default_rng(0)
    train = rng.normal(size=(6, 3))
    alpha = 0.9
    x = alpha * train[rng.integers(0, 6, 40)] + rng.normal(scale=[[0.01]] * 20 + [[1.0]] * 20, size=(40, 3))
    ds = xr.Dataset({"trajectory": (("sample", "step", "dim"), x[:, None, :]),
                     "nearest_ratio": (("sample", "step"), np.full((40, 1), np.nan)),
                     "train_data": (("train", "dim"), train)},
                    coords={"step": [19], "t": ("step", [0.1]), "alpha": ("step", [alpha])},
                    attrs={"config": json.dumps({"ridge": {"observe": False}})})
    dist = np.sort(np.linalg.norm(x[:, None, :] - alpha * train[None], axis=-1), axis=1)
    np.testing.assert_allclose(nearest_ratio_at(ds).values, dist[:, 0] / dist[:, 1], rtol=1e-10)
    fm = memorized_share(ds, n_boot=50)
    assert float(fm["f_mem"]) == pytest.approx(np.mean(dist[:, 0] / dist[:, 1] < 1 / 3))
    assert int(fm["f_mem_n_valid"]) == 40
    observed = ds.assign_attrs(config=json.dumps({"ridge": {"observe": True}}))
    assert np.isnan(nearest_ratio_at(observed).values).all()  # an observed store's value is read as stored


def test_the_memorizer_reference_is_the_training_points_noised_and_observed_like_the_samples():
    """memorizer_observation: per n_train label, training points of that nested training set drawn uniformly and noised
    to the store's last time (x_t = alpha x_i + sqrt(h) z), observed by the store's code: d1 is the brute-force
    distance to the nearest scaled training point, and every state descends from one of the first n points."""
    import json

    from ridgexr.analysis.timescales import memorizer_observation

    train = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 4.0], [0.0, -4.0]])
    ds = xr.Dataset({"train_data": (("train", "dim"), train)},
                    coords={"step": [3], "t": ("step", [0.2]), "n_train": [2, 4]},
                    attrs={"config": json.dumps({"d_star": 1, "ridge": {"max_iter": 300}})})
    obs = memorizer_observation(ds, n=80, seed=4)
    t = 0.2
    a, s = np.exp(-t), np.sqrt(1 - np.exp(-2 * t))
    z = np.random.default_rng(4).standard_normal((80, 2))
    for k, size in enumerate([2, 4]):
        xt = obs["trajectory"].isel(n_train=k, step=0).values
        x0 = (xt - s * z) / a
        d0 = np.linalg.norm(x0[:, None, :] - train[None, :size], axis=-1)
        assert np.allclose(d0.min(axis=1), 0.0, atol=1e-9)  # each state is a noised training point of this set
        d1 = np.linalg.norm(xt[:, None, :] - a * train[None, :size], axis=-1).min(axis=1)
        np.testing.assert_allclose(obs["nearest_distance"].isel(n_train=k, step=0).values, d1, rtol=1e-10)
    assert "training points" in obs.attrs["memorizer"]
    with pytest.raises(ValueError, match="`n`"):
        memorizer_observation(ds, n=1)


def test_the_position_between_memorizer_and_fresh_draws_against_brute_force():
    """(median(a) - median(mem)) / (median(null) - median(mem)) and its bootstrap interval: the point by hand, the
    interval by an explicit resampling loop with the same stream."""
    from ridgexr.analysis import arrays
    from ridgexr.analysis.timescales import _between_ci

    rng = np.random.default_rng(0)
    a, null, mem = rng.normal(2.0, 1, 51), rng.normal(5.0, 1, 40), rng.normal(1.0, 1, 33)
    out = _between_ci(a, null, mem, n_boot=300, ci=0.9, seed=2)
    point = (np.median(a) - np.median(mem)) / (np.median(null) - np.median(mem))
    r = np.random.default_rng(2)
    ma, mn, mm = (arrays.bootstrap_medians(v, 300, r) for v in (a, null, mem))
    lo, hi = np.quantile((ma - mm) / (mn - mm), [0.05, 0.95])
    np.testing.assert_allclose(out, [point, lo, hi])
    assert 0 < point < 1


@pytest.mark.slow
def test_training_window_labels_each_checkpoint_and_measures_samples_and_null_alike(sweep_store):
    """Each checkpoint in its window by its cell's tau_gen / tau_mem (a censored tau_mem: no memorizing window;
    an uncensored one from a given timescales Dataset: memorizing from there on); the measures are those of
    the analyses that name them, and the null has them too, per n_train."""
    from ridgexr.analysis import near_mode_fraction
    from ridgexr.analysis.timescales import WINDOW_DISTANCES, WINDOW_MEASURES, WINDOWS, training_window

    ds = sweep_store
    tt = training_timescales(ds, n_boot=50).compute()
    w = training_window(ds, tt, n_null=60)
    epochs = ds.epoch.values
    # the memorizer's scale: its d1 below the null's, each distance placed between the two
    assert (w.memorizer_nearest_distance < w.null_nearest_distance).all()
    for name in WINDOW_DISTANCES:
        between = ((w[name] - w[f"memorizer_{name}"]) / (w[f"null_{name}"] - w[f"memorizer_{name}"]))
        np.testing.assert_allclose(w[f"{name}_between"].values, between.transpose(*w[f"{name}_between"].dims).values,
                                   rtol=1e-10)
    for n in ds.n_train.values:
        gen = float(tt.tau_gen.sel(n_train=n).squeeze())
        labels = w.window.sel(n_train=n).squeeze().values
        expected = [WINDOWS[0] if e < gen else WINDOWS[1] for e in epochs]  # tau_mem censored in this short run
        assert bool(tt.tau_mem_censored.sel(n_train=n).squeeze())
        assert list(labels) == expected
    direct = near_mode_fraction(ds.isel(step=[-1]))["near_mode"].compute()
    np.testing.assert_array_equal(w.near_mode.transpose(*direct.dims).values, direct.values)
    d1 = ds.nearest_distance.isel(step=-1).median("sample").compute()  # d1 as stored, at the final states
    np.testing.assert_allclose(w.nearest_distance.transpose(*d1.dims).values, d1.values, rtol=1e-12)
    for name in WINDOW_MEASURES:
        assert w[f"null_{name}"].dims == ("n_train",)
    assert np.isfinite(w.null_ridge_distance).all() and np.isfinite(w.null_nearest_distance).all()
    # intervals: each median inside its own, the difference is median(samples) - median(null), the null per n_train
    for name in WINDOW_DISTANCES:
        ok = np.isfinite(w[name])
        assert ((w[f"{name}_low"] <= w[name]) & (w[name] <= w[f"{name}_high"])).where(ok, True).all()
        diff = (w[name] - w[f"null_{name}"]).transpose(*w[f"{name}_minus_null"].dims)
        np.testing.assert_allclose(w[f"{name}_minus_null"].values, diff.values, atol=1e-12)
        assert ((w[f"{name}_minus_null_low"] <= w[f"{name}_minus_null"])
                & (w[f"{name}_minus_null"] <= w[f"{name}_minus_null_high"])).where(ok, True).all()
    assert ((w.near_mode_low <= w.near_mode) & (w.near_mode <= w.near_mode_high)).all()
    # an uncensored tau_mem at the second checkpoint: memorizing from there on
    forced = tt.copy()
    forced["tau_gen"] = xr.full_like(tt.tau_gen, epochs[0])
    forced["tau_mem"] = xr.full_like(tt.tau_mem, epochs[1])
    forced["tau_mem_censored"] = xr.zeros_like(tt.tau_mem_censored)
    w2 = training_window(ds, forced, null=False, memorizer=False)
    assert "memorizer_ridge_distance" not in w2 and "ridge_distance_between" not in w2
    assert "null_ridge_distance" not in w2 and "ridge_distance_minus_null" not in w2 and "ridge_distance_low" in w2
    assert list(w2.window.isel(n_train=0).squeeze().values) == [WINDOWS[1]] + [WINDOWS[2]] * (len(epochs) - 1)


@pytest.mark.slow
def test_the_explorer_of_a_training_time_store_draws_its_series_and_marks_the_selected_epoch(sweep_store):
    """Issue 41: the explorer's training-time view: the memorized-share curves drawn (f_mem - f_fresh, tau_mem's
    measure on a store with the null) are training_timescales' values, one per n, and a line sits at the epoch the
    widget selects (moved by the widget)."""
    import holoviews as hv
    import panel as pn

    from ridgexr.explore import ExplorerData, explorer, training_view

    ds = sweep_store
    view = explorer(ds, max_samples=4)
    widgets = {w.label: w for w in view.select(pn.widgets.Widget)}
    assert "epoch" in widgets and "n_train" in widgets
    data = ExplorerData(ds, 4)
    expected = training_timescales(ds.sel(schedule="h", width=32), quality="quality_sliced_wasserstein").compute()
    for epoch in ds.epoch.values:
        pane = training_view(data, {"schedule": "h", "width": 32, "epoch": int(epoch), "n_train": 8})
        drawn = pane.object.traverse(lambda e: e, [hv.Curve])
        f_mem = [c for c in drawn if c.vdims[0].name == "f_mem_excess"]
        assert len(f_mem) == ds.sizes["n_train"]
        for c, n in zip(f_mem, ds.n_train.values):
            np.testing.assert_array_equal(c.dimension_values(1), expected["f_mem_excess"].sel(n_train=n).values)
        lines = pane.object.traverse(lambda e: e.data, [hv.VLine])
        assert float(epoch) in lines  # the selected epoch, in both panels
    # the widget drives the view: after selecting another epoch the line in the app's layout sits there

    def marked():
        layouts = [o.object for o in view.select(pn.pane.HoloViews) if isinstance(o.object, hv.Layout)]
        assert len(layouts) == 1
        return set(layouts[0].traverse(lambda e: e.data, [hv.VLine]))

    # besides the selected epoch, the lines are the reached taus of the curves (plot.training_time_curves)
    taus = {float(expected[k].sel(n_train=n)) for k in ("tau_gen", "tau_mem") for n in ds.n_train.values
            if not bool(expected[f"{k}_censored"].sel(n_train=n))}
    assert marked() == {float(ds.epoch.values[0])} | taus
    widgets["epoch"].value = int(ds.epoch.values[-1])
    assert marked() == {float(ds.epoch.values[-1])} | taus


def test_median_difference_ci_matches_a_brute_force_bootstrap_and_ignores_nans():
    """The kernel's medians and intervals equal a by-hand bootstrap with the same stream (a resampled, then b, per
    chunk); NaNs are dropped before resampling; leading axes broadcast (one null for several cells)."""
    from ridgexr.analysis.arrays import median_difference_ci

    rng = np.random.default_rng(5)
    a = rng.normal(2.0, 1.0, (3, 40))
    b = rng.normal(1.0, 1.0, 30)
    a[0, :4] = np.nan
    out = median_difference_ci(a, b[None], n_boot=300, chunk=100)
    assert out.shape == (3, 6)
    for i in range(3):
        x = a[i][np.isfinite(a[i])]
        r = np.random.default_rng(0)
        mx, dx = [], []
        for _ in range(3):
            bx = np.median(x[r.integers(0, x.size, size=(100, x.size))], axis=1)
            mx.append(bx)
            dx.append(bx - np.median(b[r.integers(0, b.size, size=(100, b.size))], axis=1))
        expect = [np.median(x), *np.quantile(np.concatenate(mx), [0.025, 0.975]),
                  np.median(x) - np.median(b), *np.quantile(np.concatenate(dx), [0.025, 0.975])]
        np.testing.assert_allclose(out[i], expect)
    assert np.isnan(median_difference_ci(np.full(5, np.nan), b)).all()
    assert np.isnan(median_difference_ci(a[1], np.full(4, np.nan))[3:]).all()


@pytest.mark.slow
def test_training_set_analyses_of_cells_held_together_match_the_per_cell_ones(sweep_store):
    """A block holding cells of several training sets (the store loaded into memory, or chunked across n_train)
    split its samples against the wrong sets' dims: by_train lined the sets' leading dims up with the samples'
    first dims, where apply_ufunc lines them up with the last (IndexError with an epoch dim before n_train).
    Loaded, and chunked across every cell, the analyses equal the per-cell lazy ones."""
    from ridgexr.analysis import memorization_fraction, near_mode_fraction, nearest_ratio_at, novelty  # noqa: F401

    ds = sweep_store
    cells = ds["cell_complete"].dims
    assert "epoch" in cells and "n_train" in cells and cells.index("epoch") < cells.index("n_train")
    lazy = ds.drop_vars("nearest_ratio")  # the d1/d2 computed from the trajectory against each cell's set
    expect = {"ratio": nearest_ratio_at(lazy).compute(), "near": near_mode_fraction(ds, r=0.5)["near_mode"].compute()}
    for view in (lazy.compute(), lazy.chunk({d: -1 for d in cells})):  # compute: a loaded copy (load would load
        # the variables this module's other tests share)
        got = {"ratio": nearest_ratio_at(view), "near": near_mode_fraction(view.assign(nearest_ratio=ds.nearest_ratio),
                                                                           r=0.5)["near_mode"]}
        for k, v in got.items():
            np.testing.assert_allclose(v.compute().transpose(*expect[k].dims).values, expect[k].values, rtol=1e-12)


@pytest.mark.slow
def test_the_summary_reads_slabs_of_cells_and_prints_the_per_cell_values(sweep_store):
    """The end-of-run summary reads the store in slabs of cells (a few tasks, not one per cell and variable):
    with a budget that puts several cells in a task the rows equal those read per cell (to rounding: a mean
    over a slab's samples sums in another order)."""
    import ridgexr.reader as reader

    ds = sweep_store
    path = ds.encoding["source"]
    opened = reader.check_complete_cells(reader.open_store(path), path)
    per_cell_bytes = 8 * ds.sizes["sample"] * ds.sizes["dim"]
    view = reader._slab_view(path, opened, budget=4 * per_cell_bytes * 8)
    assert max(max(c) for c in view["nearest_ratio"].chunks[:len(opened.cell_complete.dims)]) > 1  # slabs
    assert reader._slab_view(path, opened.isel(epoch=[0]), budget=1 << 30).sizes["epoch"] == 1  # a selection: as is
    slabs = reader.summarize(path, opened)
    cells = reader.summarize(path, opened, slab_bytes=0)  # one chunk per cell, as the store is opened
    assert len(slabs) == len(cells) == int(opened.cell_complete.size)
    for a, b in zip(slabs, cells):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(a[k], float):
                np.testing.assert_allclose(a[k], b[k], rtol=1e-12, equal_nan=True)
            else:
                assert a[k] == b[k], k


def test_the_between_modes_share_of_analyses_timescales_counts_samples_against_the_law():
    """analyses/timescales.py's look at a mixture store's samples: the share of final samples within half-way to a
    mean along the means' axis, against a direct count; a blob at the origin scores 1, draws of the law ~8 % in
    d = 8 (Phi(-sqrt 8 / 2 + ...) for both components: computed here from the normal CDF)."""
    import json
    import sys
    from pathlib import Path

    from scipy import stats

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyses"))
    import timescales as script  # analyses/timescales.py

    rng = np.random.default_rng(0)
    d, mean, S = 8, 1.0, 20000
    signs = rng.choice([-1.0, 1.0], size=S)
    law = signs[:, None] * mean + rng.standard_normal((S, d))
    blob = 0.01 * rng.standard_normal((S, d))
    traj = np.stack([law, blob])[:, None, :, None, :] * 0.5  # (epoch, n_train, sample, step, dim), alpha 0.5
    ds = xr.Dataset({"trajectory": (("epoch", "n_train", "sample", "step", "dim"), traj),
                     "population_data": (("population", "dim"), law)},
                    coords={"epoch": [10, 20], "n_train": [64], "step": [0], "alpha": ("step", [0.5])},
                    attrs={"config": json.dumps({"dataset": {"mixture": {"dim": d, "mean": mean}}})})
    rows = script.between_modes_rows(ds, [10, 20])
    half = mean * np.sqrt(d) / 2
    direct = np.mean(np.abs(law @ (np.ones(d) / np.sqrt(d))) < half)
    # |N(sqrt(d) mean, 1)| < sqrt(d) mean / 2 for either sign: Phi(-half) - Phi(-3 half)
    closed = stats.norm.cdf(-half) - stats.norm.cdf(-3 * half)
    assert abs(direct - closed) < 0.01
    assert rows["n = 64"].tolist() == [f"{direct:.2f}", f"{direct:.2f}", "1.00"]
    assert script.between_modes_rows(ds.assign_attrs(config=json.dumps({"dataset": {"points": "two-points"}})),
                                     [10]) is None


def test_the_window_tables_of_analyses_timescales_name_each_n_once():
    """analyses/timescales.py's window and difference tables put the smallest and largest n side by side, and an
    entry of one n once: its column is "window (n = 64)" and its cells hold one value each, read from the window."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyses"))
    import timescales as script  # analyses/timescales.py

    names = ("ridge_distance", "tangential_distance", "nearest_distance", "near_mode", "memorized")

    def window(ns):
        rng = np.random.default_rng(len(ns))
        cells = {name: (("epoch", "n_train"), rng.uniform(size=(2, len(ns)))) for name in names}
        nulls = {f"null_{name}": (("n_train",), rng.uniform(size=len(ns))) for name in names}
        diffs = {f"{name}_minus_null{k}": (("epoch", "n_train"), rng.uniform(size=(2, len(ns))))
                 for name in names[:3] for k in ("", "_low", "_high")}
        win = (("epoch", "n_train"), np.array([["generalizing"] * len(ns), ["memorizing"] * len(ns)]))
        return xr.Dataset({**cells, **nulls, **diffs, "window": win}, coords={"epoch": [10, 20], "n_train": ns})

    one = window([64])
    rows = script.window_rows(one, [10, 20])
    assert "window (n = 64)" in rows.columns
    assert rows["window (n = 64)"].tolist() == ["generalizing", "memorizing", ""]
    assert rows["f_mem"].iloc[1] == f"{float(one.memorized.sel(epoch=20, n_train=64)):.3f}"
    diff = script.difference_rows(one, [10])
    assert list(diff.columns) == ["checkpoint"] + [f"{c} - null (n = 64)" for c in
                                                   ("ridge distance", "tangential distance", "nearest distance")]
    two = window([16, 256])
    rows = script.window_rows(two, [20])
    assert rows["window (n = 16 / 256)"].tolist() == ["memorizing / memorizing", ""]
    assert rows["ridge distance"].iloc[0] == " / ".join(f"{float(v):.3g}" for v in two.ridge_distance.sel(epoch=20))


def test_axis_quality_of_a_store_is_the_kernel_per_cell_and_feeds_rule_null(sweep_store):
    """ds.ridge.axis_quality: lazy, each cell the kernel on its last state over alpha against population_data
    along population_data's principal axis, the null the kernel on fresh draws; merged into the store it is a
    quality training_timescales reads with its interval and the null's."""
    from ridgexr.datasets import fresh_law_draws
    from ridgexr.quality import AXIS_QUALITY, axis_wasserstein, principal_axis

    ds = sweep_store
    q = ds.ridge.axis_quality(n_boot=50, seed=3)
    assert q[AXIS_QUALITY].chunks is not None  # lazy until asked
    q = q.compute()
    pop = ds["population_data"].values
    u = principal_axis(pop)
    last = ds.isel(step=-1)
    for e in ds.epoch.values:
        for n in ds.n_train.values:
            x = last["trajectory"].sel(epoch=e, n_train=n).squeeze().transpose("sample", "dim").values
            want = axis_wasserstein(x / float(last["alpha"]), pop, u, n_boot=50, seed=3)
            got = q.sel(epoch=e, n_train=n).squeeze()
            np.testing.assert_allclose([float(got[AXIS_QUALITY]), float(got[f"{AXIS_QUALITY}_lower"]),
                                        float(got[f"{AXIS_QUALITY}_upper"]),
                                        float(got[f"{AXIS_QUALITY}_n_finite"])], want, rtol=1e-12)
    exp = ridgexr.catalog.Experiment.model_validate_json(ds.attrs["config"])
    null = axis_wasserstein(fresh_law_draws(exp.dataset, ds.sizes["sample"]), pop, u, n_boot=50, seed=3)
    assert float(q[f"{AXIS_QUALITY}_null_upper"]) == pytest.approx(null[2], rel=1e-12)
    tt = training_timescales(ds.merge(q), quality=AXIS_QUALITY, rule="null", factor=2.0, n_boot=20).compute()
    hi, n_hi = q[f"{AXIS_QUALITY}_upper"], float(q[f"{AXIS_QUALITY}_null_upper"])
    for n in ds.n_train.values:
        sure = (hi.sel(n_train=n).squeeze() <= 2 * n_hi).values
        first = ds.epoch.values[np.argmax(sure)] if sure[:-1].any() else ds.epoch.values[-1]
        assert float(tt["tau_gen"].sel(n_train=n).squeeze()) == first
    with pytest.raises(ValueError, match="population_data"):
        ds.drop_vars("population_data").ridge.axis_quality()
    with pytest.raises(ValueError, match="n_boot"):
        ds.ridge.axis_quality(n_boot=0)


@pytest.mark.parametrize("design, channels", [("timescales-unet", [8, 16, 16]), ("timescales-unet-full", [16, 32, 32])])
def test_the_unet_entries_are_one_design_on_three_seeds_sized_for_two_cores(design, channels):
    """Each U-Net design and its seed1 / seed2 replicates: identical but for their seeds (distinct) and stores; five n
    over a 16x range; 512 final samples per checkpoint; at least 8 checkpoints in every decade from 100 steps to the
    end; the final state alone stored, without ridge observation; tau_gen's rule registered; the planner's estimate
    of the three together within 8 hours on 2 cores.  The -large variant reaches n = 2 048."""
    import ridgexr
    from ridgexr.datasets import training_shape
    from ridgexr.run.plan import estimate_stage_seconds

    cat = ridgexr.open_catalog()
    names = (design, f"{design}-seed1", f"{design}-seed2")
    exps = [cat[name] for name in names]
    assert exps[0].model.block_out_channels == channels
    strip = {"name", "source", "seeds", "store", "description"}
    assert all(e.model_dump(exclude=strip) == exps[0].model_dump(exclude=strip) for e in exps[1:])
    assert len({(e.seeds.init, e.seeds.training, e.seeds.sampler) for e in exps}) == 3
    n = exps[0].dataset.n_train
    assert len(n) >= 4 and max(n) / min(n) >= 16
    assert exps[0].n_samples >= 512
    epochs = np.array(exps[0].model.epoch_list, dtype=float)
    starts = epochs[(epochs >= 100) & (epochs * 10 <= epochs[-1] * 1.0001)]
    assert all(((epochs >= e) & (epochs < 10 * e)).sum() >= 8 for e in starts)
    assert exps[0].ridge.observe is False and exps[0].sampler.record_every == exps[0].process.n_steps
    assert exps[0].timescales.quality == "quality_frechet" and exps[0].timescales.rule == "null"
    shape = training_shape(exps[0].dataset, base_dir=exps[0].base_dir)
    total = sum(sum(estimate_stage_seconds(e, shape).values()) for e in exps)
    assert total <= 8 * 3600
    # it runs in pieces of one n (ridgexr run --cells n_train=N), each planned within 2 h, together the whole
    pieces = [estimate_stage_seconds(exps[0], shape, cells={"n_train": [m]}) for m in n]
    assert max(sum(p.values()) for p in pieces) <= 2 * 3600
    assert sum(sum(p.values()) for p in pieces) == pytest.approx(total / 3, rel=1e-12)
    assert max(cat["timescales-unet-large"].dataset.n_train) >= 2048
