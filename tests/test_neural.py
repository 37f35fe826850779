"""The MLP denoiser and the conversion between parametrizations (closed forms, exact denoiser)."""

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, ExactDenoiser, MLPDenoiser
from ridgexr.models.mlp.denoiser import GaussianFourierEmbedding
from ridgexr.models.parametrization import PARAMETRIZATIONS, denoised_from_output, output_from_denoised

TRAIN = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


@pytest.mark.parametrize("parametrization", PARAMETRIZATIONS)
def test_an_output_that_is_exact_in_each_parametrization_gives_the_exact_denoiser(parametrization):
    """A network whose output is the exact quantity of its parametrization (score, epsilon or
    alpha E[x0|x_t], built from the exact denoiser by the inverse conversion) denoises and scores
    exactly: zero residual against ExactDenoiser."""
    ex = ExactDenoiser(TRAIN)
    x = torch.tensor(np.random.default_rng(0).normal(size=(50, 2)) * 3)
    t = torch.tensor(np.random.default_rng(1).uniform(0.01, 2.0, 50))
    m = torch.as_tensor(ex.denoise(x, t))
    f = output_from_denoised(m, x, t, parametrization)
    back = denoised_from_output(f, x, t, parametrization)
    assert float((back - m).abs().max()) < 1e-12
    # the closed forms of each parametrization (Tweedie), computed independently
    proc = OU()
    a, h = proc.alpha(t)[:, None], proc.h(t)[:, None]
    score = torch.as_tensor(ex.score(x, t))
    expected = {"posterior_mean": a * m, "score": score, "epsilon": -torch.sqrt(h) * score, "x0": m}[parametrization]
    np.testing.assert_allclose(f.numpy(), expected.numpy(), rtol=1e-9, atol=1e-9)


def test_mlp_shapes_dtype_and_seeded_initialisation():
    state = torch.random.get_rng_state()
    m = MLPDenoiser(3, hidden=(32, 16), embed_dim=8, seed=4)
    assert torch.equal(state, torch.random.get_rng_state())  # the global generator is left alone
    assert [tuple(p.shape) for p in m.net.parameters()] == [(32, 11), (32,), (16, 32), (16,), (3, 16), (3,)]
    same = MLPDenoiser(3, hidden=(32, 16), embed_dim=8, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), same.parameters()))
    assert m.net[0].weight.dtype == torch.float32
    x = np.zeros((4, 5, 3))
    out = m.denoise(x, 0.2)
    assert isinstance(out, np.ndarray) and out.shape == (4, 5, 3) and out.dtype == np.float64
    assert m.score(torch.zeros(7, 3), torch.full((7,), 0.5)).shape == (7, 3)


@given(t=st.floats(0.01, 5.0))
def test_gaussian_fourier_embedding_is_the_documented_map(t):
    e = GaussianFourierEmbedding(8, 30.0, seed=2)
    got = e(torch.tensor([t], dtype=torch.float64))[0]
    w = e.W.numpy()
    np.testing.assert_allclose(got.numpy(), np.r_[np.sin(2 * np.pi * w * t), np.cos(2 * np.pi * w * t)], atol=1e-9)


@pytest.mark.parametrize("kwargs, name", [(dict(d=0), "d"), (dict(d=2, parametrization="v"), "parametrization"),
                                          (dict(d=2, activation="elu"), "activation"),
                                          (dict(d=2, embed_dim=7), "embed_dim"), (dict(d=2, embed_scale=0.0), "embed_scale")])
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MLPDenoiser(**kwargs)
    with pytest.raises(ValueError, match="x"):
        MLPDenoiser(2, hidden=(4,), embed_dim=4).denoise(np.zeros((3, 5)), 0.5)
