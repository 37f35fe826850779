"""The store's layout: its shape and chunking (:class:`StoreLayout`), the template every store is created from,
and how a store is opened and read (cells, marks, attributes, chunk keys).

Layout (see ``docs/schema.md`` for every variable, :mod:`ridgexr.schema` for the table):

- cell dims ``schedule`` (str) and ``width`` (int), plus ``tau`` for a training-time sweep (:data:`CELL_DIMS`);
- per-step variables over (cell dims..., ``sample``, ``step`` [, ``dim``]);
- coordinates ``t(step)``, ``alpha(step)``, ``h(step)``, ``sampler_step(step)``;
- ``train_data(train, dim)``; per-cell training diagnostics; ``cell_complete`` (cell dims).

Every chunk carries a CRC32C checksum after its zstd compression (:data:`CODECS`), and every chunk of a written
region is stored (``write_empty_chunks``), so :func:`ridgexr.store.verify_store` can tell a damaged or missing
chunk from an unwritten one.  Chunks are 1 along every cell dim, ``sample_chunk`` along ``sample`` and
``block_steps`` along ``step``, so concurrent writers never touch the same chunk.  Unwritten float chunks read
as NaN.
"""

from __future__ import annotations

import json
import os
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import dask.array as da
import dask.threaded
import google_crc32c
import numpy as np
import xarray as xr
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.storage import LocalStore

from ..catalog.folders import root_metadata
from ..process import OU
from .record import array_names, decoding_attrs, metadata_problems, read_record, record_files
from ..schema import CELL_DIMS, CF_ATTRS, DIMS, SCHEMA_VERSION, attributes, layout_variables


class StoreDamagedError(ValueError):
    """A store's metadata, or a small array read when it is opened, is damaged; the message names the file."""

__all__ = ["IN_PROCESS", "CODECS", "ROOT_ATTRS", "StoreLayout", "is_exact_cell", "cell_label", "template",
           "write_template", "open_arrays", "EAGER_COORDS", "is_consolidated", "consolidate", "open_store",
           "StoreDamagedError", "StoreWarning", "json_attr", "cells", "complete_cells", "per_cell_arrays",
           "chunk_keys", "group_cell_dims", "cell_dims_of", "array_meta", "clear_completion", "set_root_attrs",
           "PinnedStore", "StoreReplacedError", "OPEN_ATTEMPTS"]

#: dask scheduler of the small reads ridgexr does for itself (the eager step coordinates, the run
#: summary): dask's threaded scheduler, in this process whatever client is active.  Passed as a
#: callable so that dask does not import dask.distributed to look for a client (~0.8 s of start-up).
IN_PROCESS = dask.threaded.get

#: compression then checksum, for every array of a store
CODECS = (ZstdCodec(), Crc32cCodec())

ROOT_ATTRS = {
    "Conventions": "CF-1.10",
    "references": "He, Qiu & Tao (2026), the ridge-manifold account of diffusion generalization",
}

def is_exact_cell(labels: dict) -> bool:
    """Whether a cell (its labels: dim -> value) is the exact denoiser's: the ``model`` label "exact" of a
    multi-model store, or the ``schedule`` label "exact" that a one-model store's ``include_exact`` adds."""
    return "exact" in (labels.get("model"), labels.get("schedule"))

@dataclass(frozen=True)
class StoreLayout:
    """Shape and chunking of a store.

    ``coords`` lists the cell dimensions and their labels in :data:`CELL_DIMS` order;
    ``applies`` lists the cells that are run (a model block is stored once, at the first label
    of each dimension that does not apply to it; the other cells are masked: ``cell_applies``
    false, never run, NaN).  ``None`` means every cell.
    """

    coords: tuple[tuple[str, tuple], ...]
    n_samples: int
    t: np.ndarray  # recorded times (n_rec,)
    sampler_step: np.ndarray  # (n_rec,)
    d: int  # data dimension (size of the store's ``dim`` dimension)
    block_steps: int
    sample_chunk: int
    d_star_alt: tuple[int, ...] = ()  # extra ridge dimensions of final_ridge_residual_alt
    applies: tuple[tuple[int, ...], ...] | None = None
    denoised: bool = False  # the per-cell variables denoised and denoise_t (a stopped exact block)
    final_sample: bool = False  # the per-sample final_sample (sampler kind scheduler: its output at t = 0)
    n_gate: int = 0  # the quality gate's own draws per cell (gate_sample; ridgexr.quality.gate_draws)

    def __post_init__(self):
        names = [n for n, _ in self.coords]
        if any(n not in CELL_DIMS for n in names) or names != sorted(names, key=CELL_DIMS.index) \
                or len(set(names)) != len(names):
            raise ValueError(f"`coords` must name distinct cell dims among {CELL_DIMS} in that order; got {names}")
        if any(len(v) == 0 for _, v in self.coords):
            raise ValueError("every cell dimension needs at least one label")

    @property
    def cell_dims(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.coords)

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return tuple(len(v) for _, v in self.coords)

    def labels(self, dim: str) -> tuple | None:
        """The labels of cell dimension ``dim`` (None when the store does not have it)."""
        return dict(self.coords).get(dim)

    @property
    def n_steps(self) -> int:
        return int(self.t.size)

    def applies_mask(self) -> np.ndarray:
        """Boolean array over the cell dims: True where a cell is run."""
        if self.applies is None:
            return np.ones(self.cell_shape, dtype=bool)
        mask = np.zeros(self.cell_shape, dtype=bool)
        for idx in self.applies:
            mask[idx] = True
        return mask

    def cells(self) -> list[tuple[int, ...]]:
        """Index tuples of every cell that is run, in C order."""
        mask = self.applies_mask()
        return [tuple(int(i) for i in idx) for idx in np.ndindex(*self.cell_shape) if mask[idx]]

    def cell_region(self, index: tuple[int, ...]) -> dict[str, slice]:
        return {d: slice(i, i + 1) for d, i in zip(self.cell_dims, index)}

    def cell_labels(self, index: tuple[int, ...]) -> dict[str, Any]:
        return {name: values[i] for (name, values), i in zip(self.coords, index)}


def cell_label(ds: xr.Dataset, dims, idx) -> dict:
    """{dim: label} of the cell at integer position ``idx`` along ``dims`` (plain Python values)."""
    out = {}
    for d, i in zip(dims, idx):
        v = ds[d].values[i]
        out[d] = v.item() if hasattr(v, "item") else v
    return out


def template(layout: StoreLayout, train: np.ndarray, attrs: dict, extra: dict | None = None) -> xr.Dataset:
    """The store's lazy template: every variable of :data:`ridgexr.schema.VARIABLES` that ``layout`` has,
    filled with its ``fill`` (dask, chunked as stored: 1 along every cell dim, ``sample_chunk`` x ``block_steps``
    for the per-step variables, one chunk per cell for the others), the coordinates, ``train_data`` (n_train, d)
    and ``extra`` ({name: (dims, array)}, written eagerly), with the attributes of the table."""
    cd, cs = layout.cell_dims, layout.cell_shape
    ones = (1,) * len(cd)
    S, K, d, nd = layout.n_samples, layout.n_steps, layout.d, len(layout.d_star_alt)
    size = {"sample": S, "step": K, "dim": d, "d_star_alt": nd, "gate_draw": layout.n_gate}
    data = {}
    for var in layout_variables(d_star_alt=layout.d_star_alt, denoised=layout.denoised,
                                final_sample=layout.final_sample, n_gate=layout.n_gate):
        tail = DIMS[var.dims]
        if var.name == "cell_applies":  # known at creation: written now
            data[var.name] = (cd, layout.applies_mask())
            continue
        chunk = {"sample": layout.sample_chunk if var.per_step else S, "step": layout.block_steps, "dim": d,
                 "d_star_alt": nd, "gate_draw": layout.n_gate}
        data[var.name] = (cd + tail, da.full(cs + tuple(size[k] for k in tail), var.fill, dtype=var.dtype,
                                             chunks=ones + tuple(chunk[k] for k in tail)))
    coords = {
        "sample": np.arange(S, dtype=np.int64),
        "step": np.arange(K, dtype=np.int64),
        "dim": np.arange(d, dtype=np.int64),
        "t": ("step", layout.t),
        "alpha": ("step", OU().alpha(layout.t)),
        "h": ("step", OU().h(layout.t)),
        "sampler_step": ("step", layout.sampler_step.astype(np.int64)),
    }
    for name, values in layout.coords:
        kind = object if isinstance(values[0], str) else np.float64 if name == "tau" else np.int64
        coords[name] = np.array(values, dtype=kind)
    if layout.d_star_alt:
        coords["d_star_alt"] = np.array(layout.d_star_alt, dtype=np.int64)
    if layout.n_gate:
        coords["gate_draw"] = np.arange(layout.n_gate, dtype=np.int64)
    coords["train"] = np.arange(len(train), dtype=np.int64)
    ds = xr.Dataset(data, coords=coords)
    ds["train_data"] = (("train", "dim"), np.asarray(train, dtype=np.float64))
    for name, (dims, values) in (extra or {}).items():  # dataset extras (population sample, rotation)
        ds[name] = (dims, np.asarray(values, dtype=np.float64))
    for name, (long_name, unit) in attributes().items():
        if name in ds.variables:
            ds[name].attrs.update(long_name=long_name, **({} if unit is None else {"units": unit}),
                                  **CF_ATTRS.get(name, {}))
    from .._version import __version__

    ds.attrs.update(ROOT_ATTRS, source=f"ridgexr {__version__}")
    ds.attrs.update(attrs)
    return ds


def write_template(target: Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                   extra: dict | None = None) -> None:
    """Write the store's template at ``target`` (must not exist): every array's metadata, and the arrays
    known at creation (coordinates, ``train_data``, ``cell_applies``, dataset extras); no data chunks."""
    ds = template(layout, train, {"schema_version": SCHEMA_VERSION, **attrs}, extra)
    encoding = {}
    for name, var in ds.variables.items():
        enc = {"compressors": CODECS}
        if isinstance(var.data, da.Array):
            enc["chunks"] = tuple(c[0] for c in var.data.chunks)
        elif name == "cell_applies":  # written now, one chunk per cell like every per-cell variable
            enc["chunks"] = (1,) * var.ndim
        encoding[name] = enc
    ds.to_zarr(str(target), mode="w-", compute=False, zarr_format=3, consolidated=False, encoding=encoding,
               write_empty_chunks=True)
    # the template wrote train_data and the coordinates eagerly; the dask variables hold no chunks yet


def open_arrays(path: str | Path | zarr.Group, names: Iterable[str]) -> dict[str, Any]:
    """Named zarr arrays of a store (a path or its group) opened for writing, every chunk written, even
    all-fill ones (``verify`` expects every chunk of a written region on disk)."""
    group = path if isinstance(path, zarr.Group) else zarr.open_group(str(path), mode="r+", zarr_format=3,
                                                                         use_consolidated=False)
    return {name: group[name].with_config({"write_empty_chunks": True}) for name in names}


#: small step coordinates loaded eagerly when a store is opened (``t`` becomes an index)
EAGER_COORDS = ("t", "alpha", "h", "sampler_step")


def is_consolidated(path: str | Path) -> bool:
    """Whether the store's root metadata holds consolidated metadata."""
    return root_metadata(path).get("consolidated_metadata") is not None


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


class StoreReplacedError(RuntimeError):
    """The store a reader opened was replaced (an ``--overwrite`` swapped a new store in, or it was removed)
    after it was opened: what is read now would mix the two stores.  The message says to open it again."""


class _Pin:
    """What a reader opened: the store folder, held open (its inode cannot be reused while held), and the
    store's ``generation`` id.  :meth:`check` raises :class:`StoreReplacedError` when the folder at the path is
    no longer that one."""

    def __init__(self, root: Path, generation: str | None, key: tuple[int, int] | None = None):
        """Pin the folder ``root`` now; with ``key`` (a pin unpickled in another process: the folder's (device,
        inode) when it was opened), the folder must be that one and hold the store of ``generation``."""
        self.root = root
        self.generation = generation
        self.replaced = False
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        self._close = weakref.finalize(self, os.close, fd)
        st = os.fstat(fd)
        self.key = (st.st_dev, st.st_ino)
        if key is not None and key != self.key:  # unpickled elsewhere: another folder than the one opened
            self.replaced = True
        if key is not None and generation is not None and \
                root_metadata(root).get("attributes", {}).get("generation") != generation:
            self.replaced = True

    def check(self) -> None:
        try:
            st = os.stat(self.root)
            same = (st.st_dev, st.st_ino) == self.key
        except OSError:
            same = False
        if self.replaced or not same:
            self.replaced = True
            raise StoreReplacedError(
                f"store {str(self.root)!r} was replaced or removed after it was opened (generation "
                f"{self.generation or 'unrecorded'}; an --overwrite swaps a new store in): reading on would mix "
                "the two stores; open it again")


class PinnedStore(LocalStore):
    """A read-only zarr store of a ridgexr store folder, pinned to the folder it opened (:class:`_Pin`), whose
    reads fail clearly: every read is followed by a check that the folder at the path is still the one opened
    (:class:`StoreReplacedError` otherwise: an ``--overwrite`` swapped a new store in), and every chunk of an
    array whose codecs end with a CRC32C checksum is checked before zarr decodes it, a mismatch raising
    :class:`StoreDamagedError` naming the array and the chunk file.

    Parameters
    ----------
    root : path
        The store.
    generation : str, optional
        Its root attribute ``generation`` (read before).
    checksummed : iterable of str
        The arrays whose chunks end with a CRC32C checksum.
    """

    def __init__(self, root: str | Path, *, read_only: bool = True, generation: str | None = None,
                 checksummed: Iterable[str] = (), _pin: _Pin | None = None):
        super().__init__(Path(root), read_only=True)
        self._pin = _pin if _pin is not None else _Pin(self.root, generation)
        self._checksummed = frozenset(checksummed)

    def with_read_only(self, read_only: bool = False) -> "PinnedStore":
        return type(self)(self.root, checksummed=self._checksummed, _pin=self._pin)

    def __getstate__(self):
        return {"root": str(self.root), "generation": self._pin.generation, "key": self._pin.key,
                "checksummed": sorted(self._checksummed)}

    def __setstate__(self, state):
        self.__init__(state["root"], checksummed=state["checksummed"],
                      _pin=_Pin(Path(state["root"]), state["generation"], tuple(state["key"])))

    def check(self) -> None:
        """Raise :class:`StoreReplacedError` when the folder at the path is not the one opened."""
        self._pin.check()

    def _verify(self, key: str, buf):
        self._pin.check()
        name, _, rest = key.partition("/")
        if buf is not None and name in self._checksummed and rest.startswith("c/"):
            data = buf.as_numpy_array()
            if data.size < 4 or google_crc32c.value(data[:-4]) != int.from_bytes(data[-4:].tobytes(), "little"):
                raise StoreDamagedError(
                    f"store {str(self.root)!r}: array {name!r}, chunk file {str(self.root / key)!r} fails its "
                    f"CRC32C checksum (it is damaged); run 'ridgexr verify {self.root}'")
        return buf

    async def get(self, key, prototype=None, byte_range=None):
        buf = await super().get(key, prototype, byte_range)
        return self._verify(key, buf) if byte_range is None else (self._pin.check(), buf)[1]

    def get_sync(self, key, *, prototype=None, byte_range=None):
        buf = super().get_sync(key, prototype=prototype, byte_range=byte_range)
        return self._verify(key, buf) if byte_range is None else (self._pin.check(), buf)[1]

    async def get_partial_values(self, prototype, key_ranges):
        out = await super().get_partial_values(prototype, key_ranges)
        self._pin.check()
        return out


def _crc_last(meta: dict) -> bool:
    codecs = meta.get("codecs") or []
    return bool(codecs) and isinstance(codecs[-1], dict) and codecs[-1].get("name") == "crc32c"


def _read_metadata(path: Path, root: dict) -> tuple[dict[str, dict], str]:
    """(the array metadata a reader applies: name -> dict, where they come from): the consolidated copy in the
    root ``zarr.json`` when there is one, else each array's ``zarr.json``."""
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
    if isinstance(consolidated, dict):
        return {k: v for k, v in consolidated.items() if "/" not in k and not k.startswith(".")}, \
            f"the consolidated metadata in {str(path / 'zarr.json')!r}"
    out = {}
    for meta in sorted(path.glob("*/zarr.json")):  # each parsed once; one that does not parse is named
        try:
            node = json.loads(meta.read_bytes())
            if not isinstance(node, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            raise StoreDamagedError(f"store {str(path)!r} cannot be opened: metadata file {str(meta)!r} is damaged "
                                    f"({type(exc).__name__}: {exc}); run 'ridgexr verify {path}'") from None
        if node.get("node_type") == "array":
            out[meta.parent.name] = node
    return out, "its array metadata (zarr.json files)"


def _table_problems(metadata: dict[str, dict]) -> list[tuple[str, str]]:
    """[(array, what is wrong)] of metadata against the variable table, for a store without a record: the data
    type of every variable and coordinate of the table, and no value-changing attribute but a float array's
    ``_FillValue`` NaN and the ``coordinates`` list (the only ones ridgexr writes)."""
    from ..schema import COORDINATES, VARIABLES

    out = []
    kinds = {"t": "float64", "alpha": "float64", "h": "float64", "sampler_step": "int64", "tau": "float64"}
    for name, meta in sorted(metadata.items()):
        if not isinstance(meta, dict):
            out.append((name, "its metadata is not a JSON object"))
            continue
        dtype = meta.get("data_type")
        want = VARIABLES[name].dtype if name in VARIABLES else kinds.get(name)
        if want is None and name in COORDINATES:
            want = {"float64", "int64", "string"}
        if want is not None and dtype not in ({want} if isinstance(want, str) else want):
            out.append((name, f"data_type {dtype!r} (the schema's: {want!r})"))
        for key, value in decoding_attrs(meta).items():
            if key == "coordinates":
                continue
            if key == "_FillValue" and str(dtype).startswith("float") and value in ("AAAAAAAA+H8=", "NaN"):
                continue
            out.append((name, f"attribute {key}={value!r}, which the schema does not have"))
    return out


def _absent_files(path: Path, manifest: dict | None, metadata: dict[str, dict]) -> list[tuple[str, str]]:
    """[(array, chunk file)] of the arrays every complete cell needs (written whole at creation: coordinates,
    training data, dataset extras, ``cell_applies``) whose chunk files are missing: a listing, no read.  The
    record's list of files when there is one, else every chunk of the arrays that are not per-cell results."""
    if manifest is not None:
        return [(rel.split("/", 1)[0], str(path / rel)) for rel in record_files(manifest)
                if not (path / rel).is_file()]
    cells = tuple(metadata.get("cell_complete", {}).get("dimension_names") or ())
    out = []
    for name, meta in sorted(metadata.items()):
        dims = tuple(meta.get("dimension_names") or ())
        chunks = meta.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape", [])
        per_cell = (name not in CELL_DIMS and bool(cells) and dims[:len(cells)] == cells
                    and all(c == 1 for c in chunks[:len(cells)]))
        if per_cell and name != "cell_applies":  # a cell's results: written by its run (a missing one: incomplete)
            continue
        shape = meta.get("shape") or []
        if len(chunks) != len(shape):
            continue  # damaged metadata: the open says so
        grid = [-(-int(s) // int(c)) if s else 0 for s, c in zip(shape, chunks)]
        sep = (meta.get("chunk_key_encoding", {}).get("configuration") or {}).get("separator", "/")
        for idx in np.ndindex(*grid):
            key = sep.join(["c", *map(str, idx)]) if idx else "c"
            if not (path / name / key).is_file():
                out.append((name, str(path / name / key)))
                break
    return out


def _check_open(path: Path, root: dict, metadata: dict[str, dict], where: str) -> None:
    """Refuse to open a store whose metadata would make a reader decode other values than written, or miss
    chunks every complete cell needs: :class:`StoreDamagedError` naming the array and suggesting ``ridgexr
    verify``.  Against the record kept at creation (:func:`ridgexr.store.record.metadata_problems`), or, for a
    store without one, against the variable table.  A damaged record is warned of (the values read do not
    depend on it)."""
    manifest, why = read_record(path)
    if why is not None:
        warnings.warn(f"store {str(path)!r}: {why}; run 'ridgexr verify {path}'", StoreWarning, stacklevel=4)
    problems = metadata_problems(manifest, metadata, where=where) if manifest is not None else _table_problems(metadata)
    if problems:
        name, what = problems[0]
        more = f" (and {len(problems) - 1} more array(s))" if len(problems) > 1 else ""
        raise StoreDamagedError(f"store {str(path)!r}: the metadata of array {name!r} differ from the store's "
                                f"schema ({what}){more}: a reader would decode other values than were written; "
                                f"nothing was read: run 'ridgexr verify {path}'")
    absent = _absent_files(path, manifest, metadata)
    if absent:
        name, chunk = absent[0]
        raise StoreDamagedError(f"store {str(path)!r}: array {name!r} misses its chunk file {chunk!r}, written when "
                                f"the store was created and needed by every cell (it would read as fill values); "
                                f"run 'ridgexr verify {path}'")


#: attempts of :func:`open_store` when the store is replaced while it opens (an ``--overwrite`` swap: two renames)
OPEN_ATTEMPTS = 3


def open_store(path: str | Path, *, load_marks: bool = True, check: bool = True, load_coords: bool = True,
               **kwargs) -> xr.Dataset:
    """Open a store lazily (dask-backed) with xarray, with ``t`` as an indexed coordinate.

    The step coordinates ``t``, ``alpha``, ``h`` and ``sampler_step`` are tiny and loaded
    eagerly; ``t`` gets an index along ``step``, so ``ds.sel(t=0.1, method="nearest")``,
    ``ds.sel(t=slice(0.5, 0.01))`` (t decreases along ``step``: a window runs from the
    larger time to the smaller) and ``ds.where(ds.t < 0.5, drop=True)`` work.  ``cell_complete`` is
    loaded too (``load_marks=False``: left lazy).  Damaged metadata or a damaged chunk of these small
    arrays raises :class:`StoreDamagedError` naming the file.

    With ``check`` (the default), the metadata a reader applies (the consolidated copy, else each array's
    ``zarr.json``) are checked first against the record kept at creation (or, for a store without one, the
    variable table), and the chunks written at creation must all be there: otherwise :class:`StoreDamagedError`
    names the array (``ridgexr verify`` reports and repairs).  The store is read through a :class:`PinnedStore`:
    a chunk that fails its checksum raises :class:`StoreDamagedError` naming the array and the chunk file, and a
    read after the store was replaced (``--overwrite``) raises :class:`StoreReplacedError` instead of mixing the
    two stores.  ``check=False`` (``verify`` and ``repair``, which report damage themselves) skips the metadata
    checks and reads each array's own ``zarr.json``; ``load_coords=False`` leaves the step coordinates lazy too
    (no ``t`` index: ``verify`` reads them chunk by chunk).
    """
    p = Path(path)
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return _open_store(p, load_marks, check, kwargs, load_coords)
        except StoreReplacedError:
            if attempt == OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _open_store(p: Path, load_marks: bool, check: bool, kwargs: dict, load_coords: bool = True) -> xr.Dataset:
    if not (p / "zarr.json").is_file():
        raise FileNotFoundError(f"no ridgexr store at {str(p)!r}")
    root = root_metadata(p)
    generation = root.get("attributes", {}).get("generation")
    try:
        pin = _Pin(p, generation)
        consolidated = check and root.get("consolidated_metadata") is not None
        metadata, where = _read_metadata(p, root if check else {})
        if check:
            try:
                _check_open(p, root, metadata, where)
            except StoreDamagedError:
                pin.check()  # read across an --overwrite swap: open again rather than report damage
                raise
        store = PinnedStore(p, generation=generation, checksummed=[n for n, m in metadata.items() if _crc_last(m)],
                            _pin=pin)
        ds = xr.open_zarr(store, zarr_format=3, consolidated=consolidated, **kwargs)
    except (StoreDamagedError, StoreReplacedError):
        raise
    except Exception as exc:  # damaged metadata: say which file
        raise StoreDamagedError(f"store {str(p)!r} cannot be opened: {_damaged_metadata(p) or exc}; "
                                f"run 'ridgexr verify {p}'") from exc
    if not load_coords:
        pin.check()
        ds.encoding["source"] = str(p)
        return ds
    eager = {name: _load(p, ds, name) for name in EAGER_COORDS if name in ds.coords}
    ds = ds.assign_coords(eager)
    if load_marks and "cell_complete" in ds:  # small, and read by every summary: loaded now, so that damage is named here
        ds["cell_complete"] = _load(p, ds, "cell_complete")
    pin.check()  # the metadata read above came from the folder pinned (a swap since: opened again)
    ds.encoding["source"] = str(p)
    return ds.set_xindex("t") if "t" in ds.coords and "step" in ds["t"].dims else ds


def _damaged_metadata(path: Path) -> str | None:
    """The first metadata file of a store that is not a JSON object, with the reason; None when all parse."""
    for meta in [path / "zarr.json", *sorted(path.glob("*/zarr.json"))]:
        try:
            if not isinstance(json.loads(meta.read_bytes()), dict):
                return f"metadata file {str(meta)!r} is not a JSON object"
        except (OSError, ValueError) as exc:
            return f"metadata file {str(meta)!r} is damaged ({type(exc).__name__}: {exc})"
    return None


def _load(path: Path, ds: xr.Dataset, name: str) -> xr.Variable:
    """``ds[name]``'s variable loaded; a chunk that does not decode raises :class:`StoreDamagedError` naming the array
    and its chunk file."""
    try:  # the variable alone: loading ds[name] would load its coordinates too (alpha's damage named as t's)
        return ds[name].variable.load(scheduler=IN_PROCESS)
    except (StoreDamagedError, StoreReplacedError):  # named already (the chunk file), or the store was swapped
        raise
    except Exception as exc:
        where = ""
        arr = zarr.open_array(str(path / name), mode="r", zarr_format=3)
        for coords, key in chunk_keys(arr):
            try:
                arr.get_block_selection(coords)
            except Exception:
                where = f", chunk file {str(path / name / key)!r}"
                break
        raise StoreDamagedError(f"store {str(path)!r}: array {name!r} cannot be read{where} "
                                f"({type(exc).__name__}: {exc}); run 'ridgexr verify {path}'") from exc


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
    """Labels of every cell that is run (``cell_applies``; stores before schema 1.3: every cell), in C order."""
    dims = [d for d in CELL_DIMS if d in ds.dims]
    mask = ds["cell_applies"].transpose(*dims).values if "cell_applies" in ds else None
    return [cell_label(ds, dims, idx) for idx in np.ndindex(*(ds.sizes[d] for d in dims))
            if mask is None or mask[idx]]


def complete_cells(ds: xr.Dataset) -> list[dict]:
    """Labels of the cells whose ``cell_complete`` mark is set."""
    done = ds["cell_complete"].values
    dims = ds["cell_complete"].dims
    return [cell_label(ds, dims, idx) for idx in zip(*np.nonzero(done))]


def per_cell_arrays(group: zarr.Group, cell_dims: tuple[str, ...]) -> dict[str, Any]:
    """The arrays of ``group`` that hold their own chunks for each cell: dims start with the cell dims and
    chunks are 1 along them (coordinates, such as ``model``, are store-level even when their one dim is a
    cell dim)."""
    out = {}
    n = len(cell_dims)
    for name in sorted(group.array_keys()):
        if not n or name in CELL_DIMS:
            continue
        arr = group[name]
        dims = tuple(arr.metadata.dimension_names or ())
        chunks = arr.metadata.chunk_grid.chunk_shape
        if dims[:n] == tuple(cell_dims) and all(c == 1 for c in chunks[:n]):
            out[name] = arr
    return out


def chunk_keys(arr, cell: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], str]]:
    """(chunk coordinates, key below the array's folder) of every chunk of ``cell`` (a prefix of chunk
    coordinates; ``()``: every chunk of the array)."""
    n = len(cell)
    chunks = arr.metadata.chunk_grid.chunk_shape
    grid = [-(-s // c) if s else 0 for s, c in zip(arr.shape[n:], chunks[n:])]
    encode = arr.metadata.chunk_key_encoding.encode_chunk_key
    return [(tuple(cell) + tail, encode(tuple(cell) + tail)) for tail in np.ndindex(*grid)]


def group_cell_dims(group: zarr.Group) -> tuple[str, ...]:
    return tuple(group["cell_complete"].metadata.dimension_names or ())


def cell_dims_of(ds: xr.Dataset) -> tuple[str, ...]:
    return tuple(ds["cell_complete"].dims)


def array_meta(folder: Path) -> tuple[dict | None, str | None]:
    """(parsed zarr.json, None) or (None, why it is damaged)."""
    meta = folder / "zarr.json"
    try:
        out = json.loads(meta.read_bytes())
    except FileNotFoundError:
        return None, "missing" if folder.is_dir() else "array is missing"
    except (OSError, ValueError) as exc:
        return None, f"metadata file {str(meta)!r} is damaged ({type(exc).__name__}: {exc})"
    if not isinstance(out, dict) or out.get("node_type") != "array":
        return None, f"metadata file {str(meta)!r} is not an array's metadata"
    return out, None


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


class StoreWarning(UserWarning):
    """A store needed attention that did not stop the command: an interrupted ``--overwrite`` finished or
    rolled back, a leftover folder kept, a complete cell with missing chunks masked."""
