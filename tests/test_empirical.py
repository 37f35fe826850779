import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.special import logsumexp

from ridgexr import OU, SmoothedEmpirical


def brute(train, w, x, t):
    """Direct numpy evaluation of p_t's log density and posterior moments."""
    a, h = math.exp(-t), -math.expm1(-2 * t)
    d = train.shape[1]
    l = np.log(w) - ((x[:, None, :] - a * train[None]) ** 2).sum(-1) / (2 * h)
    lp = logsumexp(l, axis=1) - 0.5 * d * np.log(2 * np.pi * h)
    r = np.exp(l - logsumexp(l, axis=1, keepdims=True))
    m = r @ train
    dx = train[None] - m[:, None]
    c = np.einsum("qn,qnd,qne->qde", r, dx, dx)
    return lp, m, c


mixtures = st.tuples(
    st.integers(1, 40),  # N: both sides of empirical.SMALL_N (16)
    st.integers(1, 5),  # d
    st.floats(0.01, 3.0),  # t
    st.integers(0, 2**31 - 1),  # seed
    st.booleans(),  # random weights
)


@given(mixtures)
def test_moments_match_brute_force(params):
    n, d, t, seed, weighted = params
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)) * 2
    w = rng.uniform(0.1, 1.0, n) if weighted else np.ones(n)
    w = w / w.sum()
    x = rng.normal(size=(6, d)) * 2
    p = SmoothedEmpirical(train, t, weights=w)
    lp, m, c = brute(train, w, x, t)
    np.testing.assert_allclose(p.log_prob(x), lp, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(p.posterior_mean(x), m, atol=1e-10)
    np.testing.assert_allclose(p.posterior_cov(x), c, atol=1e-9)


@given(mixtures)
def test_score_and_hessian_match_autograd(params):
    n, d, t, seed, weighted = params
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)) * 2
    w = rng.uniform(0.1, 1.0, n) if weighted else None
    p = SmoothedEmpirical(train, t, weights=w)
    x = torch.tensor(rng.normal(size=(4, d)) * 2, dtype=torch.float64, requires_grad=True)

    def f(xx):
        return p.moments(xx, cov=False).log_prob.sum()

    g = torch.autograd.grad(f(x), x)[0]
    np.testing.assert_allclose(p.score(x.detach()).numpy(), g.numpy(), atol=1e-9, rtol=1e-9)
    for i in range(x.shape[0]):  # small test loop over 4 queries, autograd Hessian
        hess = torch.autograd.functional.hessian(lambda v: p.moments(v[None], cov=False).log_prob.sum(),
                                                 x[i].detach())
        np.testing.assert_allclose(p.hessian(x[i].detach()).numpy(), hess.numpy(), atol=1e-8, rtol=1e-8)


def test_hessian_identity_with_covariance(rng):
    train = rng.normal(size=(20, 3))
    t = 0.4
    p = SmoothedEmpirical(train, t)
    x = rng.normal(size=(10, 3))
    a, h = OU().alpha(t), OU().h(t)
    expected = (a**2 * p.posterior_cov(x) - h * np.eye(3)) / h**2
    np.testing.assert_allclose(p.hessian(x), expected, atol=1e-12)


def test_per_query_time_broadcast(rng):
    train = rng.normal(size=(15, 2))
    ts = np.array([0.05, 0.3, 1.0])
    x = rng.normal(size=(3, 8, 2))
    p = SmoothedEmpirical(train, ts[:, None])
    m = p.posterior_mean(x)
    for k, t in enumerate(ts):
        np.testing.assert_allclose(m[k], SmoothedEmpirical(train, t).posterior_mean(x[k]), atol=1e-13)
    with pytest.raises(ValueError, match="broadcast"):
        SmoothedEmpirical(train, np.ones(5)).posterior_mean(x)


@given(n=st.integers(1, 12), d=st.integers(1, 4), log10_t=st.floats(-4, 0.5), seed=st.integers(0, 10_000))
def test_small_training_sets_agree_with_the_streamed_path(n, d, log10_t, seed):
    """N <= SMALL_N takes the cancellation-free form for every query; the streamed GEMM path (with
    its own cancellation-free fallback for concentrated posteriors) gives the same moments, the
    same O(1)-scaled covariance where it does not underflow, and the same frames."""
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)) * 2
    t = 10.0**log10_t
    ou = OU()
    x = ou.alpha(t) * train[rng.integers(0, n, 40)] + math.sqrt(ou.h(t)) * rng.normal(size=(40, d))
    p = SmoothedEmpirical(train, t)
    assert n <= p.small_n  # the default, SMALL_N
    xt, tb = p.validate_queries(x)
    small = p.moments_flat(xt, tb, cov=True)
    p.small_n = 0
    streamed = p.moments_flat(xt, tb, cov=True)
    np.testing.assert_allclose(small.log_prob, streamed.log_prob, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(small.mean, streamed.mean, atol=1e-12 * (1 + np.abs(train).max()))
    cov_scale = np.abs(streamed.cov.numpy()).max()
    np.testing.assert_allclose(small.cov, streamed.cov, atol=1e-11 * max(cov_scale, 1e-300))
    # where the covariance underflows only the scaled form resolves it: compare that, up to its scale
    ratio = torch.exp(small.log_cov_scale - streamed.log_cov_scale)[:, None, None].numpy()
    unit = np.abs(small.cov_unit.numpy()).max((1, 2), keepdims=True) + 1e-300
    np.testing.assert_allclose(ratio * small.cov_unit.numpy() / unit, streamed.cov_unit.numpy() / unit, atol=1e-9)
    assert torch.all(small.cov_error >= 0)


def test_chunked_equals_unchunked(rng):
    train = rng.normal(size=(3000, 4)) * 3
    x = rng.normal(size=(257, 4)) * 3
    big = SmoothedEmpirical(train, 0.2)
    small = SmoothedEmpirical(train, 0.2, memory_budget=1 << 16)
    qc, nc = small._chunk_sizes(x.shape[0], 8, True, None)
    assert qc < x.shape[0] and nc < train.shape[0]  # both chunkings really happen
    np.testing.assert_allclose(small.log_prob(x), big.log_prob(x), rtol=1e-12)
    np.testing.assert_allclose(small.posterior_cov(x), big.posterior_cov(x), atol=1e-10)


@given(st.integers(1, 12), st.integers(1, 30), st.integers(0, 2**31 - 1))
def test_upper_triangle_second_moments_equal_the_full_outer_products(d, n, seed):
    """The second-moment product forms each distinct entry of x x^T once (kernels.outer_upper); unpacked,
    its sums are exactly symmetric and equal the full (d^2-column) product."""
    from ridgexr.empirical.kernels import outer_upper, symmetric_from_upper, upper_pairs

    g = np.random.default_rng(seed)
    x = torch.from_numpy(g.normal(size=(n, d)))
    w = torch.from_numpy(g.random((3, n)))
    pairs, unpack = upper_pairs(d, torch.device("cpu"))
    assert pairs.shape == (2, d * (d + 1) // 2)
    full = w @ (x[:, :, None] * x[:, None, :]).reshape(n, d * d)
    got = symmetric_from_upper(w @ outer_upper(x, pairs), unpack, d)
    assert torch.equal(got, got.mT)
    np.testing.assert_allclose(got.reshape(3, d * d).numpy(), full.numpy(), rtol=1e-12, atol=1e-12)


def assert_within_cov_error(a, b):
    """cov_unit of two Moments agree entrywise within their summed certified errors (plus rounding)."""
    diff = (a.cov_unit - b.cov_unit).abs().amax((1, 2))
    scale = 1 + a.cov_unit.abs().amax((1, 2))
    assert torch.all(diff <= a.cov_error + b.cov_error + 1e-9 * scale), (diff, a.cov_error, b.cov_error)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(n=st.integers(300, 700), k=st.integers(1, 300), log10_t=st.floats(-3, -1.7), seed=st.integers(0, 10_000))
def test_top_k_kept_chunk_by_chunk_matches_one_pass_and_brute_force(n, k, log10_t, seed):
    """Top-k moments with the training set streamed in chunks (256, 256, ..., a last one smaller
    than k for most k) equal those of one pass; the dropped mass equals the brute-force mass
    outside the k largest responsibilities; and the cancellation-free covariance of concentrated
    posteriors is the same whether it reuses the one-pass logits or computes them chunk by chunk.

    The training set is a cloud plus a point with 100 others on a sphere around it: at that point's
    image the posterior is concentrated but its top 64 leave out sphere points of equal weight, so the
    certified truncation error (``cov_error``) is far above rounding and tests the log-sum-exp used."""
    d = 4
    rng = np.random.default_rng(seed)
    sphere = rng.normal(size=(100, d))
    sphere *= 1.5 / np.linalg.norm(sphere, axis=1, keepdims=True)
    train = np.concatenate([rng.normal(size=(n - 101, d)) * 2 + [20.0, 0, 0, 0], np.zeros((1, d)), sphere])
    t = 10.0**log10_t
    ou = OU()
    near = ou.alpha(t) * train[rng.integers(0, n, 20)] + 0.1 * math.sqrt(ou.h(t)) * rng.normal(size=(20, d))
    x = np.concatenate([near, np.zeros((1, d)), rng.normal(size=(10, d)) * 3])
    one = SmoothedEmpirical(train, t, drop_tol=1.0)
    many = SmoothedEmpirical(train, t, drop_tol=1.0, memory_budget=1 << 16)
    for top_k in (k, None):
        qc, nc = many._chunk_sizes(x.shape[0], 8, True, top_k)
        assert nc < n and one._chunk_sizes(x.shape[0], 8, True, top_k)[1] == n  # streamed vs one pass
    a, b = one.moments(x, top_k=k), many.moments(x, top_k=k)
    l = -((x[:, None, :] - ou.alpha(t) * train[None]) ** 2).sum(-1) / (2 * ou.h(t))
    # log_cov_scale is a log-sum-exp of the logits: summed in another order (chunks with their own
    # maxima) it moves by a few ulps of the largest logit it sums, which reach 1e4 at small t
    lse_tol = 1e-12 + 16 * np.finfo(float).eps * np.abs(l).max(1)
    np.testing.assert_allclose(b.dropped_mass, a.dropped_mass, atol=1e-12)
    np.testing.assert_allclose(b.mean, a.mean, atol=1e-11)
    assert (np.abs(np.asarray(b.log_cov_scale) - np.asarray(a.log_cov_scale)) <= lse_tol).all()
    # ties among the sphere's points may keep different ones: the difference is within both certified bounds
    assert_within_cov_error(a, b)
    r = np.exp(l - logsumexp(l, 1, keepdims=True))
    np.testing.assert_allclose(a.dropped_mass, 1 - np.sort(r, axis=1)[:, n - k:].sum(1), atol=1e-12)
    ea, eb = one.moments(x), many.moments(x)
    assert (np.abs(np.asarray(eb.log_cov_scale) - np.asarray(ea.log_cov_scale)) <= lse_tol).all()
    assert_within_cov_error(ea, eb)
    np.testing.assert_allclose(eb.cov_error, ea.cov_error, rtol=1e-6)
    assert float(ea.log_cov_scale[20]) < 0  # the sphere's centre: a concentrated posterior (the scaled top-k form)
    assert float(ea.cov_error[20]) > 1e-6  # whose truncation error is visible


def test_stable_at_tiny_t_and_far_queries(rng):
    train = rng.normal(size=(10, 2))
    x = np.array([[1e4, -1e4], [0.3, 0.2]])
    for t in (1e-5, 1e-3, 5.0):
        p = SmoothedEmpirical(train, t)
        lp, m, c = brute(train, np.full(10, 0.1), x, t)
        got = p.log_prob(x)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, lp, rtol=1e-10)
        np.testing.assert_allclose(p.posterior_mean(x), m, atol=1e-9)
        assert np.all(np.isfinite(p.hessian(x)))


def test_top_k_reports_dropped_mass(rng):
    train = rng.normal(size=(200, 3)) * 2
    x = rng.normal(size=(30, 3))
    p = SmoothedEmpirical(train, 0.5, drop_tol=1.0)  # keep the truncation everywhere
    lp, m, c = brute(train, np.full(200, 1 / 200), x, 0.5)
    mom = p.moments(x, top_k=20)
    # exact dropped mass, recomputed by brute force from the responsibilities
    a, h = math.exp(-0.5), -math.expm1(-1.0)
    l = -((x[:, None, :] - a * train[None]) ** 2).sum(-1) / (2 * h)
    r = np.exp(l - logsumexp(l, 1, keepdims=True))
    kept = np.sort(r, axis=1)[:, -20:].sum(1)
    np.testing.assert_allclose(mom.dropped_mass.numpy(), 1 - kept, atol=1e-12)
    # the mean error is bounded by dropped mass times the data diameter
    diam = np.linalg.norm(train[:, None] - train[None], axis=-1).max()
    err = np.linalg.norm(mom.mean.numpy() - m, axis=1)
    assert np.all(err <= 2 * mom.dropped_mass.numpy() * diam + 1e-12)
    np.testing.assert_allclose(mom.log_prob.numpy(), lp, rtol=1e-12)  # log p uses all N


def test_top_k_falls_back_to_exact_above_the_bound(rng):
    train = rng.normal(size=(300, 3)) * 2
    x = np.concatenate([rng.normal(size=(20, 3)) * 8, 0.98 * train[:20] + 0.01 * rng.normal(size=(20, 3))])
    p = SmoothedEmpirical(train, 0.5, drop_tol=1e-6)
    mom = p.moments(x, top_k=16)
    assert float(mom.dropped_mass.max()) <= 1e-6  # the stated bound holds for every query
    exact = SmoothedEmpirical(train, 0.5).moments(x)
    np.testing.assert_allclose(mom.mean.numpy(), exact.mean.numpy(), atol=1e-5)
    loose = SmoothedEmpirical(train, 0.5, drop_tol=1.0).moments(x, top_k=16)
    assert float(loose.dropped_mass.max()) > 1e-6  # the bound was doing something
    with pytest.raises(ValueError, match="drop_tol"):
        SmoothedEmpirical(train, 0.1, drop_tol=2.0)


def test_numpy_and_torch_kinds(rng):
    train = rng.normal(size=(5, 2))
    p = SmoothedEmpirical(torch.tensor(train), 0.3)
    x = rng.normal(size=(4, 2))
    assert isinstance(p.score(x), np.ndarray)
    out = p.score(torch.tensor(x, dtype=torch.float32))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), p.score(x), rtol=1e-4, atol=1e-4)


def test_large_training_set_memory_bounded(rng):
    # N = 50 000 in d = 32 with a 64 MiB budget: chunked, finite, agrees with a subset check
    train = rng.normal(size=(50_000, 32)).astype(np.float64)
    p = SmoothedEmpirical(train, 0.5, memory_budget=64 << 20)
    x = rng.normal(size=(4, 32))
    c = p.posterior_cov(x)
    assert c.shape == (4, 32, 32) and np.all(np.isfinite(c))
    lp, m, cb = brute(train, np.full(50_000, 1 / 50_000), x[:1], 0.5)
    np.testing.assert_allclose(c[:1], cb, atol=1e-9)


@pytest.mark.parametrize("kwargs, name", [
    (dict(train=np.zeros((0, 2)), t=0.1), "train"),
    (dict(train=np.zeros(3), t=0.1), "train"),
    (dict(train=np.array([[0.0, np.nan]]), t=0.1), "train"),
    (dict(train=np.zeros((2, 2)), t=0.0), "t"),
    (dict(train=np.zeros((2, 2)), t=-1.0), "t"),
    (dict(train=np.zeros((2, 2)), t=0.1, weights=np.array([1.0])), "weights"),
    (dict(train=np.zeros((2, 2)), t=0.1, weights=np.array([-1.0, 2.0])), "weights"),
])
def test_bad_construction(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SmoothedEmpirical(**kwargs)


def test_bad_queries():
    p = SmoothedEmpirical(np.zeros((2, 2)), 0.1)
    with pytest.raises(ValueError, match="x"):
        p.score(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="x"):
        p.score(np.array([[np.inf, 0.0]]))
    with pytest.raises(ValueError, match="top_k"):
        p.posterior_mean(np.zeros((1, 2)), top_k=0)
