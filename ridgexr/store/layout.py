"""The store's layout: its shape and chunking (:class:`StoreLayout`) and the template every store is created from.

Layout (see ``docs/schema.md`` for every variable, :mod:`ridgexr.schema` for the table):

- cell dims ``schedule`` (str) and ``width`` (int), plus ``tau`` for a training-time sweep (:data:`CELL_DIMS`);
- per-step variables over (cell dims..., ``sample``, ``step`` [, ``dim``]);
- coordinates ``t(step)``, ``alpha(step)``, ``h(step)``, ``sampler_step(step)``;
- ``train_data(train, dim)``; per-cell training diagnostics; ``cell_complete`` (cell dims).

Every chunk carries a CRC32C checksum after its zstd compression (:data:`CODECS`), and every chunk of a written
region is stored (``write_empty_chunks``), so :func:`ridgexr.store.verify_store` can tell a damaged or missing
chunk from an unwritten one.  Chunks are 1 along every cell dim, ``sample_chunk`` along ``sample`` and
``block_steps`` along ``step`` (:func:`chunk_keys`), so concurrent writers never touch the same chunk.  Unwritten
float chunks read as NaN.  This module lays a store out and reads or changes none: opening and reading is
:mod:`ridgexr.store.opening`, changing an existing store's metadata and marks :mod:`ridgexr.store.update`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
from zarr.codecs import Crc32cCodec, ZstdCodec

from ..process import OU
from ..schema import CELL_DIMS, CF_ATTRS, DIMS, SCHEMA_VERSION, attributes, layout_variables

__all__ = ["CODECS", "ROOT_ATTRS", "StoreLayout", "is_exact_cell", "template", "write_template", "chunk_keys"]


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
        return cell_labels(self.coords, index)

    def select(self, where: dict[str, Any] | None) -> list[tuple[int, ...]]:
        """The cells that are run (:meth:`cells`) whose labels are among ``where``'s, in C order
        (:func:`select_cells`)."""
        return select_cells(self.coords, self.cells(), where)


def cell_labels(coords: tuple[tuple[str, tuple], ...], index: tuple[int, ...]) -> dict[str, Any]:
    """The labels ``{dim: label}`` of the cell at ``index`` (a tuple of indexes into ``coords``' labels)."""
    return {name: values[i] for (name, values), i in zip(coords, index)}


def select_cells(coords: tuple[tuple[str, tuple], ...], cells: list[tuple[int, ...]],
                 where: dict[str, Any] | None) -> list[tuple[int, ...]]:
    """The index tuples of ``cells`` (into ``coords``, ``((dim, labels), ...)``) whose labels are among
    ``where``'s, in their order: the one rule of ``ridgexr run --cells`` (the run and its plan's price).

    ``where`` maps a cell dimension to one label or a list of them; a label matches by equality or, given as
    text (``ridgexr run --cells n_train=8,16``), by its printed form or its number (``"8"`` matches 8,
    ``"inf"`` matches inf).  None or ``{}`` selects every cell.  A dimension the entry does not have or a label
    it does not hold is a ``ValueError`` naming ``cells`` and the labels there are.
    """
    if not where:
        return list(cells)
    names = [dim for dim, _ in coords]
    labels = dict(coords)
    keep = {}
    for dim, wanted in where.items():
        if dim not in labels:
            raise ValueError(f"`cells`: {dim!r} is not a cell dimension of this entry; it has "
                             f"{', '.join(names) or 'none'}")
        wanted = list(wanted) if isinstance(wanted, (list, tuple)) else [wanted]
        index = {i for want in wanted for i, lab in enumerate(labels[dim]) if _same_label(want, lab)}
        missing = [w for w in wanted if not any(_same_label(w, lab) for lab in labels[dim])]
        if missing:
            raise ValueError(f"`cells`: {dim} has no label {', '.join(map(repr, missing))}; its labels are "
                             + ", ".join(str(lab) for lab in labels[dim]))
        keep[names.index(dim)] = index
    return [idx for idx in cells if all(idx[k] in index for k, index in keep.items())]


def _same_label(wanted: Any, label: Any) -> bool:
    """Whether ``wanted`` (a label, or its text) names the cell label ``label``."""
    if not isinstance(wanted, str) or isinstance(label, str):
        return bool(wanted == label)
    if wanted == str(label):
        return True
    try:
        return float(wanted) == float(label)
    except (TypeError, ValueError):
        return False



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



def chunk_keys(arr, cell: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], str]]:
    """(chunk coordinates, key below the array's folder) of every chunk of ``cell`` (a prefix of chunk
    coordinates; ``()``: every chunk of the array)."""
    n = len(cell)
    chunks = arr.metadata.chunk_grid.chunk_shape
    grid = [-(-s // c) if s else 0 for s, c in zip(arr.shape[n:], chunks[n:])]
    encode = arr.metadata.chunk_key_encoding.encode_chunk_key
    return [(tuple(cell) + tail, encode(tuple(cell) + tail)) for tail in np.ndindex(*grid)]
