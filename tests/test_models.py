import io
import math
import time

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, ExactDenoiser, RandomFeatureDenoiser, SmoothedEmpirical


def test_forward_matches_formula(rng):
    m = RandomFeatureDenoiser(3, 20, n_frequencies=5, feature_period=4.0, seed=3)
    A = rng.normal(size=(3, 20))
    m = m.with_A(A)
    x = rng.normal(size=(7, 3))
    t = rng.uniform(0.01, 2.0, size=7)
    k = np.arange(1, 6)
    phi = np.concatenate([np.ones((7, 1)), np.sin(2 * np.pi * k * t[:, None] / 4.0),
                          np.cos(2 * np.pi * k * t[:, None] / 4.0)], 1)
    pre = x @ m.w_x.numpy().T + phi @ m.w_t.numpy().T + m.b.numpy()
    f = np.maximum(pre, 0) @ A.T / math.sqrt(20)
    np.testing.assert_allclose(m(torch.tensor(x), torch.tensor(t)).detach().numpy(), f, rtol=1e-12)
    # posterior-mean parametrization
    a, h = np.exp(-t)[:, None], -np.expm1(-2 * t)[:, None]
    np.testing.assert_allclose(m.denoise(x, t), f / a, rtol=1e-12)
    np.testing.assert_allclose(m.score(x, t), (f - x) / h, rtol=1e-12)
    s = RandomFeatureDenoiser(3, 20, n_frequencies=5, feature_period=4.0, seed=3, parametrization="score").with_A(A)
    np.testing.assert_allclose(s.score(x, t), f, rtol=1e-12)
    np.testing.assert_allclose(s.denoise(x, t), (x + h * f) / a, rtol=1e-12)


@given(n=st.integers(1, 300), width=st.integers(1, 40), seed=st.integers(0, 1000))
def test_forward_in_row_chunks_matches_the_formula(n, width, seed):
    """One time for all rows and no gradient (a sampler step): forward runs the rows in equal chunks
    of at most FORWARD_ELEMENTS features (forced here to 64, so most draws span several chunks)
    through one reused scratch array; the output equals the numpy formula, the unchunked product and
    the path that records gradients, with the batch shape kept."""
    import ridgexr.features as rf

    rng = np.random.default_rng(seed)
    m = RandomFeatureDenoiser(2, width, n_frequencies=3, feature_period=4.0, seed=seed).with_A(
        rng.normal(size=(2, width)))
    x = rng.normal(size=(n, 2)) * 2
    t = float(rng.uniform(0.01, 2.0))
    k = np.arange(1, 4)
    phi = np.concatenate([[1.0], np.sin(2 * np.pi * k * t / 4.0), np.cos(2 * np.pi * k * t / 4.0)])
    f = np.maximum(x @ m.w_x.numpy().T + phi @ m.w_t.numpy().T + m.b.numpy(), 0) @ m.A.detach().numpy().T
    f /= math.sqrt(width)
    tt = torch.tensor(t, dtype=torch.float64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rf, "FORWARD_ELEMENTS", 64)
        with torch.no_grad():
            out = m(torch.tensor(x), tt).numpy()
            again = m(torch.tensor(x), tt).numpy()  # the scratch array reused
            batched = m(torch.tensor(x.reshape(1, n, 2)), tt).numpy()
        graded = m(torch.tensor(x), tt)  # records gradients: the unchunked path
    assert graded.requires_grad
    whole = (m.features(torch.tensor(x), tt) @ m.A.T).detach().numpy()
    np.testing.assert_allclose(out, f, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out, whole, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(graded.detach().numpy(), out, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(again, out)
    assert batched.shape == (1, n, 2)
    np.testing.assert_array_equal(batched[0], out)
    assert m.with_A(m.A.detach())._scratch == {}  # a copy never shares the scratch array


def test_feature_statistics_and_nesting():
    big = RandomFeatureDenoiser(4, 4000, n_frequencies=8, feature_period=2.0, seed=11)
    small = RandomFeatureDenoiser(4, 100, n_frequencies=8, feature_period=2.0, seed=11)
    np.testing.assert_array_equal(big.w_x[:100].numpy(), small.w_x.numpy())
    np.testing.assert_array_equal(big.w_t[:100].numpy(), small.w_t.numpy())
    np.testing.assert_array_equal(big.b[:100].numpy(), small.b.numpy())
    assert big.w_x.var().item() == pytest.approx(1 / 4, rel=0.05)
    assert big.w_t.var().item() == pytest.approx(1 / 17, rel=0.05)
    assert big.b.var().item() == pytest.approx(1.0, rel=0.05)
    other = RandomFeatureDenoiser(4, 100, n_frequencies=8, feature_period=2.0, seed=12)
    assert not torch.equal(other.w_x, small.w_x)


@pytest.mark.parametrize("act, fn", [("tanh", np.tanh), ("sigmoid", lambda z: 1 / (1 + np.exp(-z)))])
def test_activations(act, fn, rng):
    m = RandomFeatureDenoiser(2, 8, n_frequencies=2, feature_period=2.0, seed=0, activation=act)
    x, t = rng.normal(size=(3, 2)), 0.4
    k = np.arange(1, 3)
    phi = np.concatenate([[1.0], np.sin(2 * np.pi * k * t / 2), np.cos(2 * np.pi * k * t / 2)])
    pre = x @ m.w_x.numpy().T + phi @ m.w_t.numpy().T + m.b.numpy()
    np.testing.assert_allclose(m.features(x, t).numpy(), fn(pre) / math.sqrt(8), rtol=1e-12)


@given(t=st.floats(0.01, 3.0), seed=st.integers(0, 1000))
def test_exact_denoiser_is_posterior_mean(t, seed):
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(6, 2))
    ex = ExactDenoiser(train)
    x = rng.normal(size=(5, 2))
    np.testing.assert_allclose(ex.denoise(x, t), SmoothedEmpirical(train, t).posterior_mean(x), atol=1e-13)
    a, h = OU().alpha(t), OU().h(t)
    np.testing.assert_allclose(ex.score(x, t), (a * ex.denoise(x, t) - x) / h, atol=1e-9)


@pytest.mark.parametrize("kwargs, name", [
    (dict(d=2, width=0), "width"), (dict(d=0, width=3), "d"),
    (dict(d=2, width=3, activation="gelu"), "activation"),
    (dict(d=2, width=3, parametrization="eps"), "parametrization"),
    (dict(d=2, width=3, feature_period=0.0), "feature_period"), (dict(d=2, width=3, seed=-1), "seed"),
])
def test_bad_model_args(kwargs, name):
    with pytest.raises(ValueError, match=name):
        RandomFeatureDenoiser(**kwargs)


def test_bad_model_inputs():
    m = RandomFeatureDenoiser(2, 4, n_frequencies=1)
    with pytest.raises(ValueError, match="x"):
        m.denoise(np.zeros((1, 3)), 0.5)
    with pytest.raises(ValueError, match="t"):
        m.denoise(np.zeros((1, 2)), 0.0)
    with pytest.raises(ValueError, match="A"):
        m.with_A(np.zeros((3, 4)))


@pytest.mark.cuda
def test_same_features_on_cuda():
    cpu = RandomFeatureDenoiser(3, 64, n_frequencies=4, seed=5)
    gpu = RandomFeatureDenoiser(3, 64, n_frequencies=4, seed=5, device="cuda")
    assert torch.equal(cpu.w_x, gpu.w_x.cpu()) and torch.equal(cpu.b, gpu.b.cpu())


@pytest.mark.parametrize("scale", [3.0, 3e5, 3e18, 3e50])
def test_exact_denoiser_memorizes_where_float64_resolves_it_and_warns_beyond(scale):
    """For (-s, 0), (s, 0) the posterior at x = (1, 0.5), t = 0.5 puts weight sigmoid(2 alpha s / h) on (s, 0)
    (closed form): right up to MAX_DATA_SCALE; beyond it the answer was (0, 0) from 3e18 on (issue 29,
    item 4), now with a RuntimeWarning at construction."""
    import warnings

    from ridgexr.process import MAX_DATA_SCALE

    train = np.array([[-scale, 0.0], [scale, 0.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ex = ExactDenoiser(train)
    warned = [w for w in caught if issubclass(w.category, RuntimeWarning) and "does not resolve" in str(w.message)]
    assert bool(warned) == (scale > MAX_DATA_SCALE)
    if scale <= MAX_DATA_SCALE:
        p = OU()
        a, h = p.alpha(0.5), p.h(0.5)
        weight = 1.0 / (1.0 + math.exp(-2.0 * a * scale / h))  # x . (x_2 - x_1) a / h = 2 a s / h
        np.testing.assert_allclose(ex.denoise(np.array([[1.0, 0.5]]), 0.5), [[scale * (2 * weight - 1), 0.0]],
                                   rtol=1e-12, atol=1e-12)


def test_node_bar_ignores_calls_after_its_last_node():
    """evaluate_denoiser reports (node + 1, n_time) once per block of rows: with one node and several blocks the
    bar got a call after it was removed (KeyError: 1 ended fashion-latent's held-out diagnostics at N = 60 000)."""
    from rich.console import Console
    from rich.progress import Progress

    from ridgexr.models.kind import FitContext

    bars = Progress(console=Console(file=io.StringIO()))
    ctx = FitContext(exp=None, train=None, say=print, bars=bars)
    advance = ctx.node_bar("held-out diagnostics")
    advance(1, 1)
    assert len(bars.tasks) == 0
    # a bar's time counts from its creation (the work before its first node's report), hidden until then
    timed = ctx.node_bar("held-out diagnostics")
    assert [t.visible for t in bars.tasks] == [False]
    time.sleep(0.2)
    timed(1, 2)
    assert [t.visible for t in bars.tasks] == [True] and bars.tasks[0].elapsed >= 0.2
    timed(2, 2)
    assert len(bars.tasks) == 0
    advance(1, 1)  # a second block of rows at the same (last) node
    assert len(bars.tasks) == 0
