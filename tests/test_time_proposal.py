"""The loss's time proposals: unbiased against quadrature for every schedule, and what each costs in variance."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy import integrate

from ridgexr.training import fit_neural
from ridgexr.training.minibatch import dsm_loss_rows
from ridgexr.training.proposal import TimeProposal

T_MIN, T = 1e-3, 5.0
X0 = np.array([[1.0, -0.5, 0.25], [-0.3, 0.8, 2.0], [0.0, 1.5, -1.0]])
C = 0.6  # the fixed "network": eps_hat(x_t, t) = C x_t


def _linear_eps(x, t):
    return C * x


def _w(schedule, t):
    h = 1 - np.exp(-2 * t)
    return {"1": np.ones_like(t), "h": h, "h2": h**2}[schedule]


def _m(t):
    """E |C x_t - z|^2 in closed form: x_t = a x0 + sqrt(h) z, so C x_t - z = C a x0 + (C sqrt(h) - 1) z."""
    a2, h = np.exp(-2 * t), 1 - np.exp(-2 * t)
    return C**2 * a2 * np.mean((X0**2).sum(1)) + (C * np.sqrt(h) - 1) ** 2 * X0.shape[1]


def _loss_by_quadrature(schedule):
    f = lambda t: _w(schedule, np.array(t)) / (1 - np.exp(-2 * t)) * _m(t)  # noqa: E731
    edges = np.geomspace(T_MIN, T, 12)  # the integrand spans orders of magnitude near t_min
    return sum(integrate.quad(f, a, b, epsabs=0, epsrel=1e-12)[0] for a, b in zip(edges[:-1], edges[1:]))


def _rows(prop, schedule, n, seed):
    """fit_neural's row estimates: w(t) / q(t) |eps_hat - z|^2 / h at t ~ q, x0 uniform over X0."""
    g = torch.Generator().manual_seed(seed)
    t, iw = prop.draw(n, g)
    x0 = torch.as_tensor(X0)[torch.randint(0, len(X0), (n,), generator=g)]
    z = torch.randn(n, X0.shape[1], generator=g, dtype=torch.float64)
    w = torch.as_tensor(_w(schedule, t.numpy())) * iw
    return dsm_loss_rows(_linear_eps, x0, t, z, w, "epsilon").numpy()


@pytest.mark.parametrize("schedule", ["1", "h", "h2"])
@pytest.mark.parametrize("kind", ["uniform", "weight"])
def test_each_proposal_estimates_the_loss_without_bias(schedule, kind):
    """The mean of 400 000 rows equals the integral by adaptive quadrature within 4 standard errors."""
    rows = _rows(TimeProposal(schedule, T_MIN, T, kind), schedule, 400_000, seed=11)
    want = _loss_by_quadrature(schedule)
    se = rows.std(ddof=1) / np.sqrt(rows.size)
    assert abs(rows.mean() - want) < 4 * se, (rows.mean(), want, se)
    assert se < 0.02 * want  # the check has teeth: 4 SE is under 8 % of the value


def test_the_weight_proposal_cuts_the_variance_where_the_weight_spans_orders_of_magnitude():
    """Per-row standard deviation relative to the loss (the numbers in docs/training.md): w = 1 gains an order of
    magnitude (13.4 -> 1.3 here); w = h (lambda = 1) is unchanged; for w = h^2 (lambda = h, within [0.002, 1]) the
    proposal does not help this model, whose error m(t) itself falls with t (0.84 uniform, 1.00 weight)."""
    rel = {}
    for schedule in ("1", "h", "h2"):
        for kind in ("uniform", "weight"):
            rows = _rows(TimeProposal(schedule, T_MIN, T, kind), schedule, 200_000, seed=5)
            rel[schedule, kind] = rows.std() / rows.mean()
    assert rel["1", "uniform"] > 10 * rel["1", "weight"]
    assert 0.7 < rel["h2", "uniform"] / rel["h2", "weight"] < 1.0
    assert 0.9 < rel["h", "uniform"] / rel["h", "weight"] < 1.1


@settings(max_examples=25, deadline=None)
@given(t_min=st.floats(1e-4, 0.1), T=st.floats(0.5, 10.0), schedule=st.sampled_from(["1", "h", "h2"]),
       seed=st.integers(0, 2**31 - 1))
def test_the_importance_weights_integrate_the_interval(t_min, T, schedule, seed):
    """E_q[1 / q(t)] = T - t_min for any proposal (the density actually drawn is the one the weights use), and
    every t lies in [t_min, T]."""
    t, iw = TimeProposal(schedule, t_min, T, "weight").draw(100_000, torch.Generator().manual_seed(seed))
    assert float(t.min()) >= t_min and float(t.max()) <= T
    se = float(iw.std()) / np.sqrt(iw.numel())
    assert abs(float(iw.mean()) - (T - t_min)) < 5 * se + 1e-9 * T


def test_scheduler_timesteps_weighted_average_the_same_loss():
    """Over a scheduler's timesteps the loss is the plain average over k; the weight proposal's rows average to
    it too (exactly, in expectation over k: sum_k p_k iw_k f_k = mean_k f_k)."""
    t_k = np.linspace(0.002, 3.0, 50)
    prop = TimeProposal("1", T_MIN, T, "weight", timesteps=t_k)
    f = np.cos(t_k) + 2.0
    np.testing.assert_allclose((prop.p_k.numpy() * prop.iw_k.numpy() * f).sum(), f.mean(), rtol=1e-12)
    t, iw = prop.draw(50_000, torch.Generator().manual_seed(0))
    assert set(np.unique(t.numpy())) <= set(t_k)
    assert float((t < 0.1).float().mean()) > 0.1  # w = 1 draws small timesteps far more often than 2 / 50


def test_the_uniform_proposal_draws_the_numbers_of_the_earlier_loop():
    """Old stores stay reproducible: 'uniform' takes t_min + (T - t_min) torch.rand from the same generator."""
    a, _ = TimeProposal("1", 0.01, 2.0, "uniform").draw(7, torch.Generator().manual_seed(3))
    b = 0.01 + (2.0 - 0.01) * torch.rand(7, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(a, b)


def test_fit_neural_with_the_weight_proposal_reports_the_weighted_loss_and_refuses_a_vanishing_weight():
    train = np.random.default_rng(0).normal(size=(16, 2))
    net = torch.nn.Linear(2, 2).double()
    net.parametrization = "epsilon"
    model = lambda x, t: net(x)  # noqa: E731

    class Wrap(torch.nn.Module):
        parametrization = "epsilon"

        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, t):
            return model(x, t)

    fit = fit_neural(Wrap(), train, schedule="1", epochs=2, batch_size=16, device="cpu", time_proposal="weight",
                     t_min=T_MIN, T=T)
    assert np.isfinite(fit.losses).all() and fit.config["time_proposal"] == "weight"
    with pytest.raises(ValueError, match="time_proposal"):
        fit_neural(Wrap(), train, schedule=lambda t: np.where(t < 1, 0.0, 1.0), epochs=1, device="cpu",
                   time_proposal="weight")
    with pytest.raises(ValueError, match="time_proposal"):
        fit_neural(Wrap(), train, epochs=1, device="cpu", time_proposal="stratified")
