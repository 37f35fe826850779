"""Entry point of module blocks: the user's model was trained elsewhere; held-out diagnostics only."""

from __future__ import annotations

from ...training.heldout import heldout_diagnostics, heldout_sample
from ..kind import FittedCell
from .denoiser import build

__all__ = ["fit"]


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Import and probe the module (a bad path fails here, before the store is created) and estimate
    its held-out diagnostics per cell; ``{cell index: FittedCell}`` (state: the object handed to
    ``run_experiment(model=...)``, else None: workers import the module again)."""
    exp = ctx.exp
    obj = ctx.objects.get(block.label)
    den = obj.nonfinite_as_nan() if obj is not None else build(exp, block, None, ctx.train, ctx.device)
    out = {}
    for idx, lab in cells:
        ctx.say(f"{ctx.prefix(block)}held-out diagnostics")
        n_train = lab.get("n_train", exp.dataset.n_trains[-1])
        values = heldout_diagnostics(den.denoise, heldout_sample(ctx, n_train),
                                     block.diagnostic_schedule(exp.schedules), exp.d_star)
        out[idx] = FittedCell(obj, values)
    return out
