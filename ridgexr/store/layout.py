"""The store's layout: its shape and chunking (:class:`StoreLayout`), the template every store is created from,
and how a store is opened and read (cells, marks, attributes, chunk keys).

Layout (see ``docs/schema.md`` for every variable, :mod:`ridgexr.store.variables` for the table):

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
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import dask.array as da
import dask.threaded
import numpy as np
import xarray as xr
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from ..catalog.folders import root_metadata
from ..process import OU
from .variables import CELL_DIMS, CF_ATTRS, DIMS, SCHEMA_VERSION, attributes, layout_variables

__all__ = ["IN_PROCESS", "CODECS", "ROOT_ATTRS", "StoreLayout", "is_exact_cell", "cell_label", "template",
           "write_template", "open_arrays", "EAGER_COORDS", "is_consolidated", "consolidate", "open_store",
           "StoreDamagedError", "StoreWarning", "json_attr", "cells", "complete_cells", "per_cell_arrays",
           "chunk_keys", "group_cell_dims", "cell_dims_of", "array_meta", "clear_completion", "set_root_attrs"]

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
    """The store's lazy template: every variable of :data:`ridgexr.store.variables.VARIABLES` that ``layout`` has,
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
    from .. import __version__

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
    group = path if isinstance(path, zarr.Group) else zarr.open_group(str(path), mode="r+", zarr_format=3)
    return {name: group[name].with_config({"write_empty_chunks": True}) for name in names}


#: small step coordinates loaded eagerly when a store is opened (``t`` becomes an index)
EAGER_COORDS = ("t", "alpha", "h", "sampler_step")


def is_consolidated(path: str | Path) -> bool:
    """Whether the store's root metadata holds consolidated metadata."""
    return root_metadata(path).get("consolidated_metadata") is not None


def consolidate(path: str | Path) -> None:
    """Write consolidated metadata (done when a run finishes and after verify), so a plain
    ``xr.open_zarr(path)`` opens the store silently with one metadata read."""
    with warnings.catch_warnings():  # zarr notes that v3 consolidation is not (yet) in the spec; it is documented
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part",
                                category=UserWarning)
        zarr.consolidate_metadata(str(path), zarr_format=3)


def open_store(path: str | Path, *, load_marks: bool = True, **kwargs) -> xr.Dataset:
    """Open a store lazily (dask-backed) with xarray, with ``t`` as an indexed coordinate.

    The step coordinates ``t``, ``alpha``, ``h`` and ``sampler_step`` are tiny and loaded
    eagerly; ``t`` gets an index along ``step``, so ``ds.sel(t=0.1, method="nearest")``,
    ``ds.sel(t=slice(0.5, 0.01))`` (t decreases along ``step``: a window runs from the
    larger time to the smaller) and ``ds.where(ds.t < 0.5, drop=True)`` work.  ``cell_complete`` is
    loaded too (``load_marks=False``: left lazy).  Damaged metadata or a damaged chunk of these small
    arrays raises :class:`StoreDamagedError` naming the file.
    """
    p = Path(path)
    if not (p / "zarr.json").is_file():
        raise FileNotFoundError(f"no ridgexr store at {str(p)!r}")
    try:
        ds = xr.open_zarr(str(p), zarr_format=3, consolidated=is_consolidated(p), **kwargs)
    except Exception as exc:  # damaged metadata: say which file
        raise StoreDamagedError(f"store {str(p)!r} cannot be opened: {_damaged_metadata(p) or exc}; "
                                f"run 'ridgexr verify {p}'") from exc
    eager = {name: _load(p, ds, name) for name in EAGER_COORDS if name in ds.coords}
    ds = ds.assign_coords(eager)
    if load_marks and "cell_complete" in ds:  # small, and read by every summary: loaded now, so that damage is named here
        ds["cell_complete"] = _load(p, ds, "cell_complete")
    return ds.set_xindex("t") if "t" in ds.coords and "step" in ds["t"].dims else ds


class StoreDamagedError(ValueError):
    """A store's metadata, or a small array read when it is opened, is damaged; the message names the file."""


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
    ds = open_store(path, load_marks=False)
    cell_dims = cell_dims_of(ds)
    marks = open_arrays(path, ["cell_complete"])["cell_complete"]
    for labels in cells:
        marks[tuple(int(np.flatnonzero(ds[d].values == labels[d])[0]) for d in cell_dims)] = False


def set_root_attrs(path: str | Path, **attrs) -> None:
    """Update root attributes of a store (the caller holds its :class:`StoreLock`)."""
    zarr.open_group(str(path), mode="r+", zarr_format=3).attrs.update(attrs)


class StoreWarning(UserWarning):
    """A store needed attention that did not stop the command: an interrupted ``--overwrite`` finished or
    rolled back, a leftover folder kept, a complete cell with missing chunks masked."""
