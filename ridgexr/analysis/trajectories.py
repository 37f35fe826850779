"""Labelled analyses over a store's Dataset: lazy xarray/dask in, lazy xarray out.

Every function takes the Dataset of :func:`ridgexr.open_dataset` (or one with the same
variables) and returns labelled results over the store's cell dims (``schedule``,
``width``, optional ``tau``) with ``long_name``/``units`` attrs.  Nothing is computed
until ``.compute()``, so the same call runs on a laptop or a dask.distributed cluster.
The Dataset may be selected by time first -- ``ds.sel(t=0.1, method="nearest")``,
``ds.isel(step=-1)``, ``ds.sel(t=slice(0.5, 0.01))`` -- or have ``t`` as its dimension
(``ds.swap_dims(step="t")``): each analysis reads it along ``step``
(:func:`ridgexr.analysis.selection.along_step`; a selection at one time is a single step, the
"last" one).

Definitions (parameters in brackets):

- reach time [r]: the time a trajectory enters, and then stays in, the tube
  {ridge_distance <= r} (NaN if it never does).
- align time [factor]: the time from which ridge_distance stays <= factor x its final
  value (the normal displacement has reached its floor).
- slide: tangential displacement along the ridge from the align time to the end, as the
  chord |P_end - P_align| and the path length sum |P_{k+1} - P_k| of the ridge projections.
- spread: distance from a ridge projection to the nearest scaled training point alpha_t x_i.
- tangential distance [d_star, gap_floor]: the component of that offset alpha_t x_i - P along
  the ridge, |T T^T (alpha_t x_i - P)| with T the tangent frame at P; NaN where the frame is degenerate.
- memorized: d1/d2 < ratio (nearest / second-nearest scaled training distance) at a step.
"""

from __future__ import annotations

import json
from functools import partial

from typing import Sequence

import numpy as np
import xarray as xr

from .._validation import check_float, check_int, check_option
from .. import defaults, units
from . import arrays
from .selection import (along_step, at_step, by_train, cell_train, check_radius, check_vars, degenerate_share, resolved, step_label,
                       with_attrs)

__all__ = ["cell_train", "distance_curves", "ridge_dimension", "ridge_motion", "tangential_distance", "resolved", "degenerate_share", "phase_times", "phase_summary", "spread_curves", "ridge_position",
           "position_histogram", "position_density", "target_effect", "mode_counts", "nearest_ratio_at", "memorization_fraction", "near_mode_fraction",
           "phase_transition", "theory_check", "summary_table", "final_state"]



def final_state(ds: xr.Dataset) -> xr.Dataset:
    """The scheduler's final output (``final_sample``) as a state selected at t = 0.

    A store of ``sampler: {kind: scheduler}`` records the ridge geometry down to the last timestep
    with t > 0; the scheduler's output after that step (alpha_bar = 1, t = 0, where p_t has no
    ridge) is the per-sample ``final_sample``.  This returns the store without its per-step
    variables, with ``trajectory`` (cells..., sample, dim) = ``final_sample`` and the scalar
    coordinates t = 0, alpha = 1, h = 0, so the analyses that need only the state and the training
    set read it as the generated images: e.g. ``memorization_fraction(final_state(ds))``,
    ``near_mode_fraction``, ``mode_counts`` (their ``step`` attribute is -1: not a recorded step).

    Raises
    ------
    ValueError
        When ``ds`` has no ``final_sample`` (not scheduler-sampled, or written before it existed).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> ds = xr.Dataset({"final_sample": (("sample", "dim"), np.ones((2, 3))),
    ...                  "trajectory": (("sample", "step", "dim"), np.zeros((2, 4, 3))),
    ...                  "train_data": (("train", "dim"), np.eye(3))}, coords={"t": ("step", [3., 2., 1., .5])})
    >>> out = final_state(ds)
    >>> float(out["t"]), out["trajectory"].dims, float(out["trajectory"].sum())
    (0.0, ('sample', 'dim'), 6.0)
    """
    check_vars(ds, "final_sample", "train_data")
    per_step = [n for n in ds.variables if "step" in ds[n].dims or n == "step"]
    out = ds.drop_vars(per_step + ["final_sample"])
    t_attrs = dict(ds["t"].attrs) if "t" in ds.variables else {}
    out = out.assign(trajectory=with_attrs(ds["final_sample"].copy(), "the scheduler's final output (t = 0)",
                                           ds["final_sample"].attrs.get("units", units.DATA)))
    return out.assign_coords(t=((), 0.0, t_attrs), alpha=((), 1.0, {"long_name": "alpha_t = exp(-t)", "units": "1"}),
                             h=((), 0.0, {"long_name": "h_t = 1 - exp(-2t)", "units": "1"}))


def distance_curves(ds: xr.Dataset, *, quantiles: Sequence[float] = (0.1, 0.5, 0.9),
                    dim: str = "sample", mask_degenerate: bool = True) -> xr.Dataset:
    """Mean, median and quantiles of ``ridge_distance`` over ``dim`` per cell and step (lazy).

    States whose ridge frame is degenerate are masked, not averaged (:func:`resolved`);
    ``degenerate_share`` (cells, step) says how many were (stores with the flag).
    ``mask_degenerate=False`` averages them too (what a code that trusts arbitrary
    eigenvectors would report; for comparison only).

    Returns a Dataset with ``distance_mean``, ``distance_median`` (cells, step) and
    ``distance_quantile`` (cells, quantile, step) [, ``degenerate_share``]; the ``t``
    coordinate is kept.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "ridge_distance", dim=dim)
    quantiles = [check_float(q, "quantiles[i]", min_val=0, max_val=1) for q in quantiles]
    d = (resolved(ds, "ridge_distance") if mask_degenerate else ds["ridge_distance"]).chunk({dim: -1})
    out = xr.Dataset({
        "distance_mean": with_attrs(d.mean(dim), "mean ridge distance", units.DATA),
        "distance_median": with_attrs(d.median(dim).drop_vars("quantile", errors="ignore"), "median ridge distance",
                                  units.DATA),
        "distance_quantile": with_attrs(d.quantile(list(quantiles), dim=dim), "ridge-distance quantiles", units.DATA),
    })
    if "ridge_degenerate" in ds.variables:
        out["degenerate_share"] = degenerate_share(ds, "ridge_degenerate", dim)
    return out


def ridge_dimension(ds: xr.Dataset, *, quantiles: Sequence[float] = (0.1, 0.9), dim: str = "sample") -> xr.Dataset:
    """The time-dependent ridge dimension d*(t): resolved posterior-covariance directions per step (lazy).

    Rule (``resolved_rank``, :class:`ridgexr.scms.FlatFrame`): at each observed state, the
    number of eigenvalues of the posterior covariance Cov[x0 | x_t = x] above the numerical
    floor of the frame's eigengap test.  A d*-dimensional ridge frame is determined only where
    d* is below this count.  Returns ``d_star_median`` and ``d_star_quantile`` over ``dim``
    (cells, step) of the observed states (rank >= 0).
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "resolved_rank", dim=dim)
    quantiles = [check_float(q, "quantiles[i]", min_val=0, max_val=1) for q in quantiles]
    rank = ds["resolved_rank"].where(ds["resolved_rank"] >= 0).chunk({dim: -1})
    return xr.Dataset({
        "d_star_median": with_attrs(rank.median(dim).drop_vars("quantile", errors="ignore"),
                                    "median number of resolved posterior-covariance directions (d*(t))", "1"),
        "d_star_quantile": with_attrs(rank.quantile(list(quantiles), dim=dim),
                                      "quantiles of the resolved directions", "1"),
    })


def ridge_motion(ds: xr.Dataset, *, dim: str = "sample", mask_degenerate: bool = True) -> xr.Dataset:
    """Motion along the ridge over inference: the displacement of successive ridge projections (lazy).

    In data units (projections divided by alpha_t, so the ridge's own shrinking with t does
    not count): ``ridge_step`` (cells, sample, step) = ``norm(P_k / alpha_k - P_(k-1) / alpha_(k-1))``
    (NaN at the first step and where either projection is degenerate or missing);
    ``ridge_step_mean`` (cells, step) its mean over ``dim``; ``ridge_path_mean`` the cumulative
    sum of that mean from T (how far samples have moved along the ridge by step k).  Both
    projections lie on the ridge, so the displacement is motion along it (up to the ridge's
    own change between the two times).  ``mask_degenerate=False`` keeps projections whose
    frame is degenerate (for comparison only).
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "ridge_projection", "alpha", dim=dim)
    p = (resolved(ds, "ridge_projection") if mask_degenerate else ds["ridge_projection"]) / ds["alpha"]
    step = np.sqrt(((p - p.shift(step=1)) ** 2).sum("dim", skipna=False))
    step = with_attrs(step, "|P_k/alpha_k - P_(k-1)/alpha_(k-1)| of successive ridge projections", units.DATA)
    mean = with_attrs(step.mean(dim), "mean displacement along the ridge between recorded steps", units.DATA)
    path = with_attrs(mean.fillna(0.0).cumsum("step"), "cumulative mean displacement along the ridge from T",
                      units.DATA)
    return xr.Dataset({"ridge_step": step, "ridge_step_mean": mean, "ridge_path_mean": path})


def tangential_distance(ds: xr.Dataset, *, d_star: int | None = None, gap_floor: float | None = None,
                        top_k: int | None = None, quantiles: Sequence[float] = (0.1, 0.5, 0.9),
                        dim: str = "sample") -> xr.Dataset:
    """Tangential motion as a level: the distance along the ridge from each ridge projection to the
    nearest scaled training point, over non-degenerate states only (lazy).

    For the ridge projection P of a state at OU time t, q = alpha_t x_i* the scaled training point
    nearest to P and T the d*-dimensional tangent frame of the log ridge of p_t at P (top-d*
    eigenvectors of the posterior covariance; dense up to d = 128, low-rank above), ``tangential_distance`` =
    ``|T T^T (q - P)|`` and ``normal_offset`` = ``|(I - T T^T)(q - P)|``
    (:func:`ridgexr.analysis.arrays.tangential_distance`); their
    squares sum to the squared spread of :func:`spread_curves`.  A sample that slides along the ridge
    onto a training point drives ``tangential_distance`` to 0; one that stops short keeps it > 0.
    The frame is recomputed at the stored projections from the store's training set (per ``n_train``
    cell: its nested subset).  Masked (NaN): projections the store flags ``ridge_degenerate``, and those
    whose recomputed frame is degenerate under ``gap_floor``; ``masked_share`` says how many.

    Parameters
    ----------
    ds : Dataset
        A store's Dataset (``ridge_projection``, ``train_data``, ``t``), or a selection of it by time.
    d_star : int, optional
        Ridge dimension (1 <= d_star < d); default: the store's ``d_star`` (an integer).
    gap_floor : float, optional
        Relative eigengap floor of the frame at P; default: the store's ``ridge.gap_floor`` (null: sqrt(eps)).
    top_k : int, optional
        Posterior truncation of the recomputed frame; default None (the exact posterior).
    quantiles : sequence of float in [0, 1]
    dim : str
        The dimension reduced over by the summaries (default ``sample``).

    Returns
    -------
    Dataset with ``tangential_distance`` and ``normal_offset`` (cells, sample, step; data units at t),
    ``tangential_distance_mean`` / ``_median`` (cells, step), ``tangential_distance_quantile``
    (cells, quantile, step) over the unmasked states, and ``masked_share`` (cells, step): the share of
    the observed projections left out as degenerate.  Attrs ``d_star``, ``gap_floor``.

    Raises
    ------
    ValueError
        For a Dataset without these variables, a missing or out-of-range ``d_star``, a bad ``gap_floor``.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "ridge_projection", "train_data", "t", dim=dim)
    cfg = json.loads(ds.attrs.get("config", "{}"))
    if d_star is None:
        d_star = cfg.get("d_star")
        if not isinstance(d_star, int):
            raise ValueError(f"`d_star` must be given: the store's d_star is {d_star!r}, not an integer")
    d = ds.sizes["dim"]
    d_star = check_int(d_star, "d_star", min_val=1, max_val=d - 1)
    if gap_floor is None:
        gap_floor = (cfg.get("ridge") or {}).get("gap_floor")
    if gap_floor is not None:
        gap_floor = check_float(gap_floor, "gap_floor", min_val=0, max_val=1, include_boundaries="neither")
    if top_k is not None:
        top_k = check_int(top_k, "top_k", min_val=1)
    quantiles = [check_float(q, "quantiles[i]", min_val=0, max_val=1) for q in quantiles]
    proj = resolved(ds, "ridge_projection").chunk({"dim": -1})
    train = cell_train(ds)

    def _per_train(packed, tr):  # packed (..., d + 1): the projection and its time in the last column
        return arrays.tangential_distance(packed[..., :-1], packed[..., -1], tr, d_star, gap_floor=gap_floor,
                                          top_k=top_k)

    def _kernel(pp, tt, tr):
        packed = np.concatenate([pp, np.broadcast_to(tt, pp.shape[:-1])[..., None]], -1)
        return by_train(_per_train, packed, tr, core=1)

    res = xr.apply_ufunc(_kernel, proj, ds["t"], train, input_core_dims=[["dim"], [], ["train", "dim"]],
                         output_core_dims=[["part"]], dask="parallelized", output_dtypes=[float],
                         dask_gufunc_kwargs={"output_sizes": {"part": 3}})
    along = with_attrs(res.isel(part=0, drop=True), "distance along the ridge to the nearest alpha_t x_i "
                       "(|T T^T (alpha_t x_i - P)|, non-degenerate frames only)", units.DATA)
    across = with_attrs(res.isel(part=1, drop=True), "normal part of the offset to the nearest alpha_t x_i",
                        units.DATA)
    observed = ds["ridge_projection"].notnull().all("dim")
    summary = along.chunk({dim: -1})
    masked = (observed & along.isnull()).sum(dim) / observed.sum(dim)
    return xr.Dataset({
        "tangential_distance": along,
        "normal_offset": across,
        "tangential_distance_mean": with_attrs(summary.mean(dim), "mean distance along the ridge to the nearest "
                                               "alpha_t x_i", units.DATA),
        "tangential_distance_median": with_attrs(summary.median(dim).drop_vars("quantile", errors="ignore"),
                                                 "median distance along the ridge to the nearest alpha_t x_i",
                                                 units.DATA),
        "tangential_distance_quantile": with_attrs(summary.quantile(list(quantiles), dim=dim),
                                                   "quantiles of the distance along the ridge", units.DATA),
        "masked_share": with_attrs(masked, "share of the observed projections left out (degenerate frame)", "1"),
    }, attrs={"d_star": d_star, "gap_floor": "sqrt(eps)" if gap_floor is None else float(gap_floor)})


def phase_times(ds: xr.Dataset, *, r: float = 0.5, align_factor: float = 2.0, atol: float = 0.0) -> xr.Dataset:
    """Reach, align and slide of every trajectory (lazy; see module docstring).

    Returns a Dataset over (cells, sample): ``reach_time``, ``align_time`` (OU time),
    ``slide_chord``, ``slide_path`` (data units).
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "ridge_distance", "ridge_projection", "t")
    r = check_radius(r)
    align_factor = check_float(align_factor, "align_factor", min_val=1)
    atol = check_float(atol, "atol", min_val=0)
    t = ds["t"].values
    dist = resolved(ds, "ridge_distance").chunk({"step": -1})
    proj = resolved(ds, "ridge_projection").chunk({"step": -1, "dim": -1})

    def _phases(dd, pp):
        reach = arrays.reach_time(dd, t, r)
        align = arrays.align_time(dd, t, align_factor, atol)
        chord, path = arrays.slide_distance(pp, t, align)
        return reach, align, chord, path

    outs = xr.apply_ufunc(_phases, dist, proj, input_core_dims=[["step"], ["step", "dim"]],
                          output_core_dims=[[], [], [], []], dask="parallelized",
                          output_dtypes=[float] * 4)
    res = xr.Dataset(dict(zip(("reach_time", "align_time", "slide_chord", "slide_path"), outs)))
    with_attrs(res["reach_time"], f"time of entering and staying in the tube ridge_distance <= {r}", units.TIME)
    with_attrs(res["align_time"], f"time from which ridge_distance stays <= {align_factor} x its final value", units.TIME)
    with_attrs(res["slide_chord"], "|P_end - P_align| of the ridge projections", units.DATA)
    with_attrs(res["slide_path"], "path length of the ridge projections after the align time", units.DATA)
    res.attrs.update(r=float(r), align_factor=float(align_factor))
    return res


def phase_summary(phases: xr.Dataset, dim: str = "sample") -> xr.Dataset:
    """Per-cell medians of the phase times and the share of trajectories that reached the tube."""
    phases = phases.chunk({dim: -1}) if phases.chunks else phases
    out = xr.Dataset({
        "reached": with_attrs(phases["reach_time"].notnull().mean(dim), "share that reached the tube", "1"),
        "reach_time_median": with_attrs(phases["reach_time"].median(dim), "median reach time", units.TIME),
        "align_time_median": with_attrs(phases["align_time"].median(dim), "median align time", units.TIME),
        "slide_chord_median": with_attrs(phases["slide_chord"].median(dim), "median slide (chord)", units.DATA),
        "slide_path_median": with_attrs(phases["slide_path"].median(dim), "median slide (path)", units.DATA),
    })
    out.attrs.update(phases.attrs)
    return out


def spread_curves(ds: xr.Dataset, *, quantiles: Sequence[float] = (0.1, 0.5, 0.9),
                  dim: str = "sample") -> xr.Dataset:
    """Tangential spread vs step: distance of ridge projections to the nearest alpha_t x_i.

    Returns ``spread_mean`` (cells, step) and ``spread_quantile`` (cells, quantile, step).
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "ridge_projection", "train_data", "alpha", dim=dim)
    quantiles = [check_float(q, "quantiles[i]", min_val=0, max_val=1) for q in quantiles]
    train = cell_train(ds)
    alpha = ds["alpha"]
    unscaled = (ds["ridge_projection"] / alpha).chunk({"dim": -1})

    def _nearest(p, tr):
        return arrays.nearest_two(p, tr)[0]

    near = xr.apply_ufunc(partial(by_train, _nearest, core=1), unscaled, train, input_core_dims=[["dim"], ["train", "dim"]],
                          dask="parallelized", output_dtypes=[float]) * alpha  # back to data units at t
    near = near.chunk({dim: -1})
    return xr.Dataset({
        "spread_mean": with_attrs(near.mean(dim), "mean distance of projections to the nearest alpha_t x_i", units.DATA),
        "spread_quantile": with_attrs(near.quantile(list(quantiles), dim=dim),
                                  "quantiles of the distance of projections to the nearest alpha_t x_i", units.DATA),
    })


def ridge_position(ds: xr.Dataset) -> xr.DataArray:
    """Position of each ridge projection along the first principal axis of the training set.

    For a 1-d ridge through collinear points (e.g. two points) this is the coordinate along
    the ridge; (cells, sample, step), data units, lazy.
    """
    check_vars(ds, "ridge_projection", "train_data")
    train = ds["train_data"].values
    center = train.mean(0)
    if train.shape[0] >= 2:
        _, _, vt = np.linalg.svd(train - center, full_matrices=False)
        axis = vt[0] * np.sign(vt[0][np.argmax(np.abs(vt[0]))])
    else:
        axis = np.eye(train.shape[1])[0]
    ax = xr.DataArray(axis, dims="dim")
    pos = ((ds["ridge_projection"] - xr.DataArray(center, dims="dim") * ds["alpha"]) * ax).sum("dim")
    return with_attrs(pos, "position along the first principal axis of the training set", units.DATA)


def position_histogram(ds: xr.Dataset, *, bins: int = 40, step: int = -1, t: float | None = None,
                       dim: str = "sample") -> xr.Dataset:
    """Histogram of :func:`ridge_position` at one step per cell: ``density`` (cells, bin).

    The step is ``step`` (index) or, when ``t`` is given, the recorded step nearest to time ``t``.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "ridge_projection", "train_data", dim=dim)
    bins = check_int(bins, "bins", min_val=1)
    pos = ridge_position(at_step(ds, step, t) if "step" in ds.dims else ds).chunk({dim: -1})
    lim = float(np.abs(ds["train_data"].values).max()) * 1.5 + 1.0
    edges = np.linspace(-lim, lim, bins + 1)

    def _hist(p):
        flat = p.reshape(-1, p.shape[-1])
        h = np.stack([np.histogram(row[np.isfinite(row)], bins=edges, density=True)[0]
                      if np.isfinite(row).any() else np.full(bins, np.nan) for row in flat])
        return h.reshape(p.shape[:-1] + (bins,))

    h = xr.apply_ufunc(_hist, pos, input_core_dims=[[dim]], output_core_dims=[["bin"]], dask="parallelized",
                       output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"bin": bins}})
    h = h.assign_coords(bin=0.5 * (edges[1:] + edges[:-1]))
    return xr.Dataset({"density": with_attrs(h, "density of positions along the ridge", units.INV_DATA)})


def position_density(ds: xr.Dataset, *, n_points: int = 201, bw_method: str | float = "scott", step: int = -1,
                     t: float | None = None, dim: str = "sample") -> xr.Dataset:
    """Gaussian KDE of :func:`ridge_position` at one step per cell (the paper's 1-D density along the ridge).

    ``scipy.stats.gaussian_kde`` with ``bw_method`` over the finite positions of each cell,
    evaluated on ``n_points`` positions spanning the scaled training set +- 50 % (coordinate
    ``position``, data units).  Returns ``density`` (cells, position), 1 / data units, lazy.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    from scipy.stats import gaussian_kde

    check_vars(ds, "ridge_projection", "train_data", dim=dim)
    n_points = check_int(n_points, "n_points", min_val=2)
    if not (isinstance(bw_method, str) and bw_method in ("scott", "silverman")):
        check_float(bw_method, "bw_method", min_val=0, include_boundaries="neither")
    pos = ridge_position(at_step(ds, step, t) if "step" in ds.dims else ds).chunk({dim: -1})
    lim = float(np.abs(ds["train_data"].values).max()) * 1.5 + 1.0
    grid = np.linspace(-lim, lim, n_points)

    def _kde(p):
        flat = p.reshape(-1, p.shape[-1])
        out = np.full((flat.shape[0], n_points), np.nan)
        for i, row in enumerate(flat):  # one KDE per cell (a handful), each vectorised over samples
            row = row[np.isfinite(row)]
            if row.size >= 2 and np.ptp(row) > 0:
                out[i] = gaussian_kde(row, bw_method=bw_method)(grid)
        return out.reshape(p.shape[:-1] + (n_points,))

    dens = xr.apply_ufunc(_kde, pos, input_core_dims=[[dim]], output_core_dims=[["position"]],
                          dask="parallelized", output_dtypes=[float],
                          dask_gufunc_kwargs={"output_sizes": {"position": n_points}})
    dens = dens.assign_coords(position=grid)
    dens["position"].attrs.update(long_name="position along the ridge (first principal axis)", units=units.DATA)
    return xr.Dataset({"density": with_attrs(dens, "KDE of positions along the ridge", units.INV_DATA)})


def _share_per_cell(flag, x: xr.DataArray, train: xr.DataArray, name: str, long_name: str, ci: float,
                    ci_method: str, dim: str) -> xr.Dataset:
    """``name``, ``name_low``, ``name_high``: the share of samples (over ``dim``) where
    ``flag(points, training set)`` is 1, with its binomial interval, per cell (lazy)."""
    def _share(xx, tr):
        return arrays.share_with_ci(flag(xx, tr), ci, ci_method)

    # core dimensions must be one chunk each: a store writes a large training set in several chunks along `train`
    if train.chunks is not None:
        train = train.chunk({"train": -1, "dim": -1})
    if x.chunks is not None:
        x = x.chunk({dim: -1, "dim": -1})
    stats = xr.apply_ufunc(partial(by_train, _share, core=2), x, train, input_core_dims=[[dim, "dim"], ["train", "dim"]],
                           output_core_dims=[["stat"]], dask="parallelized", output_dtypes=[float],
                           dask_gufunc_kwargs={"output_sizes": {"stat": 3}})
    return xr.Dataset({
        name: with_attrs(stats.isel(stat=0), long_name, "1"),
        f"{name}_low": with_attrs(stats.isel(stat=1), f"lower end of the {ci:.0%} {ci_method} interval", "1"),
        f"{name}_high": with_attrs(stats.isel(stat=2), f"upper end of the {ci:.0%} {ci_method} interval", "1"),
    })


def near_mode_fraction(ds: xr.Dataset, *, r: float = 0.5, step: int = -1, t: float | None = None,
                       ci: float = 0.95, ci_method: str = "wilson", dim: str = "sample") -> xr.Dataset:
    """Share of samples within ``r`` of a scaled training point alpha_t x_i (the paper's count), with a CI.

    The paper counts a sample as memorized when it lies within 0.5 of a training point
    (at t_min, alpha_t ~ 1); :func:`memorization_fraction` (d1/d2 < 1/3) is ridgexr's other
    measure, and the two disagree off the modes (a sample at the midpoint of two points is
    far from both, but one far from the data along the ridge has d1/d2 small), so both are
    reported.  CI: Wilson's (default) or Clopper-Pearson's over the finite samples.

    Returns ``near_mode``, ``near_mode_low``, ``near_mode_high`` over the cells (lazy).
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "trajectory", "train_data", "alpha", dim=dim)
    r = check_radius(r)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    check_option(ci_method, "ci_method", arrays.CI_METHODS)
    last = at_step(ds, step, t)
    pts = cell_train(last) * float(last["alpha"])
    x = last["trajectory"].chunk({dim: -1, "dim": -1})

    out = _share_per_cell(lambda xx, pp: arrays.near_mode(xx, pp, r), x, pts, "near_mode",
                          f"share of samples within {r:g} of some alpha_t x_i", ci, ci_method, dim)
    out.attrs.update(r=float(r), ci=float(ci), ci_method=ci_method, step=step_label(ds, step, t))
    return out


def target_effect(ds: xr.Dataset, *, r: float = 0.5, ci: float = 0.95, n_boot: int = 2000, seed: int = 0,
                  step: int = -1, t: float | None = None, dim: str = "sample") -> xr.Dataset:
    """What fitting the noisy DSM target instead of its mean does to the samples: paired differences.

    For a store with a ``target`` dimension holding ``dsm`` and ``ideal`` (``training.target:
    [dsm, ideal]``), per remaining cell and at ``step`` (or the step nearest ``t``):

    - ``near_mode_diff`` = near-mode share (within ``r`` of some alpha_t x_i) of the DSM fit
      minus that of the ideal fit; negative: the DSM target's variance moved samples off the modes;
    - ``spread_diff`` = mean distance of the ridge projections to the nearest alpha_t x_i
      (the tangential spread, data units), DSM minus ideal; positive: more spread along the ridge.

    Both cells of a pair use the same sampler noise (common random numbers), so the
    differences are paired over samples; ``*_low`` / ``*_high`` are percentile-bootstrap
    intervals over samples (``n_boot`` replicates, ``seed``).  Samples not finite in both
    cells are left out.  Lazy.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "trajectory", "ridge_projection", "train_data", "alpha", dim=dim)
    r = check_radius(r)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    n_boot = check_int(n_boot, "n_boot", min_val=10)
    seed = check_int(seed, "seed", min_val=0)
    if "target" not in ds.dims or not {"dsm", "ideal"} <= {str(v) for v in ds["target"].values}:
        raise ValueError("`ds` must have a 'target' dimension holding 'dsm' and 'ideal' "
                         "(an entry with training.target: [dsm, ideal])")
    last = at_step(ds, step, t)
    pts = cell_train(last) * float(last["alpha"])

    def _near(xx, pp):
        return arrays.near_mode(xx, pp, r)

    def _spread(xx, pp):
        d1, _, _ = arrays.nearest_two(xx, pp)
        return np.where(np.isfinite(d1), d1, np.nan)

    per_sample = {}
    for name, var, fn in (("near_mode", "trajectory", _near), ("spread", "ridge_projection", _spread)):
        per_sample[name] = xr.apply_ufunc(partial(by_train, fn, core=1), last[var].chunk({"dim": -1}), pts,
                                          input_core_dims=[["dim"], ["train", "dim"]],
                                          dask="parallelized", output_dtypes=[float])

    def _paired(a, b):
        diff = a - b  # NaN where either is missing
        return arrays.bootstrap_mean_ci(diff, n_boot=n_boot, ci=ci, seed=seed)

    out = xr.Dataset()
    meaning = {"near_mode": ("near-mode share, DSM minus ideal target", "1"),
               "spread": ("mean distance of projections to the nearest alpha_t x_i, DSM minus ideal", units.DATA)}
    for name, v in per_sample.items():
        a, b = (v.sel(target=k, drop=True).chunk({dim: -1}) for k in ("dsm", "ideal"))
        stats = xr.apply_ufunc(_paired, a, b, input_core_dims=[[dim], [dim]], output_core_dims=[["stat"]],
                               dask="parallelized", output_dtypes=[float],
                               dask_gufunc_kwargs={"output_sizes": {"stat": 3}})
        long_name, unit = meaning[name]
        out[f"{name}_diff"] = with_attrs(stats.isel(stat=0, drop=True), long_name, unit)
        out[f"{name}_diff_low"] = with_attrs(stats.isel(stat=1, drop=True), f"lower end of the {ci:.0%} bootstrap "
                                         "interval (paired over samples)", unit)
        out[f"{name}_diff_high"] = with_attrs(stats.isel(stat=2, drop=True), f"upper end of the {ci:.0%} bootstrap "
                                          "interval (paired over samples)", unit)
        for k in ("dsm", "ideal"):
            out[f"{name}_{k}"] = with_attrs(v.sel(target=k, drop=True).mean(dim), f"{name.replace('_', '-')} "
                                        f"{'share' if name == 'near_mode' else 'mean'}, {k} target", unit)
    out.attrs.update(r=float(r), ci=float(ci), n_boot=n_boot, step=step_label(ds, step, t))
    return out


def mode_counts(ds: xr.Dataset, *, r: float = 0.5, step: int = -1, t: float | None = None,
                dim: str = "sample") -> xr.Dataset:
    """Share of samples within ``r`` of each scaled training point, and of any, at ``step`` (or nearest ``t``).

    Returns ``share`` (cells, train) and ``share_any`` (cells).
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "trajectory", "train_data", "alpha", dim=dim)
    r = check_radius(r)
    last = at_step(ds, step, t)
    pts = cell_train(last) * last["alpha"]
    x = last["trajectory"]
    dist = np.sqrt(((x - pts) ** 2).sum("dim", skipna=False))  # (cells, sample, train), lazy; NaN beyond n_train
    valid = x.notnull().all("dim")
    within = (dist <= r).where(valid)
    share = within.mean(dim).where(pts.notnull().all("dim"))
    share_any = within.max("train").mean(dim)
    out = xr.Dataset({"share": with_attrs(share, f"share of samples within {r} of alpha_t x_i", "1"),
                      "share_any": with_attrs(share_any, f"share of samples within {r} of any alpha_t x_i", "1")})
    out.attrs.update(r=float(r), step=step_label(ds, step, t))
    return out


def _unobserved(ds: xr.Dataset) -> bool:
    """Whether the store's configuration has ``ridge.observe: false`` (its per-step observations are fill values)."""
    cfg = json.loads(ds.attrs.get("config") or "{}")
    return (cfg.get("ridge") or {}).get("observe") is False


def nearest_ratio_at(ds: xr.Dataset, *, step: int = -1, t: float | None = None, dim: str = "sample") -> xr.DataArray:
    """d1/d2 of every sample at ``step`` (or the step nearest ``t``): nearest over second-nearest distance
    to the cell's training points, the one input of both memorization measures.

    A store of schema 1.5 or later holds it (``nearest_ratio``, computed at run time by
    :func:`ridgexr.nearest.step_nearest` against alpha_t x_i, with distances recomputed directly so
    that there is no cancellation); it is read, not recomputed.  A Dataset without it (an older store,
    one built in memory) gets it from ``trajectory``, ``train_data`` and ``alpha`` by
    :func:`ridgexr.analysis.arrays.nearest_two`, which also recomputes the two winners' distances
    directly (the ratio is scale-free, so x / alpha_t against x_i is the same ratio); so does a store
    that did not observe its states (``ridge.observe: false``: its ``nearest_ratio`` is the fill value).
    NaN where the state is not finite.  Dims: the cell dims and ``dim`` (lazy with dask inputs).
    """
    ds = along_step(ds)
    if "nearest_ratio" in ds and not _unobserved(ds):
        check_vars(ds, "nearest_ratio", dim=dim)
        return at_step(ds, step, t)["nearest_ratio"]
    check_vars(ds, "trajectory", "train_data", "alpha", dim=dim)
    if ds.sizes.get("train", 0) < 2:
        raise ValueError("d1/d2 needs at least two training points")
    last = at_step(ds, step, t)
    train = cell_train(last)
    a = float(last["alpha"])
    x = last["trajectory"]
    if x.chunks is not None:
        x = x.chunk({dim: -1, "dim": -1})

    def ratio(xx, tr):
        d1, d2, _ = arrays.nearest_two(xx / a, tr)
        return np.where(np.isfinite(d1), d1 / d2, np.nan)

    r = xr.apply_ufunc(partial(by_train, ratio, core=2), x, train, input_core_dims=[[dim, "dim"], ["train", "dim"]],
                       output_core_dims=[[dim]], dask="parallelized", output_dtypes=[float])
    return with_attrs(r, "d1 / d2: nearest over second-nearest training distance", "1")


def memorization_fraction(ds: xr.Dataset, *, ratio: float = defaults.MEMORIZED_RATIO, step: int = -1, t: float | None = None,
                          ci: float = 0.95, ci_method: str = "wilson", dim: str = "sample") -> xr.Dataset:
    """Share of samples with d1/d2 < ``ratio`` at ``step`` (or nearest ``t``), with a binomial CI.

    d1/d2 comes from :func:`nearest_ratio_at` (the stored ``nearest_ratio`` where the store has it).
    The CI of the share is Wilson's score interval (``ci_method="wilson"``, default) or the
    exact Clopper-Pearson interval, over the samples with finite states; it does not
    collapse to [1, 1] at 256 / 256 as a percentile bootstrap does.  Bonnaire et al.'s f_mem is the
    same share with their percentile-bootstrap interval: :func:`ridgexr.analysis.memorized_share`.

    Returns ``memorized``, ``memorized_low``, ``memorized_high`` over the cells (lazy).
    """
    ratio = check_float(ratio, "ratio", min_val=0, max_val=1, include_boundaries="neither")
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    check_option(ci_method, "ci_method", arrays.CI_METHODS)
    r = nearest_ratio_at(ds, step=step, t=t, dim=dim)
    if r.chunks is not None:
        r = r.chunk({dim: -1})

    def share(rr):
        return arrays.share_with_ci(np.where(np.isfinite(rr), rr < ratio, np.nan), ci, ci_method)

    stats = xr.apply_ufunc(share, r, input_core_dims=[[dim]], output_core_dims=[["stat"]], dask="parallelized",
                           output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 3}})
    out = xr.Dataset({
        "memorized": with_attrs(stats.isel(stat=0), f"share of samples with d1/d2 < {ratio:.3g}", "1"),
        "memorized_low": with_attrs(stats.isel(stat=1), f"lower end of the {ci:.0%} {ci_method} interval", "1"),
        "memorized_high": with_attrs(stats.isel(stat=2), f"upper end of the {ci:.0%} {ci_method} interval", "1"),
    })
    out.attrs.update(ratio=float(ratio), ci=float(ci), ci_method=ci_method, step=step_label(along_step(ds), step, t))
    return out


def phase_transition(metric: xr.DataArray | xr.Dataset, *, dim: str = "width", level: float = 0.5,
                     log: bool = True) -> xr.Dataset:
    """Critical value of ``dim`` where a metric crosses ``level`` (interpolated in log ``dim``).

    ``metric`` is a DataArray over ``dim`` (and other dims), or a Dataset holding one share
    ``X`` with its interval ``X_low``, ``X_high`` (:func:`memorization_fraction`,
    :func:`near_mode_fraction`), whose bound curves then give a CI of the crossing.
    """
    if isinstance(metric, xr.Dataset):
        names = [v for v in metric.data_vars if f"{v}_low" in metric and f"{v}_high" in metric]
        if len(names) != 1:
            raise ValueError("`metric` must be a DataArray or a Dataset with one share X and its X_low, X_high; "
                             f"got variables {list(metric.data_vars)}")
        main, low, high = metric[names[0]], metric[f"{names[0]}_low"], metric[f"{names[0]}_high"]
    else:
        main, low, high = metric, None, None
    if dim not in main.dims:
        raise ValueError(f"`dim` must be a dimension of the metric {main.dims}; got {dim!r}")
    x = main[dim].values.astype(float)

    def _cross(y):
        return np.apply_along_axis(lambda v: arrays.crossing(x, v, level, log), -1, y)

    def run(da):
        return xr.apply_ufunc(_cross, da.chunk({dim: -1}) if da.chunks else da, input_core_dims=[[dim]],
                              dask="parallelized", output_dtypes=[float])

    out = xr.Dataset({"critical": with_attrs(run(main), f"{dim} where the metric crosses {level}", "same as " + dim)})
    if low is not None:
        # each bootstrap bound curve crosses the level somewhere; NaN (propagated) when a bound
        # does not cross inside the swept range: the CI then extends beyond the sweep
        a, b = run(low), run(high)
        out["critical_low"] = with_attrs(np.minimum(a, b), "lower end of the crossing's CI (interval bounds); "
                                     "NaN: beyond the swept range", dim)
        out["critical_high"] = with_attrs(np.maximum(a, b), "upper end of the crossing's CI (interval bounds); "
                                      "NaN: beyond the swept range", dim)
    out.attrs.update(level=float(level), dim=dim)
    return out


def theory_check(ds: xr.Dataset, *, r: float = 0.5, align_factor: float = 2.0, dim: str = "sample") -> xr.Dataset:
    """Final ridge distance vs integrated normal residual, slide vs integrated tangential residual.

    Per trajectory: ``final_distance``, ``integrated_normal`` (``sum 2 dt alpha/h |e_N|``),
    ``slide_chord``, ``integrated_tangent``; per cell: Pearson ``corr_normal`` and
    ``corr_tangent`` over samples.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "residual_normal", "residual_tangent", "ridge_distance", "t", dim=dim)
    t = ds["t"].values

    def _integ(res):
        return arrays.integrated_residual(res, t)

    def integ(name):
        return xr.apply_ufunc(_integ, resolved(ds, name).chunk({"step": -1, "dim": -1}), input_core_dims=[["step", "dim"]],
                              dask="parallelized", output_dtypes=[float])

    ph = phase_times(ds, r=r, align_factor=align_factor)
    out = xr.Dataset({
        "final_distance": with_attrs(resolved(ds, "ridge_distance").isel(step=-1), "final ridge distance", units.DATA),
        "integrated_normal": with_attrs(integ("residual_normal"), "sum_k 2 dt alpha/h |residual_normal|", units.DATA),
        "slide_chord": ph["slide_chord"],
        "integrated_tangent": with_attrs(integ("residual_tangent"), "sum_k 2 dt alpha/h |residual_tangent|", units.DATA),
    })
    out["corr_normal"] = with_attrs(xr.corr(out["final_distance"], out["integrated_normal"], dim=dim),
                                "Pearson correlation, final distance vs integrated normal residual", "1")
    out["corr_tangent"] = with_attrs(xr.corr(out["slide_chord"], out["integrated_tangent"], dim=dim),
                                 "Pearson correlation, slide vs integrated tangential residual", "1")
    return out


def summary_table(ds: xr.Dataset, *, r: float = 0.5, ci: float = 0.95) -> xr.Dataset:
    """Everything ``ridgexr analyze`` prints, per cell, as one lazy Dataset.

    ``r`` is the radius of both the tube of :func:`phase_times` and the modes of
    :func:`mode_counts` (data units).
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    ph = phase_summary(phase_times(ds, r=r))
    sp = spread_curves(ds)["spread_mean"].isel(step=-1).rename("spread_final")
    parts = [ph, sp.to_dataset(), near_mode_fraction(ds, r=r, ci=ci)]
    if ds.sizes.get("train", 0) >= 2:
        parts.append(memorization_fraction(ds, ci=ci))
    return xr.merge(parts, compat="override")
