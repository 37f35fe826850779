"""Entry point of module blocks: the user's model was trained elsewhere; held-out diagnostics only."""

from __future__ import annotations

from ...training.heldout import heldout_per_cell
from ..kind import FittedCell
from .denoiser import build

__all__ = ["fit", "check"]


def check(exp, block, train) -> None:
    """Before the lock or any folder: ``process.T`` within the model's time convention, the module
    importable with its factory callable, and the checkpoint file present (the factory itself runs at
    the fit).  A model handed to ``run_experiment(model=...)`` was checked when it was wrapped.

    Raises
    ------
    ValueError (:class:`ModelError`)
        Naming the catalog file, the entry and the field.
    """
    import sys
    from pathlib import Path

    from . import PYTHON_OBJECT
    from .denoiser import ModelError, TimeConvention, load_factory

    if block.module.startswith(PYTHON_OBJECT + ":"):
        return
    where = f"{exp.source}: entry {exp.name!r}" if exp.source else f"entry {exp.name!r}"
    time = TimeConvention(block.time, block.beta_min, block.beta_max)
    if exp.process.T > time.t_max:
        raise ValueError(f"{where}: `process.T` ({exp.process.T}) exceeds the largest OU time {time.t_max:.6g} of "
                         f"model {block.label!r}'s time convention {time.label()} (model time s <= 1)")
    if exp.base_dir is not None and str(exp.base_dir) not in sys.path:  # as module_from_spec does
        sys.path.insert(0, str(exp.base_dir))
    try:
        load_factory(block.module)
    except ModelError as exc:
        raise ModelError(f"{where}: {exc}") from None
    if block.checkpoint is not None:
        file = Path(block.checkpoint)
        if not file.is_absolute() and exp.base_dir is not None:
            file = Path(exp.base_dir) / file
        if not file.is_file():
            raise ModelError(f"{where}: `checkpoint` {str(file)!r} does not exist")


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Import and probe the module (a bad path fails here, before the store is created) and estimate
    its held-out diagnostics per cell; ``{cell index: FittedCell}`` (state: the object handed to
    ``run_experiment(model=...)``, else None: workers import the module again)."""
    exp = ctx.exp
    obj = ctx.objects.get(block.label)
    den = obj.nonfinite_as_nan() if obj is not None else build(exp, block, None, ctx.train, ctx.device)
    return {idx: FittedCell(obj, values) for idx, values in heldout_per_cell(ctx, block, den.denoise, cells).items()}
