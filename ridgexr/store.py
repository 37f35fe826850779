"""The Zarr v3 store of an experiment: schema, region writes, completion marks and a lock.

Layout (see ``docs/schema.md`` for every variable):

- cell dims ``schedule`` (str) and ``width`` (int), plus ``tau`` for a training-time sweep;
- per-step variables over (cell dims..., ``sample``, ``step`` [, ``dim``]);
- coordinates ``t(step)``, ``alpha(step)``, ``h(step)``, ``sampler_step(step)``;
- ``train_data(train, dim)``; per-cell training diagnostics; ``cell_complete`` (cell dims).

The store is created once from a lazy (dask) template with ``compute=False``, so only
metadata is written.  Each cell then writes its blocks of steps with region writes whose
boundaries coincide with chunk boundaries (chunks are 1 along every cell dim, ``sample_chunk``
along ``sample`` and ``block_steps`` along ``step``), so concurrent writers never touch the
same chunk.  ``cell_complete`` is written last, after every block and the diagnostics: a cell
killed half-way stays incomplete and is recomputed on resume.  Unwritten float chunks read
as NaN.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr

from .process import OU
from .training.diagnostics import DIAGNOSTIC_VARIABLES, LOSS_UNITS

SCHEMA_VERSION = "1.1"
LOCK_NAME = ".ridgexr-lock"

__all__ = ["SCHEMA_VERSION", "StoreLayout", "create_store", "write_block", "write_cell_end", "open_store",
           "StoreLock", "StoreLockedError", "cells", "complete_cells", "cell_label", "json_attr", "VARIABLE_ATTRS",
           "CELL_DIAGNOSTICS"]

#: per-cell training diagnostics (float, one value per cell), named once in ridgexr.training
CELL_DIAGNOSTICS = tuple(DIAGNOSTIC_VARIABLES)

VARIABLE_ATTRS: dict[str, tuple[str, str]] = {
    "trajectory": ("sampler state x at each recorded step", "data units"),
    "ridge_projection": ("SCMS projection of the state onto the log-density ridge R_t", "data units"),
    "ridge_distance": ("|state - ridge_projection|", "data units"),
    "ridge_residual": ("|E E^T grad log p_t| at the projection (0 on the ridge)", "1/data units"),
    "ridge_converged": ("SCMS converged for this state", "1"),
    "normal_curvature": ("largest normal Hessian eigenvalue of log p_t at the projection (< 0 on a ridge)",
                         "1/data units^2"),
    "residual_normal": ("normal part N N^T e of the model error e = denoise(x,t) - E[x0|x_t=x], frame at x",
                        "data units"),
    "residual_tangent": ("tangent part T T^T e of the model error, frame at x", "data units"),
    "diverged": ("the trajectory left the finite numbers at some step", "1"),
    "train_data": ("training points x_i", "data units"),
    **{name: (long_name, LOSS_UNITS) for name, long_name in DIAGNOSTIC_VARIABLES.items()},
    "cell_complete": ("every variable of this cell is written", "1"),
    "max_dropped_mass": ("largest posterior mass dropped by top-k truncation over the cell's projections "
                         "(<= attr drop_tol)", "1"),
    "final_ridge_residual_alt": ("|E E^T grad log p_t| at the final state for alternative ridge dimensions",
                                 "1/data units"),
    "t": ("diffusion time of the recorded step", "OU time"),
    "alpha": ("alpha_t = exp(-t)", "1"),
    "h": ("h_t = 1 - exp(-2t)", "1"),
    "sampler_step": ("sampler step number of the recorded state (0 = start at T)", "1"),
}
STEP_SCALAR = ("ridge_distance", "ridge_residual", "normal_curvature")
STEP_VECTOR = ("trajectory", "ridge_projection", "residual_normal", "residual_tangent")
STEP_BOOL = ("ridge_converged",)


@dataclass(frozen=True)
class StoreLayout:
    """Shape and chunking of a store."""

    schedules: tuple[str, ...]
    widths: tuple[int, ...]
    taus: tuple[float, ...] | None  # None: no tau dim
    n_samples: int
    t: np.ndarray  # recorded times (n_rec,)
    sampler_step: np.ndarray  # (n_rec,)
    d: int  # data dimension (size of the store's ``dim`` dimension)
    block_steps: int
    sample_chunk: int
    d_star_alt: tuple[int, ...] = ()  # extra ridge dimensions of final_ridge_residual_alt

    @property
    def cell_dims(self) -> tuple[str, ...]:
        return ("schedule", "width") + (("tau",) if self.taus is not None else ())

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (len(self.schedules), len(self.widths)) + ((len(self.taus),) if self.taus is not None else ())

    @property
    def n_steps(self) -> int:
        return int(self.t.size)

    def cells(self) -> list[tuple[int, ...]]:
        """Index tuples of every cell, in C order."""
        return [tuple(int(i) for i in idx) for idx in np.ndindex(*self.cell_shape)]

    def cell_region(self, index: tuple[int, ...]) -> dict[str, slice]:
        return {d: slice(i, i + 1) for d, i in zip(self.cell_dims, index)}

    def cell_labels(self, index: tuple[int, ...]) -> dict[str, Any]:
        labels = {"schedule": self.schedules[index[0]], "width": self.widths[index[1]]}
        if self.taus is not None:
            labels["tau"] = self.taus[index[2]]
        return labels


def cell_label(ds: xr.Dataset, dims, idx) -> dict:
    """{dim: label} of the cell at integer position ``idx`` along ``dims`` (plain Python values)."""
    out = {}
    for d, i in zip(dims, idx):
        v = ds[d].values[i]
        out[d] = v.item() if hasattr(v, "item") else v
    return out


def _template(layout: StoreLayout, train: np.ndarray, attrs: dict) -> xr.Dataset:
    cd, cs = layout.cell_dims, layout.cell_shape
    ones = (1,) * len(cd)
    S, K, d = layout.n_samples, layout.n_steps, layout.d
    sc, bs = layout.sample_chunk, layout.block_steps
    data = {}
    for name in STEP_VECTOR:
        data[name] = (cd + ("sample", "step", "dim"), da.full(cs + (S, K, d), np.nan, chunks=ones + (sc, bs, d)))
    for name in STEP_SCALAR:
        data[name] = (cd + ("sample", "step"), da.full(cs + (S, K), np.nan, chunks=ones + (sc, bs)))
    for name in STEP_BOOL:
        data[name] = (cd + ("sample", "step"), da.zeros(cs + (S, K), dtype=bool, chunks=ones + (sc, bs)))
    data["diverged"] = (cd + ("sample",), da.zeros(cs + (S,), dtype=bool, chunks=ones + (S,)))
    for name in CELL_DIAGNOSTICS:
        data[name] = (cd, da.full(cs, np.nan, chunks=ones))
    data["cell_complete"] = (cd, da.zeros(cs, dtype=bool, chunks=ones))
    data["max_dropped_mass"] = (cd, da.full(cs, np.nan, chunks=ones))
    if layout.d_star_alt:
        nd = len(layout.d_star_alt)
        data["final_ridge_residual_alt"] = (cd + ("sample", "d_star_alt"),
                                            da.full(cs + (S, nd), np.nan, chunks=ones + (S, nd)))
    coords = {
        "schedule": np.array(layout.schedules, dtype=object),
        "width": np.array(layout.widths, dtype=np.int64),
        "sample": np.arange(S, dtype=np.int64),
        "step": np.arange(K, dtype=np.int64),
        "dim": np.arange(d, dtype=np.int64),
        "t": ("step", layout.t),
        "alpha": ("step", OU().alpha(layout.t)),
        "h": ("step", OU().h(layout.t)),
        "sampler_step": ("step", layout.sampler_step.astype(np.int64)),
    }
    if layout.taus is not None:
        coords["tau"] = np.array(layout.taus, dtype=np.float64)
    if layout.d_star_alt:
        coords["d_star_alt"] = np.array(layout.d_star_alt, dtype=np.int64)
    ds = xr.Dataset(data, coords=coords)
    ds["train_data"] = (("train", "dim"), np.asarray(train, dtype=np.float64))
    for name, (long_name, units) in VARIABLE_ATTRS.items():
        if name in ds.variables:
            ds[name].attrs.update(long_name=long_name, units=units)
    ds.attrs.update(attrs)
    return ds


def create_store(path: str | Path, layout: StoreLayout, train: np.ndarray, attrs: dict) -> None:
    """Write the store's metadata and coordinates (no data chunks) from a lazy template."""
    ds = _template(layout, train, {"schema_version": SCHEMA_VERSION, **attrs})
    encoding = {}
    for name, var in ds.data_vars.items():
        if isinstance(var.data, da.Array):
            encoding[name] = {"chunks": tuple(c[0] for c in var.data.chunks)}
    ds.to_zarr(str(path), mode="w", compute=False, zarr_format=3, consolidated=False, encoding=encoding)
    # the template wrote train_data eagerly (numpy); the dask variables hold no chunks yet


def write_block(path: str | Path, layout: StoreLayout, cell: tuple[int, ...], start: int,
                values: dict[str, np.ndarray]) -> None:
    """Write per-step variables of one cell for recorded steps [start, start + B)."""
    B = values["trajectory"].shape[0]
    cd = layout.cell_dims
    lead = (1,) * len(cd)
    data = {}
    for name in STEP_VECTOR:  # (B, n, d) -> (cells..., n, B, d)
        data[name] = (cd + ("sample", "step", "dim"), np.swapaxes(values[name], 0, 1).reshape(lead + (
            layout.n_samples, B, layout.d)))
    for name in STEP_SCALAR + STEP_BOOL:
        data[name] = (cd + ("sample", "step"), values[name].T.reshape(lead + (layout.n_samples, B)))
    region = {**layout.cell_region(cell), "step": slice(start, start + B)}
    xr.Dataset(data).to_zarr(str(path), region=region, zarr_format=3, consolidated=False)


def write_cell_end(path: str | Path, layout: StoreLayout, cell: tuple[int, ...], diverged: np.ndarray,
                   diagnostics: dict[str, float], *, max_dropped_mass: float = np.nan,
                   final_ridge_residual_alt: np.ndarray | None = None) -> None:
    """Write the per-cell variables, then the completion mark (in that order).

    ``diagnostics`` maps names of :data:`CELL_DIAGNOSTICS` to floats (missing ones are NaN);
    ``final_ridge_residual_alt`` is (n_samples, len(layout.d_star_alt)).
    """
    cd = layout.cell_dims
    lead = (1,) * len(cd)
    data = {"diverged": (cd + ("sample",), np.asarray(diverged, dtype=bool).reshape(lead + (layout.n_samples,))),
            "max_dropped_mass": (cd, np.full(lead, float(max_dropped_mass)))}
    if layout.d_star_alt:
        alt = np.asarray(final_ridge_residual_alt, dtype=np.float64).reshape(
            lead + (layout.n_samples, len(layout.d_star_alt)))
        data["final_ridge_residual_alt"] = (cd + ("sample", "d_star_alt"), alt)
    for name in CELL_DIAGNOSTICS:
        data[name] = (cd, np.full(lead, float(diagnostics.get(name, np.nan))))
    region = layout.cell_region(cell)
    xr.Dataset(data).to_zarr(str(path), region=region, zarr_format=3, consolidated=False)
    xr.Dataset({"cell_complete": (cd, np.ones(lead, dtype=bool))}).to_zarr(
        str(path), region=region, zarr_format=3, consolidated=False)


def open_store(path: str | Path, **kwargs) -> xr.Dataset:
    """Open a store lazily (dask-backed) with xarray."""
    p = Path(path)
    if not (p / "zarr.json").is_file():
        raise FileNotFoundError(f"no ridgexr store at {str(p)!r}")
    return xr.open_zarr(str(p), zarr_format=3, consolidated=False, **kwargs)


def json_attr(ds: xr.Dataset, key: str) -> dict:
    """A JSON-valued store attribute (``config``, ``provenance``, ``seeds``, ``d_star_info``,
    ``dataset_provenance``) parsed to a dict; ``{}`` when the store does not have it.

    Raises ``ValueError`` naming the attribute when its text is not valid JSON.
    """
    text = ds.attrs.get(key)
    if text is None:
        return {}
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"store attribute {key!r} is not valid JSON ({exc}); the store may be damaged") from None


def cells(ds: xr.Dataset) -> list[dict]:
    """Labels of every cell (``schedule``, ``width`` [, ``tau``]) of a store's Dataset, in C order."""
    dims = [d for d in ("schedule", "width", "tau") if d in ds.dims]
    return [cell_label(ds, dims, idx) for idx in np.ndindex(*(ds.sizes[d] for d in dims))]


def complete_cells(ds: xr.Dataset) -> list[dict]:
    """Labels of the cells whose ``cell_complete`` mark is set."""
    done = ds["cell_complete"].values
    dims = ds["cell_complete"].dims
    return [cell_label(ds, dims, idx) for idx in zip(*np.nonzero(done))]


# ---------------------------------------------------------------------------- lock
class StoreLockedError(RuntimeError):
    """Another writer holds the store."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StoreLock:
    """An exclusive writer lock: a file created with O_CREAT | O_EXCL beside the store.

    A lock left by a process that no longer runs on this host (kill -9, power loss) is
    stale and taken over; a live holder makes :meth:`acquire` raise :class:`StoreLockedError`.
    """

    def __init__(self, store: str | Path):
        self.path = Path(str(store).rstrip("/") + LOCK_NAME)
        self.held = False

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def acquire(self) -> "StoreLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                held = self._read()
                same_host = held.get("host") == socket.gethostname()
                if same_host and isinstance(held.get("pid"), int) and not _pid_alive(held["pid"]):
                    self.path.unlink(missing_ok=True)  # stale: its process is gone
                    continue
                if not held:  # being written right now, or unreadable: give it a moment
                    time.sleep(0.2)
                    held = self._read()
                raise StoreLockedError(
                    f"store {str(self.path)[:-len(LOCK_NAME)]!r} is being written by pid {held.get('pid')} on host "
                    f"{held.get('host')!r} since {held.get('since')}; wait for it to finish, or remove "
                    f"{str(self.path)!r} if that process is gone") from None
            with os.fdopen(fd, "w") as fh:
                json.dump(info, fh)
            self.held = True
            return self
        raise StoreLockedError(f"could not take the lock {str(self.path)!r}")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
