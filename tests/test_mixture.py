"""The two-component Gaussian mixture dataset (ridgexr.datasets.mixture, catalog dataset.mixture): its law
against the closed form, balanced nested subsets, and the catalog path to training data, population sample
and per-cell quality."""

import numpy as np
import pytest

from ridgexr.catalog import DatasetSpec
from ridgexr.datasets import dataset_extras, gaussian_mixture, load_training_set
from ridgexr.quality import cell_quality


def test_mixture_moments_match_the_closed_form():
    # mean 0; covariance sigma^2 I + mean^2 1 1^T (the two means +-mean 1, equal weights)
    x = gaussian_mixture(40000, 4, mean=1.5, sigma=0.5, seed=1)
    np.testing.assert_allclose(x.mean(0), 0.0, atol=0.02)
    np.testing.assert_allclose(np.cov(x.T), 0.25 * np.eye(4) + 2.25 * np.ones((4, 4)), atol=0.05)
    np.testing.assert_allclose(x[0::2].mean(0), 1.5, atol=0.01)


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_every_prefix_is_balanced(n):
    x = gaussian_mixture(64, 8, mean=10.0, sigma=0.1, seed=0)[:n]
    plus = (x.mean(1) > 0).sum()
    assert plus - (n - plus) in (0, 1)


def test_catalog_mixture_block_loads_data_population_and_quality():
    spec = DatasetSpec(mixture={"dim": 8, "n": 256, "seed": 3, "n_population": 600}, n_train=[64, 256])
    train = load_training_set(spec)
    np.testing.assert_array_equal(train, gaussian_mixture(256, 8, seed=3))
    (dims, pop), = dataset_extras(spec).values()
    assert dims == ("population", "dim") and pop.shape == (600, 8)
    np.testing.assert_array_equal(pop, gaussian_mixture(600, 8, seed=4))
    q = cell_quality(spec, train[:64], gaussian_mixture(200, 8, seed=9), n_boot=50)
    assert q["sliced_wasserstein"] < 3 * q["sliced_wasserstein_null"]  # fresh draws of the law: near the null
    with pytest.raises(ValueError, match="n_train must be <= mixture.n"):
        DatasetSpec(mixture={"n": 100}, n_train=[64, 128])
    with pytest.raises(ValueError, match="exactly one"):
        DatasetSpec(mixture={"n": 100}, points="two-points")
