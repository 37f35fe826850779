"""Writing a store's cells: blocks of recorded steps (:func:`write_block`, :class:`CellWriter`), then the per-cell
variables and the completion mark, last (:func:`write_cell_end`), or a copy of a complete cell (:func:`copy_cell`).

Every value is checked against its variable's shape (:func:`ridgexr.schema.cell_value_shape`) before
anything is written: zarr broadcasts silently.  The variables are those of the table
(:data:`ridgexr.schema.VARIABLES`), read when a cell is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr

from .integrity import cell_digest
from .layout import StoreLayout
from .update import open_arrays
from ..schema import CELL_DIAGNOSTICS, CELL_QUALITY, FIRST_SCHEMA, cell_value_shape, layout_variables, step_variables

__all__ = ["write_block", "CellWriter", "write_cell_end", "write_cell_values", "copy_cell"]


def _put_block(arrays: dict, layout: StoreLayout, cell: tuple[int, ...], start: int,
               values: dict[str, np.ndarray]) -> None:
    B = values["trajectory"].shape[0]
    where = tuple(int(i) for i in cell) + (slice(None), slice(start, start + B))
    variables = step_variables()
    missing = [v.name for v in variables if v.name not in values and not v.optional]
    if missing:
        raise ValueError(f"block values lack {missing}")
    B0, n0 = np.shape(values["trajectory"])[:2]
    values = {v.name: np.full((B0, n0), v.fill, dtype=v.dtype) for v in variables if v.optional} | dict(values)
    for v in variables:  # zarr broadcasts silently: check every shape before writing anything
        shape = cell_value_shape(v, n_samples=layout.n_samples, d=layout.d, n_steps=B)  # (n, B[, d])
        want = (B, shape[0]) + shape[2:]
        if np.shape(values[v.name]) != want:
            raise ValueError(f"block value {v.name!r} has shape {np.shape(values[v.name])}; expected {want} "
                             "(steps, samples[, dim])")
    if start < 0 or start + B > layout.n_steps:
        raise ValueError(f"steps [{start}, {start + B}) lie outside the store's {layout.n_steps} recorded steps")
    for v in variables:  # (B, n[, d]) -> the store's (sample, step[, dim]) order
        arrays[v.name][where] = np.ascontiguousarray(np.swapaxes(values[v.name], 0, 1))


def write_block(path: str | Path, layout: StoreLayout, cell: tuple[int, ...], start: int,
                values: dict[str, np.ndarray]) -> None:
    """Write per-step variables of one cell for recorded steps [start, start + B).

    Straight into the store's zarr arrays (their codecs: compression and CRC32C); the layout
    is chunk-aligned (a block is ``block_steps`` steps, a chunk along ``step``), so each call
    writes whole chunks.  For many blocks use :class:`CellWriter`, which opens the arrays once
    and writes on a background thread.
    """
    _put_block(open_arrays(path, [v.name for v in step_variables()]), layout, cell, start, values)


class CellWriter:
    """Writes one cell's blocks into the open zarr arrays on a background thread (bounded queue).

    ``write(start, values)`` hands a block over and returns at once unless ``queue_size``
    blocks are already waiting, so sampling and observation overlap with compression and I/O
    while memory stays bounded.  A write error is raised by the next ``write`` or by
    ``close``; ``close`` (also on leaving the ``with`` block, however it is left) waits until
    every handed-over block is on disk.  Completion marks are not written here: call
    :func:`write_cell_end` after ``close``.
    """

    def __init__(self, path: str | Path, layout: StoreLayout, cell: tuple[int, ...], *, queue_size: int = 2):
        import queue
        import threading

        self._arrays = open_arrays(path, [v.name for v in step_variables()])
        self._layout, self._cell = layout, tuple(int(i) for i in cell)
        self._queue: "queue.Queue" = queue.Queue(maxsize=max(1, int(queue_size)))
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ridgexr-cell-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:  # after a failure, drain without writing
                try:
                    _put_block(self._arrays, self._layout, self._cell, *item)
                except BaseException as exc:  # handed to the caller by write()/close()
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def write(self, start: int, values: dict[str, np.ndarray]) -> None:
        """Queue recorded steps [start, start + B) of the cell (``values`` as for :func:`write_block`)."""
        self._raise()
        self._queue.put((int(start), values))

    def close(self) -> None:
        """Wait until every queued block is written; re-raise a write error."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()

    def __enter__(self) -> "CellWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # already failing: finish the queued writes, keep the original exception
            if self._thread.is_alive():
                self._queue.put(None)
                self._thread.join()


def write_cell_end(path: str | Path, layout: StoreLayout, cell: tuple[int, ...], diverged: np.ndarray,
                   diagnostics: dict[str, float], *, max_dropped_mass: float = np.nan,
                   final_ridge_residual_alt: np.ndarray | None = None, denoised: np.ndarray | None = None,
                   denoise_t: float = np.nan, final_sample: np.ndarray | None = None,
                   gate_sample: np.ndarray | None = None, quality: dict[str, float] | None = None,
                   extra: dict[str, Any] | None = None) -> None:
    """Write the per-cell variables, then the completion mark (in that order).

    ``diverged`` is (n_samples,) bool; ``diagnostics`` maps names of :data:`CELL_DIAGNOSTICS` to
    floats (missing ones are NaN), ``quality`` names of :data:`CELL_QUALITY` (likewise; left out by a store of
    an older schema that lacks them); ``final_ridge_residual_alt`` is (n_samples,
    len(layout.d_star_alt)); ``denoised`` (n_samples, d) and ``denoise_t`` only with
    ``layout.denoised`` (NaN when not given); ``final_sample`` (n_samples, d) only with
    ``layout.final_sample`` (NaN when not given; each ignored by a layout without it); ``gate_sample``
    (layout.n_gate, d), the quality gate's own draws, only with ``layout.n_gate``; ``extra`` maps the names of
    further per-cell variables of the table to their values.  Written straight into the zarr arrays (every cell is
    one chunk of them), after every shape is checked (:func:`write_cell_values`).

    Raises
    ------
    ValueError
        When a value has another shape than its variable, or ``quality`` names a variable that is not a quality
        variable.
    """
    quality = quality or {}
    unknown = sorted(set(quality) - set(CELL_QUALITY))
    if unknown:
        raise ValueError(f"`quality` has names that are not quality variables: {unknown}")
    values = {"diverged": diverged, "max_dropped_mass": max_dropped_mass,
              "final_ridge_residual_alt": final_ridge_residual_alt, "denoised": denoised, "denoise_t": denoise_t,
              "final_sample": final_sample, "gate_sample": gate_sample,
              **{name: diagnostics.get(name) for name in CELL_DIAGNOSTICS}, **quality}
    have = {v.name for v in layout_variables(d_star_alt=layout.d_star_alt, denoised=layout.denoised,
                                             final_sample=layout.final_sample, n_gate=layout.n_gate)}
    values = {name: value for name, value in values.items() if name in have}  # a layout without them: ignored
    write_cell_values(path, layout, cell, values | dict(extra or {}))


def write_cell_values(path: str | Path, layout: StoreLayout, cell: tuple[int, ...], values: dict[str, Any]) -> None:
    """Write every per-cell result variable of ``layout`` (:func:`ridgexr.schema.layout_variables`, the
    marks left out) for ``cell``: ``values[name]``, or the variable's fill where it is absent or None; then the
    cell's digest and its completion mark, last.

    Each value must have the variable's shape for one cell (:func:`ridgexr.schema.cell_value_shape`:
    (n_samples,), (n_samples, d), (n_samples, len(d_star_alt)) or ()); every shape is checked before anything is
    written.  A variable that a later schema added (:data:`ridgexr.schema.SINCE`) is left out when the
    store, of an older schema, lacks it.

    Raises
    ------
    ValueError
        When a value has another shape, or ``values`` names a variable the layout does not have.
    """
    cell = tuple(int(i) for i in cell)
    group = zarr.open_group(str(path), mode="r+", zarr_format=3, use_consolidated=False)
    wanted = [v for v in layout_variables(d_star_alt=layout.d_star_alt, denoised=layout.denoised,
                                          final_sample=layout.final_sample, n_gate=layout.n_gate)
              if not v.per_step and not v.mark]
    unknown = sorted(set(values) - {v.name for v in wanted})
    if unknown:
        raise ValueError(f"`values` name variables that this store's cells do not have: {unknown}")
    out = {}
    for v in wanted:
        if v.name not in group and v.since != FIRST_SCHEMA:
            continue  # a store of an older schema
        shape = cell_value_shape(v, n_samples=layout.n_samples, d=layout.d, n_alt=len(layout.d_star_alt),
                                 n_gate=layout.n_gate)
        value = values.get(v.name)
        out[v.name] = (np.full(shape, v.fill, dtype=v.dtype) if value is None
                       else np.asarray(value, dtype=v.dtype))
        if out[v.name].shape != shape:  # zarr broadcasts silently: check before writing anything
            raise ValueError(f"`{v.name}` has shape {out[v.name].shape}; expected {shape}")
    arrays = open_arrays(group, list(out) + ["cell_complete"])
    for name, value in out.items():
        arrays[name][cell] = value
    if "cell_digest" in group:  # stores of schema 1.4 on: the digest, then the mark
        arrays["cell_digest"] = open_arrays(group, ["cell_digest"])["cell_digest"]
        arrays["cell_digest"][cell] = cell_digest(path, cell, group=group)
    arrays["cell_complete"][cell] = True


def copy_cell(path: str | Path, layout: StoreLayout, source: tuple[int, ...], cell: tuple[int, ...],
              diagnostics: dict[str, float]) -> None:
    """Write ``cell`` as a copy of the completed cell ``source``, with its own diagnostics.

    For cells whose samples are the same computation as another's (the same model, training
    set and seeds): every per-step variable is copied array by array, one block of ``layout.block_steps``
    steps at a time (whole chunks, through the codecs, so checksums are fresh, and memory bounded as for
    sampling), then :func:`write_cell_values` writes the other per-cell variables of ``source`` (the sample
    quality included: the same samples), the per-cell ``diagnostics`` and the completion mark, last, as for a
    sampled cell.

    Raises
    ------
    ValueError
        When ``source`` is not complete (its values could be partial).
    """
    source, cell = tuple(int(i) for i in source), tuple(int(i) for i in cell)
    group = zarr.open_group(str(path), mode="r", zarr_format=3, use_consolidated=False)
    steps_names = [v.name for v in step_variables()]
    per_cell = [v.name for v in layout_variables(d_star_alt=layout.d_star_alt, denoised=layout.denoised,
                                                 final_sample=layout.final_sample, n_gate=layout.n_gate)
                if not v.per_step and not v.mark and v.name not in CELL_DIAGNOSTICS and v.name in group]
    arrays = open_arrays(path, steps_names + per_cell + ["cell_complete"])
    if not bool(arrays["cell_complete"][source]):
        raise ValueError(f"cell {source} is not complete: its values cannot be copied to cell {cell}")
    for start in range(0, layout.n_steps, layout.block_steps):
        steps = (slice(None), slice(start, start + layout.block_steps))
        for name in steps_names:
            arrays[name][cell + steps] = arrays[name][source + steps]
    write_cell_values(path, layout, cell, {name: arrays[name][source] for name in per_cell}
                      | {name: diagnostics.get(name) for name in CELL_DIAGNOSTICS})
