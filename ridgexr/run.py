"""Run an experiment: fit every (schedule, width[, tau]) cell, sample, observe, store.

Steps of :func:`run_experiment`:

1. Load the training set and fit all random-feature cells with :func:`ridgexr.fit_sweep`
   (nested features, one shared training sample; cheap next to sampling).
2. Create the Zarr v3 store from a lazy template, or reopen it to resume: a store written
   by a different configuration is refused unless ``overwrite=True``.
3. Run every cell not yet marked complete, locally one after another, or as tasks on a
   dask.distributed cluster (each task writes its own region).  A cell streams its
   trajectory in blocks of ``sampler.block_steps`` recorded steps: each block is observed
   (ridge projection, residuals) and written before the next is computed.
4. Mark each cell complete after all of its data is written.

Every cell uses the same sampler seed, so all models start from the same noise and see the
same Brownian increments (common random numbers): differences between cells come from the
models alone.  Reruns with the same seeds reproduce the store exactly.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import socket
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from .analysis.arrays import memorized
from .catalog import Experiment, resolve_store
from .empirical import SmoothedEmpirical
from .models import ExactDenoiser, RandomFeatureDenoiser
from .observe import step_quantities
from .process import time_grid
from .ridge import ridge_residual, suggest_d_star
from .sampling import recorded_steps, sample
from .store import StoreLayout, StoreLock, cell_label, create_store, open_store, write_block, write_cell_end
from .training import fit_sweep, fits_to_dataset

__all__ = ["run_experiment", "RunResult", "ConfigMismatchError", "plan_layout", "run_cell", "CellTask",
           "open_dataset", "store_path", "summarize", "dask_client"]


class ConfigMismatchError(RuntimeError):
    """The store on disk was written by a different configuration."""


@dataclass
class CellTask:
    """Everything a worker needs to run one cell (small and picklable)."""

    index: tuple[int, ...]
    labels: dict
    A: np.ndarray | None  # readout (d, p); None for the exact denoiser
    diagnostics: dict


@dataclass
class RunResult:
    store: Path
    cells_run: int
    cells_skipped: int
    summary: list[dict] = field(default_factory=list)


def plan_layout(exp: Experiment, train: np.ndarray) -> StoreLayout:
    """The store layout of an experiment."""
    n_steps = exp.process.n_steps
    grid = time_grid(n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    steps = recorded_steps(n_steps, exp.sampler.record_every)
    return StoreLayout(
        schedules=tuple(exp.cell_schedules), widths=tuple(exp.model.widths),
        taus=tuple(exp.model.taus) if exp.model.tau_sweep else None, n_samples=exp.n_samples,
        t=grid[steps], sampler_step=steps, dim=int(train.shape[1]), block_steps=exp.sampler.block_steps,
        sample_chunk=exp.n_samples if exp.n_samples <= 512 else 256,
        compare_d_star=tuple(exp.ridge.compare_d_star),
    )


def _model_kwargs(exp: Experiment) -> dict:
    return dict(n_frequencies=exp.model.n_frequencies, T=exp.feature_period, activation=exp.model.activation,
                parametrization=exp.model.parametrization, seed=exp.seeds.features)


def plan_tasks(exp: Experiment, train: np.ndarray, layout: StoreLayout,
               progress: Callable[[str], None] | None = None) -> list[CellTask]:
    """Fit every model cell and return one task per store cell."""
    fits = fit_sweep(train, widths=exp.model.widths, schedules=exp.schedules, taus=exp.model.taus,
                     model_kwargs=_model_kwargs(exp), method=exp.training.method,
                     t_min=exp.training.t_min or exp.process.t_min, T=exp.process.T, n_time=exp.training.n_time,
                     n_noise=exp.training.n_noise, seed=exp.seeds.training, lr=exp.training.lr, progress=progress)
    diag = fits_to_dataset(fits, d_star=exp.d_star)
    tasks = []
    for idx in layout.cells():
        labels = layout.cell_labels(idx)
        s, w = labels["schedule"], labels["width"]
        tau = labels.get("tau", exp.model.taus[0])
        if s == "exact":
            opt = float(diag["optimal_loss"].isel(schedule=0).sel(width=w))
            d = dict(loss=opt, optimal_loss=opt, excess_loss=0.0, excess_loss_se=0.0, excess_loss_insample=0.0,
                     excess_tangent=0.0, excess_normal=0.0)
            tasks.append(CellTask(idx, labels, None, d))
            continue
        fit = fits[(s, w)]
        sel = diag.sel(schedule=s, width=w).isel(tau=fit._index(tau))
        d = {k: float(sel[k]) for k in ("loss", "optimal_loss", "excess_loss", "excess_loss_se",
                                         "excess_loss_insample", "excess_tangent", "excess_normal")}
        A = fit.A[fit._index(tau)].detach().cpu().numpy()
        tasks.append(CellTask(idx, labels, A, d))
    return tasks


def run_cell(exp_json: str, store: str, layout: StoreLayout, task: CellTask, device: str = "cpu",
             n_threads: int | None = None, on_block: Callable[[int], None] | None = None) -> dict:
    """Sample, observe and write one cell; returns a small summary. Runs in a worker too."""
    if n_threads:
        torch.set_num_threads(n_threads)
    exp = Experiment.model_validate_json(exp_json)
    train = exp.load_train()
    d = train.shape[1]
    dev = torch.device(device)
    if task.A is None:
        exact = ExactDenoiser(train, top_k=exp.ridge.top_k, drop_tol=exp.ridge.top_k_bound)
        score, denoise = (lambda x, t: exact.score(x, t)), None
    else:
        model = RandomFeatureDenoiser(d, task.labels["width"], device=dev, **_model_kwargs(exp)).with_A(task.A)
        score = lambda x, t: model.score(x, t)  # noqa: E731
        denoise = lambda x, t: model.denoise(x, t)  # noqa: E731
    density = SmoothedEmpirical(train, 1.0, drop_tol=exp.ridge.top_k_bound)
    grid = time_grid(exp.process.n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    diverged = np.zeros(exp.n_samples, dtype=bool)
    dropped = 0.0
    last = None
    with torch.no_grad():
        blocks = sample(exp.sampler.kind, score, exp.n_samples, d, grid, seed=exp.seeds.sampler,
                        block_steps=exp.sampler.block_steps, record_every=exp.sampler.record_every, device=dev)
        for block in blocks:
            q = step_quantities(density, block.x, block.t, exp.d_star, denoise, tol=exp.ridge.tol,
                                max_iter=exp.ridge.max_iter, top_k=exp.ridge.top_k)
            write_block(store, layout, task.index, int(block.index[0]), q)
            diverged |= ~q["finite"].all(0)
            if np.isfinite(q["dropped_mass"]).any():
                dropped = max(dropped, float(np.nanmax(q["dropped_mass"])))
            last = (block.x[-1], float(block.t[-1]))
            if on_block is not None:
                on_block(1)
    residual_alt = None
    if layout.compare_d_star:
        x_last, t_last = last
        ok = torch.isfinite(x_last).all(-1)
        residual_alt = np.full((exp.n_samples, len(layout.compare_d_star)), np.nan)
        for j, ds_alt in enumerate(layout.compare_d_star):  # a few alternative dimensions
            if 0 <= ds_alt < d and bool(ok.any()):
                residual_alt[ok.cpu().numpy(), j] = ridge_residual(density.with_time(t_last), x_last[ok], ds_alt,
                                                                   top_k=exp.ridge.top_k).cpu().numpy()
    write_cell_end(store, layout, task.index, diverged, task.diagnostics, max_dropped_mass=dropped,
                   residual_alt=residual_alt)
    return {**task.labels, "diverged": int(diverged.sum())}


def _provenance(device: str, scheduler: str | None) -> dict:
    import dask
    import xarray
    import zarr

    from . import __version__

    return {
        "ridgexr_version": __version__, "numpy_version": np.__version__, "torch_version": torch.__version__,
        "xarray_version": xarray.__version__, "zarr_version": zarr.__version__, "dask_version": dask.__version__,
        "python_version": platform.python_version(), "host": socket.gethostname(), "device": device,
        "scheduler": scheduler or "in-process", "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _store_attrs(exp: Experiment, config_hash: str, device: str, scheduler: str | None) -> dict:
    prov = _provenance(device, scheduler)
    return {
        "title": f"ridgexr experiment {exp.name}", "experiment": exp.name, "description": exp.description,
        "config": exp.model_dump_json(), "config_hash": config_hash, "provenance": json.dumps(prov),
        "seeds": json.dumps(exp.seeds.model_dump()), "d_star": int(exp.d_star), "device": device,
        "dataset": exp.dataset.label,
        "sampler": exp.sampler.kind,
        "note_exact": "schedule 'exact' is the exact (memorizing) denoiser: it does not depend on width, "
                      "every width holds the same trajectories",
        "created": prov["created"],
    }


def resolve_d_star(exp: Experiment, train: np.ndarray) -> tuple[Experiment, dict]:
    """The experiment with an integer d_star, and how it was chosen (for the store attrs)."""
    if exp.d_star != "auto":
        return exp, {"d_star": int(exp.d_star), "source": "catalog"}
    t = exp.ridge.auto_t
    d, spec = suggest_d_star(train, t, seed=exp.seeds.training)
    info = {"d_star": d, "source": f"auto: largest gap of the mean posterior-covariance spectrum at t={t}",
            "spectrum": [float(v) for v in spec]}
    return exp.model_copy(update={"d_star": d}), info


def dataset_provenance(exp: Experiment) -> dict:
    """Where the training set came from (MNIST: source, VAE cache key, reconstruction error)."""
    if exp.dataset.mnist is None:
        return {"dataset": exp.dataset.label}
    from .catalog import mnist_images, mnist_latents

    _, labels, source = mnist_images(exp.dataset.mnist)
    vae = mnist_latents(exp.dataset.mnist)
    return {"dataset": "mnist", "source": source, "vae_key": vae.key, "vae_cache": str(vae.path),
            "vae_config": vae.config, "recon_bce": vae.recon_bce, "recon_mse": vae.recon_mse,
            "labels": [int(v) for v in labels], "latents": "encoder means, not standardised"}


def _resolve_scheduler(scheduler: str | None) -> str | None:
    if scheduler in (None, "", "none"):
        env = os.environ.get("DASK_SCHEDULER_ADDRESS")
        return env or None
    return scheduler


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
    progress : rich.progress.Progress, optional

    Raises
    ------
    ConfigMismatchError, StoreLockedError, ValueError
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    torch.device(device)  # validates the name
    train = exp.load_train()
    config_hash = exp.config_hash(train)  # of the entry as written (d_star may be "auto")
    path = Path(store).resolve() if store is not None else resolve_store(exp, out_dir)
    exp, d_star_info = resolve_d_star(exp, train)
    if exp.d_star >= train.shape[1]:
        raise ValueError(f"d_star={exp.d_star} must be < the data dimension {train.shape[1]}")
    layout = plan_layout(exp, train)
    scheduler = _resolve_scheduler(scheduler)
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
            attrs = _store_attrs(exp, config_hash, device, scheduler)
            attrs["d_star_info"] = json.dumps(d_star_info)
            attrs["dataset_provenance"] = json.dumps(dataset_provenance(exp))
            attrs["top_k"] = -1 if exp.ridge.top_k is None else int(exp.ridge.top_k)
            attrs["top_k_bound"] = float(exp.ridge.top_k_bound)
            create_store(path, layout, train, attrs)
        todo_set = set(todo)
        tasks = [t for t in tasks if t.index in todo_set]
        _execute(exp, path, layout, tasks, device, scheduler, n_workers, progress)
    return RunResult(store=path, cells_run=len(tasks), cells_skipped=len(done), summary=summarize(path))


@contextmanager
def dask_client(scheduler: str, n_workers: int = 2):
    """A dask.distributed Client: "local" starts (and afterwards closes) a LocalCluster of
    ``n_workers`` single-threaded processes; anything else is a scheduler address."""
    from dask.distributed import Client, LocalCluster

    if scheduler == "local":
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield client
    else:
        with Client(scheduler) as client:
            yield client


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


def summarize(path: str | Path) -> list[dict]:
    """Per-cell summary rows read back from the store, at the final step.

    Columns: mean ridge distance, share of SCMS-converged projections, rms normal and
    tangent residual, memorized share (:func:`ridgexr.analysis.arrays.memorized`, d1/d2 < 1/3
    over the finite final states, as ``memorization_fraction``), diverged trajectories,
    held-out excess loss.
    """
    ds = open_store(path)
    dims = ds["cell_complete"].dims
    last = ds.isel(step=-1)
    train = ds["train_data"].values
    x = last["trajectory"].values / float(last["alpha"])  # (cells..., sample, d); d1/d2 is scale-free
    if train.shape[0] >= 2:
        with np.errstate(invalid="ignore"):  # cells not yet written are all-NaN
            memo = np.nanmean(memorized(x, train, 1 / 3), axis=-1)
    else:
        memo = np.full(x.shape[:-2], np.nan)
    rms = lambda v: np.sqrt(np.nanmean((v**2).sum(-1), axis=-1))  # noqa: E731
    cols = {
        "ridge_distance": last["ridge_distance"].mean("sample").values,
        "converged": last["ridge_converged"].mean("sample").values,
        "rms_residual_normal": rms(last["residual_normal"].values),
        "rms_residual_tangent": rms(last["residual_tangent"].values),
        "memorized": memo,
        "diverged": ds["diverged"].sum("sample").values,
        "excess_loss": ds["excess_loss"].values,
    }
    done = ds["cell_complete"].values
    rows = []
    for idx in np.ndindex(*done.shape):
        row = cell_label(ds, dims, idx)
        row["complete"] = bool(done[idx])
        row.update({k: (int(v[idx]) if k == "diverged" else float(v[idx])) for k, v in cols.items()})
        rows.append(row)
    return rows


def store_path(name_or_path: str | Path, *, out_dir: str | Path | None = None, catalog: Any = None) -> Path:
    """The store a path or catalog entry name refers to (``FileNotFoundError`` if neither)."""
    from .catalog import open_catalog

    p = Path(name_or_path)
    if (p / "zarr.json").is_file():
        return p
    cat = catalog if catalog is not None else open_catalog()
    if str(name_or_path) not in cat.experiments:
        raise FileNotFoundError(f"{str(name_or_path)!r} is neither a store path nor a catalog entry "
                                f"(known: {sorted(cat.experiments)})")
    return resolve_store(cat[str(name_or_path)], out_dir, cat.root)


def open_dataset(name_or_path: str | Path, *, out_dir: str | Path | None = None, catalog: Any = None,
                 complete_only: bool = False):
    """Open an experiment's store lazily (dask-backed ``xarray.Dataset``).

    Parameters
    ----------
    name_or_path : str or path
        A catalog entry name (resolved like ``ridgexr run NAME``) or a store path.
    out_dir : path, optional
        Data directory used when ``name_or_path`` is an entry name.
    catalog : Catalog, optional
    complete_only : bool
        Keep only cells whose ``cell_complete`` mark is set (cells along ``schedule``/
        ``width``/``tau`` with any incomplete cell are masked to NaN).

    The Dataset's ``cell_complete`` variable tells which cells are complete; its attrs hold
    the configuration (``config``, JSON) and provenance.
    """
    ds = open_store(store_path(name_or_path, out_dir=out_dir, catalog=catalog))
    if complete_only:
        ds = ds.where(ds["cell_complete"])
    return ds
