"""Reading stores back: find a store by entry name or path, open it lazily, summarise its cells."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .catalog import data_dir_source, open_catalog, resolve_store
from .store import IN_PROCESS, cell_label, is_store, open_store

__all__ = ["open_dataset", "store_path", "summarize", "mask_incomplete"]


def summarize(path: str | Path) -> list[dict]:
    """Per-cell summary rows read back from the store, at the final step.

    Columns: mean ridge distance, share of SCMS-converged projections, rms normal and
    tangent residual (states with a degenerate frame masked, their share in ``degenerate``),
    near-mode share (within 0.5 of a scaled training point, the paper's count, as
    ``near_mode_fraction``), memorized share (d1/d2 < 1/3, as
    ``memorization_fraction``), diverged trajectories, held-out excess loss.  Every column is
    built lazily and computed in one ``dask.compute`` in this process
    (:data:`ridgexr.store.IN_PROCESS`), so chunks shared by several columns (the final step's
    block of each cell) are read once.
    """
    import dask

    ds = open_store(path)
    dims = ds["cell_complete"].dims
    lazy = _summary_columns(ds, ds.isel(step=-1))
    marks = {"done": ds["cell_complete"]}
    if "cell_applies" in ds:
        marks["applies"] = ds["cell_applies"]
    with warnings.catch_warnings():  # unwritten cells and fully diverged cells are all-NaN: NaN rows
        warnings.simplefilter("ignore", RuntimeWarning)
        cols, marks = dask.compute({k: v.transpose(*dims).data for k, v in lazy.items()},
                                   {k: v.transpose(*dims).data for k, v in marks.items()}, scheduler=IN_PROCESS)
    done = marks["done"]
    applies = marks.get("applies", np.ones(done.shape, bool))
    rows = []
    for idx in np.ndindex(*done.shape):
        if not applies[idx]:  # masked: the cell's model block does not use one of its labels
            continue
        row = cell_label(ds, dims, idx)
        row["complete"] = bool(done[idx])
        row.update({k: (int(v[idx]) if k == "diverged" else float(v[idx])) for k, v in cols.items()})
        rows.append(row)
    return rows


def _summary_columns(ds, last) -> dict:
    """The summary columns as lazy DataArrays over the cell dims."""
    from .analysis import degenerate_share, memorization_fraction, near_mode_fraction, resolved

    def rms(name):  # NaN sample rows (masked or diverged) are skipped, as np.nanmean; a NaN component stays NaN
        return np.sqrt((resolved(last, name) ** 2).sum("dim", skipna=False).mean("sample"))

    # each cell against its own training set (nested subsets of an n_train sweep)
    near = near_mode_fraction(ds, r=0.5)["near_mode"]
    cols = {
        "ridge_distance": resolved(last, "ridge_distance").mean("sample"),
        "converged": last["ridge_converged"].mean("sample"),
        "rms_residual_normal": rms("residual_normal"),
        "rms_residual_tangent": rms("residual_tangent"),
        "near_mode": near,
        "memorized": (memorization_fraction(ds)["memorized"] if ds.sizes["train"] >= 2
                      else xr.full_like(near, np.nan, dtype=float)),
        "diverged": ds["diverged"].sum("sample"),
        "excess_loss": ds["excess_loss"],
    }
    if "frame_degenerate" in last.variables:
        cols["degenerate"] = degenerate_share(last, "frame_degenerate")
    return cols


def store_path(name_or_path: str | Path, *, data_dir: str | Path | None = None, catalog: Any = None) -> Path:
    """The store a path or catalog entry name refers to.

    Raises ``FileNotFoundError`` saying where it looked (and where the data folder came
    from) when ``name_or_path`` is neither a store nor an entry whose store exists.
    """
    p = Path(name_or_path)
    if is_store(p):
        return p
    cat = catalog if catalog is not None else open_catalog(data_dir=data_dir)
    if str(name_or_path) not in cat.experiments:
        raise FileNotFoundError(f"{str(name_or_path)!r} is neither a ridgexr store nor a catalog entry "
                                f"(known entries: {', '.join(sorted(cat.experiments))})")
    path = resolve_store(cat[str(name_or_path)], data_dir)
    if not is_store(path):
        raise FileNotFoundError(
            f"no ridgexr store for {str(name_or_path)!r} at {str(path)!r} (data folder from "
            f"{data_dir_source(data_dir)}); run 'ridgexr run {name_or_path}' first, or point to the folder that "
            "holds it with --data-dir DIR / data_dir=DIR or $RIDGEXR_DATA")
    return path


def open_dataset(name_or_path: str | Path, *, data_dir: str | Path | None = None, catalog: Any = None,
                 complete_only: bool = False):
    """Open an experiment's store lazily (dask-backed ``xarray.Dataset``).

    Parameters
    ----------
    name_or_path : str or path
        A catalog entry name (resolved like ``ridgexr run NAME``) or a store path.
    data_dir : path, optional
        Data folder used when ``name_or_path`` is an entry name (default ``$RIDGEXR_DATA`` or
        the platform's user data folder).
    catalog : Catalog, optional
    complete_only : bool
        Mask the per-cell data of incomplete cells (NaN for floats; boolean variables keep
        their dtype and read False there; integer ones read -1).

    The Dataset's ``cell_complete`` variable tells which cells are complete; its attrs hold
    the configuration (``config``, JSON) and provenance; ``ds.ridge.config`` and
    ``ds.ridge.provenance`` return them parsed.
    """
    ds = open_store(store_path(name_or_path, data_dir=data_dir, catalog=catalog))
    return mask_incomplete(ds) if complete_only else ds


def mask_incomplete(ds):
    """Mask the per-cell variables of incomplete cells: NaN for floats, False for booleans, -1 for integers
    (dtypes kept)."""
    done = ds["cell_complete"]
    masked = {}
    for name, var in ds.data_vars.items():
        if name == "cell_complete" or not set(done.dims) <= set(var.dims):
            continue
        if var.dtype == bool:
            masked[name] = var & done
        elif var.dtype.kind == "i":  # integer counts: -1 (the store's "not observed") keeps the dtype
            masked[name] = var.where(done, -1).astype(var.dtype)
        else:
            masked[name] = var.where(done)
    return ds.assign(masked)
