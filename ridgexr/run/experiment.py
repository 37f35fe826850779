""":func:`run_experiment`: plan, create or resume the store, and execute the cells."""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..catalog import Experiment, resolve_store
from ..datasets import load_training_set
from ..reader import summarize
from ..store import StoreLock, create_store, open_store
from .cell import run_cell
from .cluster import dask_client, resolve_scheduler
from .plan import plan_layout, plan_tasks, resolve_d_star
from .provenance import store_attrs

__all__ = ["run_experiment", "RunResult", "ConfigMismatchError"]


class ConfigMismatchError(RuntimeError):
    """The store on disk was written by a different configuration."""


@dataclass
class RunResult:
    """What :func:`run_experiment` did: the store, cells run and kept, and the per-cell summary."""

    store: Path
    cells_run: int
    cells_skipped: int
    summary: list[dict] = field(default_factory=list)


def run_experiment(exp: Experiment, *, out_dir: str | Path | None = None, store: str | Path | None = None,
                   device: str = "cpu", scheduler: str | None = None, overwrite: bool = False,
                   n_workers: int = 2, progress: Any = None) -> RunResult:
    """Run (or resume) an experiment into its Zarr store.

    Parameters
    ----------
    exp : Experiment
    out_dir : path, optional
        Data directory for the store (see :mod:`ridgexr.catalog`).
    store : path, optional
        Explicit store path (overrides ``out_dir`` resolution).
    device : {"cpu", "cuda", ...}
    scheduler : None, "local" or a dask scheduler address
        None runs cells in this process (or on ``$DASK_SCHEDULER_ADDRESS`` when set);
        "local" starts a LocalCluster of ``n_workers`` processes.
    overwrite : bool
        Replace a store written by another configuration (or any existing store).
    n_workers : int
        Workers of ``scheduler="local"``.
    progress : rich.progress.Progress, optional

    Raises
    ------
    ConfigMismatchError, StoreLockedError, ValueError
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"`device` {device!r} was requested but CUDA is not available")
    torch.device(device)  # validates the name
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    config_hash = exp.config_hash(train)  # of the entry as written (d_star may be "auto")
    path = Path(store).resolve() if store is not None else resolve_store(exp, out_dir)
    exp, d_star_info = resolve_d_star(exp, train)
    if exp.d_star >= train.shape[1]:
        raise ValueError(f"`d_star` must be < the data dimension {train.shape[1]}; got {exp.d_star}")
    layout = plan_layout(exp, train)
    scheduler = resolve_scheduler(scheduler)
    with StoreLock(path):
        exists = (path / "zarr.json").is_file()
        done: set[tuple] = set()
        if exists and overwrite:
            shutil.rmtree(path)
            exists = False
        elif path.exists() and not exists:
            if any(path.iterdir()):
                raise ConfigMismatchError(f"{path} exists and is not a ridgexr store; use --overwrite to replace it")
        if exists:
            ds = open_store(path)
            if ds.attrs.get("config_hash") != config_hash:
                raise ConfigMismatchError(
                    f"store {str(path)!r} was written by a different configuration "
                    f"(hash {str(ds.attrs.get('config_hash'))[:12]} != {config_hash[:12]}); "
                    "refusing to mix results: use --overwrite to replace it or choose another --out")
            marks = ds["cell_complete"].values
            done = {idx for idx in layout.cells() if bool(marks[idx])}
        todo = [idx for idx in layout.cells() if idx not in done]
        task_bar = progress.add_task("fitting models", total=None) if progress is not None else None
        tasks = plan_tasks(exp, train, layout) if todo else []
        if progress is not None:
            progress.remove_task(task_bar)
        if not exists:
            path.parent.mkdir(parents=True, exist_ok=True)
            create_store(path, layout, train, store_attrs(exp, config_hash, device, scheduler, d_star_info))
        todo_set = set(todo)
        tasks = [t for t in tasks if t.index in todo_set]
        _execute(exp, path, layout, tasks, device, scheduler, n_workers, progress)
    return RunResult(store=path, cells_run=len(tasks), cells_skipped=len(done), summary=summarize(path))


def _execute(exp, path, layout, tasks, device, scheduler, n_workers, progress):
    exp_json = exp.model_dump_json()
    n_blocks = math.ceil(layout.n_steps / layout.block_steps)
    overall = progress.add_task("cells", total=len(tasks)) if progress is not None else None
    if scheduler is None:
        for task in tasks:
            label = "/".join(str(v) for v in task.labels.values())
            bar = progress.add_task(f"cell {label}", total=n_blocks) if progress is not None else None
            cb = (lambda k, bar=bar: progress.advance(bar, k)) if progress is not None else None
            run_cell(exp_json, str(path), layout, task, device, on_block=cb)
            if progress is not None:
                progress.remove_task(bar)
                progress.advance(overall)
        return
    from dask.distributed import as_completed

    with dask_client(scheduler, n_workers) as client:
        threads = 1 if scheduler == "local" else None
        futures = [client.submit(run_cell, exp_json, str(path), layout, task, device, threads, pure=False,
                                 key=f"ridgexr-cell-{'-'.join(map(str, task.index))}-{os.getpid()}")
                   for task in tasks]
        for fut in as_completed(futures):
            fut.result()  # re-raises a worker's exception here
            if progress is not None:
                progress.advance(overall)
