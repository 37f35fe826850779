"""Changes to an existing store's metadata and marks: arrays opened for writing, the root metadata rewritten
atomically (:func:`set_root_attrs`), consolidated metadata (:func:`consolidate`), completion marks cleared
(:func:`clear_completion`).  The caller holds the store's :class:`ridgexr.store.StoreLock`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import zarr

from .opening import cell_dims_of, open_store
from .record import array_names

__all__ = ["open_arrays", "consolidate", "clear_completion", "set_root_attrs"]


def open_arrays(path: str | Path | zarr.Group, names: Iterable[str]) -> dict[str, Any]:
    """Named zarr arrays of a store (a path or its group) opened for writing, every chunk written, even
    all-fill ones (``verify`` expects every chunk of a written region on disk)."""
    group = path if isinstance(path, zarr.Group) else zarr.open_group(str(path), mode="r+", zarr_format=3,
                                                                         use_consolidated=False)
    return {name: group[name].with_config({"write_empty_chunks": True}) for name in names}



def _write_json_atomic(target: Path, obj: dict) -> None:
    """Write ``obj`` as JSON to ``target`` through a temporary file renamed over it (a reader sees the old file or
    the new one)."""
    tmp = target.with_suffix(f".{os.urandom(16).hex()}.partial")  # the name of zarr's own unfinished writes
    try:
        tmp.write_text(json.dumps(obj, indent=2, allow_nan=True))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise



def consolidate(path: str | Path) -> None:
    """Write consolidated metadata (done when a run finishes and after verify), so a plain
    ``xr.open_zarr(path)`` opens the store silently with one metadata read.

    The copy is built from each array's own ``zarr.json`` (as zarr's ``consolidate_metadata`` builds it, read as
    JSON: a damaged consolidated copy that zarr cannot parse is replaced, never read); the record group
    (:data:`ridgexr.store.record.RECORD`) is left out.  The root ``zarr.json`` is replaced atomically.
    """
    path = Path(path)
    root = json.loads((path / "zarr.json").read_bytes())
    metadata = {name: json.loads((path / name / "zarr.json").read_bytes()) for name in array_names(path)}
    root.pop("consolidated_metadata", None)
    root = {"attributes": root.get("attributes", {}), "zarr_format": 3,
            "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": metadata},
            "node_type": "group"}
    _write_json_atomic(path / "zarr.json", root)



def clear_completion(path: str | Path, cells: list[dict]) -> None:
    """Unset ``cell_complete`` for the cells labelled ``cells`` so that a rerun recomputes them."""
    ds = open_store(path, load_marks=False, check=False)
    cell_dims = cell_dims_of(ds)
    marks = open_arrays(path, ["cell_complete"])["cell_complete"]
    for labels in cells:
        marks[tuple(int(np.flatnonzero(ds[d].values == labels[d])[0]) for d in cell_dims)] = False



def set_root_attrs(path: str | Path, **attrs) -> None:
    """Update root attributes of a store (the caller holds its :class:`StoreLock`): its root ``zarr.json`` read and
    replaced atomically as JSON (its consolidated copy kept as it is, whatever it holds)."""
    path = Path(path)
    root = json.loads((path / "zarr.json").read_bytes())
    root.setdefault("attributes", {}).update(attrs)
    _write_json_atomic(path / "zarr.json", root)
