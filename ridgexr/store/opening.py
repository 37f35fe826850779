"""Opening and reading a store: the one module that opens one (:func:`open_store`; :mod:`ridgexr.reader` and the
xarray backend :mod:`ridgexr.xarray_backend` open through it).

The metadata a reader applies are checked against the record the store keeps of its creation; reads go through a
:class:`PinnedStore` that names a damaged chunk and refuses a store swapped in under it
(:class:`StoreReplacedError`); the cells, their marks and labels, JSON attributes, and which arrays hold chunks per
cell are read here too.
"""

from __future__ import annotations

import json
import os
import warnings
import weakref
from pathlib import Path
from typing import Any, Iterable

import dask.threaded
import google_crc32c
import numpy as np
import xarray as xr
import zarr
from zarr.storage import LocalStore

from ..catalog.folders import root_metadata
from .layout import chunk_keys
from .record import decoding_attrs, metadata_problems, read_record, record_files
from ..schema import CELL_DIMS, attributes

__all__ = ["open_store", "PinnedStore", "StoreDamagedError", "StoreReplacedError", "StoreWarning", "IN_PROCESS",
           "EAGER_COORDS", "OPEN_ATTEMPTS", "is_consolidated", "cell_label", "json_attr", "cells", "complete_cells",
           "per_cell_arrays", "group_cell_dims", "cell_dims_of", "array_meta"]


class StoreDamagedError(ValueError):
    """A store's metadata, or a small array read when it is opened, is damaged; the message names the file."""



#: dask scheduler of the small reads ridgexr does for itself (the eager step coordinates, the run
#: summary): dask's threaded scheduler, in this process whatever client is active.  Passed as a
#: callable so that dask does not import dask.distributed to look for a client (~0.8 s of start-up).
IN_PROCESS = dask.threaded.get



def cell_label(ds: xr.Dataset, dims, idx) -> dict:
    """{dim: label} of the cell at integer position ``idx`` along ``dims`` (plain Python values)."""
    out = {}
    for d, i in zip(dims, idx):
        v = ds[d].values[i]
        out[d] = v.item() if hasattr(v, "item") else v
    return out



#: small step coordinates loaded eagerly when a store is opened (``t`` becomes an index)
EAGER_COORDS = ("t", "alpha", "h", "sampler_step")



def is_consolidated(path: str | Path) -> bool:
    """Whether the store's root metadata holds consolidated metadata."""
    return root_metadata(path).get("consolidated_metadata") is not None



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



class StoreWarning(UserWarning):
    """A store needed attention that did not stop the command: an interrupted ``--overwrite`` finished or
    rolled back, a leftover folder kept, a complete cell with missing chunks masked."""
