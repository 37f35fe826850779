import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import ExactDenoiser, OU, RandomFeatureDenoiser, fit_random_features, fit_sweep, fits_to_dataset
from ridgexr.training import (GradientFlow, accumulate_moments, draw_training_sample, initial_readout, targets,
                              time_nodes)

TWO = np.array([[-3.0, 0.0], [3.0, 0.0]])
INF = math.inf


def small_model(width=24, parametrization="posterior_mean", seed=2):
    return RandomFeatureDenoiser(2, width, n_frequencies=3, feature_period=4.0, seed=seed,
                                 parametrization=parametrization)


SMALL = dict(t_min=0.05, T=2.0, quadrature="gauss-legendre-log-t")


@pytest.mark.parametrize("parametrization", ["posterior_mean", "score"])
def test_U_V_C_match_brute_force(parametrization):
    m = small_model(parametrization=parametrization)
    s = draw_training_sample(TWO, n_time=4, n_noise=3, seed=0, **SMALL)
    lam, y = targets(s, parametrization, "h", OU())
    U, V, C = accumulate_moments(m, s, lam, y, batch_size=5)  # many small batches
    streamed = fit_random_features(m, TWO, schedule="h", n_time=4, n_noise=3, seed=0, batch_size=5, taus=[0.0],
                                   **SMALL)  # the streamed, per-node accumulation of the fit
    # brute force: one sample at a time
    Ub = np.zeros((24, 24)); Vb = np.zeros((2, 24)); Cb = 0.0
    for i in range(s.size):
        psi = m.features(s.xt[i], s.t[i]).numpy()
        c = s.weight[i] * lam[i]
        Ub += c * np.outer(psi, psi); Vb += c * np.outer(y[i], psi); Cb += c * y[i] @ y[i]
    for UU, VV, CC in ((U, V, C), (streamed.U, streamed.V, streamed.C)):
        np.testing.assert_allclose(UU.numpy(), Ub, rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(VV.numpy(), Vb, rtol=1e-11, atol=1e-14)
        assert CC == pytest.approx(Cb, rel=1e-12)
    # and the quadratic form equals the sample-average loss for any A
    A = np.random.default_rng(1).normal(size=(2, 24))
    f = m.with_A(A)(torch.tensor(s.xt), torch.tensor(s.t)).detach().numpy()
    direct = np.sum(s.weight * lam * ((f - y) ** 2).sum(1))  # the paper's loss: summed over coordinates
    quad = np.trace(A @ Ub @ A.T) - 2 * np.trace(Vb @ A.T) + Cb
    assert quad == pytest.approx(direct, rel=1e-10)
    assert streamed.quadratic.loss(torch.tensor(A)) == pytest.approx(direct, rel=1e-10)


def test_sample_weights_integrate_over_time():
    """sum_s c_s g(t_s) = int_{t_min}^T g dt (an integral, not a time average)."""
    s = draw_training_sample(np.zeros((1, 1)), t_min=0.01, T=2.0, n_time=24, n_noise=1, seed=0,
                             quadrature="gauss-legendre-log-t")
    exact = 1.99 - 0.5 * (math.exp(-0.02) - math.exp(-4.0))  # int h dt, closed form
    assert np.sum(s.weight * OU().h(s.t)) == pytest.approx(exact, rel=1e-10)
    assert s.weight.sum() == pytest.approx(1.99, rel=1e-10)


@pytest.mark.parametrize("rule, order, n0", [("simpson-t", 4, 9), ("trapezoid-log-t", 2, 9),
                                             ("gauss-legendre-log-t", None, 4)])
def test_quadrature_rules_reach_their_stated_order(rule, order, n0):
    f = lambda t: np.cos(t) * np.exp(t / 3)  # noqa: E731
    F = lambda t: np.exp(t / 3) * (np.cos(t) / 3 + np.sin(t)) / (1 / 9 + 1)  # noqa: E731  its antiderivative
    a, b = 0.01, 3.0
    exact = F(b) - F(a)
    errs = []
    for k in range(3):
        n = (n0 - 1) * 2**k + 1 if rule != "gauss-legendre-log-t" else n0 * 2**k
        t, w = time_nodes(rule, n, a, b)
        assert np.all(w > 0) and np.all(np.diff(t) > 0) and t[0] >= a and t[-1] <= b
        errs.append(abs(w @ f(t) - exact))
    if order is not None:  # halving the spacing divides the error by ~2^order
        rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
        assert np.all(np.abs(rates - order) < 0.3), rates
    else:  # spectral: each doubling gains many digits
        assert errs[-1] < 1e-7 and errs[2] < 1e-3 * errs[1]  # 4, 8, 16 nodes


def test_quadrature_exact_cases():
    t, w = time_nodes("simpson-t", 7, 0.5, 2.5)
    assert w @ (t**3 - 2 * t) == pytest.approx((2.5**4 - 0.5**4) / 4 - (2.5**2 - 0.5**2), rel=1e-13)
    t, w = time_nodes("gauss-legendre-log-t", 5, 0.001, 10.0)  # exact for t^-1 polynomial in log t (deg <= 9)
    assert w @ (np.log(t) ** 3 / t) == pytest.approx((np.log(10.0) ** 4 - np.log(0.001) ** 4) / 4, rel=1e-12)
    t, w = time_nodes("trapezoid-log-t", 3, 0.1, 10.0)
    assert w @ (1 / t) == pytest.approx(np.log(100.0), rel=1e-13)
    with pytest.raises(ValueError, match="n_time.*odd"):
        time_nodes("simpson-t", 4, 0.1, 1.0)
    with pytest.raises(ValueError, match="quadrature"):
        time_nodes("midpoint", 4, 0.1, 1.0)


def test_streamed_sample_is_regenerated_bit_for_bit_and_blocks_cover_it():
    s = draw_training_sample(TWO, t_min=0.05, T=2.0, n_time=5, n_noise=3, seed=4)
    whole = s.xt.copy()
    for size in (1, 4, 7, 1000):
        for by_node in (True, False):
            blocks = list(s.blocks(size, by_node=by_node))
            np.testing.assert_array_equal(np.concatenate([b.xt for b in blocks]), whole)
            assert all(np.all(np.diff(b.group.reshape(-1, 3), axis=1) == 0) for b in blocks)  # draws not split
    assert s.size == 2 * 5 * 3 and np.isclose(s.weight.sum(), s.t_weights.sum())


def test_schedule_weight_is_score_matching_weight():
    """The posterior-mean loss with weight w/h^2 is the score-matching loss with weight w."""
    m = small_model().with_A(np.random.default_rng(3).normal(size=(2, 24)))
    fit = fit_random_features(m, TWO, schedule="h", n_time=6, n_noise=4, taus=[0.0], init=m.A.detach(), **SMALL)
    s = fit.sample
    score = m.score(s.xt, s.t)
    sm = np.sum(s.weight * OU().h(s.t) * ((score + s.z / np.sqrt(OU().h(s.t))[:, None]) ** 2).sum(1))
    assert fit.loss(0.0) == pytest.approx(sm, rel=1e-10)
    # the same for the score parametrization, with its own target
    ms = small_model(parametrization="score").with_A(np.random.default_rng(3).normal(size=(2, 24)))
    fs = fit_random_features(ms, TWO, schedule="h2", n_time=6, n_noise=4, taus=[0.0], init=ms.A.detach(), **SMALL)
    score = ms.score(s.xt, s.t)
    sm = np.sum(s.weight * OU().h(s.t) ** 2 * ((score + s.z / np.sqrt(OU().h(s.t))[:, None]) ** 2).sum(1))
    assert fs.loss(0.0) == pytest.approx(sm, rel=1e-10)


def test_flow_matches_gradient_descent_and_converges():
    m = small_model(width=16)
    taus = [0.5, 2.0, 8.0]
    flow = fit_random_features(m, TWO, n_time=6, n_noise=6, taus=taus, schedule="h2", init="normal", **SMALL)
    mu_max = float(torch.linalg.eigvalsh(flow.U).max())
    lr = 0.01 / mu_max
    gd = fit_random_features(m, TWO, n_time=6, n_noise=6, taus=taus, schedule="h2", init="normal", method="gd",
                             lr=lr, **SMALL)
    # GD converges to the flow as lr -> 0; error O(lr mu) relative
    for k in range(3):
        err = float((gd.A[k] - GradientFlow(flow.U, flow.V, _a0(m)).path([gd.taus[k]]).A[0]).norm())
        assert err <= 0.05 * float(gd.A[k].norm()) + 1e-12
    # the loss decreases along the flow
    losses = [flow.loss(t) for t in taus]
    assert losses[0] >= losses[1] >= losses[2]


def _a0(m):
    return torch.tensor(np.random.default_rng(0).standard_normal((m.width, m.d)).T.copy())


def test_closed_form_flow_is_the_papers_ode_in_the_papers_units():
    """A(tau) in paper units = an explicit integration of dA/dtau = -grad L, L computed directly
    (int over t of lambda E|A psi - alpha_t x0|^2 summed over coordinates) with autograd."""
    from scipy.integrate import solve_ivp

    m = small_model(width=10)
    fit = fit_random_features(m, TWO, schedule="h", n_time=5, n_noise=3, taus=[0.05, 0.2], init="normal",
                              init_seed=3, **SMALL)
    s = fit.sample
    psi = m.features(torch.tensor(s.xt), torch.tensor(s.t))  # computed independently of the fit
    lam = torch.tensor(OU().h(s.t) / OU().h(s.t) ** 2)
    y = torch.tensor(np.exp(-s.t)[:, None] * s.x0)
    c = torch.tensor(s.weight)

    def rhs(_, a):
        A = torch.tensor(a.reshape(2, 10), requires_grad=True)
        L = (c * lam * ((psi @ A.T - y) ** 2).sum(1)).sum()
        (g,) = torch.autograd.grad(L, A)
        return -g.numpy().ravel()

    a0 = initial_readout(2, 10, "normal", 3).numpy().ravel()
    sol = solve_ivp(rhs, (0, 0.2), a0, t_eval=[0.05, 0.2], rtol=1e-10, atol=1e-12, method="DOP853")
    for k in range(2):
        np.testing.assert_allclose(fit.A[k].numpy().ravel(), sol.y[:, k], rtol=1e-6, atol=1e-8)


@given(seed=st.integers(0, 10_000), tau=st.floats(0.01, 3.0))
def test_flow_solves_the_ode(seed, tau):
    """A(tau) from the closed form satisfies dA/dtau = -2 (A U - V) (central differences)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(6, 6)); U = torch.tensor(X @ X.T / 6 + np.diag([0, 0, 0.1, 0.2, 0.3, 0.4]))
    V = torch.tensor(rng.normal(size=(2, 6))); A0 = torch.tensor(rng.normal(size=(2, 6)))
    fl = GradientFlow(U, V, A0)
    eps = 1e-5
    A = fl.path([tau - eps, tau, tau + eps]).A
    deriv = (A[2] - A[0]) / (2 * eps)
    np.testing.assert_allclose(deriv.numpy(), (-2 * (A[1] @ U - V)).numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(fl.path([0.0]).A[0].numpy(), A0.numpy(), atol=1e-12)


def test_tau_inf_is_minimizer_and_keeps_null_space():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(8, 3))
    U = torch.tensor(X @ X.T)  # rank 3 of 8
    V = torch.tensor(rng.normal(size=(2, 3)) @ X.T)  # in the range of U
    A0 = torch.tensor(rng.normal(size=(2, 8)))
    fl = GradientFlow(U, V, A0)
    A = fl.path([INF]).A[0]
    np.testing.assert_allclose((A @ U - V).numpy(), 0, atol=1e-10)  # gradient ~ 0
    # null-space part of A(0) untouched, range part = minimum-norm solution
    null = fl.Q[:, ~fl.range]
    np.testing.assert_allclose((A @ null).numpy(), (A0 @ null).numpy(), atol=1e-10)
    Amin = V @ torch.linalg.pinv(U, hermitian=True)
    np.testing.assert_allclose((A - A0 @ null @ null.T).numpy(), Amin.numpy(), atol=1e-9)
    assert fl.path([1e9]).A[0].sub(A).abs().max() < 1e-8


def test_exact_denoiser_has_zero_excess_and_model_excess_nonnegative():
    """Excess >= 0 up to its SE when the sample is much larger than the width."""
    m = small_model(width=12)
    fit = fit_random_features(m, TWO, n_time=12, n_noise=64, taus=[1.0, INF], schedule="h", **SMALL)
    for tau in fit.taus:
        assert fit.excess_loss(tau) >= -2 * fit.excess_loss_se(tau)
        mc = fit.evaluate()["excess_loss"][fit.tau_index(tau)]
        assert fit.excess_loss(tau) == pytest.approx(mc, rel=1e-8, abs=1e-10)  # two computations agree
    # the exact denoiser's outputs have zero excess by construction of f_star: check against ExactDenoiser
    s = fit.sample
    ex = ExactDenoiser(TWO)
    np.testing.assert_allclose(fit.f_star, np.exp(-s.t)[:, None] * ex.denoise(s.xt, s.t), atol=1e-12)
    lam, y = fit.lam, fit.y
    assert fit.optimal_loss == pytest.approx(np.sum(s.weight * lam * ((fit.f_star - y) ** 2).sum(1)))


def test_two_point_directional_split_is_x_and_y():
    m = small_model(width=20, parametrization="score")
    fit = fit_random_features(m, TWO, n_time=6, n_noise=8, taus=[0.3, INF], schedule="h", **SMALL)
    s = fit.sample
    for tau in fit.taus:
        f = fit.denoiser(tau)(torch.tensor(s.xt), torch.tensor(s.t)).detach().numpy()
        e = f - fit.f_star
        c = s.weight * fit.lam
        tan_x = np.sum(c * e[:, 0] ** 2)
        nor_y = np.sum(c * e[:, 1] ** 2)
        tan, nor = fit.excess_loss_split(tau, 1)
        assert tan == pytest.approx(tan_x, rel=1e-9)
        assert nor == pytest.approx(nor_y, rel=1e-9)
        assert nor > 0  # the score parametrization does err in y


def test_sweep_uses_nested_blocks_and_matches_single_fit():
    fits = fit_sweep(TWO, widths=[8, 32], schedules=["1", "h2"], taus=[2.0, INF],
                     model_kwargs=dict(n_frequencies=3, feature_period=4.0, seed=2), n_time=6, n_noise=4, **SMALL)
    single = fit_random_features(small_model(width=8), TWO, schedule="h2", n_time=6, n_noise=4, taus=[2.0, INF],
                                 **SMALL)
    np.testing.assert_allclose(fits[("h2", 8)].U.numpy(), single.U.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fits[("h2", 8)].A.numpy(), single.A.numpy(), rtol=1e-9, atol=1e-10)
    ds = fits_to_dataset(fits, d_star=1)
    assert ds.loss.dims == ("schedule", "width", "tau")
    assert ds.loss.sel(schedule="h2", width=8, tau=2.0).item() == pytest.approx(single.loss(2.0))
    total = ds.excess_tangent + ds.excess_normal
    assert np.all(np.isfinite(total.values))


def test_same_seed_same_A_bitwise():
    kw = dict(t_min=0.05, T=2.0, n_time=5, n_noise=3, taus=[1.0])
    a = fit_random_features(small_model(), TWO, seed=9, **kw)
    b = fit_random_features(small_model(), TWO, seed=9, **kw)
    assert torch.equal(a.A, b.A)
    c = fit_random_features(small_model(), TWO, seed=10, **kw)
    assert not torch.equal(a.A, c.A)
    d = fit_random_features(small_model(), TWO, seed=9, init_seed=1, **kw)  # A(0) from its own seed
    assert not torch.equal(a.A, d.A)


def test_init_normal_is_reproducible_nested_and_standard_normal():
    from scipy import stats

    a = initial_readout(3, 400, "normal", 5)
    np.testing.assert_array_equal(a[:, :50].numpy(), initial_readout(3, 50, "normal", 5).numpy())
    assert torch.equal(a, initial_readout(3, 400, "normal", 5))
    assert not torch.equal(a, initial_readout(3, 400, "normal", 6))
    assert stats.kstest(a.numpy().ravel(), "norm").pvalue > 1e-3
    assert float(initial_readout(3, 4, "zeros").abs().max()) == 0.0
    # a sweep's A(0) of each width is the leading block of the widest one's
    fits = fit_sweep(TWO, widths=[4, 16], schedules=["1"], taus=[0.0], model_kwargs=dict(n_frequencies=2),
                     n_time=3, n_noise=2, init_seed=5, **SMALL)
    np.testing.assert_array_equal(fits[("1", 4)].A[0].numpy(), initial_readout(2, 16, "normal", 5)[:, :4].numpy())


def test_feature_period_T_makes_phi_periodic_with_the_samplers_T():
    m = RandomFeatureDenoiser(2, 8, n_frequencies=5, feature_period=10.0)
    phi = m.time_features(torch.tensor([1e-15, 10.0, 5.0], dtype=torch.float64))
    np.testing.assert_allclose(phi[0].numpy(), phi[1].numpy(), atol=1e-12)  # phi(T) = phi(0)
    assert not np.allclose(phi[0].numpy(), phi[2].numpy())
    m2 = RandomFeatureDenoiser(2, 8, n_frequencies=5, feature_period=20.0)
    assert not np.allclose(m2.time_features(torch.tensor([1e-12, 10.0], dtype=torch.float64)).diff(dim=0), 0)


def test_normal_init_gives_collinear_data_a_normal_excess_that_decays_with_tau():
    """Two points on the x-axis: with A(0) = 0 the y-row of V is zero, so the normal error is zero
    by construction; with A(0) ~ N(0, 1) it is positive at finite tau and decays with tau."""
    kw = dict(widths=[64], schedules=["h"], taus=[0.3, 3.0, 30.0], model_kwargs=dict(n_frequencies=4, seed=1),
              n_time=9, n_noise=16, **SMALL)
    normal = fits_to_dataset(fit_sweep(TWO, init="normal", **kw), d_star=1)["excess_normal"].squeeze().values
    zeros = fits_to_dataset(fit_sweep(TWO, init="zeros", **kw), d_star=1)["excess_normal"].squeeze().values
    assert np.all(normal > 0) and np.all(np.diff(normal) < 0), normal
    np.testing.assert_allclose(zeros, 0.0, atol=1e-20)


@pytest.mark.parametrize("kwargs, name", [
    (dict(schedule="h3"), "schedule"), (dict(t_min=2.0, T=1.0), "`T` must be > 2.0"), (dict(method="adam"), "method"),
    (dict(taus=[-1.0]), "taus"), (dict(n_time=0), "n_time"), (dict(n_time=4), "n_time.*odd"),
    (dict(method="gd"), "lr"), (dict(method="gd", lr=0.1, taus=[INF]), "taus"), (dict(quadrature="midpoint"), "quadrature"),
    (dict(init="uniform"), "init"), (dict(init_seed=-1), "init_seed"),
])
def test_bad_fit_args(kwargs, name):
    with pytest.raises(ValueError, match=name):
        fit_random_features(small_model(), TWO, **{**dict(t_min=0.05, T=2.0, n_time=3, n_noise=2), **kwargs})


def test_bad_train():
    with pytest.raises(ValueError, match="train"):
        fit_random_features(small_model(), np.array([[0.0, np.nan]]), t_min=0.05, T=2.0)
    with pytest.raises(ValueError, match="train"):
        fit_random_features(small_model(), np.zeros((3, 3)), t_min=0.05, T=2.0)
    with pytest.raises(ValueError, match="widths"):
        fit_sweep(TWO, widths=[0], schedules=["1"])


def test_heldout_excess_is_not_biased_by_overfitting():
    m = small_model(width=256)
    fit = fit_random_features(m, TWO, n_time=8, n_noise=8, taus=[INF], schedule="h", **SMALL)
    assert fit.excess_loss(INF) < 0  # in-sample: the min-norm fit interpolates the 128-draw sample
    # ... so its quadratic form cancels (-1e-13) and the loss is the sum of squares (~3e-17)
    assert math.isnan(fit.quadratic.loss(fit.readout(INF))) and 0 <= fit.loss(INF) < 1e-12
    hold = fit.heldout_sample()
    assert not np.array_equal(hold.z, fit.sample.z) and np.array_equal(np.unique(hold.t), np.unique(fit.sample.t))
    ev = fit.evaluate(hold, d_star=1)
    assert ev["excess_loss"][0] > 0
    assert ev["excess_tangent"][0] + ev["excess_normal"][0] == pytest.approx(ev["excess_loss"][0], rel=0.5)


def test_ideal_target_fit_is_the_weighted_least_squares_fit_to_the_exact_outputs():
    from ridgexr.training import draw_training_sample, exact_outputs

    m = RandomFeatureDenoiser(2, 12, n_frequencies=2, feature_period=4.0, seed=3)
    fit = fit_random_features(m, TWO, n_time=6, n_noise=8, seed=2, target="ideal", **SMALL)
    s = draw_training_sample(TWO, n_time=6, n_noise=8, seed=2, **SMALL)
    psi = m.features(torch.as_tensor(s.xt), torch.as_tensor(s.t)).numpy()  # (S, p), computed independently
    lam, _ = targets(s, "posterior_mean", "1", OU())
    f_star = exact_outputs(TWO, s, "posterior_mean", OU())
    w = np.sqrt(s.weight * lam)[:, None]
    A_ls = np.linalg.lstsq(psi * w, f_star * w, rcond=None)[0].T  # min-norm weighted least squares
    np.testing.assert_allclose(fit.readout().numpy(), A_ls, rtol=1e-6, atol=1e-8)
    assert fit.quadratic.optimal_loss == 0.0  # the exact denoiser fits the ideal target exactly


def test_dsm_and_ideal_fits_converge_as_the_noise_draws_grow():
    grid_x = torch.as_tensor(np.random.default_rng(0).normal(size=(200, 2)) * 3)
    grid_t = torch.full((200,), 0.3, dtype=torch.float64)
    gaps = []
    for n_noise in (4, 64, 1024):
        m = RandomFeatureDenoiser(2, 24, n_frequencies=2, feature_period=4.0, seed=3)
        kw = dict(n_time=6, n_noise=n_noise, seed=5, init="zeros", **SMALL)
        dsm = fit_random_features(m, TWO, **kw).denoiser().denoise(grid_x, grid_t)
        ideal = fit_random_features(m, TWO, target="ideal", **kw).denoiser().denoise(grid_x, grid_t)
        gaps.append(float((dsm - ideal).detach().norm() / ideal.detach().norm()))
    # the DSM target's noise averages out like 1 / sqrt(n_noise): 16x more draws, ~4x smaller gap
    assert gaps[1] < 0.5 * gaps[0] and gaps[2] < 0.5 * gaps[1] and gaps[2] < 0.05, gaps


def test_quadratic_loss_is_nan_below_its_rounding_floor_never_negative():
    """L(a) = a^2 - 2 a s + s^2 = (a - s)^2 (closed form): resolved at s = 1, lost to cancellation at s = 1e8."""
    from ridgexr.training.quadratic import QuadraticLoss

    def form(s):
        return QuadraticLoss(U=torch.ones(1, 1, dtype=torch.float64), V=torch.full((1, 1), s, dtype=torch.float64),
                             C=s * s, optimal_loss=0.0, sample=None, schedule="1", parametrization="posterior_mean")

    assert form(1.0).loss(torch.full((1, 1), 1.5, dtype=torch.float64)) == 0.25
    assert math.isnan(form(1e8).loss(torch.full((1, 1), 1e8 + 0.5, dtype=torch.float64)))
    assert form(1e8).loss(torch.full((1, 1), 2e8, dtype=torch.float64)) == 1e16  # far from the minimum: resolved


@pytest.mark.parametrize("scale", [1.0, 1e15])
def test_random_feature_loss_is_the_quadratic_form_or_the_sum_of_squares(scale):
    """The loss agrees with the streamed sum of squares (>= 0 by construction), which replaces the quadratic
    form where that cancels; at data scale 3e15 the form gave -2.9e17 (issue 29, item 4)."""
    fit = fit_random_features(small_model(width=12), TWO * scale, n_time=6, n_noise=8, taus=[1.0, INF], **SMALL)
    brute = fit.evaluate()["loss"]
    assert (brute >= 0).all()
    q = np.array([fit.loss(tau) for tau in fit.taus])
    assert not (q < 0).any()
    if scale == 1.0:
        np.testing.assert_allclose(q, brute, rtol=1e-9)
    else:  # the form cancels to 0.0 (the true loss is 13.6): the sum of squares stands in
        assert np.isnan([fit.quadratic.loss(fit.readout(tau)) for tau in fit.taus]).all()
        np.testing.assert_array_equal(q, brute)


@pytest.mark.parametrize("null_cutoff", ["relative", "absolute"])
def test_null_cutoff_gives_the_authors_minimum_norm_formula(null_cutoff):
    """A(inf) = A0 (I - U U^+) + V U^+ with U^+ keeping eigenvalues above p eps mu_max ("relative") or above the
    authors' absolute 1 / (p 1e4) ("absolute", their compute_A_infty); one eigenvalue lies between the two."""
    rng = np.random.default_rng(4)
    p, d = 40, 2
    q, _ = np.linalg.qr(rng.normal(size=(p, p)))
    mu = np.concatenate([np.logspace(0, -4, p - 2), [1e-8, 1e-18]])  # 1e-8: between 1/(p 1e4) and p eps mu_max
    U = (q * mu) @ q.T
    V, A0 = rng.normal(size=(d, p)), rng.normal(size=(d, p))
    lam, Q = np.linalg.eigh(0.5 * (U + U.T))
    lam = np.clip(lam, 0.0, None)
    keep = lam > (1.0 / (p * 1e4) if null_cutoff == "absolute" else p * np.finfo(float).eps * lam.max())
    assert keep.sum() == (p - 2 if null_cutoff == "absolute" else p - 1)
    pinv = (Q * np.where(keep, 1.0 / np.where(keep, lam, 1.0), 0.0)) @ Q.T
    expected = A0 @ (np.eye(p) - U @ pinv) + V @ pinv
    got = GradientFlow(torch.tensor(U), torch.tensor(V), torch.tensor(A0), null_cutoff=null_cutoff).path([math.inf])
    np.testing.assert_allclose(got.A[0].numpy(), expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())


@given(p=st.integers(1, 4000), strip=st.integers(1, 700))
def test_gram_strips_tile_the_columns(p, strip):
    """The strips of the upper-triangular Gram cover 0..p once, in order, with about p / strip parts."""
    from ridgexr.training.quadratic import gram_strips

    parts = gram_strips(p, strip)
    assert parts[0][0] == 0 and parts[-1][1] == p
    assert all(a < b for a, b in parts) and all(b == a2 for (_, b), (a2, _) in zip(parts, parts[1:]))
    assert len(parts) == max(1, round(p / strip))


def test_strip_gram_equals_the_full_gemm_and_brute_force():
    """accumulate's Gram by strips of rows (upper triangle only, forced here to strips of 5 columns at width 24)
    against the one full GEMM (the path of widths < 1.5 x GRAM_STRIP): equal to float64 reduction order;
    and against the per-row brute force sum of c psi psi^T."""
    import ridgexr.training.quadratic as quadratic

    m = small_model()
    s = draw_training_sample(TWO, n_time=4, n_noise=3, seed=0, **SMALL)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quadratic, "GRAM_STRIP", 5)
        assert len(quadratic.gram_strips(24)) == 5
        split = quadratic.accumulate(m, s, ["1", "h2"], normalized=False)
    full = quadratic.accumulate(m, s, ["1", "h2"], normalized=False)
    from ridgexr.training import loss_weight

    lam_nodes = {k: loss_weight(k, s.t, m.parametrization, OU()) for k in ("1", "h2")}
    for k in ("1", "h2"):
        U = split[k].U.numpy()
        np.testing.assert_array_equal(U, U.T)  # the upper triangle mirrored
        scale = np.abs(full[k].U.numpy()).max()
        np.testing.assert_allclose(U, full[k].U.numpy(), rtol=0, atol=1e-14 * scale)
        np.testing.assert_array_equal(split[k].V.numpy(), full[k].V.numpy())
        psi = m.features(torch.tensor(s.xt), torch.tensor(s.t)).numpy() * math.sqrt(24)  # raw activations
        brute = np.einsum("s,si,sj->ij", s.weight * lam_nodes[k], psi, psi)
        np.testing.assert_allclose(U, brute, rtol=1e-11, atol=1e-12 * scale)
