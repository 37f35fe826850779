import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, time_grid


@given(st.floats(1e-6, 20.0))
def test_alpha_h_closed_form_and_kinds(t):
    ou = OU()
    assert ou.alpha(t) == pytest.approx(math.exp(-t), rel=1e-14)
    assert ou.h(t) == pytest.approx(1 - math.exp(-2 * t), rel=1e-9)
    # variance preserving: alpha^2 + h = 1
    assert ou.alpha(t) ** 2 + ou.h(t) == pytest.approx(1.0, abs=1e-14)
    a = ou.alpha(np.array([t]))
    assert isinstance(a, np.ndarray)
    ht = ou.h(torch.tensor([t], dtype=torch.float64))
    assert isinstance(ht, torch.Tensor)
    assert float(ht[0]) == pytest.approx(ou.h(t), rel=1e-14)


def test_h_small_t_is_accurate():
    # 1 - exp(-2t) loses all digits at t = 1e-12 in naive arithmetic
    assert OU().h(1e-12) == pytest.approx(2e-12, rel=1e-9)


def test_ou_matches_simulation(rng):
    # Euler-Maruyama simulation of dX = -X dt + sqrt(2) dW from x0 = 2 over t = 0.7
    n, steps, t = 200_000, 700, 0.7
    dt = t / steps
    x = np.full(n, 2.0)
    for _ in range(steps):
        x = x - x * dt + math.sqrt(2 * dt) * rng.standard_normal(n)
    ou = OU()
    assert x.mean() == pytest.approx(2 * ou.alpha(t), abs=0.01)
    assert x.var() == pytest.approx(ou.h(t), abs=0.01)


@pytest.mark.parametrize("kind", ["exponential", "linear", "cosine"])
@given(n=st.integers(1, 400), t_min=st.floats(1e-5, 0.5), ratio=st.floats(1.01, 1e4))
def test_time_grid_properties(kind, n, t_min, ratio):
    T = t_min * ratio
    g = time_grid(n, T, t_min, kind)
    assert g.shape == (n + 1,)
    assert g[0] == T and g[-1] == t_min
    assert np.all(np.diff(g) < 0)


def test_exponential_grid_formula():
    g = time_grid(4, 2.0, 0.02, "exponential")
    q = (2.0 / 0.02) ** 0.25
    np.testing.assert_allclose(g, 2.0 * q ** -np.arange(5.0), rtol=1e-13)
    np.testing.assert_allclose(time_grid(4, 1.0, 0.2, "linear"), [1.0, 0.8, 0.6, 0.4, 0.2])


@pytest.mark.parametrize("kwargs, name", [
    (dict(n_steps=0, T=1.0, t_min=0.1), "n_steps"),
    (dict(n_steps=3, T=1.0, t_min=0.0), "t_min"),
    (dict(n_steps=3, T=0.1, t_min=0.1), "T"),
    (dict(n_steps=3, T=1.0, t_min=0.1, kind="log"), "kind"),
])
def test_time_grid_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        time_grid(**kwargs)
