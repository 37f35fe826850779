"""The record a store keeps of its creation: what cannot be recomputed from its configuration alone, and what its
metadata and configuration were, checksummed.

When a store is created (:func:`ridgexr.store.lifecycle.create_store`,
:func:`ridgexr.store.lifecycle.create_staging`), before it is renamed into place, :func:`write_record` adds the hidden zarr group ``.creation`` to it:

- a copy of every array written at creation (``train_data`` -- the training set, possibly a user's file --, the
  dataset's extras, the coordinates, ``cell_applies``), chunk files byte for byte, each a readable zarr array;
- in the group's attributes (``ridgexr_record``), the *manifest*: the SHA-256 of every chunk file written at
  creation, the metadata (``zarr.json``) of every array, the root attributes at creation (the configuration, its
  hash, the seeds), the store's ``generation`` (a random id, also a root attribute) and the SHA-256 of all of it.

The record is written once and never changed, except by an explicit ``ridgexr verify --repair --resolve-config
current`` (the user declares the current configuration right).  A reader checks the metadata it applies against
it (:func:`metadata_problems`), ``verify`` checks the configuration, the metadata and the chunks written at
creation against it, and ``verify --repair`` restores from it: nothing is ever rebuilt from fill values.

This module reads and writes JSON and chunk files only: no zarr, xarray or dask.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

__all__ = ["RECORD", "RECORD_KEY", "RECORD_FORMAT", "IDENTITY_ATTRS", "SCHEMA_FIELDS", "DECODING_ATTRS",
           "new_generation", "write_record", "read_record", "record_files", "file_digest", "decoding_attrs",
           "metadata_signature", "metadata_problems", "write_record_reference", "array_names", "rewrite_record"]

#: the hidden zarr group that holds the record (a group: zarr and xarray list it as one and ignore it)
RECORD = ".creation"
#: the attribute of that group that holds the manifest
RECORD_KEY = "ridgexr_record"
#: the manifest's format (readers refuse a record of a later format as unreadable, never guess)
RECORD_FORMAT = 1

#: root attributes that identify what the store holds: the configuration (compared on the fields that enter its
#: hash), its hash, and the values derived from it that code reads (seeds, d*)
IDENTITY_ATTRS = ("config", "config_hash", "seeds", "d_star", "d_star_info")

#: metadata fields that define an array (attributes are descriptive and may gain keys)
SCHEMA_FIELDS = ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "codecs", "fill_value", "dimension_names")

#: array attributes that change the values (or the variables) a reader decodes: CF packing and masking, the dtype
#: and encoding xarray records, and which variables are coordinates; ``units`` only when it names a time
#: reference ("days since ..."), which xarray decodes to dates.  The other attributes are descriptive.
DECODING_ATTRS = ("scale_factor", "add_offset", "_FillValue", "missing_value", "valid_min", "valid_max",
                  "valid_range", "dtype", "_Unsigned", "_Encoding", "calendar", "coordinates")


def new_generation() -> str:
    """A fresh store generation id (128 random bits, hex): a new store, or the new store of an ``--overwrite``."""
    import uuid

    return uuid.uuid4().hex


def file_digest(path: str | Path) -> str | None:
    """SHA-256 (hex) of a file's bytes; None when it does not exist or cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def decoding_attrs(meta: dict) -> dict:
    """The attributes of array metadata ``meta`` that change decoded values (:data:`DECODING_ATTRS`, and ``units``
    when it names a time reference)."""
    attrs = meta.get("attributes") if isinstance(meta.get("attributes"), dict) else {}
    out = {k: attrs[k] for k in DECODING_ATTRS if k in attrs}
    if "since" in str(attrs.get("units", "")).split():
        out["units"] = attrs["units"]
    return out


def metadata_signature(meta: dict) -> dict:
    """What of an array's metadata changes the values read: :data:`SCHEMA_FIELDS`, the node type and the
    value-changing attributes (:func:`decoding_attrs`)."""
    return {"node_type": meta.get("node_type"), **{k: meta.get(k) for k in SCHEMA_FIELDS},
            "attributes": decoding_attrs(meta)}


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def _digest(manifest: dict) -> str:
    return hashlib.sha256(_canonical({k: v for k, v in manifest.items() if k != "digest"})).hexdigest()


def array_names(folder: Path) -> list[str]:
    """Names of the arrays directly under ``folder`` (a subfolder whose ``zarr.json`` says ``node_type`` array)."""
    out = []
    for p in sorted(folder.iterdir()):
        try:
            meta = json.loads((p / "zarr.json").read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("node_type") == "array":
            out.append(p.name)
    return out


def write_record(target: str | Path, generation: str, *, source: str | Path | None = None) -> None:
    """Write the record of the store just created at ``target`` (a folder that is not yet in place): copy every
    array that has chunk files, and write the manifest (see the module's docstring).

    Parameters
    ----------
    target : path
        The new store's folder (its template written: every array's metadata, the arrays known at creation).
    generation : str
        The store's generation id (its root attribute ``generation``).
    source : path, optional
        Where the metadata and arrays are read (default ``target``): a template of the store's configuration,
        when the user rewrites the record (``--resolve-config current``).
    """
    target = Path(target)
    source = target if source is None else Path(source)
    root = json.loads((source / "zarr.json").read_bytes())
    arrays, files = {}, {}
    for name in array_names(source):
        if name == RECORD:
            continue
        meta = json.loads((source / name / "zarr.json").read_bytes())
        arrays[name] = meta
        chunks = sorted(q for q in (source / name).rglob("*") if q.is_file() and q.name != "zarr.json")
        for q in chunks:
            rel = q.relative_to(source).as_posix()
            data = q.read_bytes()
            files[rel] = hashlib.sha256(data).hexdigest()
            copy = target / RECORD / rel
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(data)
        if chunks:  # the copy is a readable zarr array
            shutil.copyfile(source / name / "zarr.json", target / RECORD / name / "zarr.json")
    manifest = {"format": RECORD_FORMAT, "generation": generation, "root": root.get("attributes", {}),
                "arrays": arrays, "files": files}
    _write_manifest(target, manifest)


def _write_manifest(store: Path, manifest: dict) -> None:
    """Write the record group's ``zarr.json`` holding ``manifest`` (its digest added), atomically."""
    manifest = dict(manifest)
    manifest["digest"] = _digest(manifest)
    folder = store / RECORD
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"zarr.{os.urandom(16).hex()}.partial"  # the name of zarr's own unfinished writes
    tmp.write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {RECORD_KEY: manifest}},
                              allow_nan=True))
    os.replace(tmp, folder / "zarr.json")


def read_record(path: str | Path) -> tuple[dict | None, str | None]:
    """(manifest, None) of the store at ``path``; (None, None) when it has no record (a store written before
    records were kept); (None, why) when the record is damaged (unreadable, of an unknown format, or its digest
    does not match its content)."""
    meta = Path(path) / RECORD / "zarr.json"
    try:
        text = meta.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"the record kept at creation ({str(meta)!r}) cannot be read ({exc})"
    try:
        manifest = json.loads(text)["attributes"][RECORD_KEY]
        if not isinstance(manifest, dict):
            raise TypeError("not a JSON object")
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"the record kept at creation ({str(meta)!r}) is damaged ({type(exc).__name__}: {exc})"
    if manifest.get("format") != RECORD_FORMAT:
        return None, (f"the record kept at creation ({str(meta)!r}) has format {manifest.get('format')!r}; this "
                      f"ridgexr reads format {RECORD_FORMAT}")
    if manifest.get("digest") != _digest(manifest):
        return None, f"the record kept at creation ({str(meta)!r}) is damaged: its digest does not match its content"
    return manifest, None


def rewrite_record(path: str | Path, manifest: dict) -> None:
    """Write ``manifest`` as the record of the store at ``path`` (its digest recomputed): only for an explicit
    choice of the user (``--resolve-config current``).  Call with the store's lock held."""
    _write_manifest(Path(path), {k: v for k, v in manifest.items() if k != "digest"})


def record_files(manifest: dict, array: str | None = None) -> dict[str, str]:
    """{chunk file below the store: SHA-256} written at creation (of ``array`` only, when given)."""
    files = manifest.get("files", {})
    if array is None:
        return dict(files)
    return {rel: digest for rel, digest in files.items() if rel.split("/", 1)[0] == array}


def metadata_problems(manifest: dict | None, metadata: dict[str, dict], *, where: str) -> list[tuple[str, str]]:
    """[(array, what differs)] of the array metadata a reader would apply (``metadata``: name -> ``zarr.json``
    dict, e.g. the consolidated copy) against the record (``manifest``): an array the record has that is missing,
    and for each array its :func:`metadata_signature` (data type, fill value, shape, chunks, codecs, dimension
    names, value-changing attributes).  ``where`` names the metadata in the messages.  [] when they match."""
    if manifest is None:
        return []
    out = []
    recorded = manifest.get("arrays", {})
    for name in sorted(recorded):
        have = metadata.get(name)
        if not isinstance(have, dict):
            out.append((name, f"{where} has no metadata of array {name!r}"))
            continue
        a, b = metadata_signature(have), metadata_signature(recorded[name])
        diff = [f"{k}={a[k]!r} (at creation: {b[k]!r})" for k in a if k != "attributes" and a[k] != b[k]]
        was = {**{k: v for k, v in (recorded[name].get("attributes") or {}).items() if k == "units"}, **b["attributes"]}
        diff += [f"attribute {k}={a['attributes'].get(k, '<absent>')!r} (at creation: {was.get(k, '<absent>')!r})"
                 for k in sorted(set(a["attributes"]) | set(b["attributes"]))
                 if a["attributes"].get(k) != b["attributes"].get(k)]
        if diff:
            out.append((name, f"{where}: {'; '.join(diff)}"))
    return out


def write_record_reference(path: str | Path, manifest: dict, folder: str | Path) -> tuple[Path, list[str]]:
    """Write, under ``folder``, the reference that the record of the store at ``path`` defines: every array's
    ``zarr.json`` as at creation and the chunk files written at creation, taken from the record's copies where
    their SHA-256 matches the manifest.  Returns its path and the chunk files (below the store) whose copy is
    missing or damaged (these cannot be restored from the record)."""
    path, ref = Path(path), Path(folder) / "record.zarr"
    ref.mkdir(parents=True)
    (ref / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group",
                                               "attributes": manifest.get("root", {})}, allow_nan=True))
    for name, meta in manifest.get("arrays", {}).items():
        (ref / name).mkdir()
        (ref / name / "zarr.json").write_text(json.dumps(meta, indent=2, allow_nan=True))  # as zarr writes it
    lost = []
    for rel, digest in record_files(manifest).items():
        src = path / RECORD / rel
        try:
            data = src.read_bytes()
        except OSError:
            lost.append(rel)
            continue
        if hashlib.sha256(data).hexdigest() != digest:
            lost.append(rel)
            continue
        (ref / rel).parent.mkdir(parents=True, exist_ok=True)
        (ref / rel).write_bytes(data)
    return ref, lost
