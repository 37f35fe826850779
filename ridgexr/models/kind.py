"""A registry entry: one model kind, its spec class and, by import path, its torch side.

The registry (:data:`ridgexr.models.REGISTRY`) maps ``kind`` to a :class:`ModelKind`.  The
spec is imported when a catalog is validated (torch-free); the builder and the trainer are
named by ``"package.module:attribute"`` and imported only when a run needs them, so loading a
catalog imports neither torch nor xarray.

- ``spec``: a :class:`ridgexr.models.model_spec.ModelSpec` subclass, the kind's fields and defaults;
- ``build(exp, block, task, d, device)`` -> a denoiser with ``score(x, t)`` and ``denoise(x, t)``
  (OU convention) for one cell (``task`` carries what the trainer left in ``state``);
- ``fit(context, block_index, block, cells)`` -> ``{cell index: FittedCell}``, the kind's
  training entry point (or the held-out diagnostics of a model that is not trained here);
- ``check(exp, block, train)`` (optional) raises ``ValueError`` for a block that cannot be fitted
  on this training set; it runs before the store's lock or any folder is written;
- ``cost`` (optional) a :class:`ridgexr.models.cost.KindCost`, the planner's time and memory model of
  the kind (without one: a small network trained elsewhere);
- ``scheduler(block, base_dir)`` (optional) -> (a diffusers scheduler, the image shape (C, H, W)): the
  scheduler a ``sampler: {kind: scheduler}`` entry steps with a block of this kind.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["ModelKind", "FitContext", "FittedCell", "import_path"]


def import_path(path: str) -> Any:
    """The attribute named by ``"package.module:attribute"``."""
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class ModelKind:
    """One model kind: ``name``, and import paths of its ``spec``, ``build``, ``fit`` and optional ``check``,
    ``cost`` and ``scheduler``."""

    name: str
    spec: str
    build: str
    fit: str
    check: str | None = None
    cost: str | None = None
    scheduler: str | None = None

    def spec_class(self):
        """The kind's pydantic spec class (torch-free import)."""
        return import_path(self.spec)

    def builder(self) -> Callable:
        return import_path(self.build)

    def trainer(self) -> Callable:
        return import_path(self.fit)

    def checker(self) -> Callable:
        """``check(exp, block, train)``, or a no-op for a kind that has none."""
        return import_path(self.check) if self.check else (lambda exp, block, train: None)

    def cost_model(self):
        """The kind's :class:`ridgexr.models.cost.KindCost` (the base class's small network for a kind
        that names none).  Imports torch (the cost model reads :mod:`ridgexr.empirical`)."""
        if self.cost:
            return import_path(self.cost)
        from .cost import KindCost

        return KindCost()

    def stepper(self) -> Callable | None:
        """``scheduler(block, base_dir) -> (scheduler, (C, H, W))``, or None for a kind without a scheduler."""
        return import_path(self.scheduler) if self.scheduler else None


@dataclass
class FittedCell:
    """What a kind's trainer leaves for one cell: the state its builder reads, the diagnostics.

    ``state`` is kind-specific and picklable (random features: the readout A (d, p) or None for
    the exact denoiser; mlp: the weights at the cell's epoch; module: the object handed to
    ``run_experiment(model=...)`` or None).
    """

    state: Any
    diagnostics: dict


@dataclass
class FitContext:
    """What every trainer reads besides its block: the entry, the training set and the run's options."""

    exp: Any  # ridgexr.catalog.Experiment (d_star resolved)
    train: Any  # (N, d) float64 training set
    say: Callable[[str], None]
    device: str = "cpu"
    checkpoint_root: Path | None = None
    objects: dict = field(default_factory=dict)  # label -> a model handed to run_experiment(model=...)
    heldout: dict = field(default_factory=dict)  # (n_train, n_time, n_noise) -> the held-out sample (cache)
    bars: Any = None  # a rich.progress.Progress: the run's progress display (None: no bars)

    def prefix(self, block) -> str:
        """The progress prefix of a block (its label when the store has a model dimension)."""
        return f"{block.label}: " if self.exp.model_dim else ""

    def node_bar(self, description: str) -> Callable[[int, int], None] | None:
        """A callback ``(done, total)`` that drives a progress bar named ``description`` on the run's
        display (added now, hidden until the first call, so its elapsed time counts from here; removed
        when ``done == total``; later calls, e.g. from further blocks of rows at the last node, are
        ignored); None without a display."""
        if self.bars is None:
            return None
        task = [self.bars.add_task(description, total=None, visible=False)]

        def advance(done: int, total: int) -> None:
            if task[0] is None:  # finished and removed
                return
            self.bars.update(task[0], total=total, completed=done, visible=True)
            if done >= total:
                self.bars.remove_task(task[0])
                task[0] = None

        return advance
