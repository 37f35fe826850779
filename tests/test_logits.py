"""Certified float32 logits of the top-k pass (ridgexr/empirical/kernels.py, ``logits="float32"``):
the rounding bound against float64 brute force at N = 60 000 (Fashion-MNIST pixels), and the
top-k moments and low-rank frames against the float64 path."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from ridgexr import SmoothedEmpirical
from ridgexr.catalog import open_catalog
from ridgexr.catalog.sections import RidgeSpec
from ridgexr.empirical.kernels import logit_error_bound, matmul_unit_roundoff, prepare_training_set, topk_logits

FASHION = Path("/usr/share/datasets/fashion-mnist")
needs_fashion = pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").is_file(),
                                   reason="Debian package dataset-fashion-mnist not installed "
                                          "(apt-get install dataset-fashion-mnist)")


def queries(train: np.ndarray, p: SmoothedEmpirical, t: float, q: int, seed: int) -> np.ndarray:
    """q noisy training points at time t: alpha_t x_i + sqrt(h_t) z."""
    rng = np.random.default_rng(seed)
    a, h = p.process.alpha(t), p.process.h(t)
    return a * train[rng.choice(len(train), q, replace=False)] + math.sqrt(h) * rng.normal(size=(q, train.shape[1]))


def brute_logits(train: np.ndarray, x: np.ndarray, a: float, h: float) -> np.ndarray:
    """log w_i - |x - a x_i|^2 / (2 h) (uniform w), float64, one query row at a time (no expansion)."""
    return np.stack([-((xq - a * train) ** 2).sum(1) / (2 * h) - math.log(len(train)) for xq in x])


@needs_fashion
@pytest.mark.slow
def test_float32_logits_at_sixty_thousand_images_are_within_the_bound_and_it_is_not_vacuous():
    """N = 60 000 Fashion-MNIST images in [-1, 1], d = 784: every float32 logit is within the stated bound
    eps of float64 brute force, the observed maximum is within 1 000 x of eps (300-800 x here: a worst-case
    bound), and the top-k moments with float32 logits are within their certified bounds of brute force."""
    from ridgexr.datasets.images import load_images

    train = load_images("fashion-mnist", scale="symmetric")[0].astype(np.float64)
    p = SmoothedEmpirical(train, 1.0, logits="float32")
    n, d = train.shape
    w = torch.full((n,), 1.0 / n, dtype=torch.float64)
    tr = prepare_training_set(torch.from_numpy(train), w, torch.float64, torch.device("cpu"), 1 << 30, "float32")
    center = train.mean(0)
    diam = 2 * p.radius
    for i, t in enumerate((0.01, 0.1, 0.5)):
        a, h = p.process.alpha(t), p.process.h(t)
        x = queries(train, p, t, 3, seed=i)
        want = brute_logits(train, x, a, h)
        y = torch.from_numpy(x - a * center)
        yaug = torch.cat([y * (a / h), torch.full((3, 1), -0.5 * a * a / h, dtype=torch.float64),
                          torch.ones(3, 1, dtype=torch.float64)], 1)
        # the kernels' logits drop the per-query constant |y|^2 / (2 h): add it back in float64
        got = (yaug.float() @ tr["aug32_t"]).double().numpy() - (y * y).sum(1, keepdim=True).numpy() / (2 * h)
        eps = logit_error_bound(yaug, tr, matmul_unit_roundoff(torch.device("cpu"))).numpy()
        err = np.abs(got - want).max(1)
        assert (err <= eps).all(), (t, err, eps)
        assert (err >= eps / 1000).all(), (t, err / eps)
        # the top-k moments: the mean within dropped mass x diameter of brute force, log p_t within
        # log(1 + (e^(2 eps) - 1) dropped) (+ float64 rounding of the ~1e3-1e4 logits)
        mom = p.with_time(t).moments(x, cov=False, top_k=64)
        r = np.exp(want - want.max(1, keepdims=True))
        lse = want.max(1) + np.log(r.sum(1))
        want_mean = (r / r.sum(1, keepdims=True)) @ train
        want_lp = lse - 0.5 * d * math.log(2 * math.pi * h)
        drop = mom.dropped_mass.numpy()
        assert (drop <= p.drop_tol).all() or t == 0.5
        ok = drop <= p.drop_tol
        assert (np.linalg.norm(mom.mean.numpy() - want_mean, axis=1)[ok] <= drop[ok] * diam + 1e-9).all()
        lp_bound = np.log1p(np.expm1(2 * eps) * drop) + 1e-12 * np.abs(want_lp)
        assert (np.abs(mom.log_prob.numpy() - want_lp) <= lp_bound + 1e-9).all()


def cluster_data(seed: int, n: int = 3000, d: int = 40, scale: float = 1.0):
    """Clusters of 30 points around n / 30 centres: top-k posteriors hold near the centres at small t."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n // 30, d)) * 3 * scale
    return np.repeat(centres, 30, 0) + rng.normal(size=(n, d)) * 0.3 * scale


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), t=st.sampled_from([0.005, 0.05, 0.3, 1.0]), scale=st.sampled_from([0.1, 1.0, 10.0]))
def test_float32_top_k_moments_equal_float64_where_certified(seed, t, scale):
    """moments(top_k) with float32 logits: the same kept points, so mean and covariance equal the float64
    path to rounding; the dropped mass is an upper bound of the float64 one, at most e^(2 eps) times it;
    queries whose bound exceeds drop_tol were computed exactly (dropped mass 0), as in float64."""
    train = cluster_data(seed, scale=scale)
    p64 = SmoothedEmpirical(train, t, memory_budget=1 << 22)  # several streamed chunks
    p32 = SmoothedEmpirical(train, t, memory_budget=1 << 22, logits="float32")
    x = queries(train, p64, t, 12, seed)
    m64, m32 = p64.moments(x, top_k=32), p32.moments(x, top_k=32)
    np.testing.assert_allclose(m32.mean.numpy(), m64.mean.numpy(), rtol=0, atol=1e-12 * (1 + p64.radius))
    cov_scale = torch.exp(m64.log_cov_scale)[:, None, None]
    np.testing.assert_allclose((m32.cov * 1).numpy(), m64.cov.numpy(), rtol=0,
                               atol=1e-10 * float(cov_scale.max()) * (1 + p64.radius) ** 2 + 1e-300)
    np.testing.assert_allclose(m32.log_prob.numpy(), m64.log_prob.numpy(), rtol=1e-12, atol=1e-9)
    d32, d64 = m32.dropped_mass.numpy(), m64.dropped_mass.numpy()
    exact32 = d32 == 0
    assert (d32 <= p32.drop_tol).all()
    # where float32 certified the truncation, its dropped mass bounds the float64 one from above (to rounding)
    tr = p32._train_on(torch.float64, torch.device("cpu"))
    a, h = p32.process.alpha(t), p32.process.h(t)
    y = torch.from_numpy(x) - a * tr["center"]
    yaug = torch.cat([y * (a / h), torch.full((12, 1), -0.5 * a * a / h, dtype=torch.float64),
                      torch.ones(12, 1, dtype=torch.float64)], 1)
    eps = logit_error_bound(yaug, tr, 2.0**-24).numpy()
    cert = ~exact32  # (both dropped masses are differences of sums: rounding ~ 1e-16 absolute)
    assert (d32[cert] >= d64[cert] * (1 - 1e-9) - 1e-14).all()
    assert (d32[cert] <= d64[cert] * np.exp(2 * eps[cert]) * (1 + 1e-9) + 1e-14).all()


def test_topk_logits_float32_certifies_every_dropped_logit():
    """topk_logits with float32 products: the kept logits are the float64 ones (sorted), dropped_max bounds
    every logit left out, and the returned log-sum-exp bounds the true one from above by at most eps."""
    train = cluster_data(3, n=1200, d=30, scale=5.0)
    n = len(train)
    w = torch.full((n,), 1.0 / n, dtype=torch.float64)
    tr32 = prepare_training_set(torch.from_numpy(train), w, torch.float64, torch.device("cpu"), 1 << 24, "float32")
    rng = np.random.default_rng(0)
    yaug = torch.from_numpy(rng.normal(size=(9, 32)))
    yaug[:, 30] = -torch.from_numpy(rng.uniform(0.5, 50, 9))  # -alpha^2 / (2 h) < 0
    yaug[:, 31] = 1.0
    full = (yaug @ tr32["aug_t"]).numpy()  # float64 logits of all N points
    val, idx, lse_rel, shift, dropped_max = topk_logits(yaug, tr32, 100, 16)
    np.testing.assert_allclose(val.numpy(), np.take_along_axis(full, idx.numpy(), 1), rtol=1e-13, atol=1e-9)
    assert (np.diff(val.numpy(), axis=1) <= 0).all()
    mask = np.ones_like(full, dtype=bool)
    np.put_along_axis(mask, idx.numpy(), False, 1)
    eps = logit_error_bound(yaug, tr32, 2.0**-24).numpy()
    assert (np.where(mask, full, -np.inf).max(1) <= dropped_max.numpy()).all()
    top = full.max(1)
    true_lse = top + np.log(np.exp(full - top[:, None]).sum(1))
    got = (shift + lse_rel).numpy()
    assert (got >= true_lse - 1e-9).all() and (got <= true_lse + eps + 1e-9).all()


def test_float32_low_rank_frames_equal_float64():
    """spectrum_flat (Gram path under top-k) with float32 logits: the same eigenpairs as float64."""
    train = cluster_data(7, n=1500, d=150)
    p64 = SmoothedEmpirical(train, 0.02)
    p32 = SmoothedEmpirical(train, 0.02, logits="float32")
    x = torch.from_numpy(queries(train, p64, 0.02, 6, 1))
    tf = torch.full((6,), 0.02, dtype=torch.float64)
    s64 = p64.spectrum_flat(x, tf, n_eig=4, need=3, top_k=32)
    s32 = p32.spectrum_flat(x, tf, n_eig=4, need=3, top_k=32)
    assert torch.equal(s64.path, s32.path) and torch.equal(s64.rank, s32.rank)
    np.testing.assert_allclose(s32.values.numpy(), s64.values.numpy(), rtol=1e-10, atol=1e-12)
    proj = lambda v: v[:, :, :3] @ v[:, :, :3].mT  # noqa: E731
    np.testing.assert_allclose(proj(s32.vectors).numpy(), proj(s64.vectors).numpy(), atol=1e-8)


def test_matmul_unit_roundoff_follows_torchs_precision_setting():
    before = torch.get_float32_matmul_precision()
    try:
        assert matmul_unit_roundoff(torch.device("cpu")) == 2.0**-24
        torch.set_float32_matmul_precision("high")
        assert matmul_unit_roundoff(torch.device("cpu")) == 2.0**-11
        torch.set_float32_matmul_precision("medium")
        assert matmul_unit_roundoff(torch.device("cpu")) == 2.0**-8
    finally:
        torch.set_float32_matmul_precision(before)


def test_logits_option_is_validated_and_hash_neutral():
    with pytest.raises(ValueError, match="`logits` must be one of"):
        SmoothedEmpirical(np.zeros((2, 2)), 1.0, logits="float16")
    with pytest.raises(ValueError, match="logits"):
        RidgeSpec(logits="half")
    exp = open_catalog()["two-points"]
    train = np.array([[-1.0, 0.0], [1.0, 0.0]])
    h = exp.config_hash(train)
    with_ridge = lambda v: exp.model_copy(update={"ridge": exp.ridge.model_copy(update={"logits": v})})  # noqa: E731
    assert with_ridge("float64").config_hash(train) == h != with_ridge("float32").config_hash(train)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_float32_logits_on_cuda_equal_the_cpu_float64_path():
    train = cluster_data(11, n=2000, d=60)
    x = queries(train, SmoothedEmpirical(train, 0.05), 0.05, 8, 2)
    m64 = SmoothedEmpirical(train, 0.05).moments(x, top_k=32)
    p32 = SmoothedEmpirical(torch.from_numpy(train).cuda(), 0.05, logits="float32")
    m32 = p32.moments(torch.from_numpy(x).cuda(), top_k=32)
    np.testing.assert_allclose(m32.mean.cpu().numpy(), m64.mean.numpy(), rtol=0, atol=1e-10)
    assert (m32.dropped_mass.cpu().numpy() <= p32.drop_tol).all()
