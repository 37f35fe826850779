"""What a rerun of an entry would pick up at its store path: complete cells and unfinished training runs.

Read only and without the training set, for ``ridgexr run --plan``: the plan prices every cell a run (or a piece,
``--cells``) selects, and this says how much of that the store at the path already holds.  Whether the store is
this configuration's is decided by the run, from the training set (:func:`ridgexr.run.runner.store_fate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._backend import load_plain
from ..catalog import Experiment
from ..catalog.folders import is_store
from ..catalog.folders import root_metadata as _root_metadata
from ..store.opening import open_store
from ..training.minibatch import CHECKPOINT_NAME
from .plan import run_cell_indexes
from .runner import checkpoint_root

__all__ = ["Resumable", "what_resumes", "unfinished_training"]


@dataclass(frozen=True)
class Resumable:
    """What the store path of a run holds (:func:`what_resumes`).

    Attributes
    ----------
    store : Path
    exists : bool
        Whether a ridgexr store is there.
    selected : int
        How many cells the run (or piece) samples.
    other_shape : bool
        The store's cell grid has other dimensions or sizes than the entry's: another configuration's store.
    config_hash : str or None
        The store's ``config_hash`` attribute (its checkpoints' folder is named by it).
    training : list of (str, int or None, int or None)
        The store's unfinished training runs, ``(run folder, epoch reached, epochs)``, by folder
        (``<block label>/<run folder>``, :meth:`ridgexr.models.model_spec.EpochTrainedSpec.run_folder`): a run of
        the same configuration resumes each at its epoch.  ``(folder, None, None)``: a side file that cannot be read
        (the run that reaches it says why).
    done : frozenset of tuple
        The index tuples (into the entry's ``cell_coords()``) of the selected cells the store marks complete;
        empty where there is no store, or the store's cells have another shape (``other_shape``).
    """

    store: Path
    exists: bool
    selected: int = 0
    other_shape: bool = False
    config_hash: str | None = None
    training: list[tuple[str, int | None, int | None]] = field(default_factory=list)
    done: frozenset[tuple[int, ...]] = frozenset()

    @property
    def complete(self) -> int:
        """How many of the ``selected`` cells the store marks complete (``len(done)``)."""
        return len(self.done)

    @property
    def reached(self) -> dict[str, int]:
        """``{run folder: epoch}`` of the readable unfinished training runs (what
        :func:`ridgexr.run.plan.estimate_stage_seconds` takes as ``reached``)."""
        return {folder: epoch for folder, epoch, _ in self.training if epoch is not None}


def what_resumes(exp: Experiment, store: str | Path, cells: dict[str, Any] | None = None) -> Resumable:
    """What a rerun of ``exp`` at ``store`` keeps: of the cells it samples (those of the piece ``cells``,
    :func:`ridgexr.run.plan.run_cell_indexes`), how many the store marks complete, and the training runs its
    checkpoint folder holds unfinished (their epoch and total).  Read only, without the lock or the training set.

    A store's completion marks are kept only by a run of the configuration that wrote them, and a checkpoint
    resumes only a training run of its own configuration; this does not check either (the run does).
    """
    path = Path(store)
    selected = run_cell_indexes(exp, cells)
    if not is_store(path):
        return Resumable(path, False, selected=len(selected))
    config_hash = _root_metadata(path).get("attributes", {}).get("config_hash")
    marks = open_store(path)["cell_complete"]
    coords = exp.cell_coords()
    other = (tuple(marks.dims), tuple(marks.shape)) != (tuple(n for n, _ in coords), tuple(len(v) for _, v in coords))
    complete = np.asarray(marks.values, dtype=bool)
    done = frozenset() if other else frozenset(idx for idx in selected if complete[idx])
    return Resumable(path, True, selected=len(selected), other_shape=other,
                     config_hash=config_hash, done=done,
                     training=unfinished_training(checkpoint_root(path, str(config_hash))) if config_hash else [])


def unfinished_training(root: Path) -> list[tuple[str, int | None, int | None]]:
    """``(run folder, epoch, epochs)`` of each checkpoint side file under ``root`` (a store's checkpoint folder of
    one configuration, :func:`ridgexr.run.runner.checkpoint_root`) whose run has epochs left, by folder
    (``<block label>/<run folder>``); ``(folder, None, None)`` for one that cannot be read."""
    out: list[tuple[str, int | None, int | None]] = []
    for side in sorted(root.glob(f"**/{CHECKPOINT_NAME}")):
        folder = side.parent.relative_to(root).as_posix()
        try:
            state = load_plain(side)
            epoch, epochs = int(state["epoch"]), int(state["config"]["epochs"])
        except Exception:  # noqa: BLE001 -- torn, truncated or foreign: listed as unreadable, never skipped
            out.append((folder, None, None))
            continue
        if epoch < epochs:
            out.append((folder, epoch, epochs))
    return out
