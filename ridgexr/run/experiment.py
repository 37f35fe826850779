""":func:`run_experiment`: plan, create or resume the store, and execute the cells."""

from __future__ import annotations

import collections
import contextlib
import hashlib
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
from ..catalog import NOT_HASHED, Experiment, resolve_store
from ..claims import check_claim_specs
from ..catalog.folders import root_metadata as _root_metadata
from ..datasets import dataset_extras, load_training_set
from ..process import MAX_DATA_SCALE, data_scale_limit
from ..models import model_kind
from ..sampling import divergence_bound
from ..reader import summarize
from ..store import (ConfigMismatchError, StoreDamagedError, StoreLock, StoreWarning, cell_label, check_schema,
                     clear_completion, consolidate, copy_cell, create_staging, create_store, is_store, missing_chunks,
                     open_for_run, open_store, schema_older, write_template, SCHEMA_VERSION)
from ..store.lifecycle import abandon_staging, commit_run, refuse_not_a_store, staging_stores
from .cell import run_cell
from .cluster import dask_client, resolve_scheduler
from .ensemble import v_kernel_variables
from .plan import (describe_stages, estimate_resources, estimate_stage_seconds, plan_layout, plan_tasks, resolve_d_star,
                   scms_upper_seconds)
from .provenance import store_attrs

__all__ = ["run_experiment", "RunResult", "ConfigMismatchError", "ResourceError", "check_scheduler",
           "check_resources", "validate_experiment", "MAX_DATA_SCALE", "data_scale_limit", "schema_reference",
           "check_store_schema", "check_config_hash", "repair_config_hash", "stored_config_hash", "checkpoint_root"]


class ResourceError(ValueError):
    """The run would need more memory or disk than the machine has (``force=True`` overrides)."""


@dataclass
class RunResult:
    """What :func:`run_experiment` did: the store, cells run and kept, and the per-cell summary."""

    store: Path
    cells_run: int
    cells_skipped: int
    summary: list[dict] = field(default_factory=list)


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


def _nothing_to_write(path: Path, exp: Experiment, train, overwrite: bool) -> bool:
    """Whether a store of this configuration is already complete where the run would write: at ``path`` (no
    ``overwrite``), or as the new store of an interrupted ``--overwrite`` beside it (only its swap is left)."""
    candidates = [p for p in ([path] if not overwrite else staging_stores(path)) if is_store(p)]
    config_hash = exp.config_hash(train) if candidates else None  # hashing a large training set takes a while
    for p in candidates:
        try:
            ds = open_store(p)
            if ds.attrs.get("config_hash") != config_hash:
                continue
            applies = ds["cell_applies"].values if "cell_applies" in ds else True
            if bool((ds["cell_complete"].values | ~np.asarray(applies, dtype=bool)).all()):
                return True
        except Exception:  # damaged: the run says so under its lock
            continue
    return False


def check_resources(exp: Experiment, train, path: Path, *, force: bool = False, overwrite: bool = False) -> dict:
    """Refuse, with the numbers, a run whose estimated peak memory or store size exceeds the machine.

    The disk is not checked when a complete store of this configuration is already there (nothing is written
    but, after an interrupted ``--overwrite``, a swap)."""
    est = estimate_resources(exp, train)
    mem = _machine_memory()
    disk = math.inf if _nothing_to_write(path, exp, train, overwrite) else _free_disk(path)
    gb = 2**30
    problems, hints = [], []
    if est["peak_memory"] > 0.8 * mem:
        problems.append(f"peak memory ~{est['peak_memory'] / gb:.3g} GiB > 80% of this machine's {mem / gb:.3g} GiB")
        hints.append("the memory is driven by " + ", ".join(est.get("memory_drivers") or ["the training sample"]))
    if est["store_size"] > disk:
        problems.append(f"store up to {est['store_size'] / gb:.3g} GiB > {disk / gb:.3g} GiB free "
                        f"under {path.parent}")
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


def run_experiment(exp: Experiment, *, data_dir: str | Path | None = None, store: str | Path | None = None,
                   device: str = "cpu", scheduler: str | None = None, overwrite: bool = False,
                   n_workers: int = 2, progress: Any = None, force: bool = False, model: Any = None,
                   sample_block: int | None = None, n_threads: int | None = None) -> RunResult:
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

    Raises
    ------
    ConfigMismatchError, StoreLockedError, ResourceError, ValueError, OSError
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"`device` {device!r} was requested but CUDA is not available")
    torch.device(device)  # validates the name
    check_claim_specs(exp.claims)  # a claim's kind and times are the registry's (ridgexr.claims), before any cell
    sample_block = check_optional_int(sample_block, "sample_block", min_val=1)
    n_threads = check_optional_int(n_threads, "n_threads", min_val=1)
    threads_source = None
    if n_threads is not None:
        torch.set_num_threads(n_threads)
        threads_source = "n_threads"
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    objects = {}
    if model is not None:
        exp, objects = _with_python_model(exp, model, train.shape[1])
    path = Path(store).resolve() if store is not None else resolve_store(exp, data_dir)
    check_resources(exp, train, path, force=force, overwrite=overwrite)  # first: the checks below may allocate (quadrature nodes)
    validate_experiment(exp, train)
    if progress is not None:  # the plan: what each stage will cost (an estimate)
        progress.console.print(describe_stages(estimate_stage_seconds(exp, train), scms_upper_seconds(exp, train),
                                               exp.ridge.max_iter))
    config_hash = exp.config_hash(train)  # of the entry as written (d_star may be "auto")
    exp, d_star_info = resolve_d_star(exp, train)
    layout = plan_layout(exp, train)
    scheduler = resolve_scheduler(scheduler)
    check_scheduler(scheduler)
    refuse_not_a_store(path, pending=False, overwrite=overwrite)  # before the lock file is written beside it
    with StoreLock(path):
        opening = open_for_run(path, overwrite=overwrite, resume_hash=config_hash)  # warns what it recovered
        exists = opening.action != "create"
        overwrite = opening.action in ("replace", "resume_replace")
        staging = opening.staging
        done: set[tuple] = set()
        if exists and not overwrite:
            ds = open_store(path)
            if ds.attrs.get("config_hash") != config_hash:
                diff = _config_diff(ds.attrs.get("config"), exp)
                if not diff and check_config_hash(path):  # the same configuration, a damaged hash
                    raise StoreDamagedError(f"store {str(path)!r} is damaged: {check_config_hash(path)[0]}")
                raise ConfigMismatchError(
                    f"store {str(path)!r} was written by a different configuration "
                    f"(hash {str(ds.attrs.get('config_hash'))[:12]} != {config_hash[:12]}; differing fields: "
                    f"{'; '.join(diff) or 'the training data'}); refusing to mix results: use --overwrite to "
                    "replace it or choose another --data-dir")
            damaged = check_store_schema(path)  # never resume (and consolidate) a store whose metadata is damaged
            if damaged:
                raise StoreDamagedError(f"store {str(path)!r} is damaged: " + "; ".join(map(str, damaged[:3]))
                                        + (f" (and {len(damaged) - 3} more)" if len(damaged) > 3 else "")
                                        + f"; run 'ridgexr verify --repair {path}' first")
            done = _done(path, layout)
            version = str(ds.attrs.get("schema_version", SCHEMA_VERSION))
            if len(done) < len(list(layout.cells())) and schema_older(version):
                raise ConfigMismatchError(
                    f"store {str(path)!r} has unfinished cells and was written with store schema {version}; this "
                    f"ridgexr writes schema {SCHEMA_VERSION} (new variables, docs/schema.md): use --overwrite to "
                    "rerun it, or finish it with the ridgexr that wrote it")
        elif exists and staging is not None:  # an interrupted --overwrite of this configuration: resume it
            done = _done(staging, layout)
        todo = [idx for idx in layout.cells() if idx not in done]
        task_bar = progress.add_task("fitting models", total=None) if progress is not None else None
        note = (lambda msg: progress.update(task_bar, description=f"fitting models: {msg}")) if progress else None
        ckpt = checkpoint_root(path, config_hash)  # mlp training, resumable
        tasks = (plan_tasks(exp, train, layout, progress=note, device=device, checkpoint_root=ckpt, objects=objects,
                            bars=progress) if todo else [])
        if progress is not None:
            progress.remove_task(task_bar)
        target = path
        if not exists or (overwrite and staging is None):  # the attributes (and MNIST's provenance): a new store
            attrs = store_attrs(exp, config_hash, device, scheduler, d_star_info, threads_source)
            attrs["divergence_bound"] = divergence_bound(train)
            extra = dataset_extras(exp.dataset) | v_kernel_variables(exp, train, layout, tasks, device)
            if not exists:
                path.parent.mkdir(parents=True, exist_ok=True)
                create_store(path, layout, train, attrs, extra)
            else:  # --overwrite: the new store is built whole beside the old one, then swapped in
                staging = create_staging(path, layout, train, attrs, extra)
        if exists and overwrite:
            target = staging
        todo_set = set(todo)
        tasks = [t for t in tasks if t.index in todo_set]
        try:
            _execute(exp, target, layout, tasks, device, scheduler, n_workers, progress, sample_block)
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
    return RunResult(store=path, cells_run=len(tasks), cells_skipped=len(done), summary=summarize(path))


def schema_reference(path: str | Path, folder: str | Path) -> Path:
    """Write, under ``folder``, the template that the store's own configuration (root attribute ``config``)
    defines: every array's metadata and the arrays written at creation (coordinates, ``train_data``,
    ``cell_applies``), no data chunks.  Returns its path (``folder/reference.zarr``).

    The training set is the store's ``train_data`` when it reads, else the entry's dataset.

    Raises
    ------
    StoreDamagedError
        When the root metadata (which holds the configuration) is damaged.
    """
    path = Path(path)
    try:
        attrs = json.loads((path / "zarr.json").read_bytes())["attributes"]
        exp = Experiment.model_validate_json(attrs["config"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreDamagedError(f"store {str(path)!r}: the root metadata {str(path / 'zarr.json')!r} does not hold "
                                f"a readable configuration ({type(exc).__name__}: {exc}); the schema cannot be "
                                "derived: rerun the entry with --overwrite") from None
    try:
        train = np.asarray(open_store(path, load_marks=False)["train_data"].values)
    except Exception:  # damaged: the entry's dataset defines it
        train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    ref = Path(folder) / "reference.zarr"
    attrs = {k: v for k, v in attrs.items() if k != "schema_version"}
    key = _template_key(attrs["config"], train)
    cached = _TEMPLATES.get(key)
    if cached is None or not (cached / "zarr.json").is_file():
        cached = _template_cache_dir() / key
        shutil.rmtree(cached, ignore_errors=True)
        write_template(cached, plan_layout(exp, train), train, attrs, dataset_extras(exp.dataset))
        _TEMPLATES[key] = cached
        while len(_TEMPLATES) > _TEMPLATES_KEPT:
            shutil.rmtree(_TEMPLATES.pop(next(iter(_TEMPLATES))), ignore_errors=True)
    _TEMPLATES.move_to_end(key)
    shutil.copytree(cached, ref)
    return ref


#: templates written by :func:`schema_reference` in this process, newest last: {key: folder}.  Its arrays are a
#: pure function of the configuration and ``train_data`` (the root attributes, which a run updates, are those of
#: the first store seen; :func:`ridgexr.store.check_schema` and ``repair_schema`` read arrays only), so ``verify``,
#: ``run``'s resume check and ``--repair`` in one process write it once (~1.5 s for 60 arrays) and copy it after.
_TEMPLATES: collections.OrderedDict[str, Path] = collections.OrderedDict()
_TEMPLATES_KEPT = 8


def _template_key(config: str, train: np.ndarray) -> str:
    """sha256 of the configuration (the root attribute ``config``, JSON) and of ``train_data``'s dtype, shape and
    bytes."""
    h = hashlib.sha256(str(config).encode())
    train = np.ascontiguousarray(train)
    h.update(f"{train.dtype.str}{train.shape}".encode())
    h.update(train.tobytes())
    return h.hexdigest()


def _template_cache_dir() -> Path:
    """A folder for this process's templates, removed when the process exits (TemporaryDirectory's finalizer)."""
    global _TEMPLATE_DIR
    if _TEMPLATE_DIR is None:
        import tempfile

        _TEMPLATE_DIR = tempfile.TemporaryDirectory(prefix="ridgexr-templates-")
    return Path(_TEMPLATE_DIR.name)


_TEMPLATE_DIR = None


def check_store_schema(path: str | Path) -> list:
    """:func:`ridgexr.store.check_schema` of a store against the template of its configuration, and
    :func:`check_config_hash`."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ridgexr-schema-") as tmp:
        return check_schema(path, schema_reference(path, tmp)) + check_config_hash(path)


def stored_config_hash(path: str | Path) -> str | None:
    """The ``config_hash`` of the configuration a store records (root attribute ``config``) and its ``train_data``;
    None when it cannot be recomputed: ``d_star: auto`` or an ``auto`` entry of ``ridge.d_star_alt`` (the store
    records the resolved values, the hash is of the entry as written), or a configuration or training set that
    does not read."""
    path = Path(path)
    try:
        attrs = json.loads((path / "zarr.json").read_bytes())["attributes"]
        exp = Experiment.model_validate_json(attrs["config"])
        if json.loads(attrs.get("d_star_info") or "{}").get("auto_rule") is not None:
            return None
        train = np.asarray(open_store(path, load_marks=False)["train_data"].values)
    except Exception:  # damaged: check_schema names it
        return None
    return exp.config_hash(train)


def check_config_hash(path: str | Path) -> list:
    """[:class:`ridgexr.store.Damage`] of the root attribute ``config_hash`` when it differs from the hash of the
    configuration the store records (:func:`stored_config_hash`): ``run`` would refuse the store as another
    configuration's.  [] when it matches or cannot be recomputed."""
    from ..store import Damage

    path = Path(path)
    want = stored_config_hash(path)
    have = _root_metadata(path).get("attributes", {}).get("config_hash")
    if want is None or have == want:
        return []
    return [Damage("config_hash", {}, f"the root attribute config_hash {str(have)[:12]!r} in "
                   f"{str(path / 'zarr.json')!r} differs from the hash of the configuration the store records "
                   f"({want[:12]}); 'ridgexr verify --repair' rewrites it from that configuration")]


def repair_config_hash(path: str | Path) -> bool:
    """Rewrite the root attribute ``config_hash`` from the configuration the store records; whether it changed.
    Call with the store's :class:`ridgexr.store.StoreLock` held."""
    from ..store import set_root_attrs

    want = stored_config_hash(path)
    if want is None or _root_metadata(path).get("attributes", {}).get("config_hash") == want:
        return False
    set_root_attrs(path, config_hash=want)
    return True


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
                      + "); they are recomputed", StoreWarning, stacklevel=3)
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
