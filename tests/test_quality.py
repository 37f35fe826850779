"""Sample quality: Frechet distance, nearest ratio, class share, the gate, the classifier and image_quality."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from ridgexr.datasets import images as images_mod
from ridgexr.datasets import load_images
from ridgexr.quality import (GATE, cached_classifier, class_share, frechet_distance, frechet_from_moments,
                             gate_verdict, heldout_reals, image_quality, nearest_ratio, point_quality)
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
def test_gate_bounds_are_inclusive_and_missing_measures_are_not_assessed():
    lo_share, hi_ratio = GATE["class_share_min"], GATE["nearest_ratio_max"]
    assert (lo_share, hi_ratio) == (0.8, 1.5)
    assert gate_verdict(0.8, 1.5) == "generates"
    assert gate_verdict(np.nextafter(0.8, 0), 1.0) == "does not generate"
    assert gate_verdict(0.95, np.nextafter(1.5, 2)) == "does not generate"
    assert gate_verdict(0.5, 3.0) == "does not generate"
    assert gate_verdict(nearest_ratio=1.5) == "generates"  # point sets: the ratio alone
    assert gate_verdict(nearest_ratio=math.inf) == "does not generate"
    assert gate_verdict(class_share=0.9) == "generates"
    assert gate_verdict() == gate_verdict(math.nan, math.nan) == gate_verdict(None, np.float64("nan")) \
        == "not assessed"
    assert gate_verdict(math.nan, 2.0) == "does not generate"
    with pytest.raises(ValueError, match="`class_share`"):
        gate_verdict(1.2, 1.0)
    with pytest.raises(ValueError, match="`nearest_ratio`"):
        gate_verdict(0.9, -1.0)
    with pytest.raises(TypeError, match="`nearest_ratio`"):
        gate_verdict(0.9, "1.0")


# ------------------------------------------------------------------------------------- point sets
def test_point_quality_fresh_draws_pass_and_a_shifted_sampler_fails():
    rng = np.random.default_rng(5)
    train, fresh = rng.normal(size=(200, 2)), rng.normal(size=(600, 2))
    good = point_quality(np.r_[rng.normal(size=(150, 2)), np.full((5, 2), np.nan)], train, fresh, n_boot=200)
    assert (good["n_samples"], good["n_finite"]) == (155.0, 150.0)
    assert good["gate"] == "generates"
    assert good["nearest_ratio_lower"] < 1 < good["nearest_ratio_upper"]
    assert good["sliced_wasserstein"] < 3 * good["sliced_wasserstein_null"]
    bad = point_quality(rng.normal(size=(150, 2)) * 0.3 + 4.0, train, fresh, n_boot=200)
    assert bad["gate"] == "does not generate" and bad["nearest_ratio"] > 3
    assert bad["sliced_wasserstein"] > 10 * bad["sliced_wasserstein_null"]
    with pytest.raises(ValueError, match="`fresh`"):
        point_quality(rng.normal(size=(150, 2)), train, fresh[:150])


# ----------------------------------------------------------------------- classifier, image_quality
#: the test classifier: the first 3 000 training images, 2 epochs of batches of 64 (~3 s on one thread; test
#: accuracy 0.79, recall of Trouser 0.91; of T-shirt/top only 0.50-0.86 over seeds, hence class 1 below)
SMALL = dict(n_train=3000, epochs=2, batch_size=64)
CLASS = 1


@pytest.fixture(scope="module")
def small_classifier(tmp_path_factory):
    """The small test classifier, cached in a temporary folder."""
    folder = tmp_path_factory.mktemp("classifier-cache")
    return cached_classifier(**SMALL, directory=folder)


@needs_fashion
def test_small_classifier_is_well_above_chance_has_64_features_and_is_cached(small_classifier, monkeypatch):
    assert small_classifier.test_accuracy > 0.6  # chance: 0.1
    assert small_classifier.path.is_file()
    x, y = heldout_reals(classes=[1, 8])
    assert x.shape == (2000, 784) and set(y.tolist()) == {1, 8} and -1 <= x.min() < x.max() <= 1
    feats = small_classifier.features(x[:300])
    assert feats.shape == (300, 64) and feats.dtype == np.float32 and (feats >= 0).all()  # ReLU activations
    assert (small_classifier.predict(x) == y).mean() > 0.6
    mtime = small_classifier.path.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("the cached classifier was trained again")

    monkeypatch.setattr(classifier_mod, "train_classifier", no_training)
    again = cached_classifier(**SMALL, directory=small_classifier.path.parent)
    assert again.path == small_classifier.path and again.path.stat().st_mtime_ns == mtime
    assert again.test_accuracy == small_classifier.test_accuracy
    np.testing.assert_array_equal(again.features(x[:50]), small_classifier.features(x[:50]))
    with pytest.raises(AssertionError, match="trained again"):  # other settings: another key, trained
        cached_classifier(**{**SMALL, "epochs": 1}, directory=small_classifier.path.parent)


@needs_fashion
def test_classifier_training_is_deterministic():
    x, y, _, _ = load_images("fashion-mnist", n=300, scale="symmetric")
    state = torch.random.get_rng_state()
    a = classifier_mod.train_classifier(x, y, epochs=1, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's generator is left alone
    b = classifier_mod.train_classifier(x, y, epochs=1, seed=3)
    np.testing.assert_array_equal(a.features(x[:20]), b.features(x[:20]))
    assert a.key == b.key


@pytest.fixture(scope="module")
def one_class():
    """A one-class cell: the first 1 500 training images of CLASS (file order) and its 1 000 test images."""
    train, _, _, _ = load_images("fashion-mnist", classes=[CLASS], n=1500, scale="symmetric")
    held, _ = heldout_reals(classes=[CLASS])
    return train, held


@needs_fashion
def test_real_heldout_images_pass_the_gate_and_sit_at_the_frechet_floor(small_classifier, one_class):
    train, held = one_class
    q = image_quality(held[:500], train=train, heldout=held[500:], classes=[CLASS], classifier=small_classifier,
                      n_boot=300, n_reference_draws=3)
    assert q["gate"] == "generates"
    assert q["nearest_ratio_lower"] < 1 < q["nearest_ratio_upper"] and abs(q["nearest_ratio"] - 1) < 0.1
    assert q["frechet_floor"] < q["frechet_ceiling"]
    assert abs(q["frechet"] - q["frechet_floor"]) < 0.25 * (q["frechet_ceiling"] - q["frechet_floor"])
    assert q["class_share"] >= GATE["class_share_min"]
    assert q["class_share_lower"] < q["class_share_heldout"] < q["class_share_upper"]
    assert q["classifier_accuracy"] == small_classifier.test_accuracy
    assert (q["n_samples"], q["n_finite"]) == (500.0, 500.0)


@needs_fashion
def test_class_mean_plus_noise_fails_the_gate_and_diverged_samples_are_counted(small_classifier, one_class):
    train, held = one_class
    rng = np.random.default_rng(0)
    crude = np.clip(train.mean(0) + train.std(0) * rng.standard_normal((300, 784)), -1, 1)
    samples = np.r_[crude, np.full((7, 784), np.nan)]
    q = image_quality(samples, train=train, heldout=held, classes=[CLASS], classifier=small_classifier, n_boot=300,
                      n_reference_draws=3)
    assert q["gate"] == "does not generate"
    assert q["nearest_ratio"] > GATE["nearest_ratio_max"]
    assert q["class_share_heldout"] > GATE["class_share_min"]  # the classifier knows real images of the class
    assert q["frechet"] > q["frechet_floor"] + 0.5 * (q["frechet_ceiling"] - q["frechet_floor"])
    assert (q["n_samples"], q["n_finite"]) == (307.0, 300.0)
    with pytest.raises(ValueError, match="`train_labels`"):
        image_quality(samples, train=train, heldout=held, classes=[CLASS, 0], classifier=small_classifier)
