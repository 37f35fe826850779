"""The Zarr v3 store of an experiment: schema, region writes, completion marks and a lock.

Layout (see ``docs/schema.md`` for every variable):

- cell dims ``schedule`` (str) and ``width`` (int), plus ``tau`` for a training-time sweep;
- per-step variables over (cell dims..., ``sample``, ``step`` [, ``dim``]);
- coordinates ``t(step)``, ``alpha(step)``, ``h(step)``, ``sampler_step(step)``;
- ``train_data(train, dim)``; per-cell training diagnostics; ``cell_complete`` (cell dims).

The store is created once from a lazy (dask) template with ``compute=False``, so only
metadata is written, in a hidden sibling folder that is renamed into place when complete:
a store path either holds a whole store or nothing (a crash during creation leaves only the
sibling, which the next run removes).  Every chunk carries a CRC32C checksum after its
zstd compression, and every chunk of a written region is stored (``write_empty_chunks``), so
:func:`verify_store` can tell a damaged or missing chunk from an unwritten one.  Each cell
then writes its blocks of steps with region writes whose
boundaries coincide with chunk boundaries (chunks are 1 along every cell dim, ``sample_chunk``
along ``sample`` and ``block_steps`` along ``step``), so concurrent writers never touch the
same chunk.  ``cell_complete`` is written last, after every block and the diagnostics: a cell
killed half-way stays incomplete and is recomputed on resume.  Unwritten float chunks read
as NaN.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, Iterable

import dask.array as da
import dask.threaded
import numpy as np
import xarray as xr
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from .process import OU
from .catalog.folders import is_store, root_metadata as _root_metadata  # is_store: re-exported
from . import units
from .training.diagnostics import DIAGNOSTIC_VARIABLES, LOSS_UNITS

SCHEMA_VERSION = "1.7"
LOCK_NAME = ".ridgexr-lock"

__all__ = ["CELL_DIMS", "is_exact_cell", "journal_path", "CellWriter", "STEP_VARIABLES", "consolidate", "is_consolidated", "COORD_ATTRS", "CF_ATTRS", "SCHEMA_VERSION", "schema_older", "StoreLayout", "create_store", "write_block", "write_cell_end", "open_store",
           "StoreLock", "StoreLockedError", "cells", "complete_cells", "cell_label", "json_attr", "VARIABLE_ATTRS",
           "CELL_DIAGNOSTICS", "CELL_QUALITY", "QUALITY_VARIABLES", "is_store", "chunk_leftover", "remove_partial_creations", "replace_store",
           "recover_store", "finish_interrupted", "interrupted", "damaged_root", "create_staging", "commit_staging", "StoreWarning", "StoreDamagedError",
           "missing_chunks", "cell_digest", "per_cell_arrays", "chunk_keys", "check_schema", "repair_schema", "write_template", "Damage", "verify_store",
           "clear_completion", "copy_cell", "CODECS", "IN_PROCESS"]

#: dask scheduler of the small reads ridgexr does for itself (the eager step coordinates, the run
#: summary): dask's threaded scheduler, in this process whatever client is active.  Passed as a
#: callable so that dask does not import dask.distributed to look for a client (~0.8 s of start-up).
IN_PROCESS = dask.threaded.get

#: compression then checksum, for every array of a store
CODECS = (ZstdCodec(), Crc32cCodec())

#: per-cell training diagnostics (float, one value per cell), named once in ridgexr.training
CELL_DIAGNOSTICS = tuple(DIAGNOSTIC_VARIABLES)

#: per-cell sample quality of the final samples (float, one value per cell; NaN where the cell's dataset allows
#: no such measure): ``quality_<key>`` for each key of ridgexr.quality.cells.cell_quality (docs/quality.md)
QUALITY_VARIABLES: dict[str, tuple[str, str]] = {
    "quality_nearest_ratio": ("median distance of the final samples to the nearest training point over that of "
                              "held-out real points (1: as new real data)", units.DIMENSIONLESS),
    "quality_nearest_ratio_lower": ("lower end of the 95 % bootstrap interval of quality_nearest_ratio",
                                    units.DIMENSIONLESS),
    "quality_nearest_ratio_upper": ("upper end of the 95 % bootstrap interval of quality_nearest_ratio",
                                    units.DIMENSIONLESS),
    "quality_frechet": ("Frechet distance of the final samples to the training images in the features of the "
                        "cached Fashion-MNIST classifier (not FID)", units.FEATURE2),
    "quality_frechet_floor": ("the same for held-out real images, as many as the samples (what the law scores)",
                              units.FEATURE2),
    "quality_frechet_ceiling": ("the same for class-mean-plus-noise images, as many as the samples", units.FEATURE2),
    "quality_class_share": ("share of the final samples the classifier puts in the training classes",
                            units.DIMENSIONLESS),
    "quality_class_share_lower": ("lower end of the 95 % Wilson interval of quality_class_share", units.DIMENSIONLESS),
    "quality_class_share_upper": ("upper end of the 95 % Wilson interval of quality_class_share", units.DIMENSIONLESS),
    "quality_class_share_heldout": ("the same share for held-out real images of the classes (the classifier's "
                                    "recall there)", units.DIMENSIONLESS),
    "quality_classifier_accuracy": ("the classifier's accuracy on the whole test split", units.DIMENSIONLESS),
    "quality_sliced_wasserstein": ("sliced 2-Wasserstein distance of the final samples to fresh draws of the law "
                                   "(manifolds)", units.DATA),
    "quality_sliced_wasserstein_null": ("the same for as many fresh draws (what a perfect sampler scores)",
                                        units.DATA),
    "quality_n_finite": ("final samples the quality measures used (finite ones)", units.DIMENSIONLESS),
}
CELL_QUALITY = tuple(QUALITY_VARIABLES)

VARIABLE_ATTRS: dict[str, tuple[str, str]] = {
    "trajectory": ("sampler state x at each recorded step", units.DATA),
    "ridge_projection": ("SCMS projection of the state onto the log-density ridge R_t", units.DATA),
    "ridge_distance": ("|state - ridge_projection|", units.DATA),
    "ridge_residual": ("|E E^T grad log p_t| at the projection (0 on the ridge)", units.INV_DATA),
    "nearest_distance": ("distance min_i |state - alpha_t x_i| to the nearest scaled training point "
                         "(NaN: not observed)", units.DATA),
    "nearest_ratio": ("d1 / d2: nearest over second-nearest distance to the scaled training points "
                      "(< 1/3: memorized; NaN: not observed)", "1"),
    "clip_shift": ("|x_{k+1}(clipped x0) - x_{k+1}(x0)|: how far the diffusers scheduler's clipping (clip_sample, "
                   "thresholding; root attrs scheduler_*) of its predicted x0 moved its step from the state (0: "
                   "nothing clipped; NaN: not a scheduler sampler)", units.DATA),
    "ridge_converged": ("SCMS converged for this state", "1"),
    "frame_degenerate": ("the ridge frame at the state is numerically undetermined (eigengap at d* below its "
                         "certified floor): residual_normal/residual_tangent are arbitrary there", "1"),
    "ridge_degenerate": ("the ridge frame at the projection is numerically undetermined", "1"),
    "residual_normal_rank": ("|N N^T e| with the tangent space of dimension resolved_rank at the state (d*(t))",
                             units.DATA),
    "residual_tangent_rank": ("|T T^T e| with the tangent space of dimension resolved_rank at the state (d*(t))",
                              units.DATA),
    "resolved_rank": ("number of resolved posterior-covariance directions at the state (the time-dependent "
                      "ridge dimension d*(t)); -1 where not observed", "1"),
    "projected_gradient": ("the authors' ridge residual |E E^T grad log p_t| at the state itself (E: the d - d* "
                           "most negative Hessian eigenvectors of log p_t at x), unmasked", units.INV_DATA),
    "projected_gradient_tmin": ("|E E^T grad log p_t_min| at the state, p and E at the sampler's last recorded time "
                                "t_min = t[-1] (a scheduler's last timestep; the authors' notebook)", units.INV_DATA),
    "projected_gradient_scaled": ("projected_gradient divided by its maximum over the cell's samples at that step "
                                  "(the authors' normalisation)", units.DIMENSIONLESS),
    "projected_gradient_tmin_scaled": ("projected_gradient_tmin divided by its maximum over the cell's samples at "
                                       "that step (the authors' normalisation)", units.DIMENSIONLESS),
    "frame_gap_relative": ("tangent/normal eigengap of the posterior covariance at the state less its certified "
                           "error, over its largest eigenvalue: frame_degenerate is frame_gap_relative <= attr "
                           "gap_floor", units.DIMENSIONLESS),
    "ridge_distance_resolved": ("|state - SCMS projection| at the resolved dimension min(d*, resolved_rank) "
                                "(ridge.resolved_projection; NaN without it)", units.DATA),
    "normal_curvature": ("largest normal Hessian eigenvalue of log p_t at the projection (< 0 on a ridge)",
                         units.INV_DATA2),
    "residual_normal": ("normal part N N^T e of the model error e = denoise(x,t) - E[x0|x_t=x], frame at x",
                        units.DATA),
    "residual_tangent": ("tangent part T T^T e of the model error, frame at x", units.DATA),
    "diverged": ("the trajectory left the finite numbers at some step", "1"),
    "train_data": ("training points x_i", units.DATA),
    "population_data": ("fresh sample of the training law (manifold datasets)", units.DATA),
    "manifold_rotation": ("rotation R of the manifold: x = R (manifold point, 0, ..., 0)", units.DIMENSIONLESS),
    **{name: (long_name, LOSS_UNITS) for name, long_name in DIAGNOSTIC_VARIABLES.items()},
    **QUALITY_VARIABLES,
    "cell_complete": ("every variable of this cell is written", "1"),
    "cell_digest": ("BLAKE2b-32 digest of every chunk's key and stored bytes of this cell, written just before "
                    "cell_complete (ridgexr verify checks it)", units.LABEL),
    "cell_applies": ("the cell is run: its model block uses every label of the cell (masked cells stay NaN)", "1"),
    "max_dropped_mass": ("largest posterior mass dropped by top-k truncation over the cell's projections "
                         "(<= attr drop_tol)", "1"),
    "final_ridge_residual_alt": ("|E E^T grad log p_t| at the final state for alternative ridge dimensions",
                                 units.INV_DATA),
    "v_kernel": ("V-kernel estimate: variance over training-noise draws of each coordinate of the learned score "
                 "on the grid v_kernel_x at the times v_kernel_t (training.draws > 1)", "data_unit-2"),
    "v_kernel_x": ("grid points of v_kernel (on the line through the first two training points)", units.DATA),
    "v_kernel_t": ("probe times of v_kernel", units.TIME),
    "denoised": ("Tweedie's denoiser output E[x0 | x_s = final state] at s = denoise_t (a stopped score: "
                 "s = t_stop, the state frozen below it)", units.DATA),
    "denoise_t": ("time of the state that denoised is computed from: t_stop (sde, ode), or the sampler's last "
                  "recorded time t[-1]", units.TIME),
    "final_sample": ("the diffusers scheduler's output after its last step (alpha_bar = 1, t = 0; no ridge there)",
                     units.DATA),
    "t": ("diffusion time of the recorded step", units.TIME),
    "alpha": ("alpha_t = exp(-t)", "1"),
    "h": ("h_t = 1 - exp(-2t)", "1"),
    "sampler_step": ("sampler step number of the recorded state (0 = start at T)", units.LABEL),
}
#: long_name and units of every coordinate (dimension coordinates included); label and index
#: coordinates (names, counts, indices) have no units (:data:`ridgexr.units.LABEL`)
COORD_ATTRS: dict[str, tuple[str, str | None]] = {
    "model": ("model block (catalog `models`): random features, mlp, a user's module or the exact denoiser",
              units.LABEL),
    "epoch": ("training epochs of a neural model (its weights after this many passes over the training set)",
              units.LABEL),
    "schedule": ("loss-weight schedule w(t) of the model ('exact': the exact, memorizing denoiser)", units.LABEL),
    "width": ("number of random features p (random features) or hidden-layer width (mlp)", units.LABEL),
    "tau": ("training time of the gradient flow, paper units (root attr tau_units)", units.TAU),
    "target": ("fitted target: 'dsm' (alpha_t x0, noisy) or 'ideal' (its mean E[alpha_t x0 | x_t])",
               units.LABEL),
    "n_noise": ("noise draws per (training point, time node) of the fit", units.LABEL),
    "draw": ("independent draw of the training noise of the fit (training.draws; features fixed)",
             units.LABEL),
    "data_draw": ("independent training set of a manifold dataset (dataset.manifold.draws): train_data rows "
                  "data_draw n .. (data_draw + 1) n, n = dataset.manifold.n", units.LABEL),
    "n_train": ("training-set size: the cell was trained (and observed) on the first n_train points of its "
                "training set (train_data[:n_train], or of its data_draw's rows)",
                units.LABEL),
    "sample": ("trajectory index", units.LABEL),
    "step": ("index of the recorded step (sampling order: t decreases)", units.LABEL),
    "dim": ("data coordinate index", units.LABEL),
    "train": ("training point index", units.LABEL),
    "d_star_alt": ("alternative ridge dimension", units.LABEL),
}
#: CF attributes beyond long_name and units: ``t`` is the time axis (units "1": :mod:`ridgexr.units`)
CF_ATTRS: dict[str, dict[str, str]] = {"t": {"standard_name": "time", "axis": "T"}}
ROOT_ATTRS = {
    "Conventions": "CF-1.10",
    "references": "He, Qiu & Tao (2026), the ridge-manifold account of diffusion generalization",
}

#: every cell dimension a store can have, in store order: ``model`` when the entry has several
#: model blocks (or a module or exact block alone), ``schedule`` and ``width`` when some block
#: uses them, the rest when the entry sweeps them (model.tau, model.epochs, training.target,
#: training.n_noise, training.draws, dataset.manifold.draws, dataset.n_train)
CELL_DIMS = ("model", "schedule", "width", "tau", "epoch", "target", "n_noise", "draw", "data_draw", "n_train")


def is_exact_cell(labels: dict) -> bool:
    """Whether a cell (its labels: dim -> value) is the exact denoiser's: the ``model`` label "exact" of a
    multi-model store, or the ``schedule`` label "exact" that a one-model store's ``include_exact`` adds."""
    return "exact" in (labels.get("model"), labels.get("schedule"))

STEP_SCALAR = ("ridge_distance", "ridge_residual", "normal_curvature", "residual_normal_rank", "residual_tangent_rank",
               "projected_gradient", "projected_gradient_tmin", "projected_gradient_scaled",
               "projected_gradient_tmin_scaled", "frame_gap_relative", "ridge_distance_resolved")
STEP_VECTOR = ("trajectory", "ridge_projection", "residual_normal", "residual_tangent")
STEP_BOOL = ("ridge_converged", "frame_degenerate", "ridge_degenerate")
STEP_INT = ("resolved_rank",)
#: per-step scalars a writer may leave out (they stay NaN): the nearest training point (ridgexr.nearest), the
#: scheduler's clipping of its step (ridgexr.sampling.scheduler_sampling; NaN for the other samplers)
STEP_OPTIONAL = ("nearest_distance", "nearest_ratio", "clip_shift")
#: per-step variable -> the flag under which it is numerically undetermined (masked, not averaged,
#: by every summary: :func:`ridgexr.analysis.resolved`)
DEGENERATE_FLAGS = {"ridge_projection": "ridge_degenerate", "ridge_distance": "ridge_degenerate",
                    "ridge_residual": "ridge_degenerate", "normal_curvature": "ridge_degenerate",
                    "residual_normal": "frame_degenerate", "residual_tangent": "frame_degenerate"}


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


def _template(layout: StoreLayout, train: np.ndarray, attrs: dict, extra: dict | None = None) -> xr.Dataset:
    cd, cs = layout.cell_dims, layout.cell_shape
    ones = (1,) * len(cd)
    S, K, d = layout.n_samples, layout.n_steps, layout.d
    sc, bs = layout.sample_chunk, layout.block_steps
    data = {}
    for name in STEP_VECTOR:
        data[name] = (cd + ("sample", "step", "dim"), da.full(cs + (S, K, d), np.nan, chunks=ones + (sc, bs, d)))
    for name in STEP_SCALAR + STEP_OPTIONAL:
        data[name] = (cd + ("sample", "step"), da.full(cs + (S, K), np.nan, chunks=ones + (sc, bs)))
    for name in STEP_BOOL:
        data[name] = (cd + ("sample", "step"), da.zeros(cs + (S, K), dtype=bool, chunks=ones + (sc, bs)))
    for name in STEP_INT:  # -1: not observed (masked cell, diverged state)
        data[name] = (cd + ("sample", "step"), da.full(cs + (S, K), -1, dtype=np.int16, chunks=ones + (sc, bs)))
    data["diverged"] = (cd + ("sample",), da.zeros(cs + (S,), dtype=bool, chunks=ones + (S,)))
    for name in CELL_DIAGNOSTICS + CELL_QUALITY:
        data[name] = (cd, da.full(cs, np.nan, chunks=ones))
    data["cell_complete"] = (cd, da.zeros(cs, dtype=bool, chunks=ones))
    data["cell_digest"] = (cd, da.zeros(cs, dtype=np.int32, chunks=ones))  # int32: netCDF-3 can hold a slice
    data["cell_applies"] = (cd, layout.applies_mask())
    data["max_dropped_mass"] = (cd, da.full(cs, np.nan, chunks=ones))
    if layout.d_star_alt:
        nd = len(layout.d_star_alt)
        data["final_ridge_residual_alt"] = (cd + ("sample", "d_star_alt"),
                                            da.full(cs + (S, nd), np.nan, chunks=ones + (S, nd)))
    if layout.denoised:
        data["denoised"] = (cd + ("sample", "dim"), da.full(cs + (S, d), np.nan, chunks=ones + (S, d)))
        data["denoise_t"] = (cd, da.full(cs, np.nan, chunks=ones))
    if layout.final_sample:
        data["final_sample"] = (cd + ("sample", "dim"), da.full(cs + (S, d), np.nan, chunks=ones + (S, d)))
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
    coords["train"] = np.arange(len(train), dtype=np.int64)
    ds = xr.Dataset(data, coords=coords)
    ds["train_data"] = (("train", "dim"), np.asarray(train, dtype=np.float64))
    for name, (dims, values) in (extra or {}).items():  # dataset extras (population sample, rotation)
        ds[name] = (dims, np.asarray(values, dtype=np.float64))
    for name, (long_name, unit) in {**VARIABLE_ATTRS, **COORD_ATTRS}.items():
        if name in ds.variables:
            ds[name].attrs.update(long_name=long_name, **({} if unit is None else {"units": unit}),
                                  **CF_ATTRS.get(name, {}))
    from . import __version__

    ds.attrs.update(ROOT_ATTRS, source=f"ridgexr {__version__}")
    ds.attrs.update(attrs)
    return ds


def chunk_leftover(path: str | Path) -> list[str] | None:
    """The variables of ``path`` when it is only the chunk files of a store deleted while a run wrote
    to it, else None.

    Such a folder has no ``zarr.json`` anywhere (the metadata went with the store) and nothing but
    files at ``VARIABLE/c/I/J/...`` with integer chunk coordinates and empty folders: a
    run's chunk writes recreate exactly that.  A store, even a damaged one, keeps some metadata;
    any other file makes the folder someone else's.
    """
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return None
    names = set()
    for p in path.rglob("*"):
        rel = p.relative_to(path).parts
        if p.is_symlink() or (not p.is_dir() and not p.is_file()):
            return None
        if p.is_dir():
            if len(rel) >= 2 and (rel[1] != "c" or not all(k.isdigit() for k in rel[2:])):
                return None
            continue
        if len(rel) < 3 or rel[1] != "c" or not all(k.isdigit() for k in rel[2:]) or not rel[0].isidentifier():
            return None
        names.add(rel[0])
    return sorted(names)


def _creation_prefix(path: Path) -> str:
    return f".{path.name}.creating-"


def _sibling(path: Path, tag: str = "") -> Path:
    """A fresh hidden folder name beside ``path`` that :func:`remove_partial_creations` recognises."""
    return path.parent / f"{_creation_prefix(path)}{os.getpid()}-{tag}{uuid.uuid4().hex[:8]}"


_OLD_TAG = "old-"
#: tag of a staging store that is whole (every array's metadata and the arrays written at creation): the template is
#: written under an untagged name and renamed to a tagged one, so a staging store killed half-created is never resumed
_STAGING_TAG = "staging-"
SWAP_NAME = ".ridgexr-swap"


class StoreWarning(UserWarning):
    """A store needed attention that did not stop the command: an interrupted ``--overwrite`` finished or
    rolled back, a leftover folder kept, a complete cell with missing chunks masked."""


def journal_path(path: Path) -> Path:
    """The journal of an ``--overwrite`` swap, beside the store (``STORE.ridgexr-swap``)."""
    return Path(str(path).rstrip("/") + SWAP_NAME)


def _leftovers(path: Path) -> list[Path]:
    if not path.parent.is_dir():
        return []
    return sorted(path.parent.glob(glob_escape(_creation_prefix(path)) + "*"))


def _tag(p: Path, path: Path) -> str:
    """The tag of the hidden sibling ``p`` (``.NAME.creating-PID-TAGxxxxxxxx``): "old" (a store moved aside by an
    ``--overwrite`` swap), "staging" (the whole new store of an ``--overwrite``) or "" (a template being written)."""
    rest = p.name[len(_creation_prefix(path)):].split("-", 1)[-1]
    return next((tag[:-1] for tag in (_OLD_TAG, _STAGING_TAG) if rest.startswith(tag)), "")


def _is_old(p: Path, path: Path) -> bool:
    """Whether the hidden sibling ``p`` is a store moved aside by an ``--overwrite`` swap."""
    return _tag(p, path) == "old"


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_store(path: str | Path, *, resume_hash: str | None = None,
                  keep_staging: bool = False) -> tuple[list[str], Path | None]:
    """Finish or roll back an interrupted ``--overwrite`` and clear the leftovers of killed creations.

    Call only while holding the store's :class:`StoreLock`.  With a swap journal
    (``STORE.ridgexr-swap``, written once the new store is complete): the swap is finished (the
    new store renamed into place, then the store it replaced removed); when the new store is
    gone and ``path`` holds no store, the old one is put back.  Without a journal, a store moved
    aside by an ``--overwrite`` (``.NAME.creating-PID-old-...``) is renamed back to ``path`` when
    ``path`` holds no store, and otherwise kept and reported, never deleted.  Templates killed while
    being written (``.NAME.creating-PID-xxxxxxxx``) are removed.  The whole new store of an interrupted
    ``--overwrite`` (``.NAME.creating-PID-staging-...``, renamed to that name once every array exists) is
    returned when its ``config_hash`` equals ``resume_hash`` (the overwrite resumes), kept with
    ``keep_staging`` (``verify``, readers), and removed otherwise.

    Parameters
    ----------
    path : path
        The store.
    resume_hash : str, optional
        The ``config_hash`` of the ``--overwrite`` being run.
    keep_staging : bool
        Keep the new store of an interrupted ``--overwrite`` (reported) instead of removing it.

    Returns
    -------
    notes : list of str
        One sentence per action that a user should hear of (each also warned as :class:`StoreWarning`
        by the caller, if it wishes).
    resumable : path or None
        The new store of an interrupted ``--overwrite`` with this ``resume_hash``.
    """
    path = Path(path)
    notes: list[str] = []
    journal = journal_path(path)
    if journal.exists() or journal.is_symlink():
        try:
            plan = json.loads(journal.read_text())
            new, old = path.parent / plan["new"], path.parent / plan["old"]
            if Path(plan["new"]).name != plan["new"] or Path(plan["old"]).name != plan["old"]:
                raise ValueError("not a sibling")
        except (OSError, ValueError, KeyError, TypeError):
            notes.append(f"ignored the unreadable swap journal {str(journal)!r}")
        else:
            done = []
            if is_store(new):  # the new store is complete: finish the swap
                if (is_store(path) or damaged_root(path)) and not old.exists():
                    os.rename(path, old)
                    done.append("moved the old store aside")
                if not path.exists():
                    os.rename(new, path)
                    _fsync_dir(path.parent)
                    done.append("renamed the new store into place")
            if old.exists():
                if is_store(path):  # the swap is done: ``old`` is the store it replaced
                    shutil.rmtree(old)
                    done.append(f"removed the store it replaced ({str(old)!r})")
                elif not path.exists():
                    os.rename(old, path)
                    _fsync_dir(path.parent)
                    notes.append(f"rolled back the interrupted --overwrite of {str(path)!r}: its new store was gone, "
                                 f"the old store is back in place (from {str(old)!r})")
            if done:
                notes.append(f"finished the interrupted --overwrite of {str(path)!r}: " + ", ".join(done)
                             + "; the new store is in place")
        journal.unlink()
    for tmp in path.parent.glob(glob_escape(journal.name) + ".*"):  # a journal killed while being written
        tmp.unlink()
    resumable = None
    for p in _leftovers(path):
        tag = _tag(p, path)
        if tag == "old":  # an old store moved aside, with no journal to say what happened
            if not path.exists() and is_store(p):
                os.rename(p, path)
                _fsync_dir(path.parent)
                notes.append(f"restored the old store of {str(path)!r} from {str(p)!r} "
                             "(an --overwrite was interrupted between its two renames)")
            else:
                notes.append(f"kept {str(p)!r}: the old store of an interrupted --overwrite ({str(path)!r} holds "
                             "a store too); compare them and delete the one you do not need yourself")
        elif tag == "staging" and resume_hash is not None and resumable is None and is_store(p) \
                and _root_metadata(p).get("attributes", {}).get("config_hash") == resume_hash:
            resumable = p
        elif tag == "staging" and keep_staging:
            notes.append(f"kept {str(p)!r}, the new store of an interrupted --overwrite of {str(path)!r}: the same "
                         "'ridgexr run --overwrite' resumes it (a run without --overwrite removes it)")
        elif tag == "staging":
            shutil.rmtree(p, ignore_errors=True)
            notes.append(f"removed {str(p)!r}, the unfinished new store of an interrupted --overwrite"
                         + (" of another configuration" if resume_hash is not None else "")
                         + f"; {str(path)!r} is unchanged")
        else:
            shutil.rmtree(p, ignore_errors=True)
            notes.append(f"removed {str(p)!r}, the half-written template of a store creation that was killed "
                         "(it held no results)")
    return notes, resumable


#: arrays that identify a folder as a ridgexr store when its root metadata are damaged
IDENTIFYING_ARRAYS = ("cell_complete", "trajectory")


def damaged_root(path: str | Path) -> str | None:
    """Why ``path`` is a ridgexr store whose root ``zarr.json`` is damaged, or None.

    A folder is such a store when it is not a store (:func:`is_store`) but holds the arrays of one
    (:data:`IDENTIFYING_ARRAYS`, each with array metadata that parse); the reason names the root file.
    """
    path = Path(path)
    if path.is_symlink() or not path.is_dir() or is_store(path):
        return None
    if any(_array_meta(path / name)[0] is None for name in IDENTIFYING_ARRAYS):
        return None
    meta = path / "zarr.json"
    try:
        root = json.loads(meta.read_bytes())
    except FileNotFoundError:
        return f"its root metadata file {str(meta)!r} is missing"
    except (OSError, ValueError) as exc:
        return f"its root metadata file {str(meta)!r} is damaged ({type(exc).__name__}: {exc})"
    if not isinstance(root, dict) or not isinstance(root.get("attributes"), dict):
        return f"its root metadata file {str(meta)!r} is not a JSON object with attributes"
    return f"its root metadata file {str(meta)!r} lacks the attribute schema_version"


def interrupted(path: str | Path) -> bool:
    """Whether an interrupted ``--overwrite`` left a swap journal beside ``path``, or an old store beside it while
    ``path`` holds none (:func:`finish_interrupted` finishes it)."""
    path = Path(path)
    if journal_path(path).exists() or journal_path(path).is_symlink():  # committed: the new store is complete
        return True
    return not is_store(path) and any(_is_old(p, path) for p in _leftovers(path))


def finish_interrupted(path: str | Path) -> list[str]:
    """For readers (``open_dataset``, ``info``, ``verify``): when ``path`` holds no store but an interrupted
    ``--overwrite`` left a swap journal or an old store aside, take the lock and finish or roll it back
    (:func:`recover_store`, keeping a resumable new store).  Returns the notes (one line per action); [] when
    there was nothing to do.

    Raises :class:`StoreLockedError` when a writer holds the store (it is swapping it now) and ``path`` holds no
    store; while ``path`` holds one, a reader reads it and leaves the swap to its writer.
    """
    path = Path(path)
    if not interrupted(path):
        return []
    try:
        lock = StoreLock(path).acquire()
    except StoreLockedError:
        if is_store(path):
            return []
        raise
    try:
        return recover_store(path, keep_staging=True)[0]
    finally:
        lock.release()


def remove_partial_creations(path: str | Path) -> list[Path]:
    """Remove folders left beside ``path`` by creations that were killed; returns them.

    Call only while holding the store's :class:`StoreLock` (no creation is then running).
    Stores moved aside by an interrupted ``--overwrite`` are not removed (see :func:`recover_store`).
    """
    path = Path(path)
    left = [p for p in _leftovers(path) if not _is_old(p, path)]
    for p in left:
        shutil.rmtree(p, ignore_errors=True)
    return left


def write_template(target: Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                   extra: dict | None = None) -> None:
    """Write the store's template at ``target`` (must not exist): every array's metadata, and the arrays
    known at creation (coordinates, ``train_data``, ``cell_applies``, dataset extras); no data chunks."""
    ds = _template(layout, train, {"schema_version": SCHEMA_VERSION, **attrs}, extra)
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


def create_store(path: str | Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                 extra: dict | None = None) -> None:
    """Create the store's metadata and coordinates (no data chunks) from a lazy template, atomically.

    ``extra`` maps further variable names to ``(dims, array)`` written eagerly beside
    ``train_data`` (:func:`ridgexr.datasets.dataset_extras`).

    The template is written into a hidden sibling folder and renamed to ``path`` when whole,
    so ``path`` never holds half a store.  ``path`` must not exist (see :func:`replace_store`).
    """
    path = Path(path)
    tmp = _sibling(path)
    try:
        write_template(tmp, layout, train, attrs, extra)
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def create_staging(path: str | Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                   extra: dict | None = None) -> Path:
    """Create the new store of an ``--overwrite`` in a hidden folder beside ``path``; returns that folder.

    Run the cells into it, then :func:`commit_staging` swaps it in; the store at ``path`` is not
    touched before.  A killed run leaves it beside ``path``, where :func:`recover_store` finds it
    (to resume it, or to remove it).
    """
    path = Path(path)
    tmp, staging = _sibling(path), _sibling(path, _STAGING_TAG)
    try:
        write_template(tmp, layout, train, attrs, extra)
        os.rename(tmp, staging)  # whole: from now on a rerun of the same command resumes it
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return staging


def commit_staging(path: str | Path, staging: str | Path) -> None:
    """Swap the complete store ``staging`` in for the store at ``path`` (``--overwrite``), as a journalled
    transaction.

    A journal naming both folders is written (and synced) first; then ``path`` is renamed aside,
    ``staging`` renamed to ``path``, the old store removed and the journal last.  A kill at any
    instant leaves a journal from which :func:`recover_store` finishes the swap, so a complete
    store is never lost: before the journal, ``path`` still holds the old store.
    """
    path, staging = Path(path), Path(staging)
    old = _sibling(path, _OLD_TAG)
    journal = journal_path(path)
    tmp = journal.with_name(journal.name + f".{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, json.dumps({"new": staging.name, "old": old.name}).encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, journal)
    _fsync_dir(path.parent)
    os.rename(path, old)
    os.rename(staging, path)
    _fsync_dir(path.parent)
    shutil.rmtree(old)
    os.unlink(journal)


def replace_store(path: str | Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                  extra: dict | None = None) -> None:
    """Replace the store at ``path`` by a new, empty one (its template), as one journalled swap.

    ``ridgexr run --overwrite`` does not use this: it runs every cell into the staging store first
    (:func:`create_staging`, :func:`commit_staging`), so the old store stays until the new one is
    complete.
    """
    commit_staging(path, create_staging(path, layout, train, attrs, extra))


STEP_VARIABLES = STEP_VECTOR + STEP_SCALAR + STEP_BOOL + STEP_INT + STEP_OPTIONAL


def _put_block(arrays: dict, layout: StoreLayout, cell: tuple[int, ...], start: int,
               values: dict[str, np.ndarray]) -> None:
    B = values["trajectory"].shape[0]
    where = tuple(int(i) for i in cell) + (slice(None), slice(start, start + B))
    missing = [name for name in STEP_VARIABLES if name not in values and name not in STEP_OPTIONAL]
    if missing:
        raise ValueError(f"block values lack {missing}")
    B0, n0 = np.shape(values["trajectory"])[:2]
    values = {name: np.full((B0, n0), np.nan) for name in STEP_OPTIONAL} | dict(values)  # absent: NaN, chunk written
    for name in STEP_VARIABLES:  # zarr broadcasts silently: check every shape before writing anything
        want = (B, layout.n_samples) + ((layout.d,) if name in STEP_VECTOR else ())
        if np.shape(values[name]) != want:
            raise ValueError(f"block value {name!r} has shape {np.shape(values[name])}; expected {want} "
                             "(steps, samples[, dim])")
    if start < 0 or start + B > layout.n_steps:
        raise ValueError(f"steps [{start}, {start + B}) lie outside the store's {layout.n_steps} recorded steps")
    for name in STEP_VARIABLES:  # (B, n[, d]) -> the store's (sample, step[, dim]) order
        arrays[name][where] = np.ascontiguousarray(np.swapaxes(values[name], 0, 1))


def write_block(path: str | Path, layout: StoreLayout, cell: tuple[int, ...], start: int,
                values: dict[str, np.ndarray]) -> None:
    """Write per-step variables of one cell for recorded steps [start, start + B).

    Straight into the store's zarr arrays (their codecs: compression and CRC32C); the layout
    is chunk-aligned (a block is ``block_steps`` steps, a chunk along ``step``), so each call
    writes whole chunks.  For many blocks use :class:`CellWriter`, which opens the arrays once
    and writes on a background thread.
    """
    _put_block(_open_arrays(path, STEP_VARIABLES), layout, cell, start, values)


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

        self._arrays = _open_arrays(path, STEP_VARIABLES)
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
                   quality: dict[str, float] | None = None) -> None:
    """Write the per-cell variables, then the completion mark (in that order).

    ``diverged`` is (n_samples,) bool; ``diagnostics`` maps names of :data:`CELL_DIAGNOSTICS` to
    floats (missing ones are NaN), ``quality`` names of :data:`CELL_QUALITY` (likewise; left out by a store of
    an older schema that lacks them); ``final_ridge_residual_alt`` is (n_samples,
    len(layout.d_star_alt)); ``denoised`` (n_samples, d) and ``denoise_t`` only with
    ``layout.denoised`` (NaN when not given); ``final_sample`` (n_samples, d) only with
    ``layout.final_sample`` (NaN when not given).  Written straight into the zarr arrays (every cell is one chunk of
    them), after every shape is checked.
    """
    cell = tuple(int(i) for i in cell)
    S = layout.n_samples
    values = {"diverged": np.asarray(diverged, dtype=bool), "max_dropped_mass": float(max_dropped_mass)}
    if layout.d_star_alt:
        values["final_ridge_residual_alt"] = np.asarray(final_ridge_residual_alt, dtype=np.float64)
    if layout.denoised:
        values["denoised"] = (np.full((S, layout.d), np.nan) if denoised is None
                              else np.asarray(denoised, dtype=np.float64))
        values["denoise_t"] = float(denoise_t)
    if layout.final_sample:
        values["final_sample"] = (np.full((S, layout.d), np.nan) if final_sample is None
                                  else np.asarray(final_sample, dtype=np.float64))
    want = {"diverged": (S,), "final_ridge_residual_alt": (S, len(layout.d_star_alt)), "denoised": (S, layout.d),
            "final_sample": (S, layout.d)}
    for name, shape in want.items():  # zarr broadcasts silently: check before writing anything
        if name in values and values[name].shape != shape:
            raise ValueError(f"`{name}` has shape {values[name].shape}; expected {shape}")
    values.update({name: float(diagnostics.get(name, np.nan)) for name in CELL_DIAGNOSTICS})
    quality = quality or {}
    unknown = sorted(set(quality) - set(CELL_QUALITY))
    if unknown:
        raise ValueError(f"`quality` has names that are not quality variables: {unknown}")
    group = zarr.open_group(str(path), mode="r+", zarr_format=3)
    values.update({name: float(quality.get(name, np.nan)) for name in CELL_QUALITY if name in group})
    arrays = _open_arrays(group, list(values) + ["cell_complete"])
    for name, value in values.items():
        arrays[name][cell] = value
    if "cell_digest" in group:  # stores of schema 1.4 on: the digest, then the mark
        arrays["cell_digest"] = _open_arrays(group, ["cell_digest"])["cell_digest"]
        arrays["cell_digest"][cell] = cell_digest(path, cell, group=group)
    arrays["cell_complete"][cell] = True


def copy_cell(path: str | Path, layout: StoreLayout, source: tuple[int, ...], cell: tuple[int, ...],
              diagnostics: dict[str, float]) -> None:
    """Write ``cell`` as a copy of the completed cell ``source``, with its own diagnostics.

    For cells whose samples are the same computation as another's (the same model, training
    set and seeds): every per-step variable and the per-sample ``diverged`` and
    ``final_ridge_residual_alt`` (and ``max_dropped_mass``) are copied array by array, one
    block of ``layout.block_steps`` steps at a time (whole chunks, through the codecs, so
    checksums are fresh, and memory bounded as for sampling), then :func:`write_cell_end` writes
    the per-cell ``diagnostics`` and the completion mark, last, as for a sampled cell.

    Raises
    ------
    ValueError
        When ``source`` is not complete (its values could be partial).
    """
    source, cell = tuple(int(i) for i in source), tuple(int(i) for i in cell)
    names = list(STEP_VARIABLES) + ["diverged", "max_dropped_mass", "cell_complete"]
    group = zarr.open_group(str(path), mode="r", zarr_format=3)
    quality_names = [n for n in CELL_QUALITY if n in group]  # the same samples: the same quality
    names += quality_names
    if layout.d_star_alt:
        names.append("final_ridge_residual_alt")
    if layout.denoised:
        names += ["denoised", "denoise_t"]
    if layout.final_sample:
        names.append("final_sample")
    arrays = _open_arrays(path, names)
    if not bool(arrays["cell_complete"][source]):
        raise ValueError(f"cell {source} is not complete: its values cannot be copied to cell {cell}")
    for start in range(0, layout.n_steps, layout.block_steps):
        steps = (slice(None), slice(start, start + layout.block_steps))
        for name in STEP_VARIABLES:
            arrays[name][cell + steps] = arrays[name][source + steps]
    write_cell_end(path, layout, cell, arrays["diverged"][source], diagnostics,
                   max_dropped_mass=float(arrays["max_dropped_mass"][source]),
                   final_ridge_residual_alt=arrays["final_ridge_residual_alt"][source] if layout.d_star_alt else None,
                   denoised=arrays["denoised"][source] if layout.denoised else None,
                   denoise_t=float(arrays["denoise_t"][source]) if layout.denoised else np.nan,
                   final_sample=arrays["final_sample"][source] if layout.final_sample else None,
                   quality={n: float(arrays[n][source]) for n in quality_names})


def _open_arrays(path: str | Path | zarr.Group, names: Iterable[str]) -> dict[str, Any]:
    """Named zarr arrays of a store (a path or its group) opened for writing, every chunk written, even
    all-fill ones (``verify`` expects every chunk of a written region on disk)."""
    group = path if isinstance(path, zarr.Group) else zarr.open_group(str(path), mode="r+", zarr_format=3)
    return {name: group[name].with_config({"write_empty_chunks": True}) for name in names}


#: small step coordinates loaded eagerly when a store is opened (``t`` becomes an index)
EAGER_COORDS = ("t", "alpha", "h", "sampler_step")


def is_consolidated(path: str | Path) -> bool:
    """Whether the store's root metadata holds consolidated metadata."""
    return _root_metadata(path).get("consolidated_metadata") is not None


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


# ---------------------------------------------------------------------------- chunks of a cell
#: per-cell arrays that the digest does not cover: the mark and the digest themselves
NOT_DIGESTED = ("cell_complete", "cell_digest")


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
    for name, arr in per_cell_arrays(group, _group_cell_dims(group)).items():
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


def _group_cell_dims(group: zarr.Group) -> tuple[str, ...]:
    return tuple(group["cell_complete"].metadata.dimension_names or ())


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
    for name, arr in per_cell_arrays(group, _group_cell_dims(group)).items():
        if name == "cell_complete":  # a complete cell's mark reads True: it is on disk
            continue
        base = path / name
        present = {str(Path(root, f).relative_to(base)) for root, _, files in os.walk(base) for f in files}
        for cell in cells:
            if any(key not in present for _, key in chunk_keys(arr, cell)):
                missing.setdefault(cell, []).append(name)
    return missing


# ---------------------------------------------------------------------------- verify
@dataclass(frozen=True)
class Damage:
    """One damaged (variable, cell): ``cell`` maps cell dims to labels (empty for store-level arrays)."""

    variable: str
    cell: dict
    reason: str

    def __str__(self) -> str:
        where = " ".join(f"{k}={v}" for k, v in self.cell.items()) or "(whole store)"
        return f"{self.variable} {where}: {self.reason}"


def _cell_dims(ds: xr.Dataset) -> tuple[str, ...]:
    return tuple(ds["cell_complete"].dims)


def verify_store(path: str | Path) -> tuple[list[Damage], int]:
    """Read every chunk of every complete cell (and of the store-level arrays) and check it.

    A chunk is damaged when it is missing (every chunk of a written region is stored), does
    not decode, or fails its CRC32C checksum; a complete cell is damaged when its chunks do not
    match its ``cell_digest`` (schema 1.4 on: a chunk swapped with another cell's, moved, or
    stale).  Returns the damage found and the number of chunks read.
    """
    path = Path(path)
    ds = open_store(path, load_marks=False)
    cell_dims = _cell_dims(ds)
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

#: arrays added after schema 1.3, with the schema version that added them
SINCE = {"cell_digest": "1.4", "nearest_distance": "1.5", "nearest_ratio": "1.5", "projected_gradient": "1.5",
         "projected_gradient_tmin": "1.5", "projected_gradient_scaled": "1.5", "projected_gradient_tmin_scaled": "1.5",
         "frame_gap_relative": "1.5", "ridge_distance_resolved": "1.5", "final_sample": "1.6", "data_draw": "1.6",
         "clip_shift": "1.7", **{name: "1.7" for name in QUALITY_VARIABLES}}


def schema_older(version: str) -> bool:
    """Whether a store's ``schema_version`` is older than :data:`SCHEMA_VERSION` (it may lack arrays of
    :data:`SINCE`: readable, but not resumable)."""
    return _version(str(version)) < _version(SCHEMA_VERSION)


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return (0,)


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


def _array_meta(folder: Path) -> tuple[dict | None, str | None]:
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
    root = _root_metadata(path)
    version = str(root.get("attributes", {}).get("schema_version", SCHEMA_VERSION))
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
    for folder in sorted(p for p in reference.iterdir() if (p / "zarr.json").is_file()):
        name = folder.name
        if _version(version) < _version(SINCE.get(name, "0")):
            continue  # an array of a later schema than the store's
        want, _ = _array_meta(folder)
        have, why = _array_meta(path / name)
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
        have, _ = _array_meta(dst)
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


def clear_completion(path: str | Path, cells: list[dict]) -> None:
    """Unset ``cell_complete`` for the cells labelled ``cells`` so that a rerun recomputes them."""
    ds = open_store(path, load_marks=False)
    cell_dims = _cell_dims(ds)
    marks = _open_arrays(path, ["cell_complete"])["cell_complete"]
    for labels in cells:
        marks[tuple(int(np.flatnonzero(ds[d].values == labels[d])[0]) for d in cell_dims)] = False


def set_root_attrs(path: str | Path, **attrs) -> None:
    """Update root attributes of a store (the caller holds its :class:`StoreLock`)."""
    zarr.open_group(str(path), mode="r+", zarr_format=3).attrs.update(attrs)


# ---------------------------------------------------------------------------- lock
class StoreLockedError(RuntimeError):
    """Another writer holds the store."""


class StoreLock:
    """An exclusive writer lock: ``fcntl.flock`` on a file beside the store.

    The operating system releases the lock when its holder exits, however it exits
    (kill -9, power loss), so a crashed writer never leaves a stale lock and there is no
    take-over race.  The file itself stays (deleting it would let two processes lock two
    different files); its content -- pid, host, time -- only feeds the error message, so
    an empty or garbage lock file is harmless.  POSIX only.
    """

    def __init__(self, store: str | Path):
        self.path = Path(str(store).rstrip("/") + LOCK_NAME)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _holder(self) -> dict:
        try:
            info = json.loads(self.path.read_text())
            return info if isinstance(info, dict) else {}
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "StoreLock":
        """Take the lock or raise :class:`StoreLockedError` naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never follow a symbolic link: the lock file is truncated and written
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP or self.path.is_symlink():
                raise OSError(errno.ELOOP, "the lock file is a symbolic link; ridgexr does not follow it (remove "
                              "the link)", str(self.path)) from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            held = self._holder()
            raise StoreLockedError(
                f"store {str(self.path)[:-len(LOCK_NAME)]!r} is being written by pid {held.get('pid', '?')} on host "
                f"{held.get('host', '?')!r} since {held.get('since', '?')}; wait for it to finish "
                "(the lock is released when that process exits)") from None
        note = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, note, 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (the file stays)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
