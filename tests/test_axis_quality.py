"""The Wasserstein distance along the law's first principal axis (ridgexr.quality.axis_wasserstein and its
kernels): the exact 1-D distance against scipy and a closed form, the axis against a known covariance, the
bootstrap against resampling by hand, and a blob against the mixture it replaces; the rule 'null' that
compares each end of an interval with the same end of the null's."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from ridgexr.analysis import arrays
from ridgexr.datasets import fresh_law_draws, gaussian_mixture
from ridgexr.quality import axis_wasserstein, principal_axis

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=40), st.lists(finite, min_size=1, max_size=40))
def test_wasserstein_1d_is_scipys_for_any_two_samples(x, y):
    assert arrays.wasserstein_1d(np.array(x), np.array(y)) == pytest.approx(
        stats.wasserstein_distance(x, y), rel=1e-9, abs=1e-9)


def test_wasserstein_1d_batches_pairs_and_its_p2_is_the_sorted_difference():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 30)), rng.normal(size=(5, 30))
    batch = arrays.wasserstein_1d(x, y, p=2)
    one = [arrays.wasserstein_1d(a, b, p=2) for a, b in zip(x, y)]
    brute = np.sqrt(((np.sort(x, 1) - np.sort(y, 1)) ** 2).mean(1))  # equal sizes: the sorted pairs
    np.testing.assert_allclose(batch, one, rtol=1e-12)
    np.testing.assert_allclose(batch, brute, rtol=1e-12)
    with pytest.raises(ValueError, match="at least one"):
        arrays.wasserstein_1d(np.array([]), np.array([1.0]))


def test_principal_axis_is_the_direction_of_a_known_covariance():
    rng = np.random.default_rng(1)
    v = np.array([2.0, -1.0, 2.0]) / 3.0
    x = rng.normal(size=(20000, 3)) @ (np.eye(3) + 3.0 * np.outer(v, v))  # variance 16 along v, 1 across
    u = principal_axis(x)
    assert abs(u @ v) > 0.999 and np.linalg.norm(u) == pytest.approx(1.0)
    assert u[np.argmax(np.abs(u))] > 0 and np.array_equal(principal_axis(-x), u)  # a fixed sign
    # the mixture's axis is the axis of its means
    mix = gaussian_mixture(4000, 8, mean=1.0, sigma=1.0, seed=3)
    assert principal_axis(mix) @ (np.ones(8) / math.sqrt(8)) > 0.999


def test_the_distance_of_a_blob_to_the_mixture_is_the_closed_form():
    """One Gaussian blob with the mixture's variance along the axis against the mixture 1/2 N(+-a, 1): W1 =
    integral of |F - G| (scipy quadrature of the two CDFs), within the sampling error of 20 000 points."""
    d, mean = 8, 1.0
    a = mean * math.sqrt(d)  # the means' distance from 0 along the axis
    s = math.sqrt(1 + a * a)
    closed, _ = integrate.quad(lambda z: abs(stats.norm.cdf(z / s) - 0.5 * stats.norm.cdf(z - a)
                                             - 0.5 * stats.norm.cdf(z + a)), -40, 40, limit=200)
    rng = np.random.default_rng(2)
    u = np.ones(d) / math.sqrt(d)
    z = rng.normal(size=(20000, d))
    blob = z - np.outer(z @ u, u) + np.outer(rng.normal(scale=s, size=20000), u)  # N(0, 1) across u, N(0, s^2) along
    mix = gaussian_mixture(20000, d, mean=mean, sigma=1.0, seed=4)
    w, lo, hi, n = axis_wasserstein(blob, mix, u, n_boot=200)
    assert n == 20000 and w == pytest.approx(closed, abs=0.03) and lo <= w + 0.03
    # shifted along the axis by delta: W1 = delta (the same law moved)
    fresh = gaussian_mixture(20000, d, mean=mean, sigma=1.0, seed=5)
    w_shift, *_ = axis_wasserstein(fresh + 0.5 * u, mix, u, n_boot=10)
    assert w_shift == pytest.approx(0.5, abs=0.03)


def test_the_interval_resamples_both_sets_and_non_finite_samples_are_left_out_and_counted():
    rng = np.random.default_rng(3)
    x, ref, u = rng.normal(size=(60, 2)), rng.normal(size=(90, 2)) + [0.3, 0.0], np.array([1.0, 0.0])
    bad = np.vstack([x, [[np.nan, 0.0], [np.inf, 1.0]]])
    w, lo, hi, n = axis_wasserstein(bad, ref, u, n_boot=300, seed=7)
    assert n == 60 and w == pytest.approx(stats.wasserstein_distance(x[:, 0], ref[:, 0]), rel=1e-9)
    # the same replicates by hand: the kernel's blocks draw samples then reference indices from one generator
    g = np.random.default_rng(7)
    boots = [arrays.wasserstein_1d(x[g.integers(0, 60, (250, 60)), 0], ref[g.integers(0, 90, (250, 90)), 0]),
             arrays.wasserstein_1d(x[g.integers(0, 60, (50, 60)), 0], ref[g.integers(0, 90, (50, 90)), 0])]
    np.testing.assert_allclose([lo, hi], np.quantile(np.concatenate(boots), [0.025, 0.975]), rtol=1e-12)
    assert all(math.isnan(v) for v in axis_wasserstein(np.full((3, 2), np.nan), ref, u, n_boot=5)[:3])


@pytest.mark.parametrize("kwargs, match", [
    (dict(axis=[0.0, 0.0]), "axis"), (dict(axis=[1.0]), "axis"), (dict(n_boot=0), "n_boot"),
    (dict(ci=1.0), "ci"), (dict(reference=np.full((3, 2), np.nan)), "reference")])
def test_bad_arguments_are_named(kwargs, match):
    args = dict(samples=np.zeros((4, 2)), reference=np.ones((5, 2)), axis=[1.0, 0.0]) | kwargs
    with pytest.raises(ValueError, match=match):
        axis_wasserstein(**args)


def test_fresh_law_draws_are_the_law_and_independent_of_the_training_set_and_population():
    from ridgexr.catalog import DatasetSpec
    from ridgexr.datasets import dataset_extras, load_training_set

    spec = DatasetSpec.model_validate({"mixture": {"dim": 4, "mean": 1.0, "sigma": 1.0, "n": 64, "seed": 3,
                                                   "n_population": 100}})
    fresh = fresh_law_draws(spec, 50)
    np.testing.assert_array_equal(fresh, gaussian_mixture(50, 4, mean=1.0, sigma=1.0, seed=5))
    train, pop = load_training_set(spec), dataset_extras(spec)["population_data"][1]
    assert not np.isin(fresh, train).any() and not np.isin(fresh, pop).any()
    # a manifold with two training draws (seeds 7 and 9; 8 is the population's): the first seed after them, 10
    circle = DatasetSpec.model_validate({"manifold": {"kind": "circle", "ambient_dim": 3, "radius": 2.0, "n": 16,
                                                      "seed": 7, "draws": 2}})
    from ridgexr.datasets import manifold_of

    want = manifold_of(circle.manifold).sample(5, density="uniform", seed=10)[0]
    np.testing.assert_array_equal(fresh_law_draws(circle, 5), want)
    assert fresh_law_draws(DatasetSpec.model_validate({"points": "two-points"}), 5) is None


def test_rule_null_with_the_nulls_interval_compares_each_end_with_the_same_end():
    """A perfect sampler's interval equals the null's: it passes surely with the null's interval, and fails
    surely against twice the null's point value when its interval is wide (the first rule of timescales-gmm-long)."""
    q, lo, hi = np.array([1.0, 0.12, 0.11]), np.array([0.9, 0.06, 0.05]), np.array([1.2, 0.26, 0.25])
    null, n_lo, n_hi = np.array(0.045), np.array(0.06), np.array(0.255)
    sure, possible = arrays.quality_reached(q, lo, hi, rule="null", factor=2.0, null=null, null_low=n_lo,
                                            null_high=n_hi)
    assert sure.tolist() == [False, True, True] and possible.tolist() == [False, True, True]
    point, _ = arrays.quality_reached(q, lo, hi, rule="null", factor=2.0, null=null)
    assert point.tolist() == [False, False, False]
    # mirrored (higher is better): the same verdicts
    m_sure, m_possible = arrays.quality_reached(-q, -hi, -lo, rule="null", factor=1.0, null=-null, null_low=-n_hi,
                                                null_high=-n_lo, higher_is_better=True)
    ref_sure, ref_possible = arrays.quality_reached(q, lo, hi, rule="null", factor=1.0, null=null, null_low=n_lo,
                                                    null_high=n_hi)
    assert m_sure.tolist() == ref_sure.tolist() and m_possible.tolist() == ref_possible.tolist()
