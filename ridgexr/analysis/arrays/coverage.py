"""Coverage of a law by samples, array layer: weight in geodesic balls, the coverage radius, and the rate of a metric
over the number of training points (a bootstrap over pairs, or a Student-t interval over independent draws).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ball_weight", "ball_mass", "weight_share", "coverage_radius", "rate_fit", "draw_rate_fit"]


def ball_weight(dist: np.ndarray, radii: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weight in closed balls: the sum of ``weights`` (default 1 each) of the points with distance <= r, per
    centre and radius, and the total weight of the finite points per centre.

    Parameters
    ----------
    dist : (n_centers, n_points) distances of the points to each centre (NaN: left out)
    radii : (n_radii,) radii, increasing
    weights : (n_points,) optional non-negative weights

    Returns
    -------
    (n_centers, n_radii) weights within each radius and (n_centers,) totals: one ``searchsorted`` into the radii
    and one ``bincount`` for all centres, O(n_centers n_points), so that chunks of points can be summed
    (:func:`ridgexr.analysis.coverage` streams its samples so).

    Examples
    --------
    >>> within, total = ball_weight(np.array([[0.5, 1.5, np.nan, 3.5]]), np.array([1.0, 3.0]))
    >>> within.tolist(), total.tolist()
    ([[1.0, 2.0]], [3.0])
    """
    dist = np.asarray(dist, dtype=np.float64)
    radii = np.asarray(radii, dtype=np.float64)
    n_c, n_p = dist.shape
    n_r = radii.size
    w = np.ones(n_p) if weights is None else np.asarray(weights, dtype=np.float64)
    w = np.broadcast_to(w, dist.shape)
    ok = np.isfinite(dist)
    # bin j: the first radius >= the distance (the point is within radii[j:]); n_r: beyond every radius or NaN
    first = np.where(ok, np.searchsorted(radii, np.where(ok, dist, 0.0), side="left"), n_r)
    per_bin = np.bincount((first + np.arange(n_c)[:, None] * (n_r + 1)).ravel(), weights=np.where(ok, w, 0.0).ravel(),
                          minlength=n_c * (n_r + 1)).reshape(n_c, n_r + 1)
    return np.cumsum(per_bin[:, :n_r], axis=1), np.where(ok, w, 0.0).sum(1)


def ball_mass(dist: np.ndarray, radii: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Mass of closed balls: share of points (or of ``weights``) with distance <= r, per centre and radius.

    Parameters
    ----------
    dist : (n_centers, n_points) distances of the points to each centre (NaN: left out)
    radii : (n_radii,) radii, increasing
    weights : (n_points,) optional non-negative weights (default uniform)

    Returns
    -------
    (n_centers, n_radii) masses in [0, 1] (:func:`ball_weight` over its total; NaN for a centre without
    finite points).

    Examples
    --------
    >>> ball_mass(np.array([[0.5, 1.5, 2.5, 3.5]]), np.array([1.0, 3.0])).tolist()
    [[0.25, 0.75]]
    """
    return weight_share(*ball_weight(dist, radii, weights))


def weight_share(within: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Ball masses from :func:`ball_weight`'s sums (added over chunks of points where streamed):
    ``within / total`` per centre, NaN for a centre without finite points.

    Parameters
    ----------
    within : (n_centers, n_radii) weight within each radius
    total : (n_centers,) total finite weight

    Returns
    -------
    (n_centers, n_radii) masses in [0, 1].

    Examples
    --------
    >>> weight_share(np.array([[1.0, 3.0], [0.0, 0.0]]), np.array([4.0, 0.0])).tolist()
    [[0.25, 0.75], [nan, nan]]
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total[:, None] > 0, within / total[:, None], np.nan)


def coverage_radius(sample_mass: np.ndarray, population_mass: np.ndarray, radii: np.ndarray,
                    c: float = 0.5) -> np.ndarray:
    """delta-coverage: the smallest radius r such that every ball B(centre, r) holds sample mass
    >= c x population mass.

    Parameters
    ----------
    sample_mass : (..., n_centers, n_radii) sample mass of each ball (:func:`ball_mass`)
    population_mass : (n_centers, n_radii) population mass of the same balls
    radii : (n_radii,) increasing radii
    c : float > 0, the mass ratio required

    Returns
    -------
    (..., 3): delta (the smallest radius of ``radii`` at which every centre passes, a ball of population mass 0
    failing; NaN if none),
    the smallest and the largest mass ratio sample / population over the centres at delta.

    Examples
    --------
    >>> s = np.array([[0.0, 0.3, 1.0], [0.1, 0.4, 1.0]]); p = np.array([[0.1, 0.4, 1.0]] * 2)
    >>> float(coverage_radius(s, p, np.array([0.5, 1.0, 2.0]), c=0.5)[0])
    1.0
    """
    sample_mass = np.asarray(sample_mass, dtype=np.float64)
    population_mass = np.asarray(population_mass, dtype=np.float64)
    radii = np.asarray(radii, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = sample_mass / population_mass
    # a ball without population mass cannot show coverage (with a population sample as the law, 0 >= c x 0 would
    # pass every ball below the population's own spacing): delta is never below the population's resolution
    passes = ((sample_mass >= c * population_mass) & (population_mass > 0)).all(-2)  # (..., n_radii)
    first = np.argmax(passes, axis=-1)
    found = passes.any(-1)
    delta = np.where(found, radii[first], np.nan)
    at = np.take_along_axis(ratio, np.broadcast_to(first[..., None, None], ratio.shape[:-1] + (1,)), -1)[..., 0]
    lo = np.where(found, np.nanmin(np.where(np.isfinite(at), at, np.inf), -1), np.nan)
    hi = np.where(found, np.nanmax(np.where(np.isfinite(at), at, -np.inf), -1), np.nan)
    return np.stack([delta, lo, hi], -1)


def rate_fit(n: np.ndarray, metric: np.ndarray, *, n_boot: int = 2000, ci: float = 0.95,
             seed: int = 0) -> np.ndarray:
    """Slope of log(metric) against log(n) by least squares, with a pairs-bootstrap percentile CI.

    Returns (3,): slope, lower, upper.  A metric ~ c n^-r gives slope -r.
    """
    u = np.log(np.asarray(n, dtype=float))
    v = np.log(np.asarray(metric, dtype=float))
    ok = np.isfinite(u) & np.isfinite(v)
    u, v = u[ok], v[ok]
    if u.size < 3:
        raise ValueError(f"`rate_fit` needs at least 3 finite (n, metric) pairs; got {u.size}")
    if np.unique(u).size < 2:
        raise ValueError("`rate_fit` needs at least 2 distinct n among the finite pairs")

    def slopes(uu, vv):  # rows are replicates; a replicate with one distinct n has no slope (NaN)
        uc = uu - uu.mean(-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (uc * (vv - vv.mean(-1, keepdims=True))).sum(-1) / (uc * uc).sum(-1)

    idx = np.random.default_rng(seed).integers(0, u.size, size=(n_boot, u.size))
    boot = slopes(u[idx], v[idx])
    boot = boot[np.isfinite(boot)]  # dropped: the replicates that drew a single n
    lo, hi = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2])
    return np.array([slopes(u[None], v[None])[0], lo, hi])


def draw_rate_fit(n: np.ndarray, metric: np.ndarray, *, ci: float = 0.95) -> np.ndarray:
    """Slope of log(metric) against log(n) over M independent replicates (e.g. training sets), with a
    Student-t interval from the spread of the per-replicate slopes.

    Each row of ``metric`` (M, K) is one replicate's curve over the K values ``n`` (K,); its slope is
    the least-squares slope of its finite (log n, log metric) pairs (rows with fewer than 2 distinct
    finite n are left out).  The estimate is the mean of the M' remaining slopes, the interval
    mean +- t_{M'-1, (1 + ci) / 2} sd / sqrt(M'): the replicates are independent, so their spread
    carries every source of noise inside a replicate (the training draw and the sampler's noise).

    Returns (4,): slope, lower, upper, M' (NaN interval when M' < 2).  A metric ~ c n^-r gives slope -r.

    >>> n = np.array([100.0, 1000.0, 10000.0])
    >>> m = np.array([n ** -0.5 * 1.1, n ** -0.5 * 0.9, n ** -0.5])
    >>> [round(float(v), 6) for v in draw_rate_fit(n, m)]
    [-0.5, -0.5, -0.5, 3.0]
    """
    from scipy import stats

    ci = float(ci)
    if not 0 < ci < 1:
        raise ValueError(f"`ci` must be in (0, 1); got {ci}")
    u = np.log(np.asarray(n, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.log(np.atleast_2d(np.asarray(metric, dtype=float)))
    if v.shape[-1] != u.size:
        raise ValueError(f"`metric` must have shape (M, {u.size}); got {v.shape}")
    ok = np.isfinite(v) & np.isfinite(u)
    w = ok.astype(float)
    cnt = w.sum(-1)
    uu, vv = np.where(ok, u, 0.0), np.where(ok, v, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        um, vm = (uu * w).sum(-1) / cnt, (vv * w).sum(-1) / cnt
        uc = (uu - um[:, None]) * w
        slopes = (uc * (vv - vm[:, None])).sum(-1) / (uc * uc).sum(-1)
    slopes = slopes[np.isfinite(slopes) & (cnt >= 2)]
    m = slopes.size
    if m == 0:
        return np.array([np.nan, np.nan, np.nan, 0.0])
    mean = float(slopes.mean())
    if m < 2:
        return np.array([mean, np.nan, np.nan, 1.0])
    half = stats.t.ppf((1 + ci) / 2, m - 1) * slopes.std(ddof=1) / np.sqrt(m)
    return np.array([mean, mean - half, mean + half, float(m)])
