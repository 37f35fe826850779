""":func:`run_experiment`: plan, create or resume the store, and execute the cells."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._validation import check_optional_int
from ..threads import max_threads
from ..catalog import NOT_HASHED, Experiment, resolve_store
from ..claims import check_claim_specs
from ..catalog.folders import root_metadata as _root_metadata
from ..datasets import dataset_extras, load_training_set, training_shape
from ..process import MAX_DATA_SCALE, data_scale_limit
from ..models import model_kind
from ..sampling import divergence_bound
from ..reader import summarize
from ..catalog.folders import enclosing_store
from ..store.lifecycle import ConfigMismatchError, create_staging, create_store, open_for_run
from ..store.integrity import missing_chunks
from ..store.opening import StoreDamagedError, StoreWarning, cell_label, open_store
from ..store.update import clear_completion, consolidate
from ..store.lock import StoreLock
from ..store.write import copy_cell
from ..catalog.folders import is_store
from ..schema import ARRAYS_SCHEMA, SCHEMA_VERSION, schema_older
from ..store.lifecycle import (abandon_staging, commit_run, foreign_entries, refuse_not_a_store, remove_partial_files,
                               staging_stores)
from .cell import run_cell
from .cluster import dask_client, resolve_scheduler
from .ensemble import v_kernel_variables
from .plan import (count_run_cells, describe_stages, estimate_resources, estimate_stage_seconds, missing_training_data,
                   piece_cells, plan_layout, plan_tasks, resolve_d_star, resumed_training, run_cell_indexes,
                   scms_upper_seconds)
from .provenance import store_attrs
from .verification import check_identity, check_store_schema

__all__ = ["run_experiment", "Plan", "plan_run", "execute", "store_fate", "RunResult", "ConfigMismatchError", "ResourceError", "check_scheduler",
           "check_resources", "validate_experiment", "MAX_DATA_SCALE", "data_scale_limit", "checkpoint_root"]


class ResourceError(ValueError):
    """The run would need more memory or disk than the machine has (``force=True`` overrides)."""


@dataclass
class RunResult:
    """What :func:`run_experiment` did: the store, cells run and kept, and the per-cell summary."""

    store: Path
    cells_run: int
    cells_skipped: int
    summary: list[dict] = field(default_factory=list)
    cells_left: int = 0  # cells neither complete nor run: outside ``cells`` (run them later, the store resumes)
    plan: Plan | None = None  # the plan it executed


def checkpoint_root(path: Path, config_hash: str) -> Path:
    """The folder of a store's resumable training checkpoints (``<store>.checkpoints/<config hash[:12]>``),
    beside the store: what a rerun resumes and what :func:`ridgexr.run.score_errors` reads the networks from."""
    return Path(path).with_name(Path(path).name + ".checkpoints") / config_hash[:12]


def _config_diff(stored: str | None, exp: Experiment) -> list[str]:
    """Dotted names of the configuration fields that differ between a store and ``exp``."""
    try:
        old = json.loads(stored) if stored else {}
    except json.JSONDecodeError:
        return ["config (unreadable in the store)"]
    new = json.loads(exp.model_dump_json())
    out = []

    def walk(a, b, prefix):
        for key in sorted(set(a) | set(b)):
            if key in NOT_HASHED:
                continue
            va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
            if isinstance(va, dict) and isinstance(vb, dict):
                walk(va, vb, f"{prefix}{key}.")
            elif va != vb:
                out.append(f"{prefix}{key}: {va!r} -> {vb!r}")

    walk(old, new, "")
    return out


def check_scheduler(scheduler: str | None, timeout: float = 5.0) -> None:
    """Raise ``ValueError`` when a scheduler address does not answer (None and "local" need nothing)."""
    if scheduler in (None, "local"):
        return
    from dask.distributed import Client

    try:
        with Client(scheduler, timeout=timeout):
            pass
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"`scheduler`: no dask scheduler answers at {scheduler!r} within {timeout:g} s "
                         f"({type(exc).__name__}: {exc})") from None


def _machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _free_disk(path: Path) -> int:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _share_to_write(path: Path, exp: Experiment, train, overwrite: bool) -> tuple[float, str]:
    """(share of the store's size a run still writes, what it is) where the run would write: 0 when a store of this
    configuration is already complete there (at ``path`` without ``overwrite``, or as the new store of an
    interrupted ``--overwrite`` beside it: only its swap is left), the share of its run cells not complete when it
    resumes one, else 1 (a new store)."""
    candidates = [p for p in ([path] if not overwrite else staging_stores(path)) if is_store(p)]
    if not candidates or not isinstance(train, np.ndarray):  # a plan prices from the data's shape: a new store
        return 1.0, "store"
    config_hash = exp.config_hash(train)  # hashing a large training set takes a while: only when there is a store
    for p in candidates:
        try:
            if _root_metadata(p).get("attributes", {}).get("config_hash") != config_hash:
                continue
            ds = open_store(p)
            applies = np.asarray(ds["cell_applies"].values if "cell_applies" in ds else True, dtype=bool)
            runs = np.broadcast_to(applies, ds["cell_complete"].shape)
            left = int((runs & ~ds["cell_complete"].values.astype(bool)).sum())
            return left / max(1, int(runs.sum())), f"the {left} unfinished of {int(runs.sum())} cells"
        except Exception:  # damaged: the run says so under its lock
            continue
    return 1.0, "store"


def check_resources(exp: Experiment, train, path: Path, *, force: bool = False, overwrite: bool = False) -> dict:
    """Refuse, with the numbers, a run whose estimated peak memory or store size exceeds the machine.

    The disk is checked for what the run still writes: a resumed store's unfinished cells (their share of the
    store's size bound), nothing when a complete store of this configuration is already there (but, after an
    interrupted ``--overwrite``, a swap)."""
    est = estimate_resources(exp, train)
    mem = _machine_memory()
    share, what = _share_to_write(path, exp, train, overwrite)
    need = share * est["store_size"]
    disk = _free_disk(path) if need > 0 else math.inf
    gb = 2**30
    problems, hints = [], []
    if est["peak_memory"] > 0.8 * mem:
        problems.append(f"peak memory ~{est['peak_memory'] / gb:.3g} GiB > 80% of this machine's {mem / gb:.3g} GiB")
        hints.append("the memory is driven by " + ", ".join(est.get("memory_drivers") or ["the training sample"]))
    if need > disk:
        problems.append(f"{what} up to {need / gb:.3g} GiB > {disk / gb:.3g} GiB free under {path.parent}")
        hints.append("the store grows with n_samples, n_steps / sampler.record_every and the swept values")
    if problems and not force:
        raise ResourceError(f"experiment {exp.name!r} (store {str(path)!r}) is too large for this machine: "
                            + "; ".join(problems) + " (" + "; ".join(hints) + "; reduce them, or pass --force)")
    return est


def validate_experiment(exp: Experiment, train) -> None:
    """Checks that need the training set: data magnitude, d_star and d_star_alt against d, and each
    model kind's ``check`` (:class:`ridgexr.models.ModelKind`)."""
    where = f"{exp.source}: entry {exp.name!r}" if exp.source else f"entry {exp.name!r}"  # each message names it
    d = train.shape[1]
    arr = np.asarray(train, dtype=np.float64)
    top = float(np.abs(arr).max())  # the largest |x_i|, scaled so that its square cannot overflow
    big = top * float(np.sqrt(((arr / top) ** 2).sum(-1).max())) if 0 < top < math.inf else top
    limit = data_scale_limit(exp.process.t_min)
    if not big <= limit:  # inf or NaN too (the norm overflows from |x| ~ 1e154)
        raise ValueError(f"{where}: the training data reach |x| = {big:.3g} > {limit:.3g} = {MAX_DATA_SCALE:g} x "
                         f"sqrt(h(t_min = {exp.process.t_min:g})), beyond which float64 does not resolve the "
                         "geometry at the smallest noise scale; rescale them or raise `process.t_min`")
    if exp.d_star != "auto" and not 1 <= exp.d_star < d:
        raise ValueError(f"{where}: `d_star` must lie in 1..{d - 1} (1 <= d_star < the data dimension d = {d}); "
                         f"got {exp.d_star}")
    big_n = [n for n in exp.dataset.n_trains if n is not None and n > train.shape[0]]
    if big_n:
        raise ValueError(f"{where}: `dataset.n_train` must be <= the {train.shape[0]} points of the training set; got {big_n}")
    bad = [k for k in exp.ridge.d_star_alt if k != "auto" and not 1 <= k <= d - 1]
    if bad:
        raise ValueError(f"{where}: `ridge.d_star_alt` entries must lie in 1..{d - 1} (d = {d}); got {bad}")
    for block in exp.blocks:  # each kind's own checks (random features: a loss form float64 can hold)
        model_kind(block.kind).checker()(exp, block, train)


@dataclass(frozen=True, eq=False)
class Plan:
    """What a run of an entry does, built once by :func:`plan_run` and carried out by :func:`execute`.

    ``ridgexr run --plan`` prints a plan priced from the training set's shape (nothing read, trained or written);
    :func:`run_experiment` executes one built from the training set itself, whose :meth:`summary` is the same where
    the store is new.

    Attributes
    ----------
    experiment : Experiment
        The entry as written (``d_star`` may be ``"auto"``; a Python model's block in place of the entry's).
    store : Path
        Where the store is written.
    train_shape : tuple of int
        (N, d) of the training set.
    n_cells : int
        Cells that run (the layout's cells a model applies to, those ``cells`` selects).
    stage_seconds : dict
        Stage -> estimated seconds on 2 idle cores of the cells that run
        (:func:`ridgexr.run.plan.estimate_stage_seconds`).
    scms_upper_seconds : float or None
        Sampling and observation with every projection at ``ridge.max_iter`` (None when that is no bound).
    resources : dict
        :func:`ridgexr.run.plan.estimate_resources` (peak memory and store size, bytes).
    refused : str or None
        Why this machine refuses the run without ``force`` (:class:`ResourceError`'s message).
    missing_data : str or None
        Why the training set cannot be read here (a plan priced from its shape).
    train : ndarray or None
        The training set, (N, d); None in a plan priced from its shape, as are the fields below.
    config_hash : str or None
        The store's configuration hash (of the entry as written).
    resolved : Experiment or None
        The entry with ``d_star`` (and ``ridge.d_star_alt``) resolved.
    d_star_info : dict or None
        How ``d_star`` was chosen (a store attribute).
    layout : StoreLayout or None
        The store's shape and chunking.
    fate : str or None
        What the store path holds for this run, read without the lock (:func:`store_fate`): ``"create"``,
        ``"resume"``, ``"resume_replace"``, ``"replace"`` or ``"refuse"``; :func:`execute` decides again under the
        store's lock, after recovering what a killed command left.
    objects : dict
        A Python model's label -> :class:`ridgexr.models.ModuleDenoiser`.
    overwrite, force : bool
        As passed to :func:`plan_run`.
    cells : dict or None
        As passed to :func:`plan_run`: the cells a piece runs (None: every cell).
    """

    experiment: Experiment
    store: Path
    train_shape: tuple[int, int]
    n_cells: int
    stage_seconds: dict
    scms_upper_seconds: float | None
    resources: dict
    refused: str | None
    missing_data: str | None
    train: np.ndarray | None = None
    config_hash: str | None = None
    resolved: Experiment | None = None
    d_star_info: dict | None = None
    layout: Any = None
    fate: str | None = None
    objects: dict = field(default_factory=dict)
    overwrite: bool = False
    force: bool = False
    cells: dict | None = None

    def summary(self) -> dict:
        """What ``ridgexr run --plan`` prints: the store, the training set's shape, the cells that run, each stage's
        estimated seconds, the bound at ``ridge.max_iter``, peak memory and store size, and the refusal."""
        est = self.resources
        return {"store": self.store, "train_shape": tuple(self.train_shape), "n_cells": self.n_cells,
                "cells": dict(self.cells or {}),
                "stage_seconds": dict(self.stage_seconds), "scms_upper_seconds": self.scms_upper_seconds,
                "max_iter": self.experiment.ridge.max_iter, "peak_memory": est["peak_memory"],
                "memory_stage": est["memory_stage"], "memory_drivers": list(est["memory_drivers"]),
                "store_size": est["store_size"], "refused": self.refused, "missing_data": self.missing_data}


def plan_run(exp: Experiment, *, data_dir: str | Path | None = None, store: str | Path | None = None,
             overwrite: bool = False, force: bool = False, model: Any = None, read_data: bool = True,
             cells: dict[str, Any] | None = None) -> Plan:
    """The :class:`Plan` of a run of ``exp``: where its store goes, what each stage costs, and, from the training set
    (``read_data``), ``d_star`` resolved, the configuration hash and the store's layout.

    Everything that can fail without touching the store is checked here, in this order: ``cells``, the store path
    (not inside another store), the resources (:func:`check_resources`: raises :class:`ResourceError` unless
    ``force``, when the training set is read), the entry against its training set (:func:`validate_experiment`).  With
    ``read_data=False`` nothing is loaded, trained or written: the plan is priced from the training set's shape
    (:func:`ridgexr.datasets.training_shape`) and its refusal is reported in ``refused``, not raised.

    ``cells`` (see :func:`run_experiment`) makes the plan a piece's: its cell count and its stages' seconds are
    those of the selected cells (peak memory and store size stay the whole store's); a bad dimension or label is
    a ``ValueError`` here, before anything is read.

    Raises
    ------
    ConfigMismatchError, ResourceError, ValueError, OSError
    """
    missing = None
    cells = dict(cells) if cells else None
    if cells and overwrite:
        raise ValueError("`cells` cannot be combined with `overwrite`: a replacement store is swapped in only whole; "
                         "replace the store with every cell, or remove it and run the entry in pieces")
    if model is None:
        n_cells = count_run_cells(exp, cells)  # a bad dimension or label of ``cells`` fails before the data is read
    if read_data:
        train = load_training_set(exp.dataset, base_dir=exp.base_dir)
        shape = tuple(int(n) for n in train.shape)
    else:
        train, shape = None, tuple(int(n) for n in training_shape(exp.dataset, base_dir=exp.base_dir))
        missing = missing_training_data(exp)  # a named image set not installed: the shape is the published one
    objects = {}
    if model is not None:
        exp, objects = _with_python_model(exp, model, shape[1])
        n_cells = count_run_cells(exp, cells)
    path = Path(store).resolve() if store is not None else resolve_store(exp, data_dir)
    outer = enclosing_store(path)
    if outer is not None:  # resolve_store refuses it for an entry's path; an explicit store path too
        raise ConfigMismatchError(f"store path {str(path)!r} lies inside the ridgexr store {str(outer)!r}: choose a "
                                  "store path outside every store")
    priced = train if train is not None else shape
    try:  # first: the checks below may allocate (quadrature nodes)
        est, refused = check_resources(exp, priced, path, overwrite=overwrite), None
    except ResourceError as exc:
        if read_data and not force:
            raise
        est, refused = check_resources(exp, priced, path, force=True, overwrite=overwrite), str(exc)
    common = dict(experiment=exp, store=path, train_shape=shape, n_cells=n_cells,
                  stage_seconds=estimate_stage_seconds(exp, priced, cells=cells),
                  scms_upper_seconds=scms_upper_seconds(exp, priced, cells), resources=est, refused=refused,
                  missing_data=missing, objects=objects, overwrite=overwrite, force=force, cells=cells)
    if train is None:
        return Plan(**common)
    validate_experiment(exp, train)
    config_hash = exp.config_hash(train)  # of the entry as written (d_star may be "auto")
    resolved, d_star_info = resolve_d_star(exp, train)
    return Plan(**common, train=train, config_hash=config_hash, resolved=resolved, d_star_info=d_star_info,
                layout=plan_layout(resolved, train), fate=store_fate(path, config_hash, overwrite=overwrite))


def store_fate(path: str | Path, config_hash: str, *, overwrite: bool = False) -> str:
    """What a run of configuration ``config_hash`` does with the store path ``path``, as it stands (read only).

    ``"create"``: no store there; ``"resume"``: a store of this configuration (its complete cells are kept);
    ``"refuse"``: a store of another configuration, without ``overwrite`` (:class:`ConfigMismatchError`);
    ``"replace"``: with ``overwrite``, a store there is replaced; ``"resume_replace"``: with ``overwrite``, the new
    store of an interrupted ``--overwrite`` of this configuration lies beside it and is finished.  A store
    whose root metadata cannot be read counts as another configuration's.
    """
    path = Path(path)
    if overwrite:
        for staging in staging_stores(path):
            if is_store(staging) and _root_metadata(staging).get("attributes", {}).get("config_hash") == config_hash:
                return "resume_replace"
    if not is_store(path):
        return "create"
    if overwrite:
        return "replace"
    same = _root_metadata(path).get("attributes", {}).get("config_hash") == config_hash
    return "resume" if same else "refuse"


def run_experiment(exp: Experiment, *, data_dir: str | Path | None = None, store: str | Path | None = None,
                   device: str = "cpu", scheduler: str | None = None, overwrite: bool = False,
                   n_workers: int = 2, progress: Any = None, force: bool = False, model: Any = None,
                   sample_block: int | None = None, n_threads: int | None = None,
                   cells: dict[str, Any] | None = None) -> RunResult:
    """Run (or resume) an experiment into its Zarr store.

    Everything that can fail without touching the store is checked first (device, the entry's claims
    against the claims registry, data, d*, resources, the scheduler address) and the models are fitted; only then is the store
    created (atomically), or, with ``overwrite``, a new one written beside the old and
    swapped in.

    Parameters
    ----------
    exp : Experiment
    data_dir : path, optional
        Data folder of the store (see :mod:`ridgexr.catalog`).
    store : path, optional
        Explicit store path (overrides ``data_dir`` resolution).
    device : {"cpu", "cuda", ...}
    scheduler : None, "local" or a dask scheduler address
        None runs cells in this process (or on ``$DASK_SCHEDULER_ADDRESS`` when set);
        "local" starts a LocalCluster of ``n_workers`` processes.
    overwrite : bool
        Replace a store written by another configuration (or any existing store).
    n_workers : int
        Workers of ``scheduler="local"``.
    progress : rich.progress.Progress, optional
    force : bool
        Run even when the estimated memory or store size exceeds the machine.
    model : ModuleDenoiser, nn.Module or callable (y, s) -> output, optional
        Your own trained model, run in place of the entry's model blocks: the store gets one
        ``model`` label (its name) and the entry's dataset, process, sampler and ridge
        settings.  A bare callable is read as a score in OU time; wrap it in
        :class:`ridgexr.models.ModuleDenoiser` for another parametrization or time
        convention.  Its weights (or code) enter the config hash (:func:`ridgexr.models.module.denoiser.model_digest`).
    sample_block : int, optional
        Split each cell's observation into parts of this many samples (one cell across a
        cluster): with a ``scheduler`` the cells run one after another here and each block's
        parts run on the workers (the training set sent to each worker once); without one, the
        parts run here.  Both give the same store bit for bit; the unsplit run agrees to ~1e-12.
    n_threads : int, optional
        torch's CPU threads in this process, set before any work (default: as they are; ``ridgexr run``
        passes :func:`ridgexr.threads.resolve_threads`'s count).  Recorded in the store's ``provenance``
        attribute; it changes rounding only (:mod:`ridgexr.threads`).
    cells : dict, optional
        Run only the cells whose labels are among these, ``{dimension: label or [labels]}`` (e.g. ``{"n_train":
        [8, 16]}``; :meth:`ridgexr.store.StoreLayout.select`); the others are neither fitted nor sampled and a
        later run (with other ``cells``, or none) resumes the store with them.  Every fit and every cell draws
        from its own seeds, so a cell holds the same numbers whichever cells run beside it: a run longer than a
        session goes in pieces, each piece's cells complete.

    Raises
    ------
    ConfigMismatchError, StoreLockedError, ResourceError, ValueError, OSError
    """
    sample_block, threads_source = _check_run_arguments(exp, device, sample_block, n_threads)
    run_plan = plan_run(exp, data_dir=data_dir, store=store, overwrite=overwrite, force=force, model=model,
                        cells=cells)
    return execute(run_plan, device=device, scheduler=scheduler, n_workers=n_workers, progress=progress,
                   sample_block=sample_block, threads_source=threads_source)


def _check_run_arguments(exp: Experiment, device: str, sample_block: int | None,
                         n_threads: int | None) -> tuple[int | None, str | None]:
    """Check the device, the entry's claims and ``sample_block``, and set torch's CPU threads: (``sample_block``,
    the threads' source, a store attribute: ``"n_threads"`` when set here, else None)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"`device` {device!r} was requested but CUDA is not available")
    torch.device(device)  # validates the name
    check_claim_specs(exp.claims)  # a claim's kind and times are the registry's (ridgexr.claims), before any cell
    sample_block = check_optional_int(sample_block, "sample_block", min_val=1)
    n_threads = check_optional_int(n_threads, "n_threads", min_val=1, max_val=max_threads())
    if n_threads is None:
        return sample_block, None
    torch.set_num_threads(n_threads)
    return sample_block, "n_threads"


def execute(plan: Plan, *, device: str = "cpu", scheduler: str | None = None, n_workers: int = 2,
            progress: Any = None, sample_block: int | None = None, threads_source: str | None = None
            ) -> RunResult:
    """Carry out a :class:`Plan` built from the training set (:func:`plan_run`): under the store's lock, create,
    resume or replace the store (what the store holds decides, :func:`ridgexr.store.lifecycle.open_for_run`), fit
    the models of the cells left, and run them.  ``progress`` (a rich ``Progress``) first prints the plan's stages.

    The steps, in order: :func:`_open_for_run` (what the store path holds, what a killed command left),
    :func:`_cells_done` (the cells a resume keeps, after checking the store is this configuration's and intact),
    :func:`_fit_cells` (the models of the cells left), :func:`_create_target` (a new store, or the new one of an
    ``--overwrite``), :func:`_run_cells` (sample and observe, then swap a replacement in).  The plan's ``cells``
    (a piece, :func:`plan_run`) limits the cells fitted and run.

    Raises
    ------
    ConfigMismatchError, StoreLockedError, StoreDamagedError, ValueError, OSError
    """
    if plan.train is None:
        raise ValueError("`plan` was priced from the training set's shape (read_data=False): plan_run(..., "
                         "read_data=True) builds one that runs")
    path = plan.store
    every = plan.layout.cells()
    chosen = set(piece_cells(plan.resolved, plan.layout.coords, every, plan.cells))
    if progress is not None:  # the plan: what each stage will cost (an estimate)
        progress.console.print(describe_stages(plan.stage_seconds, plan.scms_upper_seconds,
                                               plan.experiment.ridge.max_iter))
    scheduler = resolve_scheduler(scheduler)
    check_scheduler(scheduler)
    refuse_not_a_store(path, pending=False, overwrite=plan.overwrite)  # before the lock file is written beside it
    with StoreLock(path), _naming(path):
        exists, overwrite, staging = _open_for_run(plan)
        done = _cells_done(plan, exists, overwrite, staging)
        if progress is not None:
            _print_left(plan, done, progress)
        todo = [idx for idx in every if idx not in done and idx in chosen]
        left = len(every) - len(done) - len(todo)
        tasks = _fit_cells(plan, todo, device, progress)
        target = _create_target(plan, exists, overwrite, staging, tasks, device, scheduler, threads_source)
        _run_cells(plan, target, tasks, device, scheduler, n_workers, progress, sample_block)
    return RunResult(store=path, cells_run=len(tasks), cells_skipped=len(done), summary=summarize(path),
                     plan=plan, cells_left=left)


def _print_left(plan: Plan, done: set[tuple], progress: Any) -> None:
    """Where the run keeps complete cells or resumes training from a checkpoint, one more line of the plan: its stages
    priced without those cells and each training run from its checkpoint's epoch
    (:func:`ridgexr.run.plan.estimate_stage_seconds`); nothing where it picks up nothing."""
    from .resumes import unfinished_training  # it imports this module

    exp = plan.experiment
    done = set(done).intersection(run_cell_indexes(exp, plan.cells))  # those of the piece
    training = unfinished_training(checkpoint_root(plan.store, plan.config_hash))
    reached = resumed_training(exp, {folder: epoch for folder, epoch, _ in training if epoch is not None},
                               plan.cells, done)
    if not done and not reached:
        return
    left = estimate_stage_seconds(exp, plan.train, cells=plan.cells, done=done, reached=reached)
    kept = f"{len(done)} complete cell(s) kept" if done else ""
    resumed = ", ".join(f"{folder} from epoch " + f"{epoch:,}".replace(",", " ") for folder, epoch in reached.items())
    progress.console.print(describe_stages(left, scms_upper_seconds(exp, plan.train, plan.cells, done),
                                           exp.ridge.max_iter,
                                           lead=f"left ({'; '.join(p for p in (kept, resumed) if p)})"))


def _open_for_run(plan: Plan) -> tuple[bool, bool, Path | None]:
    """Under the store's lock: recover what a killed command left (:func:`ridgexr.store.lifecycle.open_for_run`,
    which warns what it recovered), refuse an ``--overwrite`` of a folder holding what a store does not write, and
    remove unfinished chunk writes.  Returns (a store is there, it is replaced, the new store of an interrupted
    ``--overwrite`` or None)."""
    path = plan.store
    opening = open_for_run(path, overwrite=plan.overwrite, resume_hash=plan.config_hash)
    exists = opening.action != "create"
    overwrite = opening.action in ("replace", "resume_replace")
    staging = opening.staging
    if overwrite:  # it deletes the old store: only what a store holds, never a nested store or a user's file
        foreign = foreign_entries(path)
        if foreign:
            raise ConfigMismatchError(
                f"--overwrite refuses to replace {str(path)!r}: it holds what a ridgexr store does not write ("
                + ", ".join(repr(f) for f in foreign) + "); move that out of the store first")
    for p in [q for q in (path, staging) if q is not None and exists]:
        left = remove_partial_files(p)
        if left:
            warnings.warn(f"removed {len(left)} unfinished chunk write(s) (*.partial) that a killed command left "
                          f"in {str(p)!r}", StoreWarning, stacklevel=4)
    return exists, overwrite, staging


def _cells_done(plan: Plan, exists: bool, overwrite: bool, staging: Path | None) -> set[tuple]:
    """The cells a run keeps: those complete in the store it resumes (or in the new store of an interrupted
    ``--overwrite``), none for a new or replaced store.  A store resumed in place must be this configuration's
    (:class:`ConfigMismatchError` naming the fields that differ), intact (:func:`check_store_schema`, else
    :class:`StoreDamagedError`) and, with cells left, of a schema this ridgexr writes."""
    path, layout, config_hash = plan.store, plan.layout, plan.config_hash
    if exists and staging is not None and overwrite:  # an interrupted --overwrite of this configuration: resume it
        return _done(staging, layout)
    if not exists or overwrite:
        return set()
    attrs = _root_metadata(path).get("attributes", {})
    if attrs.get("config_hash") != config_hash:
        diff = _config_diff(attrs.get("config"), plan.resolved)
        identity = check_identity(path)
        if not diff and identity:  # the same configuration, a damaged hash
            raise StoreDamagedError(f"store {str(path)!r} is damaged: {identity[0]}")
        raise ConfigMismatchError(
            f"store {str(path)!r} was written by a different configuration "
            f"(hash {str(attrs.get('config_hash'))[:12]} != {config_hash[:12]}; differing fields: "
            f"{'; '.join(diff) or 'the training data'}); refusing to mix results: use --overwrite to "
            "replace it or choose another --data-dir")
    damaged = check_store_schema(path)  # never resume (and consolidate) a store whose metadata is damaged
    if damaged:
        raise StoreDamagedError(f"store {str(path)!r} is damaged: " + "; ".join(map(str, damaged[:3]))
                                + (f" (and {len(damaged) - 3} more)" if len(damaged) > 3 else "")
                                + f"; run 'ridgexr verify {path}' first")
    done = _done(path, layout)
    version = str(attrs.get("schema_version", SCHEMA_VERSION))
    if len(done) < len(list(layout.cells())) and schema_older(version, than=ARRAYS_SCHEMA):
        raise ConfigMismatchError(
            f"store {str(path)!r} has unfinished cells and was written with store schema {version}; this "
            f"ridgexr writes schema {SCHEMA_VERSION} (new variables, docs/schema.md): use --overwrite to "
            "rerun it, or finish it with the ridgexr that wrote it")
    return done


def _fit_cells(plan: Plan, todo: list[tuple], device: str, progress: Any) -> list:
    """The tasks of the cells ``todo``: only their models fitted and diagnosed (:func:`ridgexr.run.plan.plan_tasks`),
    mlp and unet training resumable from the store's checkpoint folder (:func:`checkpoint_root`)."""
    task_bar = progress.add_task("fitting models", total=None) if progress is not None else None
    note = (lambda msg: progress.update(task_bar, description=f"fitting models: {msg}")) if progress else None
    tasks = plan_tasks(plan.resolved, plan.train, plan.layout, progress=note, cells=todo, device=device,
                       checkpoint_root=checkpoint_root(plan.store, plan.config_hash), objects=plan.objects,
                       bars=progress)
    if progress is not None:
        progress.remove_task(task_bar)
    return tasks


def _create_target(plan: Plan, exists: bool, overwrite: bool, staging: Path | None, tasks: list, device: str,
                   scheduler: str | None, threads_source: str | None) -> Path:
    """The store the cells are written to: ``plan.store`` (created here when there is none), or the new store of an
    ``--overwrite`` (created beside it here, or the interrupted one ``staging``), swapped in at the end."""
    path, exp, train, layout = plan.store, plan.resolved, plan.train, plan.layout
    if not exists or (overwrite and staging is None):  # the attributes (and MNIST's provenance): a new store
        attrs = store_attrs(exp, plan.config_hash, device, scheduler, plan.d_star_info, threads_source)
        attrs["divergence_bound"] = divergence_bound(train)
        extra = dataset_extras(exp.dataset) | v_kernel_variables(exp, train, layout, tasks, device)
        if not exists:
            path.parent.mkdir(parents=True, exist_ok=True)
            create_store(path, layout, train, attrs, extra)
        else:  # --overwrite: the new store is built whole beside the old one, then swapped in
            staging = create_staging(path, layout, train, attrs, extra)
    return staging if exists and overwrite else path


def _run_cells(plan: Plan, target: Path, tasks: list, device: str, scheduler: str | None, n_workers: int,
               progress: Any, sample_block: int | None) -> None:
    """Run ``tasks`` into ``target`` and consolidate it; a replacement (``target`` beside ``plan.store``) is swapped
    in after, or abandoned on an error.  A store deleted under the run is a :class:`StoreDamagedError`; an
    ``OSError`` that names no file (a full disk) is told which store it was writing."""
    path = plan.store
    try:
        _execute(plan.resolved, target, plan.layout, tasks, device, scheduler, n_workers, progress, sample_block)
        consolidate(target)
    except BaseException as exc:
        if isinstance(exc, Exception) and not (target / "zarr.json").exists():
            if target != path:
                abandon_staging(exc, path, target)
            raise StoreDamagedError(
                f"store {str(target)!r} was deleted (its root metadata is gone) while this run wrote to it; "
                "the chunks written since are left there without metadata: rerun the same command, which "
                f"removes them and starts a new store ({type(exc).__name__}: {exc})") from exc
        if isinstance(exc, OSError) and exc.filename is None:  # e.g. a full disk, raised by a chunk write
            exc.add_note(f"while writing the store {str(target)!r}")
        if target != path:
            abandon_staging(exc, path, target)
        raise
    if target != path:
        commit_run(path, target)  # its OSError says what is intact


@contextlib.contextmanager
def _naming(path: Path):
    """Within: an ``OSError`` that names no file (a write on a full or read-only disk) names the store ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def _done(store: Path, layout) -> set[tuple]:
    """The cells of ``layout`` that ``store`` marks complete and whose chunks are all on disk; a marked cell
    that misses a chunk (damage) is unmarked, with a warning, and recomputed."""
    marks = open_store(store)["cell_complete"].values
    done = {idx for idx in layout.cells() if bool(marks[idx])}
    gone = missing_chunks(store, sorted(done))
    if gone:
        ds = open_store(store)
        labels = [cell_label(ds, ds["cell_complete"].dims, idx) for idx in sorted(gone)]
        warnings.warn(f"store {str(store)!r}: {len(gone)} cell(s) marked complete miss chunks ("
                      + "; ".join(" ".join(f"{k}={v}" for k, v in lab.items()) for lab in labels)
                      + "); they are recomputed", StoreWarning, stacklevel=5)
        clear_completion(store, labels)
    return done - set(gone)


def _with_python_model(exp: Experiment, model: Any, d: int) -> tuple[Experiment, dict]:
    """The entry with one module block standing for ``model``, and {label: ModuleDenoiser}."""
    from ..models.module import PYTHON_OBJECT, ModuleSpec
    from ..models.module.denoiser import ModuleDenoiser, model_digest

    den = model if isinstance(model, ModuleDenoiser) else ModuleDenoiser(model)
    den.check(d)
    label = den.name
    block = ModuleSpec(name=label, module=f"{PYTHON_OBJECT}:{label}@{model_digest(den)}",
                      parametrization=den.parametrization, time=den.time.kind, beta_min=den.time.beta_min,
                      beta_max=den.time.beta_max,
                      schedule=den.schedule or (exp.schedules[0] if exp.schedules else None))
    if den.schedule is not None and exp.schedules and den.schedule not in exp.schedules:
        raise ValueError(f"the model's schedule {den.schedule!r} is not one of the entry's schedules {exp.schedules}")
    return Experiment.model_validate(exp.model_dump() | {"model": block.model_dump(), "models": None}), {label: den}


def _execute(exp, path, layout, tasks, device, scheduler, n_workers, progress, sample_block=None):
    """Run every task's cell, locally or on dask (whole cells as tasks; with ``sample_block``, the cells
    here and their observation split over the workers); cells with a ``twin_of`` are copied from it
    after it is complete (it may have been completed by an earlier run)."""
    exp_json = exp.model_dump_json()
    n_blocks = math.ceil(layout.n_steps / layout.block_steps)
    overall = progress.add_task("cells", total=len(tasks)) if progress is not None else None
    sampled = [task for task in tasks if task.twin_of is None]
    if scheduler is None or sample_block is not None:
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(dask_client(scheduler, n_workers)) if scheduler is not None else None
            for task in sampled:
                label = "/".join(str(v) for v in task.labels.values())
                bar = progress.add_task(f"cell {label}", total=n_blocks) if progress is not None else None
                cb = (lambda k, bar=bar: progress.advance(bar, k)) if progress is not None else None
                run_cell(exp_json, str(path), layout, task, device, on_block=cb, sample_block=sample_block,
                         client=client)
                if progress is not None:
                    progress.remove_task(bar)
                    progress.advance(overall)
    else:
        from dask.distributed import as_completed

        with dask_client(scheduler, n_workers) as client:
            threads = 1 if scheduler == "local" else None
            futures = [client.submit(run_cell, exp_json, str(path), layout, task, device, threads, pure=False,
                                     key=f"ridgexr-cell-{'-'.join(map(str, task.index))}-{os.getpid()}")
                       for task in sampled]
            for fut in as_completed(futures):
                fut.result()  # re-raises a worker's exception here
                if progress is not None:
                    progress.advance(overall)
    for task in tasks:
        if task.twin_of is not None:
            copy_cell(path, layout, task.twin_of, task.index, task.diagnostics)
            if progress is not None:
                progress.advance(overall)
