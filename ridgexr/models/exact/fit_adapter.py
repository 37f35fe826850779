"""Entry point of exact blocks: nothing to train, held-out diagnostics only."""

from __future__ import annotations

from ...training.heldout import heldout_diagnostics, heldout_sample
from ..kind import FittedCell
from .denoiser import ExactDenoiser

__all__ = ["fit"]


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """The held-out diagnostics of the exact denoiser per cell; ``{cell index: FittedCell}``
    (its loss is the optimal loss)."""
    exp = ctx.exp
    out = {}
    for idx, lab in cells:
        rows = exp.dataset.rows(lab)
        ctx.say(f"{ctx.prefix(block)}held-out diagnostics")
        ex = ExactDenoiser(ctx.train[rows], top_k=exp.ridge.top_k, drop_tol=exp.ridge.drop_tol)
        values = heldout_diagnostics(ex.denoise, heldout_sample(ctx, rows, block.diagnostics),
                                     block.diagnostic_schedule(exp.schedules), exp.d_star,
                                     progress=ctx.node_bar(f"{ctx.prefix(block)}held-out diagnostics (time nodes)"))
        out[idx] = FittedCell(None, values | {"loss": values["optimal_loss"]})
    return out
