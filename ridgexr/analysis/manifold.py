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
from .selection import along_step, at_step, by_train, cell_train, check_vars, step_label, with_attrs

__all__ = ["store_manifold", "manifold_distance", "novelty", "manifold_density", "distribution_distance",
           "ridge_vs_manifold", "rate_fit", "coverage",
           "smoothed_target_distance"]


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

    out = xr.apply_ufunc(partial(by_train, _nov, core=1), x, cell_train(last), input_core_dims=[["dim"], ["train", "dim"]],
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
             seed: int = 0, draw_dim: str | None = None) -> xr.Dataset:
    """Log-log slope of ``metric`` against the coordinate ``dim`` (e.g. a distance against
    ``n_train``), per remaining cell, with a pairs-bootstrap interval
    (:func:`ridgexr.analysis.arrays.rate_fit`).  A metric ~ c N^-r has slope -r.

    With ``draw_dim`` (e.g. ``"data_draw"``, independent training sets): one slope per draw, their
    mean and a Student-t interval from their spread (:func:`ridgexr.analysis.arrays.draw_rate_fit`),
    plus ``n_draws`` (the draws with a slope); ``n_boot`` and ``seed`` are then unused.

    Returns ``slope``, ``slope_low``, ``slope_high`` (and ``n_draws``); lazy.
    """
    if dim not in metric.dims:
        raise ValueError(f"`dim` must be a dimension of the metric {metric.dims}; got {dim!r}")
    n = metric[dim].values.astype(float)
    if draw_dim is not None:
        if draw_dim not in metric.dims or draw_dim == dim:
            raise ValueError(f"`draw_dim` must be a dimension of the metric {metric.dims} other than {dim!r}; "
                             f"got {draw_dim!r}")

        def _dfit(v):
            flat = v.reshape(-1, *v.shape[-2:])
            out = np.array([arrays.draw_rate_fit(n, cell, ci=ci) for cell in flat])  # one fit per cell
            return out.reshape(v.shape[:-2] + (4,))

        data = metric.chunk({dim: -1, draw_dim: -1}) if metric.chunks else metric
        res = xr.apply_ufunc(_dfit, data, input_core_dims=[[draw_dim, dim]], output_core_dims=[["stat"]],
                             dask="parallelized", output_dtypes=[float],
                             dask_gufunc_kwargs={"output_sizes": {"stat": 4}})
        return xr.Dataset({
            "slope": with_attrs(res.isel(stat=0, drop=True), f"mean over {draw_dim} of the log-log slopes against "
                                f"{dim}", "1"),
            "slope_low": with_attrs(res.isel(stat=1, drop=True), f"lower end of the {ci:.0%} Student-t interval "
                                    f"over {draw_dim}", "1"),
            "slope_high": with_attrs(res.isel(stat=2, drop=True), f"upper end of the {ci:.0%} Student-t interval "
                                     f"over {draw_dim}", "1"),
            "n_draws": with_attrs(res.isel(stat=3, drop=True), f"{draw_dim} labels with a slope", "1"),
        }, attrs={"dim": dim, "draw_dim": draw_dim})

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


def _circle_arc_mass(center: np.ndarray, half_angle: np.ndarray, density: str, kappa: float) -> np.ndarray:
    """Population mass of the arcs [phi - a, phi + a] of a circle (closed form), (n_centers, n_radii)."""

    def cdf(theta):  # cumulative mass from -pi, continued periodically (one more unit per turn)
        turns = np.floor((theta + np.pi) / (2 * np.pi))
        w = theta - 2 * np.pi * turns  # in [-pi, pi)
        if density == "uniform":
            base = (w + np.pi) / (2 * np.pi)
        elif density == "piecewise":  # 1/3 of the mass on [-pi, 0), 2/3 on [0, pi)
            base = np.where(w < 0, (w + np.pi) / (3 * np.pi), 1 / 3 + 2 * w / (3 * np.pi))
        else:
            from scipy import stats
            base = stats.vonmises.cdf(w, kappa) - stats.vonmises.cdf(-np.pi, kappa)
        return turns + base

    a = np.minimum(half_angle, np.pi)
    return np.clip(cdf(center[:, None] + a[None, :]) - cdf(center[:, None] - a[None, :]), 0.0, 1.0)


def _sphere_cap_mass(center: np.ndarray, half_angle: np.ndarray, density: str, n_grid: int = 4097) -> np.ndarray:
    """Population mass of the geodesic caps of half-angle a (radians) around unit ``center`` (n, 3), in
    the sphere's own coordinates, for the uniform or piecewise density, (n_centers, n_radii).

    Piecewise: 4/3 x uniform on the half y2 >= 0 (azimuth in [0, pi)), 2/3 x on the other.  The circle
    at angle s from c meets that half in the share arccos(q) / pi of its length, q = -c2 cos s /
    (sqrt(1 - c2^2) sin s) clipped to [-1, 1] (closed form); the mass is the integral over s of
    sin(s) / 2 x (2/3 + 2/3 share(s)), by the trapezoid rule on ``n_grid`` angles in [0, pi]
    (uniform: (1 - cos a) / 2 exactly).
    """
    a = np.minimum(np.asarray(half_angle, dtype=np.float64), np.pi)
    if density == "uniform":
        return np.broadcast_to((1 - np.cos(a)) / 2, (center.shape[0], a.size)).copy()
    s = np.linspace(0.0, np.pi, n_grid)
    c2 = np.clip(center[:, 1:2], -1.0, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = -c2 * np.cos(s) / (np.sqrt(1 - c2 * c2) * np.sin(s))
    # at s = 0, pi and for c on the y2 axis q is +-inf (the whole circle on one side); 0 / 0 (c on y2 = 0
    # at s = pi / 2): the great circle, half on each side
    share = np.arccos(np.clip(np.nan_to_num(q, nan=0.0), -1.0, 1.0)) / np.pi
    f = np.sin(s) / 2 * (2 / 3 + 2 / 3 * share)
    cum = np.concatenate([np.zeros((f.shape[0], 1)), np.cumsum((f[:, 1:] + f[:, :-1]) / 2 * np.diff(s), -1)], -1)
    # linear interpolation in s, every centre at once (np.interp's formula, row by row)
    j = np.clip(np.searchsorted(s, a, side="right"), 1, s.size - 1)
    w = np.clip((a - s[j - 1]) / (s[j] - s[j - 1]), 0.0, 1.0)
    return np.clip(cum[:, j - 1] * (1 - w) + cum[:, j] * w, 0.0, 1.0)


#: samples per chunk of :func:`coverage` (its distance matrix is n_centers x this)
COVERAGE_CHUNK = 16384
#: the most ball centres :func:`coverage` refines to (circle and sphere)
MAX_CENTRES = 2**20
#: centres per call of the sphere's cap masses (its quadrature holds centres x 4 097 values)
CAP_CHUNK = 2048


class _Centres:
    """The ball centres of :func:`coverage` on one store's manifold, their population masses, and the refinement
    of delta on denser centres."""

    def __init__(self, m, cfg: dict, radii: np.ndarray, ds: xr.Dataset):
        self.m, self.cfg, self.radii, self.r0 = m, cfg, radii, float(m.radius)
        self.pop = self.pop_tree = None
        if m.kind == "sphere" and cfg["density"] not in ("uniform", "piecewise"):
            check_vars(ds, "population_data")
            self.pop = self._unit(np.asarray(ds["population_data"].values, dtype=np.float64))

    def _unit(self, x):
        u = self.m.local(x)[..., :self.m.k + 1]
        return u / np.linalg.norm(u, axis=-1, keepdims=True)

    def _grid(self, n: int) -> np.ndarray:
        """n centres: angles (circle) or unit vectors of a Fibonacci lattice (sphere)."""
        if self.m.kind == "circle":
            return np.linspace(-np.pi, np.pi, n, endpoint=False)
        i = np.arange(n) + 0.5
        z, ang = 1 - 2 * i / n, np.pi * (1 + 5**0.5) * i
        s = np.sqrt(1 - z * z)
        return np.c_[s * np.cos(ang), s * np.sin(ang), z]

    def spacing(self, n: int) -> float:
        return 2 * np.pi * self.r0 / n if self.m.kind == "circle" else float(np.sqrt(4 * np.pi / n)) * self.r0

    def pop_mass(self, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
        """Population masses (n_centres, n_radii) of the balls."""
        a = radii / self.r0
        if self.m.kind == "circle":
            return _circle_arc_mass(centres, a, self.cfg["density"], float(self.cfg.get("kappa", 1.0)))
        if self.pop is not None:  # a population sample's share (its k-d tree built once)
            from scipy.spatial import cKDTree

            if not isinstance(self.pop_tree, cKDTree):
                self.pop_tree = cKDTree(self.pop)
            return self._counts(self.pop_tree, centres, a) / len(self.pop)
        return np.concatenate([_sphere_cap_mass(centres[i:i + CAP_CHUNK], a, self.cfg["density"])
                               for i in range(0, len(centres), CAP_CHUNK)])

    def first(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``n`` centres embedded in R^D, and their population masses at every radius (a population
        sample's: its share within each geodesic distance)."""
        g = self._grid(n)
        pts = self.m.embed(self.r0 * (np.c_[np.cos(g), np.sin(g)] if self.m.kind == "circle" else g))
        if self.pop is not None:
            return pts, arrays.ball_mass(self.m.geodesic_distance(pts, self.m.embed(self.r0 * self.pop)), self.radii)
        return pts, self.pop_mass(g, self.radii)

    def _counts(self, points, centres: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Points of ``points`` (angles sorted, circle; unit vectors or their ``cKDTree``, sphere) in the closed
        balls of half-angles ``a`` (n_radii,) around ``centres``, (n_centres, n_radii)."""
        if self.m.kind == "circle":
            ext = np.concatenate([points - 2 * np.pi, points, points + 2 * np.pi])
            lo = np.searchsorted(ext, centres[:, None] - a[None, :], side="left")
            hi = np.searchsorted(ext, centres[:, None] + a[None, :], side="right")
            return np.minimum(hi - lo, points.size).astype(np.float64)
        from scipy.spatial import cKDTree

        tree = points if isinstance(points, cKDTree) else cKDTree(points)
        chord = 2 * np.sin(np.minimum(a, np.pi) / 2)
        return np.stack([tree.query_ball_point(centres, r, return_length=True) for r in chord], -1).astype(np.float64)

    def refine(self, xx: np.ndarray, stats: np.ndarray, n: int, c: float) -> np.ndarray:
        """delta (and its ratios) on centres refined until their spacing is at most delta (``stats``: the first
        pass's (delta, ratio min, ratio max); returns them with the number of centres)."""
        delta = stats[0]
        if self.m.kind == "circle":
            u = self._local_angles(xx)
        else:
            from scipy.spatial import cKDTree

            u = cKDTree(self._unit(xx))  # built once: every radius of the scan queries it
        size = xx.shape[0]
        grid = self._grid(n)
        while np.isfinite(delta) and self.spacing(len(grid)) > delta and len(grid) < MAX_CENTRES:
            # the next power of 2 of centres whose spacing is at most delta (it can only grow: one refinement
            # suffices unless MAX_CENTRES stops it)
            want = int(min(MAX_CENTRES, 2 ** np.ceil(np.log2(len(grid) * (self.spacing(len(grid)) / delta)
                                                                ** self.m.k))))
            if self.m.kind == "circle":  # nested: n x 2^j equally spaced from -pi holds the old grid
                grid = self._grid(len(grid) * int(2 ** np.ceil(np.log2(want / len(grid)))))
            else:  # the old centres and a denser lattice
                grid = np.concatenate([grid, self._grid(want)])
            start = int(np.searchsorted(self.radii, delta))  # below delta the old centres (among these) fail
            delta, ratios = np.nan, (np.nan, np.nan)
            for j in range(start, self.radii.size):
                r = self.radii[j:j + 1]
                pop = self.pop_mass(grid, r)[:, 0]
                mass = self._counts(u, grid, r / self.r0)[:, 0] / size
                if np.all(mass >= c * pop):
                    with np.errstate(invalid="ignore", divide="ignore"):
                        ratio = mass / pop
                    delta, ratios = float(r[0]), (float(np.nanmin(ratio)), float(np.nanmax(ratio)))
                    break
            stats = np.array([delta, *ratios])
        return np.append(stats[:3], len(grid))

    def _local_angles(self, xx):
        y = self.m.local(xx)
        return np.sort(np.arctan2(y[:, 1], y[:, 0]))


def coverage_radii(radius: float) -> np.ndarray:
    """The default radii of :func:`coverage` on a manifold of ``radius`` r (data units): geometric, from 1e-5 r
    to pi r, at the ratio (pi / 1e-3)^(1/79) = 1.107 of the grid of 80 radii from 1e-3 r to pi r that it extends
    downwards (that grid's radii are its last 80, to rounding: a delta above 1e-3 r reads the same as before).

    >>> r = coverage_radii(2.0)
    >>> r.size, bool(np.allclose(r[-80:], np.geomspace(2e-3, 2 * np.pi, 80), rtol=1e-13)), bool(r[0] <= 2e-5)
    (126, True, True)
    """
    ratio = (np.pi / 1e-3) ** (1 / 79)
    below = int(np.ceil(np.log(1e-3 / 1e-5) / np.log(ratio)))  # steps of the old grid's ratio down to 1e-5 r
    return radius * 1e-3 * ratio ** np.arange(-below, 80)


def coverage(ds: xr.Dataset, *, c: float = 0.5, variable: str = "denoised", n_centers: int = 256,
             radii: np.ndarray | None = None, step: int = -1, t: float | None = None,
             dim: str = "sample", refine: bool = True) -> xr.Dataset:
    """delta-coverage of the manifold by the samples: the smallest geodesic radius r such that every
    geodesic ball of radius r on M holds sample mass >= c x population mass.

    The samples (``variable``: ``denoised``, the output of a stopped score, or ``trajectory`` at
    ``step`` / nearest ``t``, divided by alpha_t) are replaced by their nearest points on M;
    geodesic distances are closed form (:meth:`Manifold.geodesic_distance`).  Ball centres:
    ``n_centers`` equally spaced points of a circle, or a Fibonacci lattice of the sphere.
    Population mass: closed form on the circle (the entry's density: uniform, piecewise or von
    Mises) and on the sphere for the uniform and piecewise densities (:func:`_sphere_cap_mass`), the
    share of the stored ``population_data`` on the sphere with von Mises-Fisher.  Radii: ``radii`` (increasing,
    data units), default :func:`coverage_radii` (geometric, 1e-5 r to pi r, r the radius).  Non-finite
    samples are left out.  The samples are streamed in chunks of :data:`COVERAGE_CHUNK` (memory O(n_centers x
    chunk), not O(n_centers x samples)).

    "Every ball" is read on a finite set of centres, which says nothing about the gaps between them once delta
    falls below their spacing (256 centres on a circle of radius 2 are 0.049 apart; a memorizer's delta at
    N = 10^5 is 0.003).  With ``refine`` (default) the centres are refined until their spacing is at most
    delta: nested grids on the circle (n_centers x 2^j), the old centres plus a denser Fibonacci lattice on
    the sphere, so delta can only grow and the scan resumes at the last one; spacing 2 pi r / n on the circle
    and sqrt(4 pi r^2 / n) on the sphere, at most :data:`MAX_CENTRES` centres (the cell's
    ``coverage_centres`` says how many were used).  The refined counts come from the samples' sorted angles
    (circle) or a k-d tree of their unit vectors (sphere, chord 2 sin(a / 2) for geodesic angle a): the
    same closed balls as the distances.

    Returns a Dataset over the cells: ``coverage_delta`` (data units; NaN when no radius of the
    grid passes), ``mass_ratio_min`` and ``mass_ratio_max`` (sample over population mass over the
    centres at delta), ``coverage_centres``.  Computed eagerly per cell.

    Raises
    ------
    ValueError
        For a store that is not of a circle or sphere, a missing ``variable``, c <= 0, bad radii.
    """
    m = store_manifold(ds)
    if m.kind == "torus":
        raise ValueError("`coverage` needs a circle or sphere store (no closed-form geodesics on the torus)")
    check_vars(ds, variable, dim=dim)
    c = check_float(c, "c", min_val=0, include_boundaries="neither")
    n_centers = check_int(n_centers, "n_centers", min_val=2)
    r0 = float(m.radius)
    radii = coverage_radii(r0) if radii is None else np.asarray(radii, dtype=np.float64)
    if radii.ndim != 1 or radii.size == 0 or not np.all(np.diff(radii) > 0) or radii[0] <= 0:
        raise ValueError(f"`radii` must be a 1-D increasing array of radii > 0; got {radii!r}")
    x = ds[variable]
    if "step" in x.dims:
        last = at_step(ds, step, t)
        x = last[variable] / float(last["alpha"])
    cfg = json.loads(ds.attrs["config"])["dataset"]["manifold"]
    centres = _Centres(m, cfg, radii, ds)
    points, pop_mass = centres.first(n_centers)  # once for every cell

    def _cov(xx):  # the samples in chunks: the (n_centers, chunk) distances stay small at 10^6 samples
        xx = np.asarray(xx, dtype=np.float64)
        xx = xx[np.isfinite(xx).all(-1)]
        within, total = np.zeros((len(points), radii.size)), np.zeros(len(points))
        for start in range(0, xx.shape[0], COVERAGE_CHUNK):
            w, n = arrays.ball_weight(m.geodesic_distance(points, xx[start:start + COVERAGE_CHUNK]), radii)
            within += w
            total += n
        stats = arrays.coverage_radius(arrays.weight_share(within, total), pop_mass, radii, c)
        return centres.refine(xx, stats, n_centers, c) if refine and xx.shape[0] else np.append(stats, n_centers)

    res = xr.apply_ufunc(_cov, x.compute(), input_core_dims=[[dim, "dim"]], output_core_dims=[["stat"]],
                         vectorize=True)
    out = xr.Dataset({
        "coverage_delta": with_attrs(res.isel(stat=0, drop=True), f"smallest geodesic radius at which every ball "
                                     f"holds sample mass >= {c:g} x population mass", units.DATA),
        "mass_ratio_min": with_attrs(res.isel(stat=1, drop=True), "smallest sample / population ball mass at delta",
                                     "1"),
        "mass_ratio_max": with_attrs(res.isel(stat=2, drop=True), "largest sample / population ball mass at delta",
                                     "1"),
        "coverage_centres": with_attrs(res.isel(stat=3, drop=True), "ball centres delta was read on (n_centers, "
                                       "more where refined)", "1"),
    })
    out.attrs.update(c=c, n_centers=n_centers, variable=variable, k=m.k)
    return out


def smoothed_target_distance(ds: xr.Dataset, *, variable: str = "denoised", n_projections: int = 128,
                             seed: int = 0, dim: str = "sample") -> xr.DataArray:
    """Sliced 2-Wasserstein distance between the samples projected to M and the smoothed-and-projected
    population: proj_M(p + sigma z), p from ``population_data``, z ~ N(0, I), sigma = sqrt(h_s) / alpha_s
    at the cell's ``denoise_t`` = s (the noise level the stopped score was learned down to).

    The coarse score's samples converge to this target, not to the data law (Shen, Hsieh & He):
    its distance to the target should fall near-parametrically in N.  ``variable`` must be
    per-cell (``denoised``); samples that are not finite are left out.  Returns (cells), data
    units; computed eagerly per cell (``seed`` draws z and the projections).

    Raises
    ------
    ValueError
        For a store without ``denoised`` / ``denoise_t`` / ``population_data`` or not of a circle or sphere.
    """
    from ..process import OU

    m = store_manifold(ds)
    check_vars(ds, variable, "denoise_t", "population_data", dim=dim)
    n_projections = check_int(n_projections, "n_projections", min_val=1)
    seed = check_int(seed, "seed", min_val=0)
    pop = np.asarray(ds["population_data"].values, dtype=np.float64)
    z = np.random.default_rng(seed).standard_normal(pop.shape)
    proc = OU()

    def _dist(xx, s):
        xx = np.asarray(xx, dtype=np.float64)
        xx = xx[np.isfinite(xx).all(-1)]
        if not np.isfinite(s) or xx.shape[0] == 0:
            return np.nan
        sigma = float(np.sqrt(proc.h(s)) / proc.alpha(s))
        target = m.project(pop + sigma * z)
        return arrays.sliced_wasserstein(m.project(xx), target, n_projections=n_projections, seed=seed)

    out = xr.apply_ufunc(_dist, ds[variable].compute(), ds["denoise_t"].compute(),
                         input_core_dims=[[dim, "dim"], []], vectorize=True, output_dtypes=[float])
    return with_attrs(out, "sliced W2 between the samples on M and the smoothed-and-projected population",
                      units.DATA)
