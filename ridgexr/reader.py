"""Reading stores back: find a store by entry name or path, open it lazily, summarise its cells."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ._validation import check_optional_int
from .catalog import data_dir_source, default_data_dir, open_catalog, resolve_store, stores_named
from .store.opening import IN_PROCESS, StoreDamagedError, StoreReplacedError, StoreWarning, cell_label, open_store
from .store.lifecycle import damaged_root, finish_interrupted
from .catalog.folders import is_store
from .store.integrity import missing_chunks

__all__ = ["open_dataset", "store_path", "summarize", "mask_incomplete", "check_complete_cells"]


def check_complete_cells(ds: xr.Dataset, path: str | Path) -> xr.Dataset:
    """``ds`` with ``cell_complete`` unset for the complete cells that miss a chunk, each named in a
    :class:`ridgexr.store.StoreWarning`.

    Such a cell would read fill values (NaN, False, -1) where its data are gone; treated as
    incomplete, it is masked by ``complete_only=True`` and skipped by the summaries.  The check
    lists the arrays' folders and reads no chunk (:func:`ridgexr.store.integrity.missing_chunks`).
    """
    done = ds["cell_complete"]
    dims = done.dims
    marks = np.asarray(done.values, dtype=bool)
    gone = missing_chunks(path, [tuple(int(i) for i in idx) for idx in zip(*np.nonzero(marks))])
    if not gone:
        return ds
    marks = marks.copy()
    for idx, names in sorted(gone.items()):
        marks[idx] = False
        where = " ".join(f"{k}={v}" for k, v in cell_label(ds, dims, idx).items())
        warnings.warn(f"store {str(path)!r}: cell {where} is marked complete but chunks of {', '.join(names)} are "
                      "missing; it is treated as incomplete (masked by complete_only=True): run 'ridgexr verify "
                      "--repair' and 'ridgexr run' to recompute it", StoreWarning, stacklevel=3)
    return ds.assign(cell_complete=done.copy(data=marks))


def summarize(path: str | Path, ds: xr.Dataset | None = None, *, slab_bytes: int | None = None) -> list[dict]:
    """Per-cell summary rows read back from the store, at the final step.

    Columns: mean ridge distance, share of SCMS-converged projections, rms normal and
    tangent residual (states with a degenerate frame masked, their share in ``degenerate``),
    near-mode share (within 0.5 of a scaled training point, the paper's count, as
    ``near_mode_fraction``), memorized share (d1/d2 < 1/3, as
    ``memorization_fraction``), diverged trajectories, held-out excess loss, and (stores of schema 1.7 on)
    ``quality``, the sample-quality gate's verdict (:func:`ridgexr.quality.sample_quality`).  Every column is
    built lazily and computed in one ``dask.compute`` in this process
    (:data:`ridgexr.store.opening.IN_PROCESS`), so chunks shared by several columns (the final step's
    block of each cell) are read once.  A complete cell with a missing chunk is shown as
    incomplete, with a warning (:func:`check_complete_cells`); pass ``ds`` when it is already
    open and checked.  The store is read in slabs of cells of at most ``slab_bytes`` of one step per task
    (default :data:`SUMMARY_SLAB_BYTES`; :func:`_slab_view`); ``slab_bytes=0`` reads it as opened, one chunk per
    cell (the same values to rounding, ~3-5x slower on a 3 072-cell store).
    """
    import dask

    ds = check_complete_cells(open_store(path), path) if ds is None else ds
    dims = ds["cell_complete"].dims
    slab_bytes = check_optional_int(slab_bytes, "slab_bytes", min_val=0)
    if slab_bytes != 0:  # the same values, read in slabs of cells: a few tasks instead of one per cell
        ds = _slab_view(path, ds, SUMMARY_SLAB_BYTES if slab_bytes is None else slab_bytes)
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
    gate = None
    if any(str(n).startswith("quality_") for n in ds.data_vars):
        from .quality import sample_quality

        gate = sample_quality(ds)["gate"].transpose(*dims).values
    rows = []
    for idx in np.ndindex(*done.shape):
        if not applies[idx]:  # masked: the cell's model block does not use one of its labels
            continue
        row = cell_label(ds, dims, idx)
        row["complete"] = bool(done[idx])
        row.update({k: (int(v[idx]) if k == "diverged" else float(v[idx])) for k, v in cols.items()})
        if gate is not None:
            row["quality"] = str(gate[idx])
        rows.append(row)
    return rows


#: bytes of a cell's final-step data per task of the summary's reads (:func:`_slab_view`)
SUMMARY_SLAB_BYTES = 128 * 2**20


def _slab_view(path: str | Path, ds: xr.Dataset, budget: int = SUMMARY_SLAB_BYTES) -> xr.Dataset:
    """``ds`` (the store at ``path``, opened and checked) with its arrays read in slabs of cells.

    A store keeps one chunk per cell, so a dask array per chunk makes one task per cell and variable: 25 000
    tasks for a 3 072-cell store's summary, whose scheduling cost dwarfs the reads.  Opened without dask and
    chunked along the cell dimensions so that a task reads at most ``budget`` bytes of one step of its cells
    (zarr fetches a slab's chunk files in one call), the same values are read in a few tasks.  ``ds``'s loaded
    coordinates and its checked ``cell_complete`` are kept.  A ``ds`` that is not the whole store (a selection)
    is returned as it is.
    """
    cells = ds["cell_complete"].dims
    fast = open_store(path, chunks=None, load_marks=False)
    if fast.attrs.get("generation") != ds.attrs.get("generation"):  # replaced since ds was opened: never mix them
        raise StoreReplacedError(f"store {str(path)!r} was replaced (an --overwrite) after it was opened: open it "
                                 "again")
    if dict(fast.sizes) != dict(ds.sizes):  # a selection of the store: read it as given
        return ds
    fast = fast.assign(cell_complete=ds["cell_complete"])
    per_cell = sum(v.dtype.itemsize * int(np.prod([s for d, s in v.sizes.items() if d not in cells and d != "step"]))
                   for v in fast.data_vars.values() if set(cells) <= set(v.dims))
    room = max(1, budget // max(per_cell, 1))
    chunks = {}
    for d in reversed(cells):  # the innermost cell dimensions whole first, as the store's label order runs
        chunks[d] = int(max(1, min(ds.sizes[d], room)))
        room = max(1, room // chunks[d])
    return fast.chunk(chunks)


def _summary_columns(ds, last) -> dict:
    """The summary columns as lazy DataArrays over the cell dims."""
    from .analysis import degenerate_share, memorization_fraction, near_mode_fraction, resolved

    def rms(name):  # NaN sample rows (masked or diverged) are skipped, as np.nanmean; a NaN component stays NaN
        return np.sqrt((resolved(last, name) ** 2).sum("dim", skipna=False).mean("sample"))

    # each cell against its own training set (nested subsets of an n_train sweep)
    near = near_mode_fraction(ds, r=0.5)["near_mode"]
    cols = {
        "ridge_distance": resolved(last, "ridge_distance").mean("sample"),
        # NaN where no state was projected (ridge.observe: false, or every sample diverged), not 0
        "converged": last["ridge_converged"].mean("sample").where(last["ridge_distance"].notnull().any("sample")),
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
    """The store a path, a catalog entry name or a stored entry name refers to.

    In this order: a store path; a catalog entry's store (as ``ridgexr run NAME`` writes it); else a
    store of the data folder made by an entry of that name whatever catalog defined it (the entry
    name a store records, or ``<data folder>/<name>.zarr``: :func:`ridgexr.catalog.stores_named`).  While a
    catalog file of the data folder is skipped (it cannot be read), a name that is no entry raises its error
    instead: the name may be an entry of that file, whose store is elsewhere.

    A store path that holds no store because an ``--overwrite`` was interrupted between its renames is
    first finished or rolled back (:func:`ridgexr.store.lifecycle.finish_interrupted`: the store's lock is taken
    for it), with a :class:`~ridgexr.store.StoreWarning` line saying what was done.

    Raises ``FileNotFoundError`` saying where it looked (and where the data folder came
    from) when ``name_or_path`` is none of these, ``ValueError`` when several stores of the data
    folder record the name, and :class:`~ridgexr.store.StoreDamagedError` naming the root ``zarr.json`` of a
    folder that holds a store's arrays but whose root metadata is missing or damaged.
    """
    p = Path(name_or_path)
    _finish_interrupted(p)
    if is_store(p):
        return p
    _refuse_damaged_root(p)
    name = str(name_or_path)
    cat = catalog if catalog is not None else open_catalog(data_dir=data_dir)
    if name not in cat.experiments and cat.skipped:  # it may be an entry of a skipped catalog file, with another store
        raise cat.not_found(name)
    if name not in cat.experiments:
        stored = stores_named(name, data_dir)
        if len(stored) == 1:
            return stored[0]
        if stored:
            raise ValueError(f"{name!r} names {len(stored)} stores of the data folder (each records entry {name!r}): "
                             f"{', '.join(map(str, stored))}; give the store's path instead")
        raise FileNotFoundError(f"{name!r} is neither a ridgexr store nor a catalog entry (known entries: "
                                f"{', '.join(sorted(cat.experiments))}) nor the entry of a store in the data folder "
                                f"{str(default_data_dir(data_dir))!r} (from {data_dir_source(data_dir)})")
    path = resolve_store(cat[name], data_dir)
    _finish_interrupted(path)
    _refuse_damaged_root(path)
    if not is_store(path):
        raise FileNotFoundError(
            f"no ridgexr store for {name!r} at {str(path)!r} (data folder from "
            f"{data_dir_source(data_dir)}); run 'ridgexr run {name_or_path}' first, or point to the folder that "
            "holds it with --data-dir DIR / data_dir=DIR or $RIDGEXR_DATA")
    return path


def _finish_interrupted(path: Path) -> None:
    """Finish (or roll back) an ``--overwrite`` interrupted between its renames, one warning line per action."""
    for note in finish_interrupted(path):
        warnings.warn(note, StoreWarning, stacklevel=4)


def _refuse_damaged_root(path: Path) -> None:
    """Raise :class:`StoreDamagedError` naming the root ``zarr.json`` of a store whose root metadata is damaged."""
    why = damaged_root(path)
    if why is not None:
        raise StoreDamagedError(f"store {str(path)!r} is damaged: {why}; the configuration it recorded is lost "
                                "with it: rerun its entry with 'ridgexr run NAME --overwrite', which replaces it")


def open_dataset(name_or_path: str | Path, *, data_dir: str | Path | None = None, catalog: Any = None,
                 complete_only: bool = False):
    """Open an experiment's store lazily (dask-backed ``xarray.Dataset``).

    Parameters
    ----------
    name_or_path : str or path
        A catalog entry name (resolved like ``ridgexr run NAME``), a store path, or the name of the entry
        that made a store of the data folder, whatever catalog defined it (:func:`store_path`).
    data_dir : path, optional
        Data folder used when ``name_or_path`` is an entry name (default ``$RIDGEXR_DATA`` or
        the platform's user data folder).
    catalog : Catalog, optional
        The catalog that resolves an entry name (default: the built-in and the data folder's).
    complete_only : bool
        Mask the per-cell data of incomplete cells (NaN for floats; boolean variables keep
        their dtype and read False there; integer ones read -1).

    Returns
    -------
    xarray.Dataset
        The store, lazily (dask arrays). Its ``cell_complete`` variable tells which cells are
        complete; its attrs hold the configuration (``config``, JSON) and the provenance;
        ``ds.ridge.config`` and ``ds.ridge.provenance`` return them parsed.

    Raises
    ------
    ridgexr.store.StoreDamagedError
        When the metadata the Dataset would apply differ from the store's record of its creation (a scale,
        an offset, a fill value, a dtype, time units: other values than were written), when a chunk written at
        creation (``t``, ``train_data``, ...) is missing, or, on a read, when a chunk fails its checksum; the
        message names the array (and the chunk file) and ``ridgexr verify``.
    ridgexr.store.StoreReplacedError
        On a read of the Dataset after an ``--overwrite`` swapped a new store in under it: open it again.

    Notes
    -----
    A cell marked complete whose chunks are not all on disk (damage: it would read fill values)
    is treated as incomplete, with a warning naming it (a listing of the store, no chunk read).
    The Dataset reads through the store folder it opened (:class:`ridgexr.store.opening.PinnedStore`): it never mixes
    two stores.
    """
    path = store_path(name_or_path, data_dir=data_dir, catalog=catalog)
    ds = check_complete_cells(open_store(path), path)
    return mask_incomplete(ds) if complete_only else ds


def mask_incomplete(ds):
    """Mask the per-cell variables of incomplete cells: NaN for floats, False for booleans, -1 for integers
    (dtypes kept)."""
    done = ds["cell_complete"]
    masked = {}
    for name, var in ds.data_vars.items():
        if name in ("cell_complete", "cell_digest") or not set(done.dims) <= set(var.dims):
            continue
        if var.dtype == bool:
            masked[name] = var & done
        elif var.dtype.kind == "i":  # integer counts: -1 (the store's "not observed") keeps the dtype
            masked[name] = var.where(done, -1).astype(var.dtype)
        else:
            masked[name] = var.where(done)
    return ds.assign(masked)
