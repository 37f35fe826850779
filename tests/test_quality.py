"""Sample quality: Frechet distance, nearest ratio, class share, coverage, the gate (its decision size against a
brute-force enumeration, its controls by simulation), the classifier and image_quality."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom, binomtest

from ridgexr.datasets import images as images_mod
from ridgexr.datasets import load_images
from ridgexr.quality import (GATE, GATE_DRAWS, cached_classifier, class_share, coverage, decision_size,
                             draw_measures, expected_coverage, frechet_distance, frechet_from_moments, gate_design,
                             gate_power, gate_reference, gate_seed, gate_verdict, heldout_reals, image_quality,
                             knn_radii, nearest_ratio, point_quality)
from ridgexr.quality.pixel_quality import N_REFERENCE
from ridgexr.quality import classifier as classifier_mod

FASHION = images_mod.DEBIAN_DATASETS / "fashion-mnist"
needs_fashion = pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").is_file(),
                                   reason="Debian package dataset-fashion-mnist not installed "
                                          "(apt-get install dataset-fashion-mnist)")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The module's small convolutions on one torch thread (restored after): training the test classifier
    took 4-8 s on one thread and 16-19 s on two on the shared 2-core machine (load ~6)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------- Frechet
def _frechet_scipy(x, y):
    """The textbook formula with scipy's general matrix square root of C_x C_y."""
    mx, my = x.mean(0), y.mean(0)
    cx, cy = np.atleast_2d(np.cov(x, rowvar=False, ddof=1)), np.atleast_2d(np.cov(y, rowvar=False, ddof=1))
    root = scipy.linalg.sqrtm(cx @ cy).real
    return float(((mx - my) ** 2).sum() + np.trace(cx + cy - 2 * root))


@given(n=st.integers(8, 40), m=st.integers(8, 40), k=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_frechet_distance_matches_scipy_sqrtm(n, m, k, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, k)) @ rng.normal(size=(k, k))
    y = rng.normal(size=(m, k)) * rng.uniform(0.5, 2, size=k) + rng.normal(size=k)
    d = frechet_distance(x, y)
    assert d >= 0
    assert d == pytest.approx(_frechet_scipy(x, y), rel=1e-6, abs=1e-8)
    assert d == pytest.approx(frechet_distance(y, x), rel=1e-8, abs=1e-10)  # symmetric


def test_frechet_of_isotropic_gaussians_is_the_closed_form():
    # N(mu1, s1^2 I) vs N(mu2, s2^2 I) in k dims: |mu1 - mu2|^2 + k (s1 - s2)^2
    k, mu1, mu2 = 5, np.arange(5.0), np.full(5, 0.5)
    d = frechet_from_moments(mu1, 0.25 * np.eye(k), mu2, 9.0 * np.eye(k))
    assert d == pytest.approx(((mu1 - mu2) ** 2).sum() + k * (0.5 - 3.0) ** 2, rel=1e-12)


def test_frechet_is_zero_for_identical_sets_and_handles_rank_deficient_covariances():
    x = np.random.default_rng(1).normal(size=(5, 20))  # 5 points in 20 dims: covariance of rank 4
    assert frechet_distance(x, x) == pytest.approx(0.0, abs=1e-9)
    # the zero eigenvalues of C^{1/2} C C^{1/2} come out ~1e-16 and their square roots ~1e-8 each
    assert frechet_distance(x, x + 2.0) == pytest.approx(4.0 * 20, abs=1e-5)


def test_frechet_checks_name_the_argument():
    with pytest.raises(ValueError, match="`y`"):
        frechet_distance(np.zeros((4, 3)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="`x`"):
        frechet_distance(np.zeros((1, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="`cov2`"):
        frechet_from_moments(np.zeros(2), np.eye(2), np.zeros(2), np.eye(3))


# ------------------------------------------------------------------------------------- nearest ratio
def _brute_ratio(samples, reals, train):
    def nearest(p):
        best = math.inf
        for q in train:
            best = min(best, math.sqrt(sum((a - b) ** 2 for a, b in zip(p, q))))
        return best

    return float(np.median([nearest(p) for p in samples]) / np.median([nearest(p) for p in reals]))


def test_nearest_ratio_matches_a_double_loop_and_leaves_out_diverged_samples():
    rng = np.random.default_rng(3)
    train, reals, samples = rng.normal(size=(15, 3)), rng.normal(size=(9, 3)), 1.7 * rng.normal(size=(11, 3))
    ratio, lo, hi = nearest_ratio(samples, reals, train, n_boot=200)
    assert ratio == pytest.approx(_brute_ratio(samples, reals, train), rel=1e-12)
    assert lo <= ratio <= hi
    diverged = np.concatenate([samples, np.full((3, 3), np.nan), [[np.inf, 0, 0]]])
    assert nearest_ratio(diverged, reals, train, n_boot=200) == (ratio, lo, hi)
    assert all(math.isnan(v) for v in nearest_ratio(np.full((2, 3), np.nan), reals, train))


def test_nearest_ratio_interval_contains_the_estimate_and_narrows_with_more_points():
    rng = np.random.default_rng(4)
    train = rng.normal(size=(300, 2))
    intervals = []
    for n in (40, 1000):
        ratio, lo, hi = nearest_ratio(rng.normal(size=(n, 2)), rng.normal(size=(n, 2)), train, n_boot=400, seed=1)
        assert lo <= ratio <= hi
        intervals.append((lo, hi))
    assert intervals[1][1] - intervals[1][0] < 0.5 * (intervals[0][1] - intervals[0][0])
    assert intervals[1][0] < 1 < intervals[1][1]  # samples of the training law: the reference value 1 is inside
    copies = train[:50] + 1e-3 * rng.normal(size=(50, 2))  # memorized: far below 1
    assert nearest_ratio(copies, rng.normal(size=(50, 2)), train, n_boot=100)[2] < 0.2


def test_nearest_ratio_checks_its_arguments():
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="`reals`"):
        nearest_ratio(x, np.zeros((4, 3)), x)
    with pytest.raises(ValueError, match="`train`"):
        nearest_ratio(x, x, np.full((4, 2), np.nan))
    with pytest.raises(ValueError, match="`ci`"):
        nearest_ratio(x, x, x, ci=1.0)
    with pytest.raises(TypeError, match="`n_boot`"):
        nearest_ratio(x, x, x, n_boot=10.0)


# -------------------------------------------------------------------------------------- class share
@pytest.mark.parametrize("k, n", [(0, 7), (3, 4), (37, 50), (50, 50)])
def test_class_share_is_a_direct_count_with_scipys_wilson_interval(k, n):
    rng = np.random.default_rng(k)
    predicted = rng.permutation(np.r_[rng.choice([2, 5], size=k), rng.choice([0, 1, 7], size=n - k)])
    share, lo, hi = class_share(predicted, [2, 5], ci=0.9)
    want = binomtest(k, n).proportion_ci(confidence_level=0.9, method="wilson")
    assert share == k / n
    assert (lo, hi) == pytest.approx((want.low, want.high), abs=1e-12)


def test_class_share_of_no_sample_is_nan_and_bad_input_names_the_argument():
    assert all(math.isnan(v) for v in class_share(np.zeros(0, dtype=int), [0]))
    with pytest.raises(ValueError, match="`predicted`"):
        class_share(np.array([0.5, 1.0]), [0])
    with pytest.raises(ValueError, match="`classes`"):
        class_share(np.array([0, 1]), [])


# --------------------------------------------------------------------------------------------- gate
def _joint(n, m, p0, p1):
    """The pmf of every (X, Y), X ~ Bin(n, p) the draws in the classes (p0: a perfect sampler, p1: 20 % off-class),
    Y ~ Bin(m, p0) the held-out reals there, and D = Y / m - X / n: how far the share falls below the recall."""
    x, y = np.arange(n + 1)[:, None], np.arange(m + 1)[None, :]
    d = (y / m - x / n).ravel()
    return d, (binom.pmf(x, n, p0) * binom.pmf(y, m, p0)).ravel(), (binom.pmf(x, n, p1) * binom.pmf(y, m, p0)).ravel()


def _least_margin_power(n, m, p0, p1, alpha):
    """By enumeration: the least margin at which a perfect sampler fails (D > margin) with probability <= alpha, and
    the probability that the alternative passes (D <= margin) there."""
    d, w0, w1 = _joint(n, m, p0, p1)
    values = np.unique(d)  # every value D takes, ascending
    above = w0.sum() - np.cumsum(np.bincount(np.searchsorted(values, d), weights=w0, minlength=len(values)))
    margin = values[np.flatnonzero(above <= alpha)[0]]  # P(D > margin) <= alpha at the least such value
    return margin, w1[d <= margin + 1e-12].sum()


@pytest.mark.parametrize("recall, offclass, m", [(0.865, 0.142, 750), (0.686, 0.096, 750), (0.91, 0.002, 300),
                                                 (0.75, 0.3, 1000)])
def test_the_decision_size_is_the_least_n_that_separates_a_perfect_sampler_from_20_percent_off_class(recall, offclass,
                                                                                                    m):
    """gate_design against a brute-force enumeration of the joint law of (draws in the classes, held-out reals in
    the classes): at its n the perfect sampler fails <= alpha and the 20 %-off-class sampler passes <= beta; at
    every smaller n (down to n - 8) the least margin that keeps alpha lets the alternative pass more than beta."""
    d = gate_design(recall, offclass, m)
    p1 = 0.8 * recall + 0.2 * offclass
    assert d.alternative == pytest.approx(p1) and d.share_min == pytest.approx(recall - d.margin)
    dd, w0, w1 = _joint(d.n, m, recall, p1)
    fail, passes = w0[dd > d.margin + 1e-12].sum(), w1[dd <= d.margin + 1e-12].sum()
    assert (fail, passes) == pytest.approx((d.false_fail, d.false_pass), abs=1e-9)
    assert fail <= GATE["alpha"] and passes <= GATE["beta"]
    assert _least_margin_power(d.n, m, recall, p1, GATE["alpha"])[0] == pytest.approx(d.margin, abs=1e-9)
    for n in range(max(1, d.n - 8), d.n):
        assert _least_margin_power(n, m, recall, p1, GATE["alpha"])[1] > GATE["beta"], n
    assert gate_design(0.5, 0.6, 750) is None  # off-class reals land in the classes more often: no size separates


def test_the_decision_size_of_t_shirts_with_the_cached_classifiers_confusion_is_about_a_hundred():
    """The measured confusion of the cached classifier (docs/quality.md): T-shirt/top recall 0.86 on 750 held-out
    reals, Shirts put there at 0.142: about 100 draws, not 16; every class without an off-class law: 64."""
    assert decision_size(0.86, 0.142, 750) == gate_design(0.86, 0.142, 750).n == 99
    assert decision_size(0.973, 0.002, 750) == GATE["min_draws"] == 64  # the share alone would need 26
    assert decision_size(1.0, math.nan, 9750) == decision_size() == 64
    assert decision_size(0.86, 0.142, None) is None
    assert GATE_DRAWS >= decision_size(0.6827, 0.096, 750)  # Shirt, the least recall


def test_coverage_and_the_knn_radii_are_a_double_loop():
    rng = np.random.default_rng(3)
    ref, s = rng.normal(size=(30, 3)), rng.normal(size=(12, 3))
    dist = np.array([[np.linalg.norm(a - b) for b in ref] for a in ref])
    radii = np.array([sorted(dist[i, np.arange(30) != i])[3] for i in range(30)])
    np.testing.assert_allclose(knn_radii(ref, k=4), radii, rtol=1e-12)
    covered = [any(np.linalg.norm(p - ref[j]) < radii[j] for p in s) for j in range(30)]
    assert coverage(s, ref, radii) == np.mean(covered)
    assert math.isnan(coverage(np.zeros((0, 3)), ref, radii))


@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 40), m=st.integers(8, 40), k=st.integers(1, 5), dim=st.integers(1, 4))
def test_expected_coverage_is_what_fresh_draws_cover_on_average(n, m, k, dim):
    """The closed form against 400 Monte-Carlo replicates of fresh draws (a Gaussian law, whatever its
    dimension): within 4 standard errors."""
    rng = np.random.default_rng([n, m, k, dim])
    got = []
    for _ in range(400):  # replicates of a small reference and sample
        ref, s = rng.normal(size=(m, dim)), rng.normal(size=(n, dim))
        got.append(coverage(s, ref, knn_radii(ref, k)))
    got = np.array(got)
    se = got.std() / np.sqrt(len(got)) + 1e-3
    assert abs(got.mean() - expected_coverage(n, m, k)) < 4 * se


def test_gate_bounds_are_inclusive_and_image_cells_need_their_decision_size():
    assert GATE["nearest_ratio_max"] == 1.5 and GATE["coverage_min"] == 0.7
    assert gate_verdict(nearest_ratio=1.5) == "generates"  # point sets: the ratio alone, at any size
    assert gate_verdict(nearest_ratio=np.nextafter(1.5, 2)) == gate_verdict(nearest_ratio=math.inf) \
        == "does not generate"
    assert gate_verdict() == gate_verdict(math.nan, math.nan) == gate_verdict(None, np.float64("nan")) \
        == "not assessed"
    d = gate_design(0.86, 0.142, 750)
    m = dict(class_share_heldout=0.86, class_share_offclass=0.142, n_heldout=750, n_draws=320, coverage=0.7,
             coverage_null=1.0)
    assert gate_verdict(d.share_min, 1.5, **m) == "generates"  # every bound inclusive
    assert gate_verdict(np.nextafter(d.share_min, 0), 1.0, **m) == "does not generate"
    assert gate_verdict(0.9, 1.0, **m | {"coverage": np.nextafter(0.7, 0)}) == "does not generate"
    assert gate_verdict(0.9, 1.0, **m | {"n_draws": d.n - 1}) == "not assessed"  # below the decision size
    assert gate_verdict(0.5, 1.0, **m | {"n_draws": d.n - 1}) == "does not generate"  # a failing term decides
    assert gate_verdict(0.9, 1.0, **m | {"n_draws": None}) == "not assessed"  # a store before the gate's draws
    every = m | {"class_share_offclass": math.nan, "n_draws": 64}  # every class: no off-class law, 64 draws
    assert gate_verdict(0.2, 1.0, **every) == "generates"
    assert gate_verdict(0.2, 1.0, **every | {"n_draws": 63}) == "not assessed"
    with pytest.raises(ValueError, match="`class_share`"):
        gate_verdict(1.2, 1.0)
    with pytest.raises(ValueError, match="`nearest_ratio`"):
        gate_verdict(0.9, -1.0)
    with pytest.raises(TypeError, match="`nearest_ratio`"):
        gate_verdict(0.9, "1.0")


def test_gate_seeds_are_distinct_streams():
    seeds = {gate_seed(s, b) for s in range(4) for b in range(10)}
    assert len(seeds) == 40 and all(0 <= v < 2**63 for v in seeds)


# ------------------------------------------------------------------------------------- point sets
def test_point_quality_fresh_draws_pass_and_a_shifted_sampler_fails():
    rng = np.random.default_rng(5)
    train, fresh = rng.normal(size=(200, 2)), rng.normal(size=(600, 2))
    good = point_quality(np.r_[rng.normal(size=(150, 2)), np.full((5, 2), np.nan)], train, fresh, n_boot=200)
    assert (good["n_draws"], good["n_finite"]) == (155.0, 150.0)
    assert good["gate"] == "generates"
    assert good["nearest_ratio_lower"] < 1 < good["nearest_ratio_upper"]
    assert good["sliced_wasserstein"] < 3 * good["sliced_wasserstein_null"]
    bad = point_quality(rng.normal(size=(150, 2)) * 0.3 + 4.0, train, fresh, n_boot=200)
    assert bad["gate"] == "does not generate" and bad["nearest_ratio"] > 3
    assert bad["sliced_wasserstein"] > 10 * bad["sliced_wasserstein_null"]
    with pytest.raises(ValueError, match="`fresh`"):
        point_quality(rng.normal(size=(150, 2)), train, fresh[:150])


# ----------------------------------------------------------------------- classifier, image_quality
@needs_fashion
def test_small_classifier_is_well_above_chance_has_64_features_and_is_cached(fashion_classifier, monkeypatch):
    small = fashion_classifier
    settings_ = {k: small.config[k] for k in ("n_train", "epochs", "batch_size")}
    assert small.test_accuracy > 0.6  # chance: 0.1
    assert small.path.is_file()
    x, y = heldout_reals(classes=[1, 8])
    assert x.shape == (2000, 784) and set(y.tolist()) == {1, 8} and -1 <= x.min() < x.max() <= 1
    feats = small.features(x[:300])
    assert feats.shape == (300, 64) and feats.dtype == np.float32 and (feats >= 0).all()  # ReLU activations
    assert (small.predict(x) == y).mean() > 0.6
    f, p = small.features_and_predictions(x[:300])
    np.testing.assert_array_equal(f, feats)
    np.testing.assert_array_equal(p, small.predict(x[:300]))
    mtime = small.path.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("the cached classifier was trained again")

    monkeypatch.setattr(classifier_mod, "train_classifier", no_training)
    again = cached_classifier(**settings_, directory=small.path.parent)
    assert again.path == small.path and again.path.stat().st_mtime_ns == mtime
    assert again.test_accuracy == small.test_accuracy
    np.testing.assert_array_equal(again.features(x[:50]), small.features(x[:50]))
    with pytest.raises(AssertionError, match="trained again"):  # other settings: another key, trained
        cached_classifier(**{**settings_, "epochs": 1}, directory=small.path.parent)


@needs_fashion
def test_classifier_training_is_deterministic():
    x, y, _, _ = load_images("fashion-mnist", n=300, scale="symmetric")
    state = torch.random.get_rng_state()
    a = classifier_mod.train_classifier(x, y, epochs=1, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's generator is left alone
    b = classifier_mod.train_classifier(x, y, epochs=1, seed=3)
    np.testing.assert_array_equal(a.features(x[:20]), b.features(x[:20]))
    assert a.key == b.key


#: the class of the image tests (Trouser: the small classifier's recall 0.91)
CLASS = 1


@pytest.fixture(scope="module")
def one_class(fashion_classifier):
    """A one-class cell: the first 1 500 training images of CLASS (file order), the whole test split and the gate's
    reference for CLASS."""
    train, _, _, _ = load_images("fashion-mnist", classes=[CLASS], n=1500, scale="symmetric")
    x, y = heldout_reals()
    return train, x, y, gate_reference(fashion_classifier, x, y, [CLASS])


@needs_fashion
def test_the_reference_splits_the_test_images_of_the_classes_and_measures_the_confusion(fashion_classifier,
                                                                                       one_class):
    _, x, y, ref = one_class
    assert len(ref.reals) == 1000 and len(ref.reference_index) == N_REFERENCE == 250 and ref.n_heldout == 750
    assert not set(ref.reference_index.tolist()) & set(ref.pool_index.tolist())
    assert set(ref.reference_index.tolist()) | set(ref.pool_index.tolist()) == set(range(1000))
    pred = fashion_classifier.predict(x)
    assert ref.recall == np.mean(pred[y == CLASS][ref.pool_index] == CLASS)
    assert ref.offclass == max(np.mean(pred[y == c] == CLASS) for c in range(10) if c != CLASS)
    assert np.isnan(gate_reference(fashion_classifier, x, y).offclass)  # every class: no off-class law


@needs_fashion
def test_the_gate_fails_mean_copies_and_off_class_draws_and_passes_held_out_reals_at_its_decision_size(one_class):
    """The controls, by simulation at the decision size (400 replicates each): held-out reals of the class pass
    at least 95 % of the time, a sampler with 20 % of its draws from the most confusable other class (or from the
    other classes at random) fails at least 95 % of the time, and copies of the class mean and class-mean-plus-noise
    blobs fail.  The gate before (class share >= 0.8, nearest ratio <= 1.5) passed the mean's copies."""
    train, x, y, ref = one_class
    power = gate_power(ref, train, x, y, n_rep=400, seed=1)
    assert power["n"] == decision_size(ref.recall, ref.offclass, ref.n_heldout) >= GATE["min_draws"]
    assert power["perfect"] >= 0.95 * power["perfect_reps"]
    assert power["off_class"] <= 0.05 * power["off_class_reps"]
    assert power["off_class_mixed"] <= 0.05 * power["off_class_mixed_reps"]
    assert power["mean_copies"] == power["crude"] == 0
    copies = image_quality(np.repeat(train.mean(0, keepdims=True), 256, 0), train=train, classes=[CLASS],
                           classifier=ref.classifier, reference=ref, n_boot=50)
    assert copies["gate"] == "does not generate"
    assert copies["coverage"] < 0.1 * copies["coverage_null"]  # the diversity term fails them
    assert copies["class_share"] >= 0.8 and copies["nearest_ratio"] <= 1.5  # what the gate before read


@needs_fashion
def test_draw_measures_is_what_image_quality_computes_from_the_images(one_class):
    """The simulation's shortcut (per-image features, labels and nearest distances, computed once) is the
    measure of the images themselves."""
    train, x, y, ref = one_class
    rng = np.random.default_rng(2)
    rows = rng.choice(ref.pool_index, 100, replace=False)
    samples = np.r_[ref.reals[rows], x[y == 6][:20], np.full((3, 784), np.nan)]  # reals, shirts, diverged
    q = image_quality(samples, train=train, classes=[CLASS], classifier=ref.classifier, reference=ref, n_boot=50)
    finite = samples[:120]
    near_s = np.array([np.linalg.norm(train - p, axis=1).min() for p in finite])
    near_r = np.array([np.linalg.norm(train - p, axis=1).min() for p in ref.reals])
    k = int((ref.classifier.predict(finite) == CLASS).sum())
    m = draw_measures(ref, ref.classifier.features(finite), k, 123, near_s, near_r)
    for key, value in m.items():
        assert q[key] == (value if key == "gate" else pytest.approx(value, rel=1e-9, nan_ok=True)), key
    assert (q["n_draws"], q["n_finite"]) == (123.0, 120.0) and q["class_share"] == k / 123  # diverged: outside


@needs_fashion
def test_the_frechet_floor_and_the_coverage_do_not_depend_on_the_training_set_size(one_class):
    """The reference is the test split, not the cell's training images: the same draws against 100 or 1 500
    training images score the same Fréchet distance, floor, ceiling and coverage; only the nearest ratio moves."""
    train, _, _, ref = one_class
    draws = ref.reals[ref.pool_index[:320]]
    small, large = (image_quality(draws, train=t, classes=[CLASS], classifier=ref.classifier, reference=ref,
                                  n_boot=50) for t in (train[:100], train))
    for key in ("frechet", "frechet_floor", "frechet_ceiling", "coverage", "coverage_null", "class_share"):
        assert small[key] == large[key], key
    assert small["nearest_ratio"] != large["nearest_ratio"]
    assert large["gate"] == "generates" and abs(large["nearest_ratio"] - 1) < 0.1
    assert large["frechet"] < large["frechet_floor"] + 0.25 * (large["frechet_ceiling"] - large["frechet_floor"])


@needs_fashion
def test_class_mean_plus_noise_fails_the_gate_by_the_nearest_ratio(one_class):
    train, _, _, ref = one_class
    rng = np.random.default_rng(0)
    crude = np.clip(train.mean(0) + train.std(0) * rng.standard_normal((320, 784)), -1, 1)
    q = image_quality(crude, train=train, classes=[CLASS], classifier=ref.classifier, reference=ref, n_boot=100)
    assert q["gate"] == "does not generate" and q["nearest_ratio"] > GATE["nearest_ratio_max"]
    assert q["frechet"] > q["frechet_floor"] + 0.5 * (q["frechet_ceiling"] - q["frechet_floor"])
    with pytest.raises(ValueError, match="`reference`"):
        image_quality(crude, train=train, classes=[CLASS, 0], classifier=ref.classifier, reference=ref)
