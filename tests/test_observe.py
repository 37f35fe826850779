"""Per-step observation of sampler blocks, against independent computations."""

import numpy as np
import torch

from ridgexr import SmoothedEmpirical, project_to_ridge, ridge_frame
from ridgexr.observe import step_quantities

THREE = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


def block(rng, B=3, n=7):
    return torch.tensor(rng.normal(size=(B, n, 2)) * 2 + 2), np.array([0.6, 0.4, 0.3])[:B]


def test_projection_and_distance_match_project_to_ridge(rng):
    x, t = block(rng)
    q = step_quantities(SmoothedEmpirical(THREE, 1.0), x, t, 1, None)
    for k in range(x.shape[0]):
        ref = project_to_ridge(SmoothedEmpirical(THREE, t[k]), x[k].numpy(), 1, max_iter=200)
        np.testing.assert_allclose(q["ridge_projection"][k], ref.point, atol=1e-12)
        np.testing.assert_array_equal(q["ridge_converged"][k], ref.converged)
        np.testing.assert_allclose(q["normal_curvature"][k], ref.normal_curvature, rtol=1e-12)
    np.testing.assert_allclose(q["ridge_distance"], np.linalg.norm(q["ridge_projection"] - x.numpy(), axis=-1))
    assert q["finite"].all() and np.all(q["residual_normal"] == 0) and np.all(q["residual_tangent"] == 0)


def test_residuals_split_the_model_error_by_the_frame_at_x(rng):
    x, t = block(rng)
    err = torch.tensor(rng.normal(size=(2,)))

    def denoise(xf, tf):  # the exact posterior mean plus a known constant error
        return torch.stack([torch.as_tensor(SmoothedEmpirical(THREE, float(s)).posterior_mean(xi[None].numpy())[0])
                            for xi, s in zip(xf, tf)]) + err

    q = step_quantities(SmoothedEmpirical(THREE, 1.0), x, t, 1, denoise)
    np.testing.assert_allclose(q["residual_normal"] + q["residual_tangent"],
                               np.broadcast_to(err.numpy(), q["residual_normal"].shape), atol=1e-10)
    for k in range(x.shape[0]):
        fr = ridge_frame(SmoothedEmpirical(THREE, t[k]), x[k].numpy(), 1)
        tangent = fr.tangent[..., 0]  # (n, 2)
        np.testing.assert_allclose((q["residual_tangent"][k] * fr.normal[..., 0]).sum(-1), 0, atol=1e-10)
        np.testing.assert_allclose(np.abs((q["residual_tangent"][k] * tangent).sum(-1)),
                                   np.abs(tangent @ err.numpy()), atol=1e-10)


def test_non_finite_states_get_nan_geometry_and_are_not_dropped(rng):
    x, t = block(rng)
    x[1, 2, 0] = float("nan")
    x[2, 4, 1] = float("inf")
    q = step_quantities(SmoothedEmpirical(THREE, 1.0), x, t, 1, None)
    assert not q["finite"][1, 2] and not q["finite"][2, 4] and q["finite"].sum() == x.shape[0] * x.shape[1] - 2
    for key in ("ridge_distance", "ridge_residual", "normal_curvature", "dropped_mass"):
        assert np.isnan(q[key][1, 2]) and np.isnan(q[key][2, 4]), key
        assert np.isfinite(np.delete(q[key].ravel(), [1 * 7 + 2, 2 * 7 + 4])).all(), key
    assert not q["ridge_converged"][1, 2]
    np.testing.assert_array_equal(q["trajectory"], x.numpy())


def test_the_model_is_evaluated_in_bounded_chunks_with_the_same_result(rng, monkeypatch):
    import ridgexr.observe as observe

    x = torch.tensor(rng.normal(size=(5, 40, 2)) * 2 + 2)
    t = np.linspace(0.6, 0.2, 5)
    sizes = []

    def denoise(xf, tf):
        sizes.append(xf.shape[0])
        return 0.5 * xf + tf[:, None]  # any model: a known function of (x, t)

    whole = step_quantities(SmoothedEmpirical(THREE, 1.0), x, t, 1, denoise)
    monkeypatch.setattr(observe, "DENOISE_CHUNK", 7)
    sizes.clear()
    chunked = step_quantities(SmoothedEmpirical(THREE, 1.0), x, t, 1, denoise)
    assert max(sizes) == 7 and sum(sizes) == 200
    for key in ("residual_normal", "residual_tangent"):
        np.testing.assert_array_equal(chunked[key], whole[key])


def _brute_cov(train, x, t):
    """Posterior covariance Cov[x0 | x_t = x] by log-sum-exp weights in numpy (independent of ridgexr)."""
    a, h = np.exp(-t), -np.expm1(-2 * t)
    logw = -((x - a * train) ** 2).sum(-1) / (2 * h)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    m = w @ train
    return (w[:, None] * (train - m)).T @ (train - m)


def test_degenerate_flags_and_resolved_rank_against_independent_computations(rng):
    """frame_degenerate / ridge_degenerate are the frames' flags; resolved_rank counts the posterior-covariance
    directions resolved in float64: 3 at moderate t, 2 when three points share the posterior, 1 for two, in d = 3."""
    pts = np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [1.0, 1.7320508, 0.0], [1.0, 0.6, 8.0]])
    centre3 = pts[:3].mean(0)  # equidistant from the three points of the triangle, far from the fourth
    mid2 = pts[:2].mean(0) - np.array([0.0, 0.5, 0.0])  # equidistant from the first two only
    x = torch.tensor(np.stack([centre3, mid2, np.array([1.0, 1.0, 2.0])])[None])  # (1, 3, 3)
    for t, expected in ((0.004, [2, 1, None]), (0.8, [3, 3, 3])):
        e = np.exp(-t)
        xs = x * e  # the same geometry in the scaled frame x = alpha y
        q = step_quantities(SmoothedEmpirical(pts, 1.0), xs, np.array([t]), 1, None)
        for j, want in enumerate(expected):
            ev = np.linalg.eigvalsh(_brute_cov(pts, xs[0, j].numpy(), t))
            if want is None:
                continue
            assert (ev > 1e-6 * ev.max()).sum() == want and q["resolved_rank"][0, j] == want, (t, j, ev)
        fr = ridge_frame(SmoothedEmpirical(pts, t), xs[0].numpy(), 1)
        np.testing.assert_array_equal(q["frame_degenerate"][0], fr.degenerate)
        ref = project_to_ridge(SmoothedEmpirical(pts, t), xs[0].numpy(), 1, max_iter=200)
        np.testing.assert_array_equal(q["ridge_degenerate"][0], ref.degenerate)


def test_split_at_the_resolved_rank_against_a_brute_force_eigendecomposition(rng):
    """residual_*_rank: |e| split by the top-`resolved_rank` eigenvectors of the brute-force posterior covariance."""
    pts = np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [1.0, 1.7320508, 0.0], [1.0, 0.6, 8.0]])
    err = np.array([0.3, -0.2, 0.5])
    x = torch.tensor(rng.normal(size=(2, 6, 3)) + 1.0)
    t = np.array([0.7, 0.01])

    def denoise(xf, tf):
        return torch.stack([torch.as_tensor(SmoothedEmpirical(pts, float(s)).posterior_mean(xi[None].numpy())[0])
                            for xi, s in zip(xf, tf)]) + torch.as_tensor(err)

    q = step_quantities(SmoothedEmpirical(pts, 1.0), x, t, 1, denoise)
    for k in range(2):
        for j in range(6):
            ev, vecs = np.linalg.eigh(_brute_cov(pts, x[k, j].numpy(), t[k]))
            r = int(q["resolved_rank"][k, j])
            top = vecs[:, ::-1][:, :r]
            tang = np.linalg.norm(top.T @ err)
            np.testing.assert_allclose(q["residual_tangent_rank"][k, j], tang, atol=1e-7)
            np.testing.assert_allclose(q["residual_normal_rank"][k, j] ** 2 + tang**2, err @ err, rtol=1e-9)
    assert (q["resolved_rank"][0] == 3).all()  # t = 0.7: every direction resolved, nothing normal
    np.testing.assert_allclose(q["residual_normal_rank"][0], 0.0, atol=1e-9)


def test_the_sampler_score_gives_the_same_residuals_as_calling_the_model_again():
    """step_quantities(score=block.score) uses D = (x + h s) / alpha and calls the model only at the last step
    (NaN score); residuals equal those of evaluating the model at every state, to rounding."""
    import ridgexr
    from ridgexr.sampling import reverse_sde

    model = ridgexr.RandomFeatureDenoiser(2, 64, seed=1, parametrization="posterior_mean")
    model = model.with_A(torch.tensor(np.random.default_rng(0).normal(size=(2, 64)) * 3))
    calls = []

    def denoise(x, t):
        calls.append(x.shape[0])
        return model.denoise(x, t)

    grid = ridgexr.time_grid(7, 1.0, 0.05)
    dens = SmoothedEmpirical(THREE, 1.0)
    for blk in reverse_sde(lambda x, t: model.score(x, t), 5, 2, grid, seed=0, block_steps=8):
        again = step_quantities(dens, blk.x, blk.t, 1, denoise)
        n_again = sum(calls)
        reused = step_quantities(dens, blk.x, blk.t, 1, denoise, score=blk.score)
        assert sum(calls) - n_again == 5  # only the last step's five states
        for name in ("residual_normal", "residual_tangent", "residual_normal_rank", "residual_tangent_rank"):
            np.testing.assert_allclose(reused[name], again[name], rtol=1e-10, atol=1e-11)
        assert np.abs(again["residual_tangent"]).max() > 1e-3  # the model is not exact: a real comparison


def test_accelerated_observation_matches_the_plain_one(rng):
    """step_quantities(accelerate=True) hands the option to SCMS: the projections agree with the plain ones
    within the plain iteration's accuracy, every flag and the frame at x (its first evaluation) are the same."""
    x, t = block(rng, B=3, n=20)
    dens = SmoothedEmpirical(THREE, 1.0)
    plain = step_quantities(dens, x, t, 1, None, tol=1e-8, max_iter=500)
    fast = step_quantities(dens, x, t, 1, None, tol=1e-8, max_iter=500, accelerate=True)
    np.testing.assert_allclose(fast["ridge_projection"], plain["ridge_projection"], atol=1e-6)
    assert (fast["ridge_projection"] != plain["ridge_projection"]).any()  # the option reached SCMS
    for name in ("ridge_converged", "frame_degenerate", "ridge_degenerate", "resolved_rank", "finite"):
        np.testing.assert_array_equal(fast[name], plain[name])
    np.testing.assert_array_equal(np.sign(fast["normal_curvature"]), np.sign(plain["normal_curvature"]))


def _autograd_projected_gradient(train, x, t, d_star):
    """|E E^T grad log p_t(x)| by torch.autograd: the Hessian of the mixture's log-density, its d - d*
    most negative eigenvectors E (the authors' definition, written from the density alone)."""
    tr = torch.as_tensor(train)
    a, h = np.exp(-t), 1 - np.exp(-2 * t)

    def logp(y):
        return torch.logsumexp(-((y[None, :] - a * tr) ** 2).sum(-1) / (2 * h), 0)

    out = []
    for xi in torch.as_tensor(x):
        y = xi.clone().requires_grad_(True)
        g = torch.autograd.grad(logp(y), y)[0]
        hess = torch.autograd.functional.hessian(logp, xi)
        vals, vecs = torch.linalg.eigh(hess)  # ascending: the most negative first
        e = vecs[:, : xi.shape[0] - d_star]
        out.append(float((e @ (e.T @ g)).norm()))
    return np.array(out)


def test_projected_gradient_matches_the_autograd_hessian_at_t_and_at_t_min(rng):
    train = rng.normal(size=(12, 4)) * np.array([3.0, 2.0, 1.0, 0.5])
    x = torch.tensor(rng.normal(size=(3, 6, 4)) * 1.5)
    t = np.array([0.9, 0.5, 0.3])
    t_min = 0.2
    q = step_quantities(SmoothedEmpirical(train, 1.0), x, t, 2, None, t_min=t_min)
    for k in range(3):
        ref_t = _autograd_projected_gradient(train, x[k].numpy(), t[k], 2)
        ref_min = _autograd_projected_gradient(train, x[k].numpy(), t_min, 2)
        np.testing.assert_allclose(q["projected_gradient"][k], ref_t, rtol=1e-8)
        np.testing.assert_allclose(q["projected_gradient_tmin"][k], ref_min, rtol=1e-8)
        np.testing.assert_allclose(q["projected_gradient_scaled"][k], ref_t / ref_t.max(), rtol=1e-8)
        np.testing.assert_allclose(q["projected_gradient_tmin_scaled"][k], ref_min / ref_min.max(), rtol=1e-8)
    assert np.all(q["projected_gradient_scaled"].max(-1) == 1.0)


def test_projected_gradient_scaling_ignores_diverged_states(rng):
    x, t = block(rng)
    x[1, 2, 0] = float("nan")
    q = step_quantities(SmoothedEmpirical(THREE, 1.0), x, t, 1, None)
    assert np.isnan(q["projected_gradient"][1, 2]) and np.isnan(q["projected_gradient_scaled"][1, 2])
    row = q["projected_gradient"][1]
    np.testing.assert_allclose(q["projected_gradient_scaled"][1], row / np.nanmax(row))
    # t_min defaults to the block's last time: the t_min measure of the last step is the measure at t
    np.testing.assert_allclose(q["projected_gradient_tmin"][-1], q["projected_gradient"][-1], rtol=1e-12)


def test_frame_gap_relative_is_the_covariance_gap_and_sets_degeneracy_under_any_floor(rng):
    train = rng.normal(size=(15, 4)) * np.array([3.0, 2.0, 1.0, 0.5])
    x = torch.tensor(rng.normal(size=(3, 8, 4)) * 2)
    t = np.array([0.8, 0.3, 0.05])
    q = step_quantities(SmoothedEmpirical(train, 1.0), x, t, 2, None, max_iter=1)  # the frame at x: SCMS's first
    for k in range(3):
        for i in range(8):
            mu = np.linalg.eigvalsh(_brute_cov(train, x[k, i].numpy(), t[k]))[::-1]  # descending
            np.testing.assert_allclose(q["frame_gap_relative"][k, i], (mu[1] - mu[2]) / mu[0], atol=1e-9)
    for floor in (None, 1e-13, 0.05):
        qf = step_quantities(SmoothedEmpirical(train, 1.0), x, t, 2, None, gap_floor=floor, max_iter=1)
        c = np.sqrt(np.finfo(float).eps) if floor is None else floor
        np.testing.assert_array_equal(qf["frame_degenerate"], qf["frame_gap_relative"] <= c)
    assert step_quantities(SmoothedEmpirical(train, 1.0), x, t, 2, None, gap_floor=0.05,
                           max_iter=1)["frame_degenerate"].any()


def test_resolved_projection_equals_a_fixed_projection_at_the_resolved_rank(rng):
    """Three points in R^4 resolve at most 2 posterior directions: with d* = 3 every state's d*(t) is its rank
    (0, 1 or 2), and ridge_distance_resolved is the SCMS distance at that fixed dimension."""
    train = np.c_[THREE, np.zeros((3, 2))]
    x = torch.tensor(np.c_[rng.normal(size=(4 * 9, 2)) * 2 + 2, rng.normal(size=(4 * 9, 2))].reshape(4, 9, 4))
    t = np.array([1.0, 0.5, 0.2, 0.02])
    q = step_quantities(SmoothedEmpirical(train, 1.0), x, t, 3, None, resolved=True, max_iter=300)
    rank = q["resolved_rank"]
    assert rank.max() < 3 and len(np.unique(rank)) >= 2
    for k in range(4):
        for r in np.unique(rank[k]):
            sel = rank[k] == r
            ref = project_to_ridge(SmoothedEmpirical(train, t[k]), x[k][sel].numpy(), int(r), max_iter=300)
            np.testing.assert_allclose(q["ridge_distance_resolved"][k][sel],
                                       np.linalg.norm(ref.point - x[k][sel].numpy(), axis=-1), atol=1e-9)
    full = step_quantities(SmoothedEmpirical(train, 1.0), x, t, 1, None, resolved=True)  # rank >= d* = 1 mostly
    at_fixed = full["resolved_rank"] >= 1
    np.testing.assert_array_equal(full["ridge_distance_resolved"][at_fixed], full["ridge_distance"][at_fixed])
    assert np.isnan(step_quantities(SmoothedEmpirical(train, 1.0), x, t, 3, None)["ridge_distance_resolved"]).all()
