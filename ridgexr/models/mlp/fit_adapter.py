"""Training entry point of mlp blocks: one :func:`ridgexr.fit_neural` run per (schedule, width, n_train),
through the neural kinds' one loop (:func:`ridgexr.models.trained.fit_epoch_block`)."""

from __future__ import annotations

from ..trained import fit_epoch_block
from .denoiser import MLPDenoiser, mlp_kwargs

__all__ = ["fit"]


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Train an mlp block for its cells; ``{cell index: FittedCell}`` (state: the weights at the cell's epoch).

    One run per (schedule, width, n_train, data_draw) to the largest listed epoch, with snapshots at
    the listed epochs and checkpoints under ``ctx.checkpoint_root`` (a rerun resumes them).
    """
    d = ctx.train.shape[1]
    return fit_epoch_block(ctx, block, cells,
                           make_net=lambda lab: MLPDenoiser(d, **mlp_kwargs(ctx.exp, block, lab["width"])))
