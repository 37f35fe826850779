import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, ExactDenoiser, time_grid
from ridgexr.sampling import probability_flow, recorded_steps, reverse_sde, sample, within_bound

X1 = np.array([[2.0, -1.0]])


def exact_score(x, t):
    return ExactDenoiser(X1).score(x, t)


def test_probability_flow_matches_the_closed_form_for_one_point():
    """With p_t = N(alpha x1, h I) the flow is x_t = alpha_t x1 + sqrt(h_t / h_T) (x_T - alpha_T x1)."""
    ou = OU()
    grid = time_grid(400, 2.0, 0.01)
    blocks = list(probability_flow(exact_score, 64, 2, grid, seed=3, block_steps=100))
    x = torch.cat([b.x for b in blocks]).numpy()  # (steps, samples, d)
    x_T = x[0]
    t_end = grid[-1]
    expected = ou.alpha(t_end) * X1 + math.sqrt(ou.h(t_end) / ou.h(2.0)) * (x_T - ou.alpha(2.0) * X1)
    np.testing.assert_allclose(x[-1], expected, atol=2e-4)  # Heun: second order in the step


@pytest.mark.slow
def test_reverse_sde_reaches_the_right_gaussian():
    ou = OU()
    grid = time_grid(300, 4.0, 0.05)
    last = None
    for b in reverse_sde(exact_score, 20000, 2, grid, seed=1, block_steps=400):
        last = b.x[-1].numpy()
    # starting from N(0, I) ~ p_T, the law at t_min is N(alpha x1, h I) up to O(dt) and alpha_T^2
    np.testing.assert_allclose(last.mean(0), ou.alpha(0.05) * X1[0], atol=0.03)
    np.testing.assert_allclose(last.var(0), ou.h(0.05), rtol=0.12)


def test_blocks_are_consecutive_and_seeded():
    grid = time_grid(23, 1.0, 0.01)
    a = list(reverse_sde(exact_score, 5, 2, grid, seed=7, block_steps=4, record_every=3))
    steps = np.concatenate([b.step for b in a])
    np.testing.assert_array_equal(steps, recorded_steps(23, 3))
    assert steps[-1] == 23 and all(b.x.shape[0] <= 4 for b in a)
    np.testing.assert_array_equal(np.concatenate([b.index for b in a]), np.arange(steps.size))
    np.testing.assert_allclose(np.concatenate([b.t for b in a]), grid[steps])
    b = list(reverse_sde(exact_score, 5, 2, grid, seed=7, block_steps=4, record_every=3))
    assert all(torch.equal(u.x, v.x) for u, v in zip(a, b))
    c = list(reverse_sde(exact_score, 5, 2, grid, seed=8, block_steps=4, record_every=3))
    assert not torch.equal(a[-1].x, c[-1].x)


@pytest.mark.parametrize("kwargs, name", [
    (dict(kind="euler"), "kind"), (dict(n_samples=0), "n_samples"), (dict(block_steps=0), "block_steps"),
    (dict(grid=np.array([1.0, 2.0])), "grid"), (dict(record_every=0), "record_every"), (dict(d=0), "d"),
    (dict(seed=-1), "seed"),
])
def test_bad_sampler_args(kwargs, name):
    args = dict(kind="sde", score=exact_score, n_samples=2, d=2, grid=time_grid(5, 1.0, 0.1), seed=0,
                block_steps=2, record_every=1)
    args.update(kwargs)
    kind = args.pop("kind")
    with pytest.raises(ValueError, match=name):
        list(sample(kind, args.pop("score"), args.pop("n_samples"), args.pop("d"), args.pop("grid"), **args))


@pytest.mark.parametrize("kind", ["sde", "ode"])
def test_blocks_carry_the_score_the_sampler_used(kind):
    """StepBlock.score is score(x, t) at every recorded state, bit for bit, and NaN at the last step (never stepped
    from); the trajectory is the same as a hand-written Euler-Maruyama / Heun loop on the same noise
    (OU: -f(x) = x, g^2 = 2)."""
    grid = time_grid(11, 1.0, 0.05)
    blocks = list(sample(kind, exact_score, 6, 2, grid, seed=4, block_steps=4, record_every=2))
    for b in blocks:
        for i, (k, t) in enumerate(zip(b.step, b.t)):
            if k == grid.size - 1:
                assert torch.isnan(b.score[i]).all()
            else:
                assert torch.equal(b.score[i], exact_score(b.x[i], float(t)))
    # the hand-written sampler
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    states = [x]
    for k in range(grid.size - 1):
        t0, t1 = float(grid[k]), float(grid[k + 1])
        dt = t0 - t1
        if kind == "sde":
            noise = torch.randn(x.shape, generator=gen, dtype=x.dtype)
            x = x + (x + 2 * exact_score(x, t0)) * dt + math.sqrt(2 * dt) * noise
        else:
            v0 = x + exact_score(x, t0)
            xp = x + dt * v0
            x = x + 0.5 * dt * (v0 + xp + exact_score(xp, t1))
        states.append(x)
    recorded = torch.cat([b.x for b in blocks])
    np.testing.assert_allclose(recorded.numpy(), torch.stack(states)[recorded_steps(11, 2)].numpy(), atol=1e-13)


@given(seed=st.integers(0, 10_000), bound=st.sampled_from([0.0, 1.0, 3.0, 1e6, 1e300, math.inf]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_within_bound_is_finite_and_inside_the_bound(seed, bound, dtype):
    """Against a per-row reference: every entry finite and the float64 norm <= bound."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(40, 3)) * 10.0 ** rng.integers(-3, 8, size=(40, 1))
    x[rng.random((40, 3)) < 0.05] = np.nan
    x[rng.random((40, 3)) < 0.05] = np.inf
    x[rng.random((40, 3)) < 0.05] = -np.inf
    xt = torch.tensor(x, dtype=dtype)
    x64 = xt.double().numpy()
    expected = [bool(np.all(np.isfinite(r)) and np.linalg.norm(r) <= bound) for r in x64]
    assert within_bound(xt, bound).tolist() == expected


def test_inverse_sigma_matches_a_hand_stepped_euler_maruyama_loop():
    """The authors' sampler (MNIST.ipynb, euler_maruyama_sampler): geometric grid T q^-i, score = net(x, t) /
    sqrt(1 - e^-2t), x <- x + (x + 2 score) dt + sqrt(2 dt) z, written out step by step."""
    from ridgexr.sampling import scale_score

    T, t_min, n, seed = 10.0, 1e-3, 40, 5
    grid = time_grid(n, T, t_min, "exponential")
    np.testing.assert_allclose(grid, T * (T / t_min) ** (-np.arange(n + 1) / n), rtol=1e-12)
    blocks = list(reverse_sde(scale_score(exact_score, "inverse_sigma"), 6, 2, grid, seed=seed, block_steps=64))
    got = torch.cat([b.x for b in blocks]).numpy()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    hand = [x.numpy().copy()]
    for i in range(n):
        dt = grid[i] - grid[i + 1]
        z = torch.randn(6, 2, generator=gen, dtype=torch.float64)
        score = exact_score(x, grid[i]) / math.sqrt(1 - math.exp(-2 * grid[i]))
        x = x + (x + 2 * score) * dt + math.sqrt(2 * dt) * z
        hand.append(x.numpy().copy())
    np.testing.assert_allclose(got, np.stack(hand), rtol=1e-12, atol=1e-12)
    plain = torch.cat([b.x for b in reverse_sde(scale_score(exact_score, "none"), 6, 2, grid, seed=seed)]).numpy()
    assert np.abs(plain[-1] - got[-1]).max() > 1e-3  # the rescaling changes the samples


def test_implied_denoiser_inverts_the_score_and_sees_the_rescaling():
    from ridgexr.sampling import implied_denoiser, scale_score

    x = torch.tensor(np.random.default_rng(0).normal(size=(5, 2)))
    t = torch.tensor([0.05, 0.2, 0.5, 1.0, 3.0], dtype=torch.float64)
    exact = ExactDenoiser(X1)
    np.testing.assert_allclose(implied_denoiser(exact_score)(x, t), exact.denoise(x, t), atol=1e-12)
    ou = OU()
    h, a = ou.h(t)[:, None], ou.alpha(t)[:, None]
    expected = (x + h * exact_score(x, t) / torch.sqrt(h)) / a
    np.testing.assert_allclose(implied_denoiser(scale_score(exact_score, "inverse_sigma"))(x, t), expected,
                               rtol=1e-12)
