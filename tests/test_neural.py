"""The MLP denoiser and the conversion between parametrizations (closed forms, exact denoiser)."""

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, ExactDenoiser, MLPDenoiser
from ridgexr.models.mlp.denoiser import GaussianFourierEmbedding
from ridgexr.parametrization import PARAMETRIZATIONS, denoised_from_output, output_from_denoised

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


def test_the_residual_architecture_is_their_gmm_network_computed_by_hand():
    """architecture 'residual' (Bonnaire et al.'s GMM network): x -> W_in x, then per block h <- LayerNorm(h + W2
    GELU(W1 (h + E(s)))) with E their sinusoidal encoding of s = embed_scale t (cos at even, sin at odd i, frequencies
    1e-4^(2 (i // 2) / width)), then W_out h; computed here from the weights in float64; the spec gives it gelu,
    refuses another activation, and leaves the config hash of a plain mlp block unchanged."""
    import math

    from ridgexr.catalog import Experiment
    from ridgexr.catalog.experiment import hashed_config
    from ridgexr.models.mlp import MLPSpec

    width, d, scale = 8, 3, 200.0
    m = MLPDenoiser(d, hidden=(width,) * 3, activation="gelu", architecture="residual", embed_scale=scale, seed=1,
                    dtype=torch.float64)
    x = torch.randn(5, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([0.01, 0.1, 0.5, 1.0, 2.0], dtype=torch.float64)
    i = np.arange(width)
    freqs = 1e-4 ** (2 * (i // 2) / width)
    arg = scale * t.numpy()[:, None] * freqs[None]
    e = torch.as_tensor(np.where(i % 2 == 0, np.cos(arg), np.sin(arg)))
    h = x @ m.net[0].weight.T + m.net[0].bias
    for block in m.net[1:-1]:
        z = (h + e) @ block.linear1.weight.T + block.linear1.bias
        z = 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))
        z = h + z @ block.linear2.weight.T + block.linear2.bias
        mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
        h = (z - mu) / torch.sqrt(var + block.norm.eps) * block.norm.weight + block.norm.bias
    expected = h @ m.net[-1].weight.T + m.net[-1].bias
    torch.testing.assert_close(m(x, t), expected, rtol=1e-10, atol=1e-12)
    assert len(m.net) == 5 and m.denoise(x, 0.3).shape == (5, d)
    spec = MLPSpec(widths=[16], depth=3, architecture="residual")
    assert spec.nonlinearity == "gelu"
    with pytest.raises(ValueError, match="gelu"):
        MLPSpec(widths=[16], architecture="residual", activation="relu")
    plain = dict(name="x", dataset={"points": "two-points"}, model={"kind": "mlp", "widths": [16]}, store="x.zarr",
                 schedules=["h"])
    explicit = plain | {"model": {"kind": "mlp", "widths": [16], "architecture": "mlp"}}
    residual = plain | {"model": {"kind": "mlp", "widths": [16], "architecture": "residual"}}
    def hashed(entry):
        return hashed_config(Experiment(**entry).model_dump())

    assert hashed(plain) == hashed(explicit) and hashed(plain) != hashed(residual)
