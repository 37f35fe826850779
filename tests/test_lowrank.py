"""Low-rank ridge frames (ridgexr/empirical/lowrank.py) against the dense eigh path, the randomized
path's certificate, and memory-bounded moments at image scale (N up to 60 000, d = 784)."""

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from ridgexr import SmoothedEmpirical, project_to_ridge, ridge_residual
from ridgexr.empirical.lowrank import (PATH_DENSE, PATH_GRAM, PATH_RANDOMIZED, PATH_SUPPORT, SUPPORT_RTOL,
                                      certify_subspace, support_spectrum)
from ridgexr.scms import frame_flat, frame_width

D = 784
FASHION = Path("/usr/share/datasets/fashion-mnist")


def cluster_problem(seed: int, rel_gap: float, n: int = 2000, d: int = D, n_near: int = 1, inside: float = 0.0):
    """n - 8 far-apart points and a cluster of 8 around c whose two largest spreads differ by ``rel_gap``;
    ``n_near`` queries near alpha c (offset orthogonally to the cluster, and by ``inside`` x that noise
    within it) and one near a far point.

    At t = 0.5 the posterior near c is carried by the cluster (the far points' mass is ~exp(-400)):
    the certified top-k support holds, so the Gram path and the dense top-k path both run.
    """
    rng = np.random.default_rng(seed)
    far = rng.normal(size=(n - 8, d))
    c = rng.normal(size=d) * 0.1
    u = np.linalg.qr(rng.normal(size=(d, 4)))[0]
    spreads = np.array([1.5, 1.5 * (1 + rel_gap), 0.8, 0.4])
    coef = np.concatenate([np.eye(4), -np.eye(4)]) * spreads
    cluster = c + coef @ u.T
    train = np.concatenate([far, cluster])
    p = SmoothedEmpirical(train, 0.5)
    a, h = p.process.alpha(0.5), p.process.h(0.5)
    # queries at alpha c plus noise orthogonal to the cluster: the cluster's posterior weights stay symmetric,
    # so the top two covariance eigenvalues differ by O(rel_gap) (near-degenerate for small gaps)
    noise = 0.3 * math.sqrt(h) * rng.normal(size=(n_near, d))
    x = a * c + noise - (noise @ u) @ u.T + inside * (noise @ u) @ u.T  # ``inside`` > 0: asymmetric
    x = np.concatenate([x, a * far[:1] + 0.01 * rng.normal(size=(1, d))])  # one concentrated on a far point
    return p, torch.tensor(x)


def assert_frames_agree(dense, low, d_star, tol=1e-8, n_values=None):
    """Flags equal; where the frame is determined, the tangent projectors, normal curvatures, top
    ``n_values`` eigenvalues (default all computed) and residuals agree to ``tol`` plus the eigenvector
    perturbation bound eps |C| / gap."""
    assert torch.equal(dense.degenerate, low.degenerate)
    assert torch.equal(dense.resolved_rank, low.resolved_rank)
    assert not bool(low.rank_censored.any())
    m = low.eigenvalues.shape[-1]
    assert m == frame_width(dense.step.shape[-1], d_star) and low.normal is None
    scale = dense.eigenvalues[:, :m].abs().amax(-1)
    nv = m if n_values is None else n_values
    np.testing.assert_allclose(low.eigenvalues[:, :nv], dense.eigenvalues[:, :nv], rtol=0,
                               atol=float(tol * scale.max()))
    ok = ~dense.degenerate
    pt_d = dense.tangent @ dense.tangent.mT
    pt_l = low.tangent @ low.tangent.mT
    bound = tol + 64 * 2.2e-16 / (dense.eigengap.abs() / scale).clamp_min(1e-300)
    diff = (pt_d - pt_l).abs().amax((-1, -2))
    assert bool((diff[ok] <= bound[ok]).all()), (diff, bound, dense.degenerate)
    res_d = dense.project_normal(dense.step).norm(dim=-1) / dense.h
    res_l = low.project_normal(low.step).norm(dim=-1) / low.h
    step = dense.step.norm(dim=-1) / dense.h
    assert bool(((res_d - res_l).abs()[ok] <= (bound * step)[ok] + 1e-12).all())
    np.testing.assert_allclose(low.normal_curvature[ok], dense.normal_curvature[ok], rtol=tol)


@pytest.mark.slow
@settings(max_examples=3)
@given(log10_gap=st.floats(-12, -1), d_star=st.integers(1, 2), seed=st.integers(0, 1000))
def test_gram_frames_equal_the_dense_eigh_path(log10_gap, d_star, seed):
    """Top-k support (dropped mass <= drop_tol): the k x k Gram path gives the dense path's frame,
    including gaps near the degenerate floor (hypothesis draws gaps 1e-12 .. 1e-1)."""
    p, x = cluster_problem(seed, 10.0 ** log10_gap)
    t = torch.full((x.shape[0],), 0.5, dtype=torch.float64)
    dense = frame_flat(p, x, t, d_star, "log", 64, frame="dense")
    low = frame_flat(p, x, t, d_star, "log", 64, frame="lowrank")
    spec = p.spectrum_flat(x, t, n_eig=frame_width(D, d_star), need=d_star + 1, top_k=64)
    assert bool((spec.path == PATH_GRAM).all())
    assert_frames_agree(dense, low, d_star)


def test_scms_projections_equal_on_the_gram_path():
    """project_to_ridge: the low-rank frames give the dense path's projected points and diagnostics
    (d = 200: the dense reference diagonalises a (d, d) matrix per point and iteration)."""
    p, x = cluster_problem(3, 0.3, d=200, n_near=3, inside=0.5)
    kw = dict(top_k=64, max_iter=40)
    dense = project_to_ridge(p, x[:3], 1, frame="dense", **kw)
    low = project_to_ridge(p, x[:3], 1, frame="lowrank", **kw)
    for name in ("converged", "degenerate", "iterations", "on_ridge"):
        np.testing.assert_array_equal(getattr(low, name), getattr(dense, name), err_msg=name)
    assert bool(dense.converged.all()) and int(dense.iterations.min()) >= 5
    np.testing.assert_allclose(low.point, dense.point, rtol=0, atol=1e-8)
    np.testing.assert_allclose(low.residual, dense.residual, rtol=0, atol=1e-8)
    np.testing.assert_allclose(low.normal_curvature, dense.normal_curvature, rtol=1e-8)


def spread_problem(seed: int, n: int = 2000, d: int = D):
    """Points on a 30-dim ellipsoid (geometric spreads) plus 1e-3 noise, queried at t = 0.3: posteriors
    spread over many points, so the exact dense path and the randomized path run."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.normal(size=(d, 30)))[0]
    train = (rng.normal(size=(n, 30)) * (2.0 * 0.8 ** np.arange(30))) @ u.T + 1e-3 * rng.normal(size=(n, d))
    p = SmoothedEmpirical(train, 0.3)
    a, h = p.process.alpha(0.3), p.process.h(0.3)
    x = a * train[:2] + math.sqrt(h) * (rng.normal(size=(2, 30)) @ u.T)
    return p, torch.tensor(x)


@pytest.mark.slow
def test_randomized_frames_equal_the_dense_eigh_path():
    """Spread posteriors over all N = 2 000 points: the certified subspace iteration (made to run at d = 784
    by ``randomized_min_d = 0``) gives the dense frame; its rank is censored at the block width where the
    dense rank is at least that."""
    p, x = spread_problem(0)
    p.randomized_min_d = 0
    t = torch.full((x.shape[0],), 0.3, dtype=torch.float64)
    spec = p.spectrum_flat(x, t, n_eig=frame_width(D, 3), need=4)
    assert bool((spec.path == PATH_RANDOMIZED).all())
    assert bool((spec.eig_error < 1e-9 * spec.values[:, 0]).all())
    dense = frame_flat(p, x, t, 3, "log", None, frame="dense")
    low = frame_flat(p, x, t, 3, "log", None, frame="lowrank")
    assert bool(low.rank_censored.all()) and bool((dense.resolved_rank >= frame_width(D, 3)).all())
    low.rank_censored[:] = False
    low.resolved_rank = dense.resolved_rank
    assert_frames_agree(dense, low, 3, n_values=4)  # the certified d* + 1 (the rest of the block: no claim)


@pytest.mark.slow
def test_support_frames_equal_the_dense_eigh_path():
    """Spread posteriors at d = 784 (below ``randomized_min_d``): the covariance formed over each query's
    certified support gives the dense frame, with the exact resolved rank (nothing censored)."""
    p, x = spread_problem(0)
    t = torch.full((x.shape[0],), 0.3, dtype=torch.float64)
    spec = p.spectrum_flat(x, t, n_eig=frame_width(D, 3), need=4)
    assert bool((spec.path == PATH_SUPPORT).all())
    dense = frame_flat(p, x, t, 3, "log", None, frame="dense")
    low = frame_flat(p, x, t, 3, "log", None, frame="lowrank")
    assert_frames_agree(dense, low, 3)


def brute_covariance(resp, mean, xc):
    """Sum_i r_i (x_i - mu)(x_i - mu)^T over all points, numpy float64 (one (N, d) product)."""
    z = xc - mean[:, None, :]
    return np.einsum("qn,qni,qnj->qij", resp, z, z)


@settings(max_examples=12, deadline=None)
@given(decay=st.floats(0.2, 0.999), n=st.integers(30, 400), seed=st.integers(0, 1000))
@example(decay=0.2, n=300, seed=0)  # supports of a few dozen points: the Gram form (k <= d)
@example(decay=0.999, n=400, seed=1)  # supports of ~all 400 points: the formed covariance (k > d)
def test_support_spectrum_equals_the_full_covariance(decay, n, seed):
    """support_spectrum against eigh of the covariance over all N points (numpy): the top eigenvalues within
    the reported eig_error (+ rounding), the top eigenvectors' projector, the exact rank, and the certified
    support (the dropped responsibility delta has delta diam^2 <= SUPPORT_RTOL trace).  Responsibilities decay
    geometrically from a random order, so supports from a few points (Gram form, k <= d) to all N
    (formed covariance, k > d) occur."""
    rng = np.random.default_rng(seed)
    d, m = 40, 6
    xc = rng.normal(size=(n, d)) * np.linspace(2.0, 0.1, d)
    logits = np.log(decay) * np.stack([rng.permutation(n) for _ in range(3)]) + 1e-3 * rng.normal(size=(3, n))
    resp = np.exp(logits - logits.max(1, keepdims=True))
    resp /= resp.sum(1, keepdims=True)
    mean = resp @ xc
    cov = brute_covariance(resp, mean, xc)
    trace = np.trace(cov, axis1=1, axis2=2)
    diam2 = 4 * float((xc * xc).sum(1).max())
    err = 64 * 2.2e-16 * (resp @ (xc * xc).sum(1))
    gen = torch.Generator().manual_seed(0)
    values, vectors, eig_error, rank, k = support_spectrum(torch.tensor(resp), torch.tensor(mean), torch.tensor(xc),
                                                           torch.tensor(err), torch.tensor(trace), m, diam2,
                                                           1 << 20, gen)
    if (decay, n) == (0.2, 300):
        assert bool((k <= d).all())
    if (decay, n) == (0.999, 400):
        assert bool((k > d).all())
    # the certified support: the ranks beyond k carry at most the allowance, the k-th one more
    r_sorted = -np.sort(-resp, 1)
    tail = np.cumsum(r_sorted[:, ::-1], 1)[:, ::-1]
    allow = SUPPORT_RTOL * trace / diam2
    kk = k.numpy()
    for q in range(3):
        dropped = tail[q, kk[q]] if kk[q] < n else 0.0
        assert dropped <= allow[q] * (1 + 1e-12)
        assert tail[q, kk[q] - 1] > allow[q] or kk[q] == 1
        np.testing.assert_allclose(float(eig_error[q]), dropped * diam2, rtol=1e-12, atol=1e-300)
    lam, vec = np.linalg.eigh(cov)
    lam, vec = lam[:, ::-1], vec[:, :, ::-1]
    scale = lam[:, 0]
    tol = eig_error.numpy() + 1e-12 * scale
    assert (np.abs(values.numpy() - lam[:, :m]) <= tol[:, None]).all()
    floor = 2 * d * err + np.sqrt(2.2e-16) * np.abs(lam).max(1)
    near = np.abs(lam[:, :, None] - floor[:, None, None]) < 1e-9 * scale[:, None, None]
    if not near.any():  # (a value within rounding of the floor could be counted either way)
        np.testing.assert_array_equal(rank.numpy(), (lam > floor[:, None]).sum(1))
    # the leading eigenvectors where their gap is resolved
    for q in range(3):
        for j in range(2):
            gap = min(abs(lam[q, j] - lam[q, j + 1]), abs(lam[q, j - 1] - lam[q, j]) if j else np.inf)
            if gap > 1e-6 * scale[q]:
                cos = abs(float(vectors[q, :, j].numpy() @ vec[q, :, j]))
                assert cos > 1 - 1e-8 * (scale[q] / gap) ** 2
    assert vectors.shape == (3, d, m)
    np.testing.assert_allclose(vectors.mT @ vectors, np.broadcast_to(np.eye(m), (3, m, m)), atol=1e-10)


def test_certificate_rejects_a_wrong_subspace():
    """An invariant subspace that misses the top eigenvector has zero residuals, yet the complement
    bound exceeds its Ritz values; a random subspace has large residuals; the true one passes."""
    rng = np.random.default_rng(1)
    d, m = 60, 6
    q_mat = np.linalg.qr(rng.normal(size=(d, d)))[0]
    lam = 10.0 * 0.5 ** np.arange(d)
    c = torch.tensor((q_mat * lam) @ q_mat.T)[None]

    def apply(rows, v):
        return c[rows] @ v

    gen = torch.Generator().manual_seed(0)
    for cols, want in ((range(0, m), True), (range(1, m + 1), False)):
        v = torch.tensor(q_mat[:, list(cols)])[None]
        theta = torch.tensor(lam[list(cols)])[None]
        res = torch.linalg.vector_norm(c @ v - v * theta[:, None, :], dim=1)
        ok, err = certify_subspace(apply, theta, v, res, 2, gen)
        assert bool(ok[0]) is want, cols
        if want:
            assert float(err[0]) < 1e-12
    v = torch.linalg.qr(torch.tensor(rng.normal(size=(1, d, m))))[0]
    h = v.mT @ c @ v
    theta, u = torch.linalg.eigh(h)
    theta, u = theta.flip(-1), u.flip(-1)
    y = v @ u
    res = torch.linalg.vector_norm(c @ y - y * theta[:, None, :], dim=1)
    assert not bool(certify_subspace(apply, theta, y, res, 2, gen)[0][0])


def test_uncertified_queries_fall_back_to_the_dense_path():
    """With one application allowed the randomized path cannot certify: those queries take the dense
    path, whose eigenvalues are those of the formed covariance."""
    p, x = spread_problem(1, n=300, d=200)
    t = torch.full((2,), 0.3, dtype=torch.float64)
    spec = p.spectrum_flat(x, t, n_eig=6, need=2, max_iter=1, force="randomized")
    assert bool((spec.path == PATH_DENSE).all())
    cov = p.moments_flat(x, t, cov=True).cov_unit
    mu = torch.linalg.eigvalsh(cov).flip(-1)[:, :6]
    np.testing.assert_allclose(spec.values, mu, rtol=1e-12, atol=1e-14)


def fashion_or_random(n: int):
    """The Fashion-MNIST training images in [0, 1] (the Debian package), or random data of that size."""
    if (FASHION / "train-images-idx3-ubyte.gz").is_file():
        from ridgexr.datasets.mnist import load_idx_dir
        return load_idx_dir(FASHION)[0][:n], "fashion-mnist"
    return np.random.default_rng(0).uniform(size=(n, D)), "random"


@pytest.mark.slow
def test_streamed_moments_at_sixty_thousand_points_equal_brute_force():
    """N = 60 000, d = 784, a 32 MiB budget (the training set streamed in chunks): log p_t and E[x0|x]
    equal a float64 brute force (numpy logits and log-sum-exp over all N) for a few queries."""
    train, _ = fashion_or_random(60_000)
    rng = np.random.default_rng(2)
    for t in (0.5,):  # posteriors over thousands of images: the running maximum moves between chunks
        p = SmoothedEmpirical(train, t, memory_budget=1 << 25)
        a, h = p.process.alpha(t), p.process.h(t)
        x = a * train[rng.choice(len(train), 3)] + math.sqrt(h) * rng.normal(size=(3, D))
        mom = p.moments(x, cov=False)
        logits = -(np.sum(x * x, 1)[:, None] - 2 * a * x @ train.T + a * a * np.sum(train * train, 1)[None]) / (2 * h)
        top = logits.max(1, keepdims=True)
        r = np.exp(logits - top)
        lse = top[:, 0] + np.log(r.sum(1))
        want_lp = lse - math.log(len(train)) - 0.5 * D * math.log(2 * math.pi * h)
        want_mean = (r / r.sum(1, keepdims=True)) @ train
        np.testing.assert_allclose(mom.log_prob.numpy(), want_lp, rtol=1e-10)
        np.testing.assert_allclose(mom.mean.numpy(), want_mean, rtol=0, atol=1e-9)


def test_top_k_fallback_stays_within_the_memory_budget(tmp_path):
    """frame_flat(top_k=8) where top-k cannot certify (spread posteriors): the exact recomputation
    streams in its own chunks; with the top-k chunk it built (600, 784^2) blocks (2.9 GB)."""
    script = textwrap.dedent("""
        import resource, numpy as np, torch
        from ridgexr import SmoothedEmpirical
        from ridgexr.scms import frame_flat
        rng = np.random.default_rng(0)
        p = SmoothedEmpirical(rng.uniform(size=(600, 784)), 1.0, memory_budget=1 << 28)
        x = torch.tensor(rng.uniform(size=(2, 784)))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        fr = frame_flat(p, x, torch.full((2,), 1.0, dtype=torch.float64), 1, "log", 8, frame="dense")
        assert float(fr.dropped_mass.max()) == 0.0  # recomputed exactly
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip()) < 1.0, out.stdout  # GB of peak RSS growth (the budget is 0.25 GB)



@pytest.mark.slow
def test_the_support_path_stays_within_the_memory_budget(tmp_path):
    """spectrum_flat on 300 spread queries over N = 800 > d = 400 points (supports of all 800: the formed
    covariance) with a 256 MiB budget: the query chunk counts the (d, d) covariance and eigh's vectors
    (measured 0.44 GB of growth; without them all 300 queries went at once: 1.27 GB)."""
    script = textwrap.dedent("""
        import resource, numpy as np, torch
        from ridgexr import SmoothedEmpirical
        from ridgexr.empirical.lowrank import PATH_SUPPORT
        rng = np.random.default_rng(0)
        p = SmoothedEmpirical(rng.uniform(size=(800, 400)), 1.0, memory_budget=1 << 28)
        x = torch.tensor(rng.uniform(size=(300, 400)))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        spec = p.spectrum_flat(x, torch.full((300,), 1.0, dtype=torch.float64), n_eig=12, need=2)
        assert bool((spec.path == PATH_SUPPORT).all())
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip()) < 1.0, out.stdout  # GB of peak RSS growth (the budget is 0.25 GB)

def test_observation_with_low_rank_frames_equals_the_dense_one():
    """step_quantities: the model-error split by a low-rank frame equals the dense split (N N^T e = e - T T^T e);
    the split at the resolved rank is the dense one where the rank is below the computed block (Gram path)."""
    from ridgexr.observe import step_quantities

    p, x = cluster_problem(5, 0.2, d=200, n_near=3, inside=0.5)
    rng = np.random.default_rng(0)
    shift = torch.tensor(rng.normal(size=(1, 200)) * 0.05)

    def denoise(xx, tt):  # a model with a known error: the exact denoiser shifted by a constant
        return p.with_time(tt).moments(xx, cov=False).mean + shift

    kw = dict(max_iter=8, top_k=64)
    dense = step_quantities(p, x[None], np.array([0.5]), 2, denoise, frame="dense", **kw)
    low = step_quantities(p, x[None], np.array([0.5]), 2, denoise, frame="lowrank", **kw)
    assert not dense["frame_degenerate"].any()
    for name in ("frame_degenerate", "ridge_converged", "resolved_rank"):
        np.testing.assert_array_equal(low[name], dense[name], err_msg=name)
    for name in ("residual_normal", "residual_tangent", "ridge_projection", "residual_tangent_rank",
                 "residual_normal_rank"):
        np.testing.assert_allclose(low[name], dense[name], rtol=0, atol=1e-8, err_msg=name)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), rank=st.integers(0, 12), upper=st.booleans(), seed=st.integers(0, 2**16))
def test_the_svd_fallback_of_eigh_gives_the_eigenpairs_of_a_psd_matrix(n, rank, upper, seed):
    """svd_eigh (psd_eigh's fallback) against numpy's eigh: the same eigenvalues (descending), and each
    vector an eigenvector (A v = lambda v), reading only the given triangle."""
    from ridgexr.empirical.lowrank import svd_eigh

    g = np.random.default_rng(seed)
    b = g.standard_normal((n, min(rank, n)))
    a = b @ b.T
    one = a.copy()  # only the given triangle holds the matrix
    one[np.tril_indices(n, -1) if upper else np.triu_indices(n, 1)] = np.nan
    vals, vecs = svd_eigh(torch.as_tensor(one), upper=upper)
    want = np.linalg.eigvalsh(a)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(vals.numpy(), np.sort(np.abs(want))[::-1], atol=1e-12 * scale)
    np.testing.assert_allclose(a @ vecs.numpy(), vecs.numpy() * vals.numpy(), atol=1e-10 * scale)
    np.testing.assert_allclose(vecs.numpy().T @ vecs.numpy(), np.eye(n), atol=1e-12)


def test_psd_eigh_answers_where_lapack_eigh_did_not_converge():
    """The float32 Gram matrix (64 x 64, eigenvalues 1e2 .. 1e-29) on which torch.linalg.eigh raised in
    fashion-unet-16's observation: psd_eigh returns its eigenpairs (numpy's eigenvalues, A v = lambda v)."""
    from ridgexr.empirical.lowrank import psd_eigh

    a = np.load(Path(__file__).parent / "data" / "gram_eigh_diverges_float32.npy")
    vals, vecs = psd_eigh(torch.as_tensor(a))
    top = float(np.linalg.eigvalsh(a.astype(np.float64)).max())
    np.testing.assert_allclose(np.sort(vals.numpy()), np.sort(np.abs(np.linalg.eigvalsh(a.astype(np.float64)))),
                               atol=1e-5 * top)
    np.testing.assert_allclose(a @ vecs.numpy(), vecs.numpy() * vals.numpy(), atol=1e-5 * top)


@pytest.mark.parametrize("path", ["support", "gram"])
def test_gap_floor_moves_the_low_rank_flags_as_it_moves_the_dense_ones(path):
    """``ridge.gap_floor`` (the relative floor c of the frame, default sqrt(eps)) sets the low-rank kernel's
    resolved rank and degenerate flags exactly as the dense path's: at c = 0.2 the dense rank drops (the floor
    c x the top eigenvalue passes eigenvalues the default floor resolves), and the low-rank frame's rank and
    flags equal the dense ones at both floors."""
    if path == "support":  # spread posteriors at d = 40: the covariance formed over each query's support
        p, x = spread_problem(1, n=600, d=40)
        t0, want = 0.3, PATH_SUPPORT
    else:  # 16 points (at most ``small_n``): the k x k Gram path over every point
        p, x = cluster_problem(2, 0.3, n=16, d=40, n_near=3, inside=0.5)
        t0, want = 0.5, PATH_GRAM
    t = torch.full((x.shape[0],), t0, dtype=torch.float64)
    flags = {}
    for c in (None, 0.2):
        dense = frame_flat(p, x, t, 1, "log", None, c, frame="dense")
        low = frame_flat(p, x, t, 1, "log", None, c, frame="lowrank")
        assert torch.equal(low.resolved_rank, dense.resolved_rank), (c, low.resolved_rank, dense.resolved_rank)
        assert torch.equal(low.degenerate, dense.degenerate), (c, low.degenerate, dense.degenerate)
        flags[c] = dense.resolved_rank, dense.degenerate
    assert bool((flags[0.2][0] < flags[None][0]).any()), flags  # the floor matters here (the test can fail)
    spec = p.spectrum_flat(x, t, n_eig=frame_width(40, 1), need=2, gap_floor=0.2)
    assert bool((spec.path == want).all()), spec.path
