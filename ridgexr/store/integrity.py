"""The store's integrity: cell digests, missing chunks, ``verify`` (every chunk of every complete cell) and the
schema check and repair against the template of the store's configuration, and :func:`verify_and_repair`, the
whole ``ridgexr verify [--repair]`` sequence."""

from __future__ import annotations

import errno
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
from .layout import chunk_keys
from .opening import StoreWarning, array_meta, group_cell_dims, per_cell_arrays
from .update import clear_completion, consolidate, open_arrays, set_root_attrs
from .lifecycle import recover_store, remove_partial_files
from .lock import StoreLock
from .record import (DECODING_ATTRS, RECORD, SCHEMA_FIELDS, decoding_attrs, file_digest, read_record, record_files,
                     write_record_reference)
from ..schema import FIRST_SCHEMA, SCHEMA_VERSION, SINCE, schema_older

__all__ = ["NOT_DIGESTED", "cell_digest", "missing_chunks", "Damage", "DAMAGE_KINDS", "verify_store", "CONSOLIDATED",
           "SCHEMA_FIELDS", "DECODING_ATTRS", "check_schema", "repair_schema", "restore_marks", "VerifyReport",
           "verify_and_repair", "creation_array", "READ_ONLY_ERRNOS"]

#: per-cell arrays that the digest does not cover: the mark and the digest themselves
NOT_DIGESTED = ("cell_complete", "cell_digest")

def cell_digest(path: str | Path, cell: tuple[int, ...], *, group: zarr.Group | None = None,
                arrays: dict | None = None) -> int:
    """BLAKE2b-32 digest (a signed 32-bit integer) of one cell: for every per-cell array (except the mark and the digest), in name
    order, each chunk's key and its bytes as stored (after compression and checksum).

    A chunk copied from another cell or position, or a stale chunk of an earlier write, has the right
    checksum but another key or other bytes, so the digest changes.  A missing chunk enters as a marker.
    Reads the cell's chunk files (no decoding).  ``arrays`` (:func:`ridgexr.store.opening.per_cell_arrays` of the store's
    group) spares listing them again when many cells are digested.
    """
    import hashlib

    path = Path(path)
    if arrays is None:
        group = group if group is not None else zarr.open_group(str(path), mode="r", zarr_format=3,
                                                                use_consolidated=False)
        arrays = per_cell_arrays(group, group_cell_dims(group))
    cell = tuple(int(i) for i in cell)
    h = hashlib.blake2b(digest_size=4)
    for name, arr in arrays.items():
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
    group = zarr.open_group(str(path), mode="r", zarr_format=3, use_consolidated=False)
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


#: what a :class:`Damage` is of (:attr:`Damage.kind`)
DAMAGE_KINDS = ("chunk", "metadata", "file", "consolidated", "identity", "record")


@dataclass(frozen=True)
class Damage:
    """One damaged (variable, cell): ``cell`` maps cell dims to labels (empty for store-level arrays).

    ``kind`` (one of :data:`DAMAGE_KINDS`) says what is damaged: a chunk of a complete cell or of a store-level
    array, or its digest (``chunk``, from :func:`verify_store`); an array's metadata (``metadata``); a chunk file
    written at creation (``file``); the consolidated copy of the metadata (``consolidated``); the configuration
    against its hash and the record kept at creation (``identity``); the record itself (``record``).
    """

    variable: str
    cell: dict
    reason: str
    kind: str = "chunk"

    def __str__(self) -> str:
        where = " ".join(f"{k}={v}" for k, v in self.cell.items()) or "(whole store)"
        return f"{self.variable} {where}: {self.reason}"


def _labeller(group: zarr.Group, cell_dims: tuple[str, ...]) -> Callable:
    """``label(ds, dims, idx)`` -> {dim: label} of a cell at integer position ``idx``, from the cell dims'
    coordinates read once with zarr (a coordinate that does not read gives the positions: ``#i``)."""
    values = {}
    for d in cell_dims:
        try:
            values[d] = np.asarray(group[d][...])
        except Exception:  # damaged: the cell is named by its position
            values[d] = None

    def label(_ds, dims, idx):
        out = {}
        for d, i in zip(dims, idx):
            v = values.get(d)
            v = f"#{i}" if v is None or i >= len(v) else v[i]
            out[d] = v.item() if hasattr(v, "item") else v
        return out

    return label


def verify_store(path: str | Path) -> tuple[list[Damage], int]:
    """Read every chunk of every complete cell (and of the store-level arrays) and check it.

    A chunk is damaged when it is missing (every chunk of a written region is stored), does
    not decode, or fails its CRC32C checksum; a complete cell is damaged when its chunks do not
    match its ``cell_digest`` (schema 1.4 on: a chunk swapped with another cell's, moved, or
    stale).  Returns the damage found and the number of chunks read.
    """
    path = Path(path)
    # each array's own metadata (not the consolidated copy): verify reports the damage chunk by chunk
    group = zarr.open_group(str(path), mode="r", zarr_format=3, use_consolidated=False)
    cell_dims = group_cell_dims(group)
    cell_label = _labeller(group, cell_dims)
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
            damage.append(Damage("cell_complete", cell_label(None, cell_dims, coords),
                                 f"chunk {coords} does not decode ({path / 'cell_complete' / key}: "
                                 f"{type(exc).__name__}: {exc})"))
    n_read += len(complete)
    labels = {idx: cell_label(None, cell_dims, idx) for idx in complete}
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
            if cell_digest(path, idx, arrays=per_cell) != int(np.asarray(digests.get_block_selection(idx)).ravel()[0]):
                damage.append(Damage("cell_digest", labels[idx], "the cell's chunks do not match its digest: a "
                                     "chunk was swapped with another position's, or is stale"))
    return damage, n_read


#: the variable named in a :class:`Damage` of the consolidated metadata (rebuilt by ``verify --repair``)
CONSOLIDATED = "consolidated metadata"


def _attr_diff(have: dict, want: dict) -> list[str]:
    """``key=value (schema: value)`` for each value-changing attribute of ``have`` that differs from ``want``."""
    a, b = decoding_attrs(have), decoding_attrs(want)
    return [f"{k}={a.get(k, '<absent>')!r} (schema: {b.get(k, '<absent>')!r})" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def _reference_files(reference: Path) -> dict[str, str]:
    """{chunk file below the store: SHA-256} of the chunk files in ``reference`` (the arrays written at creation)."""
    out = {}
    for folder in sorted(p for p in reference.iterdir() if (p / "zarr.json").is_file()):
        for q in sorted(folder.rglob("*")):
            if q.is_file() and q.name != "zarr.json":
                out[q.relative_to(reference).as_posix()] = file_digest(q)
    return out


def _metadata_damage(path: Path, name: str, want: dict, consolidated) -> list[Damage]:
    out = []
    have, why = array_meta(path / name)
    if isinstance(consolidated, dict):  # what readers use: the copy in the root metadata
        copy = consolidated.get(name)
        if not isinstance(copy, dict) or _attr_diff(copy, want) or any(
                copy.get(k) != want.get(k) for k in (set(copy) | set(want)) if k != "attributes"):
            out.append(Damage(CONSOLIDATED, {}, f"the consolidated metadata of {name!r} in "
                              f"{str(path / 'zarr.json')!r} differ from the store's schema", "consolidated"))
    if have is None:
        out.append(Damage(name, {}, why if why != "missing" else f"metadata file "
                          f"{str(path / name / 'zarr.json')!r} is missing", "metadata"))
        return out
    # every field but the descriptive attributes (their wording may change between versions)
    diff = [k for k in sorted((set(have) | set(want)) - {"attributes"}) if have.get(k) != want.get(k)]
    if diff:
        out.append(Damage(name, {}, f"metadata differs from the store's schema ({', '.join(diff)})", "metadata"))
        return out
    attrs = _attr_diff(have, want)
    if attrs:  # readers would decode other values: scaled, masked, another dtype
        out.append(Damage(name, {}, f"attributes that change the decoded values differ from the store's schema in "
                          f"{str(path / name / 'zarr.json')!r}: {', '.join(attrs)}", "metadata"))
    return out


def check_schema(path: str | Path, reference: str | Path, *, expected: dict[str, str] | None = None) -> list[Damage]:
    """Compare a store with ``reference``, the schema it must have: the record kept at its creation
    (:func:`ridgexr.store.record.write_record_reference`), or the template its configuration defines (metadata
    and the small arrays written at creation; see :func:`ridgexr.run.verification.schema_reference`).

    Damage: per array, metadata missing (folder or ``zarr.json``), that does not parse, or that differs in any
    field but ``attributes`` (descriptive; their wording may change between versions) or in an attribute that
    changes decoded values (:data:`DECODING_ATTRS`: ``scale_factor``, ``_FillValue``, ...) (kind ``metadata``), or
    whose consolidated copy differs (kind ``consolidated``); per array written whole at creation (coordinates,
    ``train_data``, ``cell_applies``, the dataset's extras), a chunk file that is missing or whose SHA-256 differs
    from ``expected`` (kind ``file``; default: the SHA-256 of the reference's chunk files).  Arrays the reference
    does not have are not checked, nor arrays of a later schema than the store's.

    Parameters
    ----------
    path, reference : path
        The store and its schema.
    expected : dict, optional
        {chunk file below the store: SHA-256} of the chunk files written at creation (the record's).
    """
    path, reference = Path(path), Path(reference)
    damage = []
    root = root_metadata(path)
    version = str(root.get("attributes", {}).get("schema_version", SCHEMA_VERSION))
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")

    def later(name):  # an array of a later schema than the store's
        return schema_older(version, than=SINCE.get(name, FIRST_SCHEMA))

    for folder in sorted(p for p in reference.iterdir() if (p / "zarr.json").is_file() and p.name != RECORD):
        if not later(folder.name):
            damage += _metadata_damage(path, folder.name, array_meta(folder)[0], consolidated)
    files = _reference_files(reference) if expected is None else expected
    bad: dict[str, list[str]] = {}
    for rel, digest in sorted(files.items()):
        name = rel.split("/", 1)[0]
        if later(name):
            continue
        have = file_digest(path / rel)
        if have is None:
            bad.setdefault(name, []).append(f"chunk file {str(path / rel)!r}, written at creation, is missing")
        elif have != digest:
            bad.setdefault(name, []).append(f"chunk file {str(path / rel)!r} differs from the one written at "
                                            "creation (SHA-256)")
    for name, what in bad.items():
        damage.append(Damage(name, {}, what[0] + (f" (and {len(what) - 1} more)" if len(what) > 1 else ""), "file"))
    seen, out = set(), []
    for d in damage:  # one consolidated-metadata line per array is enough: one per store
        key = (d.variable, d.reason) if d.kind != "consolidated" else CONSOLIDATED
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def creation_array(path: str | Path, name: str) -> np.ndarray | None:
    """The values of ``name``, an array written whole when the store was created (``train_data``, a coordinate, a
    dataset extra), read from what can be trusted: the record's copy when its chunk files match the record's
    SHA-256 (else the store's own files when they do); for a store without a record, the store's own array when
    every chunk file is there and decodes (its CRC32C checksum).  None when none can be read: never fill values."""
    path = Path(path)
    manifest, _ = read_record(path)
    if manifest is not None:
        files = record_files(manifest, name)
        for base in (path / RECORD, path):
            if files and all(file_digest(base / rel) == digest for rel, digest in files.items()):
                try:
                    return np.asarray(zarr.open_array(str(base / name), mode="r", zarr_format=3)[...])
                except Exception:
                    continue
        return None
    try:
        arr = zarr.open_array(str(path / name), mode="r", zarr_format=3)
        if any(not (path / name / key).is_file() for _, key in chunk_keys(arr)):
            return None
        return np.asarray(arr[...])
    except Exception:  # missing, metadata damaged, a chunk that does not decode
        return None


def _mend_record(path: Path, manifest: dict, lost: list[str]) -> list[str]:
    """Copy back into the record the chunk files of ``lost`` (below the store) whose file in the store still has the
    SHA-256 the record holds, with their array's ``zarr.json``; returns those restored."""
    mended = []
    for rel in lost:
        if file_digest(path / rel) != record_files(manifest).get(rel):
            continue
        copy = path / RECORD / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path / rel, copy)
        meta = path / RECORD / rel.split("/", 1)[0] / "zarr.json"
        meta.write_text(json.dumps(manifest["arrays"][rel.split("/", 1)[0]], indent=2, allow_nan=True))
        mended.append(rel)
    return mended


def _write_atomic(src: Path, dst: Path) -> None:
    tmp = dst.with_suffix(f".{os.urandom(16).hex()}.partial")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def repair_schema(path: str | Path, reference: str | Path, damage: list[Damage], *,
                  expected: dict[str, str] | None = None) -> list[str]:
    """Repair what :func:`check_schema` found, from ``reference``, never making the store worse: the ``zarr.json``
    of each array whose metadata are damaged is rewritten from the reference and its chunk files are kept (a
    chunk that no longer decodes, or a cell whose digest no longer verifies, is found by :func:`verify_store` and
    recomputed alone); a chunk file written at creation is restored only from a reference file whose SHA-256 is
    the expected one (``expected``, the record's; default: the reference's own), else left as it is (the caller
    reports it: such inputs are never rebuilt from fill values).  Returns the names rewritten
    (:data:`CONSOLIDATED` when the consolidated metadata are damaged: the caller rebuilds them with
    :func:`consolidate` once the arrays are whole).  Call with the store's :class:`StoreLock` held.
    """
    path, reference = Path(path), Path(reference)
    fixed = [CONSOLIDATED] if any(d.variable == CONSOLIDATED for d in damage) else []  # the caller consolidates
    files = _reference_files(reference) if expected is None else expected
    for name in sorted({d.variable for d in damage if d.kind in ("metadata", "file", "chunk")}):
        src = reference / name
        if not (src / "zarr.json").is_file():
            continue
        changed = False
        have, _ = array_meta(path / name)
        if have != json.loads((src / "zarr.json").read_bytes()):
            (path / name).mkdir(exist_ok=True)
            _write_atomic(src / "zarr.json", path / name / "zarr.json")
            changed = True
        for rel, digest in sorted(files.items()):
            if rel.split("/", 1)[0] != name or file_digest(path / rel) == digest:
                continue
            if file_digest(reference / rel) != digest:  # no intact source: left for the caller to report
                continue
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(reference / rel, path / rel)
            changed = True
        if changed:
            fixed.append(name)
    return fixed


def restore_marks(path: str | Path) -> list[dict]:
    """Set ``cell_complete`` again for the cells whose mark is missing or does not decode but whose
    ``cell_digest`` is on disk and matches the digest of the cell's chunks (:func:`cell_digest`): the digest is
    written after every other variable of the cell, so such a cell is complete and its chunks are those it
    certified.  Returns their labels.  Call with the store's :class:`StoreLock` held, once the metadata are whole.
    """
    path = Path(path)
    group = zarr.open_group(str(path), mode="r", zarr_format=3, use_consolidated=False)
    if "cell_digest" not in group or "cell_complete" not in group:
        return []
    marks, digests = group["cell_complete"], group["cell_digest"]
    arrays = per_cell_arrays(group, group_cell_dims(group))
    restore = []
    for coords, key in chunk_keys(marks):
        if (path / "cell_complete" / key).is_file():
            try:
                marks.get_block_selection(coords)
                continue  # an intact mark, set or not: verify_store reads a set one, a cleared one stays cleared
            except Exception:  # the mark does not decode: its digest decides
                pass
        if not (path / "cell_digest" / key).is_file():
            continue
        try:
            digest = int(np.asarray(digests.get_block_selection(coords)).ravel()[0])
        except Exception:
            continue
        if digest == cell_digest(path, coords, arrays=arrays):
            restore.append(coords)
    if not restore:
        return []
    arr = open_arrays(path, ["cell_complete"])["cell_complete"]
    for coords in restore:
        arr[coords] = True
    dims = group_cell_dims(group)
    label = _labeller(group, dims)
    return [label(None, dims, coords) for coords in restore]


@dataclass
class VerifyReport:
    """What :func:`verify_and_repair` found and did.

    ``schema``: damage of the configuration (against its hash and the record kept at creation), of the record,
    of the metadata and of the chunk files written at creation; ``damage``: damaged chunks and digests of
    complete cells and store-level arrays; ``n_read``: chunks read; ``rewritten``: arrays (or
    :data:`CONSOLIDATED`) rewritten from the store's schema; ``refused``: damage the repair could not undo without
    making the store worse (an input with no intact copy, a configuration that disagrees with its hash); ``cells``:
    labels of the damaged cells, marked incomplete with ``repair``; ``restored``: labels of the cells whose
    completion mark was lost and is set again because their digest verifies; ``notes``: what the recovery of an
    interrupted ``--overwrite`` did and the unfinished writes removed (one line each, each also warned as a
    :class:`ridgexr.store.StoreWarning`); ``resolved``: what the user's resolution of the configuration changed;
    ``read_only``: the store could not be written (nothing was recorded in it); ``record``: whether the store has
    an intact record of its creation; ``mended``: the chunk files whose copy in the record was rewritten from the
    store's own (their SHA-256 the record's)."""

    schema: list[Damage] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    n_read: int = 0
    rewritten: list[str] = field(default_factory=list)
    cells: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refused: list[Damage] = field(default_factory=list)
    restored: list[dict] = field(default_factory=list)
    read_only: bool = False
    record: bool = False
    resolved: list[str] = field(default_factory=list)
    mended: list[str] = field(default_factory=list)

    @property
    def whole(self) -> list[Damage]:
        """Damage of store-level arrays (no cell): a cell's rerun cannot recompute them."""
        return [d for d in self.damage if not d.cell]

    @property
    def identity(self) -> list[Damage]:
        """Damage of the configuration: it disagrees with its hash or with the record kept at creation."""
        return [d for d in self.schema if d.kind == "identity"]


#: a further check of :func:`verify_and_repair`: (the damage it finds in a store, the repair that rewrites it
#: and says whether it changed anything)
Check = tuple[Callable[[Path], list[Damage]], Callable[[Path], bool]]

#: ``errno`` values of a store that cannot be written (a read-only file system, no permission): ``verify`` then
#: reads without its lock and records nothing
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


def verify_and_repair(path: str | Path, reference: Callable[[Path, Path], Path], *, repair: bool = False,
                      checks: dict[str, Check] | None = None, identity: Callable[[Path], list[Damage]] | None = None,
                      resolve: Callable[[Path], list[str]] | None = None) -> VerifyReport:
    """``ridgexr verify [--repair]``: check a store against the record of its creation (or, for a store without
    one, the schema of its configuration), read every chunk, and repair only what can be repaired without making
    it worse.

    Under the store's lock: finish an interrupted ``--overwrite`` (:func:`ridgexr.store.lifecycle.recover_store`,
    keeping a resumable new store) and remove the unfinished chunk writes a killed command left
    (:func:`ridgexr.store.lifecycle.remove_partial_files`); apply ``resolve`` (a user's explicit choice between a
    configuration and its hash); check the configuration (``identity``: against its hash and the record), then
    the metadata and the chunk files written at creation (:func:`check_schema`) against the record -- or, without
    one, the template ``reference`` derives from the configuration, only when the configuration matches its hash
    -- and the further ``checks``; with ``repair``, and only when the configuration is not in doubt, rewrite
    damaged metadata keeping the chunks, restore inputs from intact copies (:func:`repair_schema`) and set the
    marks of cells whose digest verifies (:func:`restore_marks`); then read every chunk (:func:`verify_store`) --
    when the metadata match -- and, with ``repair``, mark the damaged cells incomplete (``ridgexr run`` recomputes
    exactly them).  Records the result as the root attribute ``verified``; consolidates the metadata only when
    every array's match the schema.

    A store that cannot be written (a read-only file system: the lock file cannot be created) is verified without
    the lock and nothing is recorded in it (``read_only``); ``repair`` and ``resolve`` need to write and raise.

    Parameters
    ----------
    path : path
        The store.
    reference : callable (store, folder) -> path
        Writes the template the store's configuration defines under ``folder`` and returns it
        (:func:`ridgexr.run.verification.schema_reference`): the schema of a store without a record of its creation.
    repair : bool
        Rewrite damaged metadata, restore what was written at creation from intact copies, and unmark damaged
        cells.
    checks : dict, optional
        name -> (check, repair) of further store-level checks; a damage whose ``variable`` is ``name`` is repaired
        by that repair.
    identity : callable (store) -> list of Damage, optional
        The check of the configuration against its hash and the record (:func:`ridgexr.run.verification.check_identity`);
        while it finds damage nothing is rewritten.
    resolve : callable (store) -> list of str, optional
        A user's explicit resolution of a disagreement between the configuration and its hash
        (:func:`ridgexr.run.verification.resolve_config`), applied first; returns its notes.

    Returns
    -------
    VerifyReport

    Raises
    ------
    StoreLockedError
        When a writer holds the store.
    OSError
        When ``repair`` or ``resolve`` is asked of a store that cannot be written (naming the store when the
        error names no file).
    """
    path = Path(path)
    try:
        return _verify_and_repair(path, reference, repair, dict(checks or {}), identity, resolve)
    except OSError as exc:  # a write that names no file (a full or read-only disk): the store
        if exc.filename is None:
            exc.filename = str(path)
        raise


def _verify_and_repair(path: Path, reference, repair: bool, checks: dict, identity, resolve) -> VerifyReport:
    import tempfile

    out = VerifyReport()
    lock = StoreLock(path)
    try:
        lock.acquire()
    except OSError as exc:
        if repair or resolve is not None or exc.errno not in READ_ONLY_ERRNOS:
            raise
        lock, out.read_only = None, True
    try:
        if lock is not None:
            out.notes = recover_store(path, keep_staging=True)[0]
            for note in out.notes:  # said now: a failure below must not lose them
                warnings.warn(note, StoreWarning, stacklevel=2)
            partial = remove_partial_files(path)
            if partial:
                out.notes.append(f"removed {len(partial)} unfinished chunk write(s) (*.partial) that a killed command "
                                 f"left in {str(path)!r}")
                warnings.warn(out.notes[-1], StoreWarning, stacklevel=2)
            if resolve is not None:
                out.resolved = resolve(path)
        manifest, record_problem = read_record(path)
        out.record = manifest is not None
        found = [Damage(RECORD, {}, record_problem, "record")] if record_problem else []
        found += identity(path) if identity is not None else []
        doubt = any(d.kind == "identity" for d in found)
        with tempfile.TemporaryDirectory(prefix="ridgexr-schema-") as tmp:
            if manifest is not None:
                ref, lost = write_record_reference(path, manifest, tmp)
                expected = record_files(manifest)
                if lost:  # the record's own copies: restored from the store's files that match the record
                    found.append(Damage(RECORD, {}, f"the record's copy of {lost[0]} (in {str(path / RECORD)!r}) is "
                                        "missing or damaged" + (f" (and {len(lost) - 1} more)" if len(lost) > 1
                                                                else ""), "record"))
                    if repair and lock is not None and not doubt:
                        out.mended = _mend_record(path, manifest, lost)
                        if len(out.mended) < len(lost):
                            out.refused.append(found[-1])
            elif not doubt:  # the configuration matches its hash (or cannot be checked): its template
                ref, expected = reference(path, Path(tmp)), None
            else:  # no schema can be trusted: the configuration that would define it is in doubt
                ref, expected = None, None
            schema = check_schema(path, ref, expected=expected) if ref is not None else []
            extra = [d for check, _ in checks.values() for d in check(path)]
            out.schema = found + schema + extra
            can_repair = repair and lock is not None and not doubt
            if can_repair and schema:
                out.rewritten += repair_schema(path, ref, schema, expected=expected)
            for name, (_, fix) in checks.items():
                if can_repair and any(d.variable == name for d in extra) and fix(path):
                    out.rewritten.append(name)
            left = check_schema(path, ref, expected=expected) if ref is not None and out.rewritten else schema
            if can_repair:
                out.refused += [d for d in left if d.kind != "consolidated"]
            elif repair and doubt:
                out.refused += [d for d in out.schema if d.kind == "identity"]
        metadata_ok = ref is not None and not any(d.kind == "metadata" for d in left)
        if ref is None or metadata_ok:
            out.damage, out.n_read = verify_store(path)
        bad = {tuple(d.cell.items()) for d in out.damage if d.cell}
        if can_repair and metadata_ok:  # lost marks of cells whose digest verifies: complete again, then read
            out.restored = restore_marks(path)
            if out.restored:
                again, n_read = verify_store(path)
                out.n_read += n_read
                out.damage += [d for d in again if d not in out.damage]
                bad = {tuple(d.cell.items()) for d in again if d.cell}
        out.cells = [dict(c) for c in bad]
        if can_repair and out.cells:
            clear_completion(path, out.cells)
        if lock is not None:
            set_root_attrs(path, verified=json.dumps({
                "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "chunks_read": out.n_read,
                "damaged": [str(d) for d in out.schema + out.damage],
                "repaired": bool(can_repair and (out.cells or out.rewritten or out.restored or out.mended))}))
            if metadata_ok and (not out.schema or out.rewritten or out.mended):  # never from damaged metadata
                consolidate(path)
    finally:
        if lock is not None:
            lock.release()
    return out
