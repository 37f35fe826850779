"""Held-out diagnostics of a model that is not fitted in closed form (mlp, module, exact).

The diagnostics of every cell are estimated on one held-out sample per training set: the
random-feature fit's sample drawn with seed ``seeds.training + 1`` (the same quadrature,
nodes and noise draws), so the numbers of every kind are comparable.
"""

from __future__ import annotations

import math
from typing import Callable

from .diagnostics import DIAGNOSTIC_VARIABLES
from .fit import evaluate_denoiser
from .sample import TrainingSample, draw_training_sample

__all__ = ["heldout_sample", "heldout_diagnostics"]


def heldout_sample(ctx, n_train: int | None) -> TrainingSample:
    """The held-out sample of the first ``n_train`` training points (cached on ``ctx.heldout``).

    ``ctx`` is a :class:`ridgexr.models.FitContext`; the sample uses the entry's first ``n_noise``.
    """
    if n_train not in ctx.heldout:
        exp = ctx.exp
        ctx.heldout[n_train] = draw_training_sample(
            ctx.train[:n_train], t_min=exp.loss_t_min, T=exp.process.T, n_time=exp.training.n_time,
            n_noise=exp.training.n_noises[0], seed=exp.seeds.training + 1, quadrature=exp.training.quadrature)
    return ctx.heldout[n_train]


def heldout_diagnostics(denoise: Callable, sample: TrainingSample, schedule: str, d_star: int,
                        loss: float = math.nan) -> dict:
    """Every per-cell diagnostic of ``denoise`` on ``sample`` (NaN where not estimated), with ``loss``."""
    ev = evaluate_denoiser(denoise, sample, schedule=schedule, d_star=d_star)
    return {name: ev.get(name, math.nan) for name in DIAGNOSTIC_VARIABLES} | {"loss": loss}
