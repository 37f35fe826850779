"""Array-layer metrics for manifold and distribution questions, against independent computations."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from ridgexr.analysis import arrays
from ridgexr.datasets.manifolds import Manifold


@given(n=st.integers(2, 60), m=st.integers(2, 60), seed=st.integers(0, 100))
def test_sliced_wasserstein_in_one_dimension_is_scipys_wasserstein(n, m, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, 1)), rng.normal(1.0, 2.0, size=(m, 1))
    # in 1-D every unit direction is +1 or -1, which leave W_1 unchanged
    sw = arrays.sliced_wasserstein(x, y, p=1, n_projections=4, seed=seed)
    assert sw == pytest.approx(stats.wasserstein_distance(x[:, 0], y[:, 0]), rel=1e-10, abs=1e-12)


def test_sliced_wasserstein_zero_for_equal_samples_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3))
    assert arrays.sliced_wasserstein(x, x[::-1]) == pytest.approx(0.0, abs=1e-12)
    shifts = [arrays.sliced_wasserstein(x, x + np.array([s, 0, 0])) for s in (0.5, 1.0, 2.0)]
    assert shifts[0] < shifts[1] < shifts[2]
    # a pure shift c: SW_2 = |c| sqrt(E theta_1^2) = |c| / sqrt(d) for directions uniform on the sphere
    assert shifts[2] == pytest.approx(2.0 / np.sqrt(3), rel=0.15)


def test_mmd_matches_a_direct_double_sum_and_separates_laws():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(12, 2)), rng.normal(size=(9, 2)) + 0.3
    s = 0.8
    k = lambda a, b: np.exp(-((a - b) ** 2).sum() / (2 * s * s))  # noqa: E731
    kxx = sum(k(a, b) for i, a in enumerate(x) for j, b in enumerate(x) if i != j) / (12 * 11)
    kyy = sum(k(a, b) for i, a in enumerate(y) for j, b in enumerate(y) if i != j) / (9 * 8)
    kxy = sum(k(a, b) for a in x for b in y) / (12 * 9)
    assert arrays.mmd2(x, y, bandwidth=s) == pytest.approx(kxx + kyy - 2 * kxy, rel=1e-12)
    a, b = rng.normal(size=(400, 2)), rng.normal(size=(400, 2))
    same = arrays.mmd2(a, b)
    far = arrays.mmd2(a, b + 1.0)
    assert abs(same) < 0.01 < far


def test_hausdorff_and_novelty_against_brute_force():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(30, 3)), rng.normal(size=(20, 3))
    d = np.linalg.norm(a[:, None] - b[None], axis=-1)
    assert arrays.hausdorff(a, b) == pytest.approx(max(d.min(1).max(), d.min(0).max()), rel=1e-12)
    circle = Manifold("circle", ambient_dim=2, radius=1.0)
    train = circle.sample(64, seed=3)[0]
    nov = arrays.novelty(train, train)
    # training points are not novel; the distance kernel uses |x|^2 - 2 x.p + |p|^2, whose error at
    # zero distance is ~ sqrt(eps) |x| (here 4e-7 relative to the spacing)
    np.testing.assert_allclose(nov, 0.0, atol=2e-6)
    far = arrays.novelty(np.array([[3.0, 0.0]]), train)
    spacing = np.median(np.sort(np.linalg.norm(train[:, None] - train[None], axis=-1), 1)[:, 1])
    assert far[0] == pytest.approx(np.linalg.norm(train - [3.0, 0.0], axis=1).min() / spacing, rel=1e-9)


def test_rate_fit_recovers_a_known_slope():
    rng = np.random.default_rng(4)
    n = np.repeat([8, 16, 32, 64, 128, 256, 512, 1024, 2048], 4)
    metric = 3.0 * n ** -0.5 * np.exp(rng.normal(0, 0.05, n.size))
    slope, lo, hi = arrays.rate_fit(n, metric, seed=1)
    assert lo < -0.5 < hi and abs(slope + 0.5) < 0.03 and hi - lo < 0.1
    with pytest.raises(ValueError, match="at least 3"):
        arrays.rate_fit([1, 2], [1.0, 0.5])
    with pytest.raises(ValueError, match="2 distinct n"):
        arrays.rate_fit([4, 4, 4, 8], [1.0, 0.5, 0.7, np.nan])  # the pair at n = 8 is not finite
    with warnings.catch_warnings():  # few pairs: many replicates draw one n and are dropped, silently
        warnings.simplefilter("error")
        slope, lo, hi = arrays.rate_fit([1, 2, 4], [1.0, 0.5, 0.25], seed=0)
    assert slope == pytest.approx(-1.0) and lo == pytest.approx(-1.0) and hi == pytest.approx(-1.0)


def test_sliced_wasserstein_in_blocks_of_directions_equals_all_at_once(monkeypatch):
    """The directions are taken in blocks of at most SLICED_BLOCK quantile values: the same number as one block."""
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((300, 2)), rng.standard_normal((410, 2)) + 0.3
    whole = arrays.sliced_wasserstein(x, y, n_projections=37, seed=4)
    monkeypatch.setattr(arrays.distances, "SLICED_BLOCK", 3 * 712)  # 3 directions per block, the last one short
    assert arrays.sliced_wasserstein(x, y, n_projections=37, seed=4) == pytest.approx(whole, rel=1e-13)
