"""The store's integrity: cell digests, missing chunks, ``verify`` (every chunk of every complete cell) and the
schema check and repair against the template of the store's configuration, and :func:`verify_and_repair`, the
whole ``ridgexr verify [--repair]`` sequence."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import zarr

from ..catalog.folders import root_metadata
from .layout import (StoreWarning, array_meta, cell_dims_of, cell_label, chunk_keys, clear_completion, consolidate, group_cell_dims,
                     open_store, per_cell_arrays, set_root_attrs)
from .lifecycle import recover_store
from .lock import StoreLock
from .variables import FIRST_SCHEMA, SCHEMA_VERSION, SINCE, schema_older

__all__ = ["NOT_DIGESTED", "cell_digest", "missing_chunks", "Damage", "verify_store", "CONSOLIDATED", "SCHEMA_FIELDS",
           "DECODING_ATTRS", "check_schema", "repair_schema", "VerifyReport", "verify_and_repair"]

#: per-cell arrays that the digest does not cover: the mark and the digest themselves
NOT_DIGESTED = ("cell_complete", "cell_digest")

def cell_digest(path: str | Path, cell: tuple[int, ...], *, group: zarr.Group | None = None) -> int:
    """BLAKE2b-32 digest (a signed 32-bit integer) of one cell: for every per-cell array (except the mark and the digest), in name
    order, each chunk's key and its bytes as stored (after compression and checksum).

    A chunk copied from another cell or position, or a stale chunk of an earlier write, has the right
    checksum but another key or other bytes, so the digest changes.  A missing chunk enters as a marker.
    Reads the cell's chunk files (no decoding).
    """
    import hashlib

    path = Path(path)
    group = group if group is not None else zarr.open_group(str(path), mode="r", zarr_format=3)
    cell = tuple(int(i) for i in cell)
    h = hashlib.blake2b(digest_size=4)
    for name, arr in per_cell_arrays(group, group_cell_dims(group)).items():
        if name in NOT_DIGESTED:
            continue
        for _, key in chunk_keys(arr, cell):
            try:
                data = (path / name / key).read_bytes()
            except FileNotFoundError:
                data = None
            h.update(f"{name}/{key}\0".encode())
            h.update(b"\xff" if data is None else len(data).to_bytes(8, "little") + data)
    return int.from_bytes(h.digest(), "little", signed=True)


def missing_chunks(path: str | Path, cells: Iterable[tuple[int, ...]]) -> dict[tuple[int, ...], list[str]]:
    """{cell: [variables]} of the given cells that miss a chunk of some per-cell array.

    From a listing of the arrays' folders: no chunk is read.  Every chunk of a written region is
    stored (``write_empty_chunks``), so a complete cell with a missing chunk is damaged and would
    read fill values.
    """
    path = Path(path)
    cells = [tuple(int(i) for i in c) for c in cells]
    if not cells:
        return {}
    group = zarr.open_group(str(path), mode="r", zarr_format=3)
    missing: dict[tuple[int, ...], list[str]] = {}
    for name, arr in per_cell_arrays(group, group_cell_dims(group)).items():
        if name == "cell_complete":  # a complete cell's mark reads True: it is on disk
            continue
        base = path / name
        present = {str(Path(root, f).relative_to(base)) for root, _, files in os.walk(base) for f in files}
        for cell in cells:
            if any(key not in present for _, key in chunk_keys(arr, cell)):
                missing.setdefault(cell, []).append(name)
    return missing


@dataclass(frozen=True)
class Damage:
    """One damaged (variable, cell): ``cell`` maps cell dims to labels (empty for store-level arrays)."""

    variable: str
    cell: dict
    reason: str

    def __str__(self) -> str:
        where = " ".join(f"{k}={v}" for k, v in self.cell.items()) or "(whole store)"
        return f"{self.variable} {where}: {self.reason}"


def verify_store(path: str | Path) -> tuple[list[Damage], int]:
    """Read every chunk of every complete cell (and of the store-level arrays) and check it.

    A chunk is damaged when it is missing (every chunk of a written region is stored), does
    not decode, or fails its CRC32C checksum; a complete cell is damaged when its chunks do not
    match its ``cell_digest`` (schema 1.4 on: a chunk swapped with another cell's, moved, or
    stale).  Returns the damage found and the number of chunks read.
    """
    path = Path(path)
    ds = open_store(path, load_marks=False)
    cell_dims = cell_dims_of(ds)
    group = zarr.open_group(str(path), mode="r", zarr_format=3)
    per_cell = per_cell_arrays(group, cell_dims)
    damage: list[Damage] = []
    n_read = 0
    complete = []
    marks = group["cell_complete"]
    for coords, key in chunk_keys(marks):  # mark by mark: a damaged mark is one damaged cell
        try:
            if bool(np.asarray(marks.get_block_selection(coords)).all()) and (path / "cell_complete" / key).is_file():
                complete.append(coords)
        except Exception as exc:
            damage.append(Damage("cell_complete", cell_label(ds, cell_dims, coords),
                                 f"chunk {coords} does not decode ({path / 'cell_complete' / key}: "
                                 f"{type(exc).__name__}: {exc})"))
    n_read += len(complete)
    labels = {idx: cell_label(ds, cell_dims, idx) for idx in complete}
    for name in sorted(group.array_keys()):
        if name == "cell_complete":
            continue
        arr = group[name]
        targets = [(idx, labels[idx]) for idx in complete] if name in per_cell else [((), {})]
        for idx, where in targets:
            bad = None
            for coords, key in chunk_keys(arr, idx):
                chunk = path / name / key
                if not chunk.is_file():
                    bad = f"chunk {coords} is missing ({chunk})"
                    break
                try:
                    arr.get_block_selection(coords)
                    n_read += 1
                except Exception as exc:  # any decode or checksum failure marks the chunk damaged
                    bad = f"chunk {coords} does not decode ({chunk}: {type(exc).__name__}: {exc})"
                    break
            if bad is not None:
                damage.append(Damage(name, where, bad))
    if "cell_digest" in per_cell:
        digests = group["cell_digest"]
        damaged = {tuple(d.cell.items()) for d in damage}
        for idx in complete:
            if tuple(labels[idx].items()) in damaged:
                continue  # already reported (its digest too, when that chunk is damaged), repaired with the cell
            if cell_digest(path, idx, group=group) != int(np.asarray(digests.get_block_selection(idx)).ravel()[0]):
                damage.append(Damage("cell_digest", labels[idx], "the cell's chunks do not match its digest: a "
                                     "chunk was swapped with another position's, or is stale"))
    return damage, n_read


#: the variable named in a :class:`Damage` of the consolidated metadata (rebuilt by ``verify --repair``)
CONSOLIDATED = "consolidated metadata"

#: metadata fields that define an array (attributes are descriptive and may gain keys)
SCHEMA_FIELDS = ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "codecs", "fill_value", "dimension_names")

#: array attributes that change the values (or the variables) a reader decodes: CF packing and masking, the dtype
#: and encoding xarray records, and which variables are coordinates; ``units`` only when it names a time
#: reference ("days since ..."), which xarray decodes to dates.  The other attributes are descriptive.
DECODING_ATTRS = ("scale_factor", "add_offset", "_FillValue", "missing_value", "valid_min", "valid_max",
                  "valid_range", "dtype", "_Unsigned", "_Encoding", "calendar", "coordinates")


def _decoding_attrs(meta: dict) -> dict:
    """The attributes of array metadata ``meta`` that change decoded values (:data:`DECODING_ATTRS`)."""
    attrs = meta.get("attributes") if isinstance(meta.get("attributes"), dict) else {}
    out = {k: attrs[k] for k in DECODING_ATTRS if k in attrs}
    if "since" in str(attrs.get("units", "")).split():
        out["units"] = attrs["units"]
    return out


def _attr_diff(have: dict, want: dict) -> list[str]:
    """``key=value (schema: value)`` for each value-changing attribute of ``have`` that differs from ``want``."""
    a, b = _decoding_attrs(have), _decoding_attrs(want)
    return [f"{k}={a.get(k, '<absent>')!r} (schema: {b.get(k, '<absent>')!r})" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def check_schema(path: str | Path, reference: str | Path) -> list[Damage]:
    """Compare a store with ``reference``, the template its configuration defines (metadata and the small
    arrays written at creation; see :func:`ridgexr.run.schema_reference`).

    Damage, one per array: missing (folder or ``zarr.json``), metadata that does not parse, metadata that
    differs in any field but ``attributes`` (descriptive; their wording may change between versions) or in an
    attribute that changes decoded values (:data:`DECODING_ATTRS`: ``scale_factor``, ``_FillValue``, ...), in the
    array's ``zarr.json`` or in its consolidated copy, and, for the arrays written whole at creation
    (coordinates, ``train_data``, ``cell_applies``), chunk files that differ from the reference's.
    Arrays the reference does not have are not checked (stores of an older schema).
    """
    path, reference = Path(path), Path(reference)
    damage = []
    root = root_metadata(path)
    version = str(root.get("attributes", {}).get("schema_version", SCHEMA_VERSION))
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
    for folder in sorted(p for p in reference.iterdir() if (p / "zarr.json").is_file()):
        name = folder.name
        if schema_older(version, than=SINCE.get(name, FIRST_SCHEMA)):
            continue  # an array of a later schema than the store's
        want, _ = array_meta(folder)
        have, why = array_meta(path / name)
        if have is None:
            damage.append(Damage(name, {}, why if why != "missing" else f"metadata file "
                                 f"{str(path / name / 'zarr.json')!r} is missing"))
            continue
        # every field but the descriptive attributes (their wording may change between versions)
        if isinstance(consolidated, dict):  # what readers use: the copy in the root metadata
            copy = consolidated.get(name)
            if not isinstance(copy, dict) or _attr_diff(copy, want) or any(
                    copy.get(k) != want.get(k) for k in (set(copy) | set(want)) if k != "attributes"):
                damage.append(Damage(CONSOLIDATED, {}, f"the consolidated metadata of {name!r} in "
                                     f"{str(path / 'zarr.json')!r} differ from the schema of the configuration"))
        diff = [k for k in sorted((set(have) | set(want)) - {"attributes"}) if have.get(k) != want.get(k)]
        if diff:
            damage.append(Damage(name, {}, f"metadata differs from the schema of the configuration ({', '.join(diff)})"))
            continue
        attrs = _attr_diff(have, want)
        if attrs:  # readers would decode other values: scaled, masked, another dtype
            damage.append(Damage(name, {}, f"attributes that change the decoded values differ from the schema of "
                                 f"the configuration in {str(path / name / 'zarr.json')!r}: {', '.join(attrs)}"))
            continue
        written = sorted(q.relative_to(folder) for q in folder.rglob("*") if q.is_file() and q.name != "zarr.json")
        bad = [str(k) for k in written if not (path / name / k).is_file()
               or (path / name / k).read_bytes() != (folder / k).read_bytes()]
        if bad:
            damage.append(Damage(name, {}, f"chunk {bad[0]} differs from the configuration's "
                                 f"({str(path / name / bad[0])!r})"))
    return damage


def repair_schema(path: str | Path, reference: str | Path, damage: list[Damage]) -> list[str]:
    """Rewrite the arrays named in ``damage`` (from :func:`check_schema`) from ``reference``: their
    ``zarr.json``, and the chunks written at creation (coordinates, ``train_data``, ``cell_applies``).
    Per-cell arrays get no chunks: their cells then miss chunks (or read incomplete) and are recomputed.
    Returns the names rewritten (:data:`CONSOLIDATED` when the consolidated metadata are damaged: the
    caller rebuilds them with :func:`consolidate` once the arrays are whole).  Call with the store's :class:`StoreLock` held.
    """
    path, reference = Path(path), Path(reference)
    fixed = [CONSOLIDATED] if any(d.variable == CONSOLIDATED for d in damage) else []  # the caller consolidates
    for name in sorted({d.variable for d in damage}):
        src = reference / name
        if not (src / "zarr.json").is_file():
            continue
        dst = path / name
        have, _ = array_meta(dst)
        if have is not None and any(have.get(k) != json.loads((src / "zarr.json").read_bytes()).get(k)
                                    for k in SCHEMA_FIELDS):
            shutil.rmtree(dst)  # another shape or codec: the chunks cannot be kept
        dst.mkdir(exist_ok=True)
        for q in sorted(src.rglob("*")):
            if q.is_file() and q.name != "zarr.json":
                (dst / q.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(q, dst / q.relative_to(src))
        shutil.copyfile(src / "zarr.json", dst / "zarr.json.tmp")
        os.replace(dst / "zarr.json.tmp", dst / "zarr.json")
        fixed.append(name)
    return fixed



@dataclass
class VerifyReport:
    """What :func:`verify_and_repair` found and did.

    ``schema``: damage of the metadata against the configuration's schema (and of the other checks);
    ``damage``: damaged chunks and digests of complete cells and store-level arrays; ``n_read``: chunks read;
    ``rewritten``: arrays (or :data:`CONSOLIDATED`, ``config_hash``) rewritten from the configuration; ``cells``:
    labels of the damaged cells, marked incomplete with ``repair``; ``notes``: what the recovery of an interrupted
    ``--overwrite`` did (one line each, each also warned as a :class:`ridgexr.store.StoreWarning`)."""

    schema: list[Damage] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    n_read: int = 0
    rewritten: list[str] = field(default_factory=list)
    cells: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def whole(self) -> list[Damage]:
        """Damage of store-level arrays (no cell): a cell's rerun cannot recompute them."""
        return [d for d in self.damage if not d.cell]


#: a further check of :func:`verify_and_repair`: (the damage it finds in a store, the repair that rewrites it
#: and says whether it changed anything); e.g. the root attribute ``config_hash`` (:mod:`ridgexr.run`)
Check = tuple[Callable[[Path], list[Damage]], Callable[[Path], bool]]


def verify_and_repair(path: str | Path, reference: Callable[[Path, Path], Path], *, repair: bool = False,
                      checks: dict[str, Check] | None = None) -> VerifyReport:
    """``ridgexr verify [--repair]``: under the store's lock, finish an interrupted ``--overwrite``
    (:func:`ridgexr.store.recover_store`, keeping a resumable new store), compare the metadata with the schema
    of the store's configuration (:func:`check_schema`) and the further ``checks``, rewrite what differs when
    ``repair``, then read every chunk (:func:`verify_store`) -- only when the metadata match or were rewritten --
    and, with ``repair``, mark the damaged cells incomplete (``ridgexr run`` recomputes exactly them).  Records the
    result as the root attribute ``verified``; consolidates the metadata only when every array's match the schema.

    Parameters
    ----------
    path : path
        The store.
    reference : callable (store, folder) -> path
        Writes the template the store's configuration defines under ``folder`` and returns it
        (:func:`ridgexr.run.schema_reference`).
    repair : bool
        Rewrite damaged metadata and small arrays, and unmark damaged cells.
    checks : dict, optional
        name -> (check, repair) of further store-level checks; a damage whose ``variable`` is ``name`` is repaired
        by that repair (e.g. ``{"config_hash": (check_config_hash, repair_config_hash)}``).

    Returns
    -------
    VerifyReport

    Raises
    ------
    StoreLockedError
        When a writer holds the store.
    """
    import tempfile

    path = Path(path)
    checks = dict(checks or {})
    out = VerifyReport()
    with StoreLock(path):
        out.notes = recover_store(path, keep_staging=True)[0]
        for note in out.notes:  # said now: a failure below must not lose them
            warnings.warn(note, StoreWarning, stacklevel=2)
        with tempfile.TemporaryDirectory(prefix="ridgexr-schema-") as tmp:
            ref = reference(path, Path(tmp))
            out.schema = check_schema(path, ref) + [d for check, _ in checks.values() for d in check(path)]
            out.rewritten = repair_schema(path, ref, out.schema) if repair and out.schema else []
            for name, (_, fix) in checks.items():
                if repair and any(d.variable == name for d in out.schema) and fix(path):
                    out.rewritten.append(name)
        if out.rewritten:  # every array's metadata now match the schema: the consolidated copy can be rebuilt
            consolidate(path)
        out.damage, out.n_read = verify_store(path) if (not out.schema or out.rewritten) else ([], 0)
        out.cells = [dict(c) for c in {tuple(d.cell.items()) for d in out.damage if d.cell}]
        if repair and out.cells:
            clear_completion(path, out.cells)
        set_root_attrs(path, verified=json.dumps({
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "chunks_read": out.n_read,
            "damaged": [str(d) for d in out.schema + out.damage],
            "repaired": bool(repair and (out.cells or out.rewritten))}))
        if not out.schema or out.rewritten:  # never rebuild consolidated metadata from damaged array metadata
            consolidate(path)
    return out
