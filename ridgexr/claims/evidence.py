"""What the store's claim kinds read from a store: a cell's states and final samples, its training set, and the
references they are contrasted with -- the forward process's own draws at a claim's time, observed by the
store's own code, and fresh draws of the law -- computed once per store and cached.

:class:`StoreEvidence` is built once per store by :func:`ridgexr.claims.store_claims` and handed to every kind's
``evaluate``; a kind never opens the store itself.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import xarray as xr

from ..analysis import arrays, resolved, tangential_distance
from ..analysis.selection import step_index
from ..store.layout import is_exact_cell
from ..store.opening import complete_cells

__all__ = ["StoreEvidence", "REFERENCE_DRAWS", "REFERENCE_BLOCK", "ROUNDING", "forward_draws", "observe_forward",
           "forward_tangential"]

#: forward-process draws a reference is observed on: at least this many, and at least the store's samples
REFERENCE_DRAWS = 1000
#: the draws of a reference are observed in blocks of this many (rows 0-49, 50-99, ...), cached or not: the unit of
#: the cache on disk and of a resume, and part of the reference's definition (SCMS on another batch of points
#: differs at rounding level)
REFERENCE_BLOCK = 50
#: a normal error at most this many times the tangent one is zero at rounding level
ROUNDING = 1e-9


def forward_draws(train: np.ndarray, t: float, n: int, seed: int) -> np.ndarray:
    """``n`` states of the forward (OU) process started at the training set, at time ``t``:
    x_t = alpha_t x0 + sqrt(h_t) z, x0 drawn uniformly from the rows of ``train`` (N, d), z ~ N(0, I) -- the law
    of the exact denoiser's states at t, whatever the model.  (n, d) float64, seeded.

    >>> x = forward_draws(np.array([[0.0, 0.0]]), 1e-9, 3, 0)
    >>> bool(np.abs(x).max() < 1e-3)
    True
    """
    rng = np.random.default_rng(seed)
    x0 = train[rng.integers(0, train.shape[0], size=n)]
    return math.exp(-t) * x0 + math.sqrt(-math.expm1(-2 * t)) * rng.standard_normal(x0.shape)


def observe_forward(train: np.ndarray, t: float, d_star: int, n: int, seed: int = 0, ridge=None, *,
                    tangential: bool = True, cache=None, progress=None) -> dict:
    """:func:`forward_draws` at time ``t`` observed as a store observes its states: the ridge projection and
    distance by :func:`ridgexr.observe.step_quantities` (with the ridge settings of ``ridge``, a
    :class:`ridgexr.catalog.RidgeSpec`, default its defaults) and, with ``tangential``, the distance along the ridge
    to the nearest training point (:func:`forward_tangential`); NaN where the frame is degenerate.  The draws are
    drawn at once and observed in blocks of :data:`REFERENCE_BLOCK` rows, each block on its own (so the numbers are
    the same whether a block was computed now or read from ``cache``).

    Parameters
    ----------
    train : (N, d) array
        The training set the forward process starts at.
    t : float
        OU time of the draws.
    d_star : int
        Ridge dimension.
    n : int
        Number of forward draws.
    seed : int
        Of the draws (:func:`forward_draws`).
    ridge : RidgeSpec, optional
        The store's SCMS settings.
    tangential : bool
        Also the distance along the ridge (one more frame per draw, at its projection, and a nearest-point search;
        a claim that reads only the ridge distance leaves it out: False).
    cache : ReferenceCache, optional
        Blocks already written there under this reference's key (:func:`ridgexr.claims.reference_cache.forward_key`)
        are read, the others computed and written as each finishes (:mod:`ridgexr.claims.reference_cache`).
    progress : callable, optional
        Called with the number of draws observed so far (read or computed), after each block.

    Returns
    -------
    dict: ``ridge_distance`` (n,), ``ridge_projection`` (n, d), ``t``, ``how`` (the reference in words, with how
    many draws are resolved where some fell on degenerate frames and are NaN) and, with ``tangential``,
    ``tangential_distance`` (n,).
    """
    import torch

    from ..empirical import SmoothedEmpirical
    from ..observe import step_quantities

    from .reference_cache import forward_key

    x = forward_draws(train, t, n, seed)
    density = SmoothedEmpirical(train, 1.0, drop_tol=getattr(ridge, "drop_tol", 1e-6),
                                logits=getattr(ridge, "logits", "float64"))

    def observe(rows: slice) -> tuple[np.ndarray, np.ndarray]:
        q = step_quantities(density, torch.as_tensor(x[None, rows], dtype=torch.float64), np.array([t]), d_star, None,
                            tol=getattr(ridge, "tol", None), max_iter=getattr(ridge, "max_iter", 200),
                            top_k=getattr(ridge, "top_k", None),
                            stop_degenerate=getattr(ridge, "stop_degenerate", None),
                            accelerate=bool(getattr(ridge, "accelerate", False)),
                            gap_floor=getattr(ridge, "gap_floor", None), t_min=t)
        bad = np.asarray(q["ridge_degenerate"][0], dtype=bool)
        return (np.where(bad, np.nan, np.asarray(q["ridge_distance"][0], dtype=np.float64)),
                np.where(bad[:, None], np.nan, np.asarray(q["ridge_projection"][0], dtype=np.float64)))

    dist, proj = np.full(n, np.nan), np.full(x.shape, np.nan)
    blocks = [slice(a, min(a + REFERENCE_BLOCK, n)) for a in range(0, n, REFERENCE_BLOCK)]
    stored = None if cache is None else cache.reference(
        forward_key(train, t, d_star, n, seed, ridge, REFERENCE_BLOCK), n, x.shape[1])
    try:
        todo = []
        marks = stored.complete() if stored is not None else np.zeros(len(blocks), dtype=bool)
        for b, rows in enumerate(blocks):
            read = stored.read(b) if marks[b] else None
            if read is None:
                todo.append(b)
            else:
                dist[rows], proj[rows] = read
        done = n - sum(blocks[b].stop - blocks[b].start for b in todo)
        if progress is not None:
            progress(done)
        for b in todo:  # the blocks not in the cache, in order
            dist[blocks[b]], proj[blocks[b]] = observe(blocks[b])
            if stored is not None:
                stored.write(b, dist[blocks[b]], proj[blocks[b]])
            done += blocks[b].stop - blocks[b].start
            if progress is not None:
                progress(done)
    finally:
        if stored is not None:
            stored.close()
    resolved = int(np.isfinite(dist).sum())
    masked = "" if resolved == n else f"; {resolved} of them resolved, {n - resolved} on degenerate frames masked"
    out = {"ridge_distance": dist, "ridge_projection": proj, "t": t,
           "how": f"{n} draws of the forward process from the {train.shape[0]} training points at t = {t:.3g}, "
                  f"observed by the store's code (seed {seed}{masked})"}
    if tangential:
        out["tangential_distance"] = forward_tangential(out, train, d_star, ridge)
    return out


def forward_tangential(observed: dict, train: np.ndarray, d_star: int, ridge=None) -> np.ndarray:
    """The distance along the ridge from each projection of ``observed`` (:func:`observe_forward`'s dict) to its
    nearest scaled training point (:func:`ridgexr.analysis.arrays.tangential_distance`, with the frame's gap floor
    of ``ridge``): (n,), NaN where the projection is NaN or its frame degenerate."""
    return arrays.tangential_distance(observed["ridge_projection"], observed["t"], train, d_star,
                                      gap_floor=getattr(ridge, "gap_floor", None))[..., 0]


class StoreEvidence:
    """One store's cells, their labels, gates and training sets, and the cached references of its claims.

    Parameters
    ----------
    ds : xarray.Dataset
        A ridgexr store (``ridgexr.open_dataset``).
    cache : bool or path
        Where the forward references are kept between calls (:mod:`ridgexr.claims.reference_cache`): True (the
        default) beside the store ``ds`` was opened from (``STORE.claims-cache``; none for a dataset not opened from
        a store), a folder, or False (none: computed in memory, for this object only).
    progress : rich.progress.Progress, optional
        Shows each reference's draws as they are observed ("reference t = 1.28": 340/1000).
    """

    def __init__(self, ds: xr.Dataset, *, cache: bool | str | Path = True, progress=None):
        from ..catalog import Experiment
        from .reference_cache import ReferenceCache, cache_path

        if not isinstance(cache, (bool, str, Path)):
            raise TypeError(f"`cache` must be True, False or a folder; got {type(cache).__name__} {cache!r}")
        self.ds = ds
        source = ds.encoding.get("source")
        folder = (cache_path(source) if cache is True and source else None if cache in (True, False)
                  else Path(cache))
        self._cache = None if folder is None else ReferenceCache(
            folder, {"path": str(source or ""), "config_hash": str(ds.attrs.get("config_hash", ""))})
        self._progress = progress
        self.cells = complete_cells(ds)
        self.exp = Experiment.model_validate_json(ds.attrs["config"]) if "config" in ds.attrs else None
        self.d_star = int(ds.attrs.get("d_star", 1))
        self.d = int(ds.sizes["dim"])
        self.n_samples = int(ds.sizes["sample"])
        self._quality = self._read_quality()
        self._gates = None if self._quality is None else self._quality["gate"]
        self._train: dict = {}
        self._forward: dict = {}
        self._fresh: tuple | None = None

    # ------------------------------------------------------------------ cells
    def _read_quality(self):
        if not any(str(v).startswith("quality_") for v in self.ds.data_vars):
            return None
        from ..quality import sample_quality

        return sample_quality(self.ds)

    def quality(self, label: dict) -> dict:
        """The cell's stored gate measures (:data:`ridgexr.quality.gate.GATE_KEYS`; NaN where the store has
        none)."""
        from ..quality.gate import GATE_KEYS

        q = None if self._quality is None else self._quality.sel(label)
        return {k: float(q[f"quality_{k}"]) if q is not None and f"quality_{k}" in q else math.nan
                for k in GATE_KEYS}

    def gate(self, label: dict) -> str | None:
        """The cell's quality gate ("generates", "does not generate", "not assessed"); None for the exact
        denoiser or a store without qualities."""
        if is_exact_cell(label) or self._gates is None:
            return None
        return str(self._gates.sel(label).item())

    @staticmethod
    def model_name(label: dict) -> str:
        """"exact" for the exact denoiser's cell, else the cell's ``model`` label ("model" when it has none)."""
        return "exact" if is_exact_cell(label) else str(label.get("model", "")) or "model"

    @classmethod
    def display_name(cls, label: dict) -> str:
        """The model's name as a statement says it ("exact denoiser", "U-Net", else its label)."""
        name = cls.model_name(label)
        return {"unet": "U-Net", "exact": "exact denoiser"}.get(name, name)

    def cell(self, label: dict) -> xr.Dataset:
        return self.ds.sel(label)

    def step(self, t: float) -> tuple[int, float]:
        """The recorded step nearest ``t`` and its time."""
        s = step_index(self.ds, t=t)
        return s, float(self.ds["t"].values[s])

    def train(self, label: dict) -> np.ndarray:
        """The cell's training set (its nested subset or draw), finite rows, float64 (N, d); cached."""
        from ..analysis.selection import cell_train

        key = tuple((k, label[k]) for k in ("data_draw", "n_train") if k in label)
        if key not in self._train:
            tr = cell_train(self.ds)
            tr = tr.sel({k: v for k, v in label.items() if k in tr.dims}).values.astype(np.float64)
            self._train[key] = tr[np.isfinite(tr).all(1)]
        return self._train[key]

    # ------------------------------------------------------------------ a cell's measures
    def resolved_at(self, label: dict, step: int, name: str) -> np.ndarray:
        """``name`` (per sample) at one recorded step, NaN where its frame is degenerate: (sample,) or
        (sample, dim)."""
        at = self.cell(label).isel(step=step)
        values = resolved(at, name)
        if "dim" in values.dims:
            values = values.transpose("sample", "dim")
        return np.asarray(values.values, dtype=np.float64)

    def final_samples(self, label: dict) -> np.ndarray:
        """The cell's final samples (sample, dim), as its quality chose them (:func:`ridgexr.quality.stored_final_samples`)."""
        from ..quality import stored_final_samples

        return stored_final_samples(self.cell(label)).transpose("sample", "dim").values.astype(np.float64)

    def tangential_at(self, label: dict, steps: list[int]) -> np.ndarray:
        """The distance along the ridge to the nearest training point (:func:`ridgexr.analysis.tangential_distance`)
        per sample at each of ``steps``: (len(steps), sample)."""
        cell = self.cell(label).isel(step=steps)
        return tangential_distance(cell)["tangential_distance"].transpose("step", "sample").values

    def normal_drift(self, label: dict, t_late: float, t_early: float) -> float:
        """How far the model's normal error moves a typical state between ``t_early`` and ``t_late``: the integral
        over the observed steps of 2 alpha_t m_t / h_t dt (trapezoid), m_t the median over the resolved states of
        |e_N| at t (the reverse SDE's drift error is 2 alpha_t e / h_t, the probability-flow ODE's half of it), in
        data units; NaN without observed steps or residuals."""
        ds = self.ds
        t = np.asarray(ds["t"].values, dtype=np.float64)
        keep = np.flatnonzero((t >= t_late - 1e-12) & (t <= t_early + 1e-12))
        if keep.size == 0 or "residual_normal" not in ds:
            return math.nan
        e_n = resolved(self.cell(label).isel(step=keep), "residual_normal")
        norm = np.sqrt((e_n**2).sum("dim", skipna=False)).median("sample").values.astype(np.float64)  # (steps,)
        tk = t[keep]
        rate = np.where(np.isfinite(norm), 2 * np.exp(-tk) * norm / -np.expm1(-2 * tk), 0.0)
        order = np.argsort(tk)
        return float(np.trapezoid(rate[order], tk[order])) if tk.size > 1 else 0.0

    def normal_error_zero(self, label: dict, step: int) -> bool:
        """Whether the model's normal error is zero at rounding level at ``step``: the median over the resolved
        states of |e_N| at most :data:`ROUNDING` x that of |e_T| (the tangent / normal ratio is then a ratio of
        rounding errors)."""
        e_n = np.linalg.norm(self.resolved_at(label, step, "residual_normal"), axis=-1)
        e_t = np.linalg.norm(self.resolved_at(label, step, "residual_tangent"), axis=-1)
        ok = np.isfinite(e_n) & np.isfinite(e_t)
        if not ok.any():
            return False
        return bool(np.median(e_n[ok]) <= ROUNDING * np.median(e_t[ok]))

    # ------------------------------------------------------------------ references
    def n_reference(self) -> int:
        return max(REFERENCE_DRAWS, self.n_samples)

    def forward(self, label: dict, step: int, seed: int = 0, *, tangential: bool = False) -> dict:
        """The forward process's own states at the recorded step's time, started at the cell's training set,
        observed by the store's code with the store's ridge settings and d* (:func:`observe_forward`,
        :meth:`n_reference` draws); cached per (training set, step, seed) in memory and, block by block, on disk
        (the ``cache`` of the constructor).  ``tangential``: also their distance
        along the ridge (:func:`forward_tangential`), computed the first time a claim asks for it and cached with
        them (the same numbers as ``observe_forward(..., tangential=True)``'s)."""
        train = self.train(label)
        key = (train.shape, float(np.sum(train)), int(step), int(seed))
        ridge = self.exp.ridge if self.exp is not None else None
        if key not in self._forward:
            t = float(self.ds["t"].values[step])
            n = self.n_reference()
            bar = None if self._progress is None else self._progress.add_task(f"reference t = {t:.3g}", total=n)
            self._forward[key] = observe_forward(
                train, t, self.d_star, n, seed, ridge, tangential=False, cache=self._cache,
                progress=None if bar is None else lambda k: self._progress.update(bar, completed=k))
        observed = self._forward[key]
        if tangential and "tangential_distance" not in observed:
            observed["tangential_distance"] = forward_tangential(observed, train, self.d_star, ridge)
        return observed

    def fresh_draws(self) -> tuple[np.ndarray | None, str]:
        """Fresh draws of the store's law (:func:`ridgexr.quality.reference_draws`) and what they are; (None, why)
        where the dataset has none or they cannot be loaded here; cached."""
        if self._fresh is None:
            from ..quality import reference_draws

            if self.exp is None:
                self._fresh = (None, "the store records no configuration")
            else:
                try:
                    draws, how = reference_draws(self.exp.dataset)
                except (OSError, ValueError) as err:  # a dataset whose reference cannot be loaded here: said
                    draws, how = None, f"fresh draws unavailable: {err}"
                if draws is not None and draws.shape[1] != self.d:
                    draws, how = None, f"{how}: of dimension {draws.shape[1]}, not the store's {self.d}"
                self._fresh = (draws, how)
        return self._fresh

    def stored_memorized_null(self, label: dict) -> tuple[int, int] | None:
        """(memorized, counted) fresh draws of the law against the cell's training set as the run stored them
        (``quality_memorized_null_count`` / ``_draws``, schema 1.10: the null tau_mem reads too); None where the
        store has no such count for the cell."""
        from ..analysis.timescales import MEMORIZED_NULL

        if not all(v in self.ds for v in MEMORIZED_NULL):
            return None
        k0, n0 = (float(self.cell(label)[v]) for v in MEMORIZED_NULL)
        return (int(k0), int(n0)) if np.isfinite(k0) and np.isfinite(n0) and n0 > 0 else None

    def memorized_count(self, x: np.ndarray, label: dict) -> tuple[int, int]:
        """(memorized, finite) among the rows of ``x`` against the cell's training set
        (:func:`ridgexr.analysis.arrays.memorized`: d1/d2 < :data:`ridgexr.defaults.MEMORIZED_RATIO`)."""
        flags = arrays.memorized(x, self.train(label))
        ok = np.isfinite(flags)
        return int(flags[ok].sum()), int(ok.sum())
