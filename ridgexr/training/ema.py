"""An exponential moving average of a network's weights, with diffusers' warm-up.

After the k-th optimizer step (k = 1, 2, ...) the average moves towards the weights theta_k:

    ema_k = beta_k ema_{k-1} + (1 - beta_k) theta_k,
    beta_1 = 0,   beta_k = min(decay, k / (9 + k))  (k >= 2),

the rule of diffusers' ``EMAModel`` (its ``get_decay``: step = k - 1, (1 + step) / (10 + step),
0 at the first step).  The first step copies the weights; the share of theta_1 left in ema_K is
prod_{k=2}^{K} beta_k, 3.5e-21 after 1 000 steps at decay 0.999 (without the warm-up it would be
0.999^{K-1} = 37 %: an average of mostly near-initial weights).

Floating-point parameters and buffers are averaged; integer buffers (counters) are copied.
"""

from __future__ import annotations

import copy

import torch

from .._validation import check_float

__all__ = ["WeightEMA", "ema_decay"]


def ema_decay(step: int, decay: float) -> float:
    """beta_k of the module doc for the k-th update (k >= 1): 0 at k = 1, then min(decay, k / (9 + k)).

    Examples
    --------
    >>> ema_decay(1, 0.999), round(ema_decay(2, 0.999), 6), ema_decay(10 ** 6, 0.999)
    (0.0, 0.181818, 0.999)
    """
    return 0.0 if step <= 1 else min(float(decay), step / (9.0 + step))


class WeightEMA:
    """The moving average of ``model``'s weights (module doc), held in a copy of the model.

    Parameters
    ----------
    model : torch.nn.Module
        The network being trained; the average starts as a copy of its current weights.
    decay : float
        The largest per-step decay (e.g. 0.999), in [0, 1).

    Attributes
    ----------
    module : torch.nn.Module
        The copy carrying the averaged weights (eval mode, no gradients).
    steps : int
        Updates so far (k of the module doc).
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = check_float(decay, "decay", min_val=0, max_val=1, include_boundaries="left")
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        self.steps = 0

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """One update after an optimizer step of ``model``."""
        self.steps += 1
        beta = ema_decay(self.steps, self.decay)
        mine = self.module.state_dict()
        for name, value in model.state_dict().items():
            avg = mine[name]
            if avg.is_floating_point():
                avg.mul_(beta).add_(value.detach(), alpha=1.0 - beta)
            else:
                avg.copy_(value)

    def state_dict(self) -> dict:
        """The averaged weights and the step count (a checkpoint's ``ema`` entry)."""
        return {"module": self.module.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
        self.steps = int(state["steps"])
