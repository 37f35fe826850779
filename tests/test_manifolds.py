"""Manifold point sets: closed-form distances against brute force, samples on the manifold, densities."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from ridgexr.datasets.manifolds import Manifold


def dense_points(m: Manifold, n: int = 600) -> np.ndarray:
    """A dense grid of points on the manifold (independent of Manifold.sample)."""
    g = np.linspace(-math.pi, math.pi, n, endpoint=False)
    if m.kind == "circle":
        local = np.c_[m.radius * np.cos(g), m.radius * np.sin(g)]
    elif m.kind == "sphere":
        pol, az = np.meshgrid(np.linspace(0, math.pi, n // 2), g[::2], indexing="ij")
        local = m.radius * np.c_[(np.sin(pol) * np.cos(az)).ravel(), (np.sin(pol) * np.sin(az)).ravel(),
                                 np.cos(pol).ravel()]
    else:
        u, v = np.meshgrid(g[::2], g[::2], indexing="ij")
        rho = m.radius + m.minor_radius * np.cos(v)
        local = np.c_[(rho * np.cos(u)).ravel(), (rho * np.sin(u)).ravel(), (m.minor_radius * np.sin(v)).ravel()]
    y = np.zeros((len(local), m.ambient_dim))
    y[:, :local.shape[1]] = local
    return y @ m.rotation.T


@pytest.mark.parametrize("kind, D", [("circle", 2), ("circle", 8), ("sphere", 3), ("sphere", 16), ("torus", 5)])
def test_closed_form_distance_matches_brute_force(kind, D):
    m = Manifold(kind, ambient_dim=D, radius=2.0, minor_radius=0.6, rotation_seed=3)
    grid = dense_points(m)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, D)) * 1.5
    brute = np.sqrt(((x[:, None, :] - grid[None]) ** 2).sum(-1)).min(1)
    exact = m.distance(x)
    assert np.all(exact <= brute + 1e-12)  # the closed form is a lower bound of any grid ...
    spacing = {"circle": 2.0 * 2 * math.pi / 600, "sphere": 2.0 * 2 * math.pi / 300,
               "torus": 2.6 * 2 * math.pi / 300}[kind]
    assert np.all(brute - exact <= spacing)  # ... and the grid approaches it to within its spacing


@given(seed=st.integers(0, 1000), kind=st.sampled_from(["circle", "sphere", "torus"]),
       density=st.sampled_from(["uniform", "von_mises", "piecewise"]))
def test_samples_lie_on_the_manifold_and_coordinates_round_trip(seed, kind, density):
    m = Manifold(kind, ambient_dim=6, radius=1.5, minor_radius=0.4, rotation_seed=seed)
    x, coords = m.sample(50, density=density, seed=seed)
    np.testing.assert_allclose(m.distance(x), 0.0, atol=1e-12)
    np.testing.assert_allclose(m.coordinates(x), coords, atol=1e-9)
    np.testing.assert_allclose(m.rotation @ m.rotation.T, np.eye(6), atol=1e-12)


def test_densities_have_the_stated_laws():
    circ = Manifold("circle", ambient_dim=4, radius=1.0)
    _, theta = circ.sample(4000, seed=2)
    assert stats.kstest(theta[:, 0], stats.uniform(-math.pi, 2 * math.pi).cdf).pvalue > 1e-3
    _, theta = circ.sample(4000, density="von_mises", kappa=3.0, seed=3)
    assert stats.kstest(theta[:, 0], stats.vonmises(3.0).cdf).pvalue > 1e-3
    _, theta = circ.sample(6000, density="piecewise", seed=4)
    assert abs((theta[:, 0] >= 0).mean() - 2 / 3) < 0.03
    sph = Manifold("sphere", ambient_dim=3, radius=2.0)
    x, coords = sph.sample(4000, seed=5)
    z = np.cos(coords[:, 0])  # uniform on the sphere <=> cos(polar) uniform on [-1, 1] (Archimedes)
    assert stats.kstest(z, stats.uniform(-1, 2).cdf).pvalue > 1e-3


def test_same_seed_same_points_and_bad_arguments():
    a = Manifold("torus", ambient_dim=4, radius=2.0, minor_radius=0.5, rotation_seed=7).sample(20, seed=1)[0]
    b = Manifold("torus", ambient_dim=4, radius=2.0, minor_radius=0.5, rotation_seed=7).sample(20, seed=1)[0]
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="`ambient_dim` must be >= 3"):
        Manifold("sphere", ambient_dim=2)
    with pytest.raises(ValueError, match="`minor_radius` must be <"):
        Manifold("torus", ambient_dim=3, radius=1.0, minor_radius=1.5)
    with pytest.raises(ValueError, match="`kind` must be one of"):
        Manifold("helix", ambient_dim=3)
