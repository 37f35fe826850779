"""Entry point of diffusers blocks: the UNet was trained elsewhere; held-out diagnostics only."""

from __future__ import annotations

from ...training.heldout import heldout_per_cell
from ..kind import FittedCell

__all__ = ["fit", "check"]


def check(exp, block, train) -> None:
    """Before the lock or any folder: the folders load (locally), the image shape matches the training
    set's d, ``process.T`` and ``process.t_min`` lie within the scheduler's timesteps, and the training set
    lies in ``data_range``.

    Raises
    ------
    ValueError (:class:`ridgexr.models.module.denoiser.ModelError`)
        Naming the catalog file, the entry and the field.
    """
    import numpy as np

    from ..module.denoiser import ModelError
    from .denoiser import denoiser_from_block

    where = f"{exp.source}: entry {exp.name!r}" if exp.source else f"entry {exp.name!r}"
    try:
        den = denoiser_from_block(block, exp.base_dir)
        den.check(train.shape[1])
    except ModelError as exc:
        raise ModelError(f"{where}: model {block.label!r}: {exc}") from None
    if not den.t_min <= exp.process.t_min < exp.process.T <= den.t_max:
        raise ValueError(f"{where}: model {block.label!r}: `process.t_min` .. `process.T` ({exp.process.t_min:g} .. "
                         f"{exp.process.T:g}) must lie within the OU times {den.t_min:.6g} .. {den.t_max:.6g} of its "
                         "scheduler's timesteps (alpha_bar = e^{-2t})")
    if not den.t_min <= exp.loss_t_min:
        raise ValueError(f"{where}: model {block.label!r}: the loss's t_min ({exp.loss_t_min:g}) is below the OU "
                         f"time {den.t_min:.6g} of timestep 0")
    if block.data_range is not None:
        lo, hi = float(np.min(train)), float(np.max(train))
        if lo < block.data_range[0] or hi > block.data_range[1]:
            raise ValueError(f"{where}: model {block.label!r}: the training set spans [{lo:.4g}, {hi:.4g}], outside "
                             f"the model's `data_range` {list(block.data_range)} (scale the dataset to the "
                             "model's pixel range, e.g. `scale: symmetric` for [-1, 1])")


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Load the UNet and estimate its held-out diagnostics per cell; ``{cell index: FittedCell}``
    (state None: each cell's builder loads the folders again, in its worker)."""
    from .denoiser import build

    exp = ctx.exp
    den = build(exp, block, None, ctx.train, ctx.device)
    return {idx: FittedCell(None, values) for idx, values in heldout_per_cell(ctx, block, den.denoise, cells).items()}
