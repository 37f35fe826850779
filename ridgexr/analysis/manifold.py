"""Labelled analyses for stores of manifold datasets (``dataset.manifold``): how close the samples
come to the data manifold, how new they are, and how well they match the data distribution.

These test "manifold generalization precedes memorization" (Shen, Hsieh & He, 2026): with data
on a k-manifold, samples approach the manifold at a near-parametric rate in the training-set
size N, long before their distribution on it matches the data's (minimax rate ~ N^(-1/k)).

All functions are lazy (dask) and take the store's Dataset; the manifold is rebuilt from the
store's configuration (``ds.attrs["config"]``), its ``population_data`` is a fresh sample of
the data law.  At diffusion time t the smoothed density concentrates on alpha_t M, so
distances at step t are to alpha_t M.
"""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import xarray as xr

from .. import units
from .._validation import check_float, check_int
from ..datasets.manifolds import Manifold
from . import arrays
from ._helpers import along_step, at_step, by_train, cell_train, check_vars, step_label, with_attrs

__all__ = ["store_manifold", "manifold_distance", "novelty", "manifold_density", "distribution_distance",
           "ridge_vs_manifold", "rate_fit"]


def store_manifold(ds: xr.Dataset) -> Manifold:
    """The :class:`ridgexr.datasets.Manifold` a store's training set was drawn from.

    Raises ``ValueError`` for a store whose dataset is not a manifold.
    """
    cfg = json.loads(ds.attrs.get("config", "{}")).get("dataset", {}).get("manifold")
    if not cfg:
        raise ValueError("`ds` must be a store of a manifold dataset (catalog field dataset.manifold)")
    return Manifold(cfg["kind"], ambient_dim=cfg["ambient_dim"], radius=cfg["radius"],
                    minor_radius=cfg["minor_radius"], rotation_seed=cfg["rotation_seed"])


def manifold_distance(ds: xr.DataArray | xr.Dataset, *, variable: str = "trajectory") -> xr.DataArray:
    """Distance of each state (or its ridge projection, ``variable="ridge_projection"``) to alpha_t M.

    Closed form (:meth:`Manifold.distance`): alpha_t d(x / alpha_t, M).  Returns (cells, sample,
    step), data units, lazy.
    """
    check_vars(ds, variable, "alpha")
    m = store_manifold(ds)
    alpha = ds["alpha"]
    scaled = (ds[variable] / alpha).chunk({"dim": -1})
    d = xr.apply_ufunc(m.distance, scaled, input_core_dims=[["dim"]], dask="parallelized", output_dtypes=[float])
    return with_attrs(d * alpha, f"distance of the {variable.replace('_', ' ')} to alpha_t M", units.DATA)


def novelty(ds: xr.Dataset, *, step: int = -1, t: float | None = None, dim: str = "sample") -> xr.DataArray:
    """Nearest-training distance of each sample over the median nearest-neighbour spacing of its
    cell's training set (:func:`ridgexr.analysis.arrays.novelty`), at ``step`` (or nearest ``t``).

    About 1 or more: as far from the training points as they are from each other (new);
    << 1: on top of a training point (memorized).  Returns (cells, sample), lazy.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "trajectory", "train_data", "alpha", dim=dim)
    last = at_step(ds, step, t)
    a = float(last["alpha"])
    x = (last["trajectory"] / a).chunk({"dim": -1})

    def _nov(xx, tr):
        return arrays.novelty(xx, tr[np.isfinite(tr).all(1)])

    out = xr.apply_ufunc(partial(by_train, _nov), x, cell_train(last), input_core_dims=[["dim"], ["train", "dim"]],
                         dask="parallelized", output_dtypes=[float])
    out = with_attrs(out, "nearest-training distance / median nearest-neighbour spacing of the training set", "1")
    out.attrs["step"] = step_label(ds, step, t)
    return out


def manifold_density(ds: xr.Dataset, *, bins: int = 24, tube: float | None = None, step: int = -1,
                     t: float | None = None, dim: str = "sample") -> xr.Dataset:
    """Density of the first manifold coordinate (an angle) of the samples inside a tube around
    alpha_t M, against the population's, at ``step`` (or nearest ``t``).

    ``tube`` defaults to 0.1 alpha_t radius.  Returns ``density`` (cells, bin) and
    ``population_density`` (bin), both per radian over [-pi, pi), ``in_tube`` (cells) the share
    of finite samples inside the tube, and ``ratio_max`` / ``ratio_min`` (cells): the largest
    and smallest ratio of the two densities over the bins, the "comparable density" of the
    theory (1 and 1 for a perfect match; 0 for an empty bin).  Lazy.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "trajectory", "population_data", "alpha", dim=dim)
    bins = check_int(bins, "bins", min_val=2)
    m = store_manifold(ds)
    last = at_step(ds, step, t)
    a = float(last["alpha"])
    tube = 0.1 * a * m.radius if tube is None else check_float(tube, "tube", min_val=0, include_boundaries="neither")
    edges = np.linspace(-np.pi, np.pi, bins + 1)
    width = edges[1] - edges[0]
    pop = np.histogram(m.coordinates(ds["population_data"].transpose("population", "dim").values)[:, 0], bins=edges)[0]
    pop_density = pop / (pop.sum() * width)
    x = (last["trajectory"] / a).chunk({dim: -1, "dim": -1})

    def _dens(xx):
        flat = xx.reshape(-1, *xx.shape[-2:])
        out = np.full((flat.shape[0], bins + 3), np.nan)
        for i, cell in enumerate(flat):  # one histogram per cell (a handful), vectorised over samples
            ok = np.isfinite(cell).all(1)
            inside = ok & (a * m.distance(np.where(ok[:, None], cell, 0.0)) <= tube)
            if ok.sum() == 0:
                continue
            out[i, -1] = inside.sum() / ok.sum()
            if inside.sum() == 0:
                continue
            h = np.histogram(m.coordinates(cell[inside])[:, 0], bins=edges)[0]
            dens = h / (h.sum() * width)
            ratio = np.where(pop_density > 0, dens / np.where(pop_density > 0, pop_density, 1.0), np.nan)
            out[i, :bins] = dens
            out[i, bins], out[i, bins + 1] = np.nanmax(ratio), np.nanmin(ratio)
        return out.reshape(xx.shape[:-2] + (bins + 3,))

    res = xr.apply_ufunc(_dens, x, input_core_dims=[[dim, "dim"]], output_core_dims=[["out"]],
                         dask="parallelized", output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"out": bins + 3}})
    centers = 0.5 * (edges[1:] + edges[:-1])
    out = xr.Dataset({
        "density": with_attrs(res.isel(out=slice(0, bins)).rename(out="bin").assign_coords(bin=centers),
                          "density of the first manifold coordinate of samples in the tube", "rad-1"),
        "population_density": with_attrs(xr.DataArray(pop_density, dims="bin", coords={"bin": centers}),
                                     "density of the first manifold coordinate of the population", "rad-1"),
        "ratio_max": with_attrs(res.isel(out=bins, drop=True), "largest sample / population density ratio over bins", "1"),
        "ratio_min": with_attrs(res.isel(out=bins + 1, drop=True), "smallest sample / population density ratio over bins",
                            "1"),
        "in_tube": with_attrs(res.isel(out=bins + 2, drop=True), f"share of samples within {tube:.3g} of alpha_t M", "1"),
    })
    out["bin"].attrs.update(long_name="first manifold coordinate (bin centre)", units="rad")
    out.attrs.update(tube=float(tube), step=step_label(ds, step, t))
    return out


def distribution_distance(ds: xr.Dataset, *, step: int = -1, t: float | None = None, n_boot: int = 200,
                          n_projections: int = 128, ci: float = 0.95, seed: int = 0,
                          dim: str = "sample") -> xr.Dataset:
    """Sliced 2-Wasserstein distance and squared MMD between the samples (/ alpha_t) and the
    population sample, with percentile-bootstrap intervals over the samples.

    ``sliced_w2`` in data units (:func:`ridgexr.analysis.arrays.sliced_wasserstein`, ``n_projections``
    directions), ``mmd2`` unbiased with the Gaussian kernel at the pooled median distance
    (:func:`ridgexr.analysis.arrays.mmd2`; ~0 for one law, either sign).  Non-finite samples
    are left out.  Returns each with ``_low``/``_high`` over the cells, lazy.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "trajectory", "population_data", "alpha", dim=dim)
    n_boot = check_int(n_boot, "n_boot", min_val=0)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    seed = check_int(seed, "seed", min_val=0)
    last = at_step(ds, step, t)
    a = float(last["alpha"])
    pop = ds["population_data"].transpose("population", "dim").values
    x = (last["trajectory"] / a).chunk({dim: -1, "dim": -1})
    lo_q, hi_q = (1 - ci) / 2, 1 - (1 - ci) / 2

    def _one(cell, rng):
        cell = cell[np.isfinite(cell).all(1)]
        if len(cell) < 2:
            return [np.nan] * 6
        sw = lambda c: arrays.sliced_wasserstein(c, pop, n_projections=n_projections, seed=seed)  # noqa: E731
        stats = [sw(cell), arrays.mmd2(cell, pop)]
        boot = np.array([[sw(c), arrays.mmd2(c, pop)] for c in
                         (cell[rng.integers(0, len(cell), len(cell))] for _ in range(n_boot))]) if n_boot else None
        out = []
        for j, v in enumerate(stats):
            lo, hi = (np.quantile(boot[:, j], [lo_q, hi_q]) if n_boot else (np.nan, np.nan))
            out += [v, lo, hi]
        return out

    def _dist(xx):
        flat = xx.reshape(-1, *xx.shape[-2:])
        rng = np.random.default_rng(seed)
        res = np.array([_one(c, rng) for c in flat])  # one bootstrap per cell (a handful)
        return res.reshape(xx.shape[:-2] + (6,))

    res = xr.apply_ufunc(_dist, x, input_core_dims=[[dim, "dim"]], output_core_dims=[["stat"]],
                         dask="parallelized", output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 6}})
    names = [("sliced_w2", "sliced 2-Wasserstein distance to the population", units.DATA),
             ("mmd2", "squared MMD to the population (Gaussian kernel, median bandwidth)", "1")]
    out = xr.Dataset()
    for j, (name, long_name, unit) in enumerate(names):
        out[name] = with_attrs(res.isel(stat=3 * j, drop=True), long_name, unit)
        out[f"{name}_low"] = with_attrs(res.isel(stat=3 * j + 1, drop=True), f"lower end of the {ci:.0%} bootstrap interval",
                                    unit)
        out[f"{name}_high"] = with_attrs(res.isel(stat=3 * j + 2, drop=True),
                                     f"upper end of the {ci:.0%} bootstrap interval", unit)
    out.attrs.update(step=step_label(ds, step, t), n_boot=n_boot, ci=ci)
    return out


def ridge_vs_manifold(ds: xr.Dataset, *, step: int = -1, t: float | None = None, n_dense: int = 4000,
                      dim: str = "sample") -> xr.Dataset:
    """How far the ridge (as sampled by the projections) is from the data manifold at time t.

    ``to_manifold``: largest distance of a converged ridge projection to alpha_t M (closed form);
    ``from_manifold``: largest distance of a dense uniform sample of alpha_t M (``n_dense``
    points) to the nearest projection (how much of M the projections cover);
    ``hausdorff``: the larger of the two.  Data units, (cells), lazy.
    """
    ds = along_step(ds)  # selected by t (scalar or slice) or after swap_dims(step="t")
    check_vars(ds, "ridge_projection", "alpha", dim=dim)
    n_dense = check_int(n_dense, "n_dense", min_val=10)
    m = store_manifold(ds)
    last = at_step(ds, step, t)
    a = float(last["alpha"])
    dense, _ = m.sample(n_dense, seed=0)
    p = (last["ridge_projection"] / a).chunk({dim: -1, "dim": -1})

    def _haus(pp):
        flat = pp.reshape(-1, *pp.shape[-2:])
        out = np.full((flat.shape[0], 2), np.nan)
        for i, cell in enumerate(flat):  # per cell (a handful); each vectorised
            cell = cell[np.isfinite(cell).all(1)]
            if len(cell):
                out[i] = a * m.distance(cell).max(), a * arrays.nearest_two(dense, cell)[0].max()
        return out.reshape(pp.shape[:-2] + (2,))

    res = xr.apply_ufunc(_haus, p, input_core_dims=[[dim, "dim"]], output_core_dims=[["side"]],
                         dask="parallelized", output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"side": 2}})
    to_m, from_m = res.isel(side=0, drop=True), res.isel(side=1, drop=True)
    return xr.Dataset({
        "to_manifold": with_attrs(to_m, "largest distance of a ridge projection to alpha_t M", units.DATA),
        "from_manifold": with_attrs(from_m, "largest distance of alpha_t M to the nearest ridge projection", units.DATA),
        "hausdorff": with_attrs(np.maximum(to_m, from_m), "Hausdorff distance between the projections and alpha_t M",
                            units.DATA),
    }, attrs={"step": step_label(ds, step, t)})


def rate_fit(metric: xr.DataArray, *, dim: str = "n_train", n_boot: int = 2000, ci: float = 0.95,
             seed: int = 0) -> xr.Dataset:
    """Log-log slope of ``metric`` against the coordinate ``dim`` (e.g. a distance against
    ``n_train``), per remaining cell, with a pairs-bootstrap interval
    (:func:`ridgexr.analysis.arrays.rate_fit`).  A metric ~ c N^-r has slope -r.

    Returns ``slope``, ``slope_low``, ``slope_high``; lazy.
    """
    if dim not in metric.dims:
        raise ValueError(f"`dim` must be a dimension of the metric {metric.dims}; got {dim!r}")
    n = metric[dim].values.astype(float)

    def _fit(v):
        flat = v.reshape(-1, v.shape[-1])
        out = np.array([arrays.rate_fit(n, row, n_boot=n_boot, ci=ci, seed=seed)
                        if np.isfinite(np.log(np.where(row > 0, row, np.nan))).sum() >= 3 else [np.nan] * 3
                        for row in flat])  # one fit per cell
        return out.reshape(v.shape[:-1] + (3,))

    data = metric.chunk({dim: -1}) if metric.chunks else metric
    res = xr.apply_ufunc(_fit, data, input_core_dims=[[dim]], output_core_dims=[["stat"]], dask="parallelized",
                         output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 3}})
    return xr.Dataset({
        "slope": with_attrs(res.isel(stat=0, drop=True), f"log-log slope against {dim}", "1"),
        "slope_low": with_attrs(res.isel(stat=1, drop=True), f"lower end of the {ci:.0%} bootstrap interval", "1"),
        "slope_high": with_attrs(res.isel(stat=2, drop=True), f"upper end of the {ci:.0%} bootstrap interval", "1"),
    }, attrs={"dim": dim})
