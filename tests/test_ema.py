"""The weight average of minibatch training: diffusers' warm-up rule, checked against its closed form."""

import numpy as np
import torch

from ridgexr.training import fit_neural
from ridgexr.training.ema import WeightEMA, ema_decay


def _closed_form(thetas: np.ndarray, decay: float) -> float:
    """sum_k theta_k (1 - b_k) prod_{j > k} b_j with b_1 = 0, b_k = min(decay, (1 + s) / (10 + s)), s = k - 1:
    the issue's rule written from diffusers' EMAModel.get_decay, independently of ridgexr.training.ema."""
    k = np.arange(1, len(thetas) + 1)
    s = k - 1
    b = np.where(s == 0, 0.0, np.minimum(decay, (1 + s) / (10 + s)))
    tail = np.append(np.cumprod(b[::-1])[::-1][1:], 1.0)  # prod_{j > k} b_j
    return float(np.sum(thetas * (1 - b) * tail))


class _Scalar(torch.nn.Module):
    """f(x, t) = c x in the x0 parametrization; records c at every forward (the weights before each step)."""

    parametrization = "x0"

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Parameter(torch.tensor(0.3))
        self.seen: list[float] = []

    def forward(self, x, t):
        if self.training:
            self.seen.append(float(self.c.detach()))
        return self.c * x


def test_the_average_after_k_steps_of_fit_neural_is_the_closed_form_of_its_raw_weights():
    """fit_neural's averaged weight after 1 000 steps (batch 1) equals the closed form applied to the raw weights
    theta_1..theta_K it stepped through (read at each forward, and the last from the raw snapshot)."""
    train = np.linspace(-1.0, 1.0, 50)[:, None]
    model = _Scalar()
    fit = fit_neural(model, train, epochs=20, batch_size=1, lr=1e-2, optimizer="sgd", ema=0.999, device="cpu",
                     save_epochs=[20], seed=3)
    raw = np.array(model.seen[1:] + [float(fit.raw_snapshots[20]["c"])])  # theta_k after step k
    assert len(raw) == 1000 and np.ptp(raw) > 1e-3  # the raw weight moved
    np.testing.assert_allclose(float(fit.model.c), _closed_form(raw, 0.999), rtol=1e-5)
    np.testing.assert_allclose(float(fit.snapshots[20]["c"]), float(fit.model.c))
    assert fit.at_epoch(20, "raw").c.item() == raw[-1]


def test_the_first_step_weighs_less_than_one_in_a_thousand_after_1000_steps():
    """theta_1 = 1, then 0: what is left of the first step's weights after 1 000 updates (0.999^999 = 0.37
    without the warm-up)."""
    m = torch.nn.Linear(1, 1, bias=False)
    ema = WeightEMA(m, 0.999)
    with torch.no_grad():
        m.weight.fill_(1.0)
        ema.update(m)
        m.weight.fill_(0.0)
        for _ in range(999):
            ema.update(m)
    share = float(ema.module.weight)
    assert 0 < share < 1e-3
    np.testing.assert_allclose(share, _closed_form(np.r_[1.0, np.zeros(999)], 0.999), rtol=1e-5)  # float32 weights


def test_the_decay_reaches_its_cap_and_the_first_update_copies():
    assert ema_decay(1, 0.999) == 0.0
    assert ema_decay(5, 0.999) == 5 / 14
    assert ema_decay(10 ** 5, 0.999) == 0.999
    m = torch.nn.Linear(2, 1)
    ema = WeightEMA(m, 0.9)
    with torch.no_grad():
        m.weight.add_(1.0)
    ema.update(m)
    assert torch.equal(ema.module.weight, m.weight)
