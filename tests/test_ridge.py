import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, SmoothedEmpirical, project_to_ridge, ridge_frame, ridge_residual


def autograd_geometry(p, x, kind="log"):
    """Gradient and Hessian of log p (or p) at one point, by torch autograd."""
    xt = torch.tensor(x, dtype=torch.float64)

    def f(v):
        lp = p.moments(v[None], cov=False).log_prob.sum()
        return lp if kind == "log" else torch.exp(lp)

    g = torch.autograd.functional.jacobian(f, xt).numpy()
    hess = torch.autograd.functional.hessian(f, xt).numpy()
    return g, hess


def check_ridge_conditions(p, x, d_star, kind="log", atol=1e-6):
    g, hess = autograd_geometry(p, x, kind)
    lam, vec = np.linalg.eigh(hess)
    normal = vec[:, : len(lam) - d_star]
    # first-order condition relative to the gradient scale
    scale = np.linalg.norm(g) + (1.0 if kind == "log" else abs(float(np.exp(p.log_prob(x)))))
    assert np.linalg.norm(normal.T @ g) <= atol * scale
    assert lam[len(lam) - d_star - 1] < 0


TWO = np.array([[-3.0, 0.0], [3.0, 0.0]])
THREE = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


@given(t=st.floats(0.01, 3.0), seed=st.integers(0, 10_000))
def test_two_points_projection_is_the_line(t, seed):
    rng = np.random.default_rng(seed)
    p = SmoothedEmpirical(TWO, t)
    x = rng.normal(size=(64, 2)) * 4
    r = project_to_ridge(p, x, 1)
    h = OU().h(t)
    assert r.converged.all() and r.on_ridge.all()
    np.testing.assert_allclose(r.point[:, 1], 0.0, atol=1e-12)  # the line through alpha x1, alpha x2
    np.testing.assert_allclose(r.point[:, 0], x[:, 0], atol=1e-12)  # normal projection keeps x
    np.testing.assert_allclose(r.normal_curvature, -1.0 / h, rtol=1e-9)
    assert np.all(r.residual < 1e-9)


def test_three_points_and_grid_satisfy_ridge_conditions(rng):
    grid = np.stack(np.meshgrid(np.arange(3.0), np.arange(3.0)), -1).reshape(-1, 2)
    for train, t in ((THREE, 0.3), (THREE, 1.0), (grid, 0.05)):
        p = SmoothedEmpirical(train, t)
        x = rng.uniform(-1, 6, size=(300, 2)) * (0.5 if train is grid else 1.0)
        r = project_to_ridge(p, x, 1)
        assert r.converged.mean() > 0.95
        idx = np.flatnonzero(r.on_ridge)
        assert idx.size > 100
        for i in idx[:25]:  # independent autograd check of both conditions
            check_ridge_conditions(p, r.point[i], 1)
        # reported residual agrees with the stand-alone residual function
        np.testing.assert_allclose(ridge_residual(p, r.point[idx], 1), r.residual[idx], atol=1e-9)
        assert np.all(r.residual[idx] < 1e-6)
        assert np.all(r.normal_curvature[idx] < 0)


def test_projecting_twice_changes_nothing(rng):
    p = SmoothedEmpirical(THREE, 0.4)
    r1 = project_to_ridge(p, rng.uniform(-1, 6, size=(200, 2)), 1)
    r2 = project_to_ridge(p, r1.point[r1.converged], 1)
    np.testing.assert_allclose(r2.point, r1.point[r1.converged], atol=1e-8)
    assert np.all(r2.iterations <= 1)


def test_float32_agrees_with_float64(rng):
    p = SmoothedEmpirical(THREE, 0.5)
    x = rng.uniform(-1, 6, size=(300, 2))
    r64 = project_to_ridge(p, x, 1)
    r32 = project_to_ridge(p, x.astype(np.float32), 1)
    assert r32.point.dtype == np.float32
    ok = r64.on_ridge & r32.on_ridge & ~r64.degenerate
    assert ok.mean() > 0.9
    # stated tolerance: 1e-3 data units (SCMS tol in float32 is 2e-5 (1 + R))
    np.testing.assert_allclose(r32.point[ok], r64.point[ok], atol=1e-3)


def test_density_kind_fixed_points(rng):
    p = SmoothedEmpirical(THREE, 0.6)
    x = rng.uniform(-1, 6, size=(200, 2))
    r = project_to_ridge(p, x, 1, kind="density")
    idx = np.flatnonzero(r.on_ridge)
    assert idx.size > 60  # density-ridge SCMS converges linearly and slower than the log kind
    for i in idx[:25]:
        check_ridge_conditions(p, r.point[i], 1, kind="density", atol=1e-6)
    # density and log ridges differ in general
    rl = project_to_ridge(p, x, 1)
    assert np.abs(rl.point - r.point).max() > 1e-3


def per_point_scms(p, x, d_star, tol, max_iter=500):
    """Reference: one point at a time, numpy only."""
    train = p.train.numpy()
    t = float(p.t)
    a, h = math.exp(-t), -math.expm1(-2 * t)
    y = x.copy()
    for _ in range(max_iter):
        l = -((y - a * train) ** 2).sum(1) / (2 * h)
        r = np.exp(l - l.max())
        r /= r.sum()
        m = r @ train
        c = (train - m).T @ ((train - m) * r[:, None])
        mu, v = np.linalg.eigh(c)
        e = v[:, : len(mu) - d_star]
        step = e @ (e.T @ (a * m - y))
        if np.linalg.norm(step) < tol:
            break
        y = y + step
    return y


def test_matches_per_point_reference(rng):
    train = rng.normal(size=(30, 3)) * 2
    p = SmoothedEmpirical(train, 0.3)
    x = rng.normal(size=(40, 3)) * 2
    r = project_to_ridge(p, x, 1, tol=1e-10)
    idx = np.flatnonzero(r.converged & ~r.degenerate)[:20]
    assert idx.size >= 10  # the comparison must not pass vacuously
    for i in idx:
        np.testing.assert_allclose(r.point[i], per_point_scms(p, x[i], 1, 1e-10), atol=1e-7)


@given(n=st.integers(2, 8), d=st.integers(2, 4), t=st.floats(0.05, 2.0), seed=st.integers(0, 10_000))
def test_random_mixtures_converged_points_on_ridge(n, d, t, seed):
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)) * 3
    p = SmoothedEmpirical(train, t)
    d_star = int(rng.integers(0, d))
    r = project_to_ridge(p, rng.normal(size=(20, d)) * 3, d_star)
    # never reported on the ridge unless both conditions hold
    assert np.all(r.on_ridge == (r.converged & (r.normal_curvature < 0)))
    assert np.all(r.residual[r.converged] * OU().h(t) < 1e-6 * (1 + 3 * np.sqrt(d) * 4))
    fr = ridge_frame(p, r.point, d_star)
    np.testing.assert_allclose(fr.normal_curvature, r.normal_curvature, rtol=1e-8, atol=1e-8)


def test_frame_orthonormal_and_matches_hessian(rng):
    p = SmoothedEmpirical(rng.normal(size=(10, 4)), 0.3)
    x = rng.normal(size=(7, 4))
    fr = ridge_frame(p, x, 2)
    basis = np.concatenate([fr.tangent, fr.normal], -1)
    np.testing.assert_allclose(np.swapaxes(basis, -1, -2) @ basis, np.broadcast_to(np.eye(4), (7, 4, 4)),
                               atol=1e-12)
    hess = p.hessian(x)
    np.testing.assert_allclose(fr.eigenvalues, np.linalg.eigvalsh(hess)[:, ::-1], rtol=1e-9, atol=1e-9)
    assert np.all(np.diff(fr.eigenvalues, axis=-1) <= 0)
    np.testing.assert_allclose(fr.eigengap, fr.eigenvalues[:, 1] - fr.eigenvalues[:, 2])


def test_degenerate_spectrum_is_flagged_and_deterministic():
    p = SmoothedEmpirical(np.array([[1.0, 2.0]]), 0.5)  # one point: isotropic Gaussian
    x = np.array([[0.0, 0.0], [3.0, 1.0]])
    f1, f2 = ridge_frame(p, x, 1), ridge_frame(p, x, 1)
    assert f1.degenerate.all()
    np.testing.assert_array_equal(f1.tangent, f2.tangent)
    r = project_to_ridge(p, x, 1)
    assert r.degenerate.all()


def test_top_k_projection_close_to_full(rng):
    train = rng.normal(size=(500, 2)) * 3
    p = SmoothedEmpirical(train, 0.05)
    x = rng.normal(size=(50, 2)) * 3
    full = project_to_ridge(p, x, 1)
    trunc = project_to_ridge(p, x, 1, top_k=64)
    ok = full.converged & trunc.converged & (trunc.dropped_mass < 1e-8) & ~full.degenerate
    assert ok.sum() > 25
    np.testing.assert_allclose(trunc.point[ok], full.point[ok], atol=1e-5)


@pytest.mark.parametrize("kwargs, name", [
    (dict(d_star=2), "d_star"), (dict(d_star=-1), "d_star"),
    (dict(d_star=1, kind="hessian"), "kind"), (dict(d_star=1, tol=0.0), "tol"),
    (dict(d_star=1, max_iter=0), "max_iter"), (dict(d_star=1, top_k=0), "top_k"),
])
def test_bad_input(kwargs, name):
    p = SmoothedEmpirical(TWO, 0.5)
    with pytest.raises(ValueError, match=name):
        project_to_ridge(p, np.zeros((1, 2)), **kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(d_star=1.5), "d_star"), (dict(d_star=True), "d_star"), (dict(d_star=1, max_iter=2.0), "max_iter"),
    (dict(d_star=1, top_k=1.0), "top_k"), (dict(d_star=1, tol="small"), "tol"),
])
def test_wrong_types_are_type_errors(kwargs, name):
    p = SmoothedEmpirical(TWO, 0.5)
    with pytest.raises(TypeError, match=f"`{name}` must be"):
        project_to_ridge(p, np.zeros((1, 2)), **kwargs)


def test_bad_x_and_density():
    p = SmoothedEmpirical(TWO, 0.5)
    with pytest.raises(ValueError, match="x"):
        ridge_frame(p, np.zeros((1, 3)), 1)
    with pytest.raises(ValueError, match="x"):
        ridge_residual(p, np.array([[np.nan, 0.0]]), 1)
    with pytest.raises(TypeError, match="density"):
        project_to_ridge(TWO, np.zeros((1, 2)), 1)


@pytest.mark.cuda
def test_cuda_matches_cpu(rng):
    p = SmoothedEmpirical(THREE, 0.4)
    x = rng.uniform(-1, 6, size=(500, 2))
    cpu = project_to_ridge(p, x, 1)
    gpu = project_to_ridge(p, torch.tensor(x, device="cuda"), 1)
    assert gpu.point.device.type == "cuda"
    ok = cpu.on_ridge & gpu.on_ridge.cpu().numpy() & ~cpu.degenerate
    np.testing.assert_allclose(gpu.point.cpu().numpy()[ok], cpu.point[ok], atol=1e-8)


@given(a=st.floats(-1e3, 1e3), b=st.floats(-1e3, 1e3), c=st.floats(-1e3, 1e3), scale=st.sampled_from([1e-30, 1.0, 1e30]))
def test_closed_form_2x2_eigh_matches_lapack(a, b, c, scale):
    from ridgexr.scms import eigh_2x2

    m = torch.tensor([[[a, b], [b, c]]], dtype=torch.float64) * scale
    vals, vecs = eigh_2x2(m)
    ref = torch.linalg.eigh(m)[0]
    norm = float(m.abs().max()) + 1e-300
    assert float((vals - ref).abs().max()) <= 1e-14 * norm  # the same absolute accuracy as LAPACK
    assert vals[0, 0] <= vals[0, 1]  # ascending, as torch.linalg.eigh
    np.testing.assert_allclose((vecs.mT @ vecs).numpy()[0], np.eye(2), atol=1e-14)
    assert float((m @ vecs - vecs * vals[:, None, :]).abs().max()) <= 1e-14 * norm


@given(n=st.integers(2, 7), t=st.floats(0.05, 2.0), seed=st.integers(0, 10_000))
def test_closed_form_frames_give_the_full_eigh_projection(n, t, seed):
    """2-D ridge projection with the closed-form 2 x 2 eigh equals the LAPACK path: converged
    points to 1e-9, the same converged and degenerate flags."""
    import ridgexr.scms as scms

    rng = np.random.default_rng(seed)
    p = SmoothedEmpirical(rng.normal(size=(n, 2)) * 3, t)
    x = rng.normal(size=(64, 2)) * 4
    fast = project_to_ridge(p, x, 1)
    saved = scms.CLOSED_FORM_MAX_D
    scms.CLOSED_FORM_MAX_D = 0  # the LAPACK path, for comparison
    try:
        full = project_to_ridge(p, x, 1)
    finally:
        scms.CLOSED_FORM_MAX_D = saved
    ok = fast.converged & full.converged
    np.testing.assert_array_equal(fast.degenerate, full.degenerate)
    np.testing.assert_array_equal(fast.converged, full.converged)
    np.testing.assert_allclose(fast.point[ok], full.point[ok], atol=1e-9)


@pytest.mark.slow
def test_stop_degenerate_only_removes_points_whose_frame_stays_degenerate():
    """On the 3 x 3 grid at t = 0.2 (every frame degenerate by symmetry, SCMS crawls ~200 iterations), stopping after
    5 degenerate iterations: points that still converge take exactly the default path; the others are flagged
    degenerate and unconverged; two points (never degenerate) are unchanged bit for bit."""
    from ridgexr.datasets import point_set

    grid = point_set("grid-3x3")
    rng = np.random.default_rng(0)
    x = np.exp(-0.2) * grid[rng.integers(0, 9, 300)] + np.sqrt(-np.expm1(-0.4)) * rng.normal(size=(300, 2))
    dens = SmoothedEmpirical(grid, 0.2)
    ref = project_to_ridge(dens, x, 1, max_iter=400)
    fast = project_to_ridge(dens, x, 1, max_iter=400, stop_degenerate=5)
    same = fast.converged
    np.testing.assert_array_equal(fast.point[same], ref.point[same])
    np.testing.assert_array_equal(fast.iterations[same], ref.iterations[same])
    assert fast.degenerate[~same].all() and not fast.converged[~same].any() and (~same).sum() > 100
    assert np.median(fast.iterations) < 0.6 * np.median(ref.iterations)  # they crawl toward a degenerate point
    two = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), 0.3)
    y = rng.normal(size=(50, 2)) * 2
    a, b = project_to_ridge(two, y, 1), project_to_ridge(two, y, 1, stop_degenerate=1)
    np.testing.assert_array_equal(a.point, b.point)
    with pytest.raises(ValueError, match="stop_degenerate"):
        project_to_ridge(two, y, 1, stop_degenerate=0)


@given(k=st.integers(1, 4), d=st.integers(1, 5), seed=st.integers(0, 10_000), ties=st.booleans())
def test_fix_signs_makes_each_columns_first_largest_entry_positive(k, d, seed, ties):
    """The sign convention against a per-column loop: the first entry of largest magnitude is made
    positive (an all-zero column is left alone), and nothing else changes but the column's sign."""
    from ridgexr.scms import fix_signs

    rng = np.random.default_rng(seed)
    v = rng.standard_normal((6, d, k))
    if ties:  # equal magnitudes of both signs, and an all-zero column
        v = np.round(v)
        v[0, :, 0] = 0.0
    out = fix_signs(torch.from_numpy(v)).numpy()
    for b in range(v.shape[0]):
        for j in range(k):
            col = v[b, :, j]
            i = int(np.argmax(np.abs(col)))  # numpy's argmax: the first maximum
            sign = 1.0 if col[i] == 0 else np.sign(col[i])
            np.testing.assert_array_equal(out[b, :, j], sign * col)


@pytest.mark.parametrize("n", [3, 40])  # both moment paths (N <= SMALL_N and the streamed one)
def test_empty_batches_give_empty_results(n):
    p = SmoothedEmpirical(np.random.default_rng(0).normal(size=(n, 3)), 0.3)
    x = np.zeros((0, 3))
    r = project_to_ridge(p, x, 1)
    assert r.point.shape == (0, 3) and r.converged.shape == (0,) and r.iterations.shape == (0,)
    f = ridge_frame(p, x, 1)
    assert f.normal.shape == (0, 3, 2) and f.tangent.shape == (0, 3, 1)
    assert p.moments(x, top_k=2).cov.shape == (0, 3, 3)
