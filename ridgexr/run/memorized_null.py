"""The memorized share's null added to a store written before it existed (schema 1.9 or older), without a rerun.

A run writes, per cell, how many fresh draws of the law are memorized against the cell's training set
(``quality_memorized_null_count`` / ``quality_memorized_null_draws``, :func:`ridgexr.quality.cells.memorized_null`):
what the memorization claims and tau_mem (:func:`ridgexr.analysis.training_timescales`) subtract from the samples'
memorized share.  The null depends on the dataset and the cell's training set only, not on the model, so
:func:`fill_memorized_null` computes it for an existing store from its configuration, by the run's own code, and
writes it into the store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import zarr

from ..analysis.timescales import MEMORIZED_NULL
from ..catalog import Experiment
from ..catalog.folders import root_metadata
from ..datasets import load_training_set
from ..quality.cells import memorized_null
from ..reader import store_path
from ..schema import SCHEMA_VERSION, SINCE, VARIABLES, schema_older
from ..store import StoreLock
from ..store.integrity import cell_digest
from ..store.opening import StoreDamagedError, group_cell_dims, per_cell_arrays
from ..store.update import consolidate, open_arrays, set_root_attrs

__all__ = ["fill_memorized_null"]

#: the per-cell float array whose metadata (shape, chunks, codecs, fill) a new per-cell variable copies: every
#: schema has it
_LIKE = "max_dropped_mass"


def _label(value):
    """A cell label as a Python value (a numpy scalar's item; a string coordinate's str as it is)."""
    return value.item() if isinstance(value, np.generic) else value


def _add_array(path: Path, name: str) -> None:
    """Create the per-cell float array ``name`` (empty: every value its fill, NaN) with the metadata of
    :data:`_LIKE` and the attributes of the variable table; its ``zarr.json`` written atomically."""
    meta = json.loads((path / _LIKE / "zarr.json").read_bytes())
    var = VARIABLES[name]
    attrs = {k: v for k, v in meta.get("attributes", {}).items() if k not in ("long_name", "units")}
    meta["attributes"] = {"long_name": var.long_name, **({} if var.units is None else {"units": var.units}), **attrs}
    folder = path / name
    folder.mkdir(exist_ok=True)
    tmp = folder / f"zarr.{os.urandom(16).hex()}.partial"
    tmp.write_text(json.dumps(meta, indent=2, allow_nan=True))
    os.replace(tmp, folder / "zarr.json")


def fill_memorized_null(store: str | Path, *, data_dir: str | Path | None = None) -> dict:
    """Compute and write the memorized share's null of every complete cell of an existing store.

    Per complete cell, :func:`ridgexr.quality.cells.memorized_null` of the store's dataset (its configuration,
    the root attribute ``config``) and the cell's training set, loaded as the run loads it
    (:func:`ridgexr.datasets.load_training_set`, the cell's rows): the values a run of this ridgexr writes
    (``quality_memorized_null_count``, ``quality_memorized_null_draws``; NaN for a dataset without fresh draws).
    The two arrays are created where the store lacks them; each complete cell's digest is checked before and
    rewritten after (``ridgexr verify`` passes on the result); the metadata are consolidated again.  A store whose
    only missing arrays were these two gets ``schema_version`` :data:`ridgexr.schema.SCHEMA_VERSION`, so that a
    store with unfinished cells can be resumed by this ridgexr.  Unfinished cells are left to the run.  Running
    it again rewrites the same values.

    Parameters
    ----------
    store : str or Path
        The store: a path or an entry's name (:func:`ridgexr.reader.store_path`).
    data_dir : str or Path, optional
        The data folder a name is looked up in (default as ``ridgexr run``'s).

    Returns
    -------
    dict: ``cells`` (complete cells written), ``training_sets`` (distinct training sets counted),
    ``schema_version`` (the store's, after).

    Raises
    ------
    StoreDamagedError
        When a complete cell's chunks do not match its digest (``ridgexr verify`` first), or the root metadata hold
        no configuration.
    StoreLockedError
        When another writer (a run) holds the store.

    Examples
    --------
    >>> fill_memorized_null("timescales-fashion")  # doctest: +SKIP
    {'cells': 80, 'training_sets': 4, 'schema_version': '1.10'}
    """
    path = store_path(store, data_dir=data_dir)
    with StoreLock(path):
        attrs = root_metadata(path).get("attributes", {})
        if "config" not in attrs:
            raise StoreDamagedError(f"store {str(path)!r}: its root metadata {str(path / 'zarr.json')!r} hold no "
                                    "configuration; run 'ridgexr verify' on it")
        exp = Experiment.model_validate_json(attrs["config"])
        group = zarr.open_group(str(path), mode="r", zarr_format=3, use_consolidated=False)
        cell_dims = group_cell_dims(group)
        labels = {d: np.asarray(group[d][...]) for d in cell_dims}
        marks = np.asarray(group["cell_complete"][...], dtype=bool).reshape([len(labels[d]) for d in cell_dims])
        complete = [tuple(int(i) for i in idx) for idx in np.argwhere(marks)]
        digested = "cell_digest" in group.array_keys()
        if digested:  # damage is reported, never sealed under a new digest
            per_cell = per_cell_arrays(group, cell_dims)
            stored = np.asarray(group["cell_digest"][...])
            bad = [idx for idx in complete if cell_digest(path, idx, arrays=per_cell) != int(stored[idx])]
            if bad:
                raise StoreDamagedError(f"store {str(path)!r}: {len(bad)} complete cell(s) do not match their digest "
                                        f"(first at {dict(zip(cell_dims, bad[0]))}); run 'ridgexr verify {path}' "
                                        "first")
        for name in MEMORIZED_NULL:
            if name not in group.array_keys():
                _add_array(path, name)
        train_all = load_training_set(exp.dataset, base_dir=exp.base_dir)
        out = open_arrays(path, MEMORIZED_NULL)
        nulls: dict[tuple, dict[str, float]] = {}
        for idx in complete:
            cell = {d: _label(labels[d][i]) for d, i in zip(cell_dims, idx)}
            key = (cell.get("data_draw"), cell.get("n_train"))  # the null depends on the training set alone
            if key not in nulls:
                nulls[key] = memorized_null(exp.dataset, train_all[exp.dataset.rows(cell)], base_dir=exp.base_dir)
            for name in MEMORIZED_NULL:
                out[name][idx] = nulls[key].get(name.removeprefix("quality_"), np.nan)
        if digested:
            group = zarr.open_group(str(path), mode="r", zarr_format=3, use_consolidated=False)
            per_cell = per_cell_arrays(group, cell_dims)
            digests = open_arrays(path, ["cell_digest"])["cell_digest"]
            for idx in complete:
                digests[idx] = cell_digest(path, idx, arrays=per_cell)
        version = str(attrs.get("schema_version", SCHEMA_VERSION))
        if all(not schema_older(version, than=since) for name, since in SINCE.items() if name not in MEMORIZED_NULL):
            set_root_attrs(path, schema_version=SCHEMA_VERSION)
            version = SCHEMA_VERSION
        consolidate(path)
    return {"cells": len(complete), "training_sets": len(nulls), "schema_version": version}
