"""ridgexr.nearest: the chunked exact nearest-training search against brute force."""

import math

import numpy as np
import torch
from hypothesis import given, strategies as st

from ridgexr.nearest import nearest_training, step_nearest


@given(st.integers(1, 40), st.integers(1, 30), st.integers(1, 6), st.integers(0, 2**31 - 1),
       st.sampled_from([24, 200, 10**6]))
def test_nearest_training_equals_brute_force_for_any_chunking(m, n, d, seed, budget):
    g = np.random.default_rng(seed)
    x, train, alpha = g.normal(size=(m, d)), g.normal(size=(n, d)), g.uniform(0.1, 1.0, m)
    d1, d2, idx = nearest_training(torch.tensor(x), torch.tensor(train), torch.tensor(alpha), budget=budget)
    dist = np.linalg.norm(x[:, None] - alpha[:, None, None] * train[None], axis=-1)
    order = np.sort(dist, 1)
    np.testing.assert_allclose(d1.numpy(), order[:, 0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d2.numpy(), order[:, 1] if n > 1 else np.inf, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dist[np.arange(m), idx.numpy()], order[:, 0], rtol=1e-12, atol=1e-12)


def test_on_a_training_point_the_distance_is_exactly_zero():
    """x = alpha x_i with |x| ~ 1e4: the expansion |x|^2 - 2 x.y + |y|^2 would leave ~1e-4; the direct
    recomputation 0."""
    g = np.random.default_rng(0)
    train = torch.tensor(g.normal(size=(50, 784)) * 1e3)
    alpha = torch.full((3,), 0.7, dtype=torch.float64)
    d1, d2, idx = nearest_training(alpha[:, None] * train[[4, 9, 4]], train, alpha)
    assert idx.tolist() == [4, 9, 4] and d1.tolist() == [0.0, 0.0, 0.0] and bool((d2 > 1e3).all())


def test_step_nearest_masks_unobserved_states():
    x = torch.tensor([[[0.0, 1.0], [math.nan, 0.0]]], dtype=torch.float64)  # (B=1, n=2, d=2)
    train = torch.tensor([[0.0, 2.0], [0.0, -1.0]], dtype=torch.float64)
    out = step_nearest(x, np.array([math.log(2.0)]), train, np.array([[True, False]]))  # alpha = 1/2
    np.testing.assert_allclose(out["nearest_distance"], [[0.0, np.nan]])
    np.testing.assert_allclose(out["nearest_ratio"][0, 0], 0.0)
    assert np.isnan(out["nearest_ratio"][0, 1])
