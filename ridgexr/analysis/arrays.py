"""Array layer of the analyses: numpy in, numpy out, time along the last axis.

All functions are vectorised over leading (batch) axes; none loops over samples.
"""

from __future__ import annotations

import math
import statistics
import warnings

import numpy as np

from .._validation import check_int
from ..choices import QUALITY_RULES
from ..defaults import MEMORIZED_RATIO
from ..process import OU

__all__ = ["pooled_share_ci", "pooled_contrast_ci", "gaussian_ensemble", "bootstrap_medians", "RESAMPLE_LIMIT", "ball_weight", "ball_mass", "weight_share", "coverage_radius", "wasserstein_1d", "sliced_wasserstein", "mmd2", "hausdorff", "novelty", "rate_fit", "proportion_ci", "share_with_ci", "CI_METHODS", "enter_and_stay_time", "reach_time", "align_time", "slide_distance", "nearest_two",
           "memorized", "near_mode", "bootstrap_mean_ci", "crossing", "integrated_residual",
           "tangential_distance", "memorized_share_ci", "quality_reached", "first_reached", "censored_slope",
           "censored_slope_ci", "order_verdict", "loss_gen_time", "loss_min_time", "median_difference_ci", "score_errors", "slope_range", "CENSORED_FITS"]


def enter_and_stay_time(inside: np.ndarray, t: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """First time from which ``inside`` stays True to the end of the trajectory.

    Parameters
    ----------
    inside : (..., K) bool, steps in sampling order (t decreasing)
    t : (K,) times
    valid : (...,) bool, optional; False gives NaN

    Returns
    -------
    (...,) float: t[k*] with k* = 1 + the last step outside (t[0] if never outside); NaN if
    the final step is outside (never entered for good) or the trajectory is invalid.
    """
    inside = np.asarray(inside, dtype=bool)
    K = inside.shape[-1]
    outside = ~inside
    any_out = outside.any(-1)
    last_out = K - 1 - np.argmax(outside[..., ::-1], axis=-1)
    k = np.where(any_out, last_out + 1, 0)
    res = np.where(k < K, np.asarray(t, dtype=float)[np.minimum(k, K - 1)], np.nan)
    if valid is not None:
        res = np.where(valid, res, np.nan)
    return res


def reach_time(distance: np.ndarray, t: np.ndarray, r: float) -> np.ndarray:
    """Time at which a trajectory enters, and stays in, the tube of radius ``r`` around the ridge.

    ``distance`` (..., K) is the ridge distance per step; any NaN step gives NaN.
    """
    d = np.asarray(distance, dtype=float)
    return enter_and_stay_time(d <= r, t, valid=np.isfinite(d).all(-1))


def align_time(distance: np.ndarray, t: np.ndarray, factor: float = 2.0, atol: float = 0.0) -> np.ndarray:
    """Time at which the normal displacement reaches its floor.

    The floor is the final ridge distance; the trajectory is aligned from the first time
    after which its distance stays <= max(factor * floor, atol).
    """
    d = np.asarray(distance, dtype=float)
    thresh = np.maximum(factor * d[..., -1], atol)
    return enter_and_stay_time(d <= thresh[..., None], t, valid=np.isfinite(d).all(-1))


def slide_distance(projection: np.ndarray, t: np.ndarray, t_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tangential displacement along the ridge from ``t_start`` to the end.

    Parameters
    ----------
    projection : (..., K, d) ridge projections per step
    t : (K,) decreasing times
    t_start : (...,) start time (e.g. the align time); NaN gives NaN

    Returns
    -------
    chord : (...,) |P_end - P(t_start)|
    path : (...,) sum of |P_{k+1} - P_k| over steps from t_start on
    """
    p = np.asarray(projection, dtype=float)
    t = np.asarray(t, dtype=float)
    ts = np.asarray(t_start, dtype=float)
    K = p.shape[-2]
    # index of t_start (first k with t[k] <= t_start)
    k0 = np.clip(np.searchsorted(-t, -np.nan_to_num(ts, nan=t[-1]), side="left"), 0, K - 1)
    start = np.take_along_axis(p, k0[..., None, None], axis=-2)[..., 0, :]
    chord = np.linalg.norm(p[..., -1, :] - start, axis=-1)
    steps = np.linalg.norm(np.diff(p, axis=-2), axis=-1)  # (..., K-1)
    mask = np.arange(K - 1) >= k0[..., None]
    path = np.where(mask, steps, 0.0).sum(-1)
    bad = ~np.isfinite(ts)
    return np.where(bad, np.nan, chord), np.where(bad, np.nan, path)


#: above this many values :func:`bootstrap_medians` draws through order statistics instead of resampling
RESAMPLE_LIMIT = 20000


def bootstrap_medians(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` bootstrap medians of ``values`` (n,): medians of resamples of size n with replacement.

    Up to :data:`RESAMPLE_LIMIT` values: one (n_boot, n) index matrix and one median over its rows.  Above it
    the same law through order statistics, in O(n) memory (a (2000, 4 x 10^5) resample is 6 GB): a resample
    is n draws of F_n^-1(U) (F_n the values' empirical distribution, U uniform), so its k-th smallest is
    F_n^-1(U_(k)) with U_(k) ~ Beta(k, n - k + 1) and, given it, U_(k+1) = U_(k) + (1 - U_(k)) Beta(1, n - k);
    the median is the ((n + 1) / 2)-th (odd n) or the mean of the (n/2)-th and (n/2 + 1)-th (even n).

    >>> meds = bootstrap_medians(np.arange(5.0), 4, np.random.default_rng(0)); meds.shape, bool(np.all(meds % 1 == 0))
    ((4,), True)
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    n = v.size
    if n <= RESAMPLE_LIMIT:
        return np.median(v[rng.integers(0, n, size=(n_boot, n))], axis=1)
    v = np.sort(v)
    k = (n + 1) // 2  # the median's order statistic (odd n), the lower of the two (even n)
    u = rng.beta(k, n - k + 1, size=n_boot)

    def quantile(w):  # F_n^-1(w): the smallest value whose empirical cdf reaches w
        return v[np.clip(np.ceil(w * n).astype(np.int64) - 1, 0, n - 1)]

    if n % 2:
        return quantile(u)
    return 0.5 * (quantile(u) + quantile(u + (1 - u) * rng.beta(1, n - k, size=n_boot)))


#: up to this dimension :func:`nearest_two` searches a k-d tree (exact; the matrix products above it)
KD_TREE_MAX_DIM = 8


def nearest_two(x: np.ndarray, points: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distances to the nearest and second-nearest of ``points`` and the nearest index.

    x (..., d), points (N, d) -> d1 (...), d2 (...) (inf when N = 1), idx (...) into ``points``.
    Rows of ``points`` that are not finite are left out (a training set padded with NaN, as
    for the nested subsets of an ``n_train`` sweep).  Chunked over queries; the two candidates are found
    through |x|^2 - 2 x.p + |p|^2 matrix products and their distances then recomputed directly as |x - p|
    (the expansion cancels: on a training point it leaves ~sqrt(eps) |x| instead of 0).  Up to
    :data:`KD_TREE_MAX_DIM` dimensions (and N >= 2) a k-d tree finds them instead (``scipy.spatial.cKDTree``,
    exact, distances computed directly): the cost of 10^6 queries against 10^5 points falls from minutes
    to seconds.  A query that is not finite gets NaN distances (and index 0).
    """
    x = np.asarray(x, dtype=float)
    pts = np.asarray(points, dtype=float)
    keep = np.flatnonzero(np.isfinite(pts).all(1))
    if keep.size < pts.shape[0]:
        if keep.size == 0:
            raise ValueError("`points` must have at least one finite row")
        d1, d2, idx = nearest_two(x, pts[keep], chunk)
        return d1, d2, keep[idx]
    flat = x.reshape(-1, x.shape[-1])
    d1 = np.empty(flat.shape[0])
    d2 = np.empty(flat.shape[0])
    idx = np.empty(flat.shape[0], dtype=np.int64)
    nan = ~np.isfinite(flat).all(1)
    if pts.shape[1] <= KD_TREE_MAX_DIM and pts.shape[0] >= 2:  # a k-d tree: exact, O(log N) per query in low d
        from scipy.spatial import cKDTree

        dist, near = cKDTree(pts).query(np.where(nan[:, None], 0.0, flat), k=2)
        d1[:], d2[:], idx[:] = dist[:, 0], dist[:, 1], near[:, 0]
        d1[nan] = d2[nan] = np.nan
        idx[nan] = 0
        shape = x.shape[:-1]
        return d1.reshape(shape), d2.reshape(shape), idx.reshape(shape)
    psq = (pts * pts).sum(1)
    for s in range(0, flat.shape[0], chunk):
        q = flat[s:s + chunk]
        dist2 = np.maximum((q * q).sum(1)[:, None] - 2 * q @ pts.T + psq, 0.0)
        if pts.shape[0] >= 2:
            part = np.argpartition(dist2, 1, axis=1)[:, :2]
            two = np.linalg.norm(q[:, None, :] - pts[part], axis=-1)  # the winners' distances, directly
            order = np.argsort(two, axis=1)
            two = np.take_along_axis(two, order, 1)
            idx[s:s + chunk] = np.take_along_axis(part, order, 1)[:, 0]
            d1[s:s + chunk], d2[s:s + chunk] = two[:, 0], two[:, 1]
        else:
            idx[s:s + chunk] = 0
            d1[s:s + chunk], d2[s:s + chunk] = np.linalg.norm(q - pts[0], axis=-1), np.inf
    nan = ~np.isfinite(flat).all(1)
    d1[nan] = d2[nan] = np.nan
    shape = x.shape[:-1]
    return d1.reshape(shape), d2.reshape(shape), idx.reshape(shape)


def tangential_distance(projection: np.ndarray, t: np.ndarray, points: np.ndarray, d_star: int, *,
                        gap_floor: float | None = None, top_k: int | None = None) -> np.ndarray:
    """Distance along the ridge from each ridge projection to its nearest scaled training point.

    For a ridge projection P at OU time t, let q = alpha_t x_i* be the scaled training point
    nearest to P (i* = argmin_i |P - alpha_t x_i|) and T the tangent basis of the d*-dimensional
    log-density ridge frame of p_t at P (the top-d* eigenvectors of Cov[x0 | x_t = P], i.e. of
    the Hessian of log p_t; :func:`ridgexr.scms.frame_flat`: a dense eigh up to d = 128, the certified
low-rank path above, :func:`ridgexr.scms.use_lowrank`).  Then

    - along = ``|T T^T (q - P)|``, the tangential component: the distance along the ridge;
    - across = ``|(I - T T^T) (q - P)|``, the normal component;

    so along^2 + across^2 = ``|q - P|^2``, the squared spread of :func:`ridgexr.analysis.spread_curves`.
    Where the frame at P is degenerate (tangent/normal eigengap at or below its floor, so T is
    not determined by the data) both are NaN and the flag is 1.

    Parameters
    ----------
    projection : (..., d) array
        Ridge projections in data units at time t (NaN rows: not observed, given NaN).
    t : (...,) array or float
        OU time of each projection (broadcast against the batch shape of ``projection``).
    points : (N, d) array
        The training set (unscaled); rows that are not finite are left out (nested ``n_train`` subsets).
    d_star : int
        Ridge dimension, 1 <= d_star < d.
    gap_floor : float, optional
        Relative floor of the frame's eigengap (default sqrt(eps), :func:`ridgexr.scms.default_gap_floor`).
    top_k : int, optional
        Truncate the posterior to the k most responsible training points (default: exact).

    Returns
    -------
    (..., 3) array: along, across (data units) and the degenerate flag (1.0 / 0.0; NaN where P is
    not finite).  One vectorised frame computation for all finite projections.

    Examples
    --------
    >>> tr = np.array([[-3.0, 0.0], [3.0, 0.0]])
    >>> out = tangential_distance(np.array([[1.0, 0.0]]), 0.5, tr, 1)
    >>> out.round(6).tolist()  # along = 3 e^-0.5 - 1, the segment's distance to 3 alpha_t; across 0; not degenerate
    [[0.819592, 0.0, 0.0]]
    """
    import torch

    from ..empirical import SmoothedEmpirical
    from ..scms import frame_flat

    p = np.asarray(projection, dtype=np.float64)
    tt = np.broadcast_to(np.asarray(t, dtype=np.float64), p.shape[:-1])
    pts = np.asarray(points, dtype=np.float64)
    pts = pts[np.isfinite(pts).all(1)]
    d = p.shape[-1]
    if not 1 <= int(d_star) < d:
        raise ValueError(f"`d_star` must be in 1..{d - 1}; got {d_star!r}")
    flat, tf = p.reshape(-1, d), tt.reshape(-1)
    out = np.full((flat.shape[0], 3), np.nan)
    ok = np.isfinite(flat).all(1) & np.isfinite(tf)
    if ok.any():
        x, s = flat[ok], tf[ok]
        alpha = OU().alpha(s)
        idx = nearest_two(x / alpha[:, None], pts)[2]  # nearest alpha_t x_i to P = nearest x_i to P / alpha_t
        offset = torch.from_numpy(alpha[:, None] * pts[idx] - x)
        xs, ts = torch.from_numpy(x), torch.from_numpy(s)
        fr = frame_flat(SmoothedEmpirical(pts, t=ts), xs, ts, int(d_star), "log", top_k, gap_floor, frame="auto")
        along = fr.project_tangent(offset)
        res = np.stack([along.norm(dim=-1).numpy(), (offset - along).norm(dim=-1).numpy(),
                        fr.degenerate.numpy().astype(np.float64)], -1)
        res[res[:, 2] > 0, :2] = np.nan
        out[ok] = res
    return out.reshape(p.shape[:-1] + (3,))


def memorized(x: np.ndarray, points: np.ndarray, ratio: float = MEMORIZED_RATIO) -> np.ndarray:
    """d1 / d2 < ratio (nearest over second-nearest training distance); NaN for non-finite x.

    Returns a float array (1.0 / 0.0 / NaN) of x's batch shape.
    """
    d1, d2, _ = nearest_two(x, points)
    out = (d1 / d2 < ratio).astype(float)
    return np.where(np.isfinite(d1), out, np.nan)


def near_mode(x: np.ndarray, points: np.ndarray, r: float = 0.5) -> np.ndarray:
    """1.0 where x lies within ``r`` of one of ``points`` (the paper's memorization count), 0.0
    elsewhere, NaN for non-finite x; x (..., d), points (N, d) -> (...)."""
    d1, _, _ = nearest_two(x, points)
    return np.where(np.isfinite(d1), (d1 <= r).astype(float), np.nan)


CI_METHODS = ("wilson", "clopper-pearson")


def proportion_ci(k: np.ndarray, n: np.ndarray, ci: float = 0.95,
                  method: str = "wilson") -> tuple[np.ndarray, np.ndarray]:
    """Confidence interval of a binomial proportion k / n, vectorised over any shape.

    ``wilson``: the Wilson score interval (z = Phi^-1((1 + ci) / 2));
    ``clopper-pearson``: the exact interval from beta quantiles.  Both stay inside [0, 1] and
    are not degenerate at k = 0 or k = n (unlike a percentile bootstrap).  NaN where n = 0.
    Matches ``scipy.stats.binomtest(k, n).proportion_ci(ci, method)`` (tested).  Wilson's z comes
    from the standard library (``statistics.NormalDist``; it agrees with ``scipy.stats.norm.ppf``
    to 1e-15 relative), so the default interval does not import ``scipy.stats`` (~1 s of start-up).
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        if method == "wilson":
            z = statistics.NormalDist().inv_cdf(0.5 + ci / 2)
            p = k / n
            denom = 1 + z * z / n
            center = (p + z * z / (2 * n)) / denom
            half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
            low, high = np.clip(center - half, 0, 1), np.clip(center + half, 0, 1)
            # exact at the ends (center - half cancels to ~1e-19 at k = 0): the interval's closed form is 0 / 1
            low, high = np.where(k == 0, 0.0, low), np.where(k == n, 1.0, high)
        elif method == "clopper-pearson":
            from scipy import stats

            alpha = 1 - ci
            low = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
            high = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
        else:
            raise ValueError(f"`method` must be one of {CI_METHODS}; got {method!r}")
    bad = ~(n > 0)
    return np.where(bad, np.nan, low), np.where(bad, np.nan, high)


def share_with_ci(flags: np.ndarray, ci: float = 0.95, method: str = "wilson") -> np.ndarray:
    """Share of 1s among the finite entries of ``flags`` (..., S) and its CI: (..., 3) share, low, high."""
    f = np.asarray(flags, dtype=float)
    valid = np.isfinite(f)
    n = valid.sum(-1)
    k = np.where(valid, f, 0.0).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, k / np.maximum(n, 1), np.nan)
    low, high = proportion_ci(k, n, ci, method)
    return np.stack([share, low, high], -1)


def bootstrap_mean_ci(values: np.ndarray, n_boot: int = 1000, ci: float = 0.95, seed: int = 0,
                      chunk: int = 256) -> np.ndarray:
    """Mean of ``values`` over the last axis with a percentile-bootstrap CI; NaNs are ignored.

    Returns (..., 3): mean, lower, upper.  Resampling is one index matrix per chunk of
    ``chunk`` replicates (no Python loop over samples).
    """
    v = np.asarray(values, dtype=float)
    lead = v.shape[:-1]
    flat = v.reshape(-1, v.shape[-1])
    out = np.full((flat.shape[0], 3), np.nan)
    rng = np.random.default_rng(seed)
    lo_q, hi_q = (1 - ci) / 2, 1 - (1 - ci) / 2
    for i, row in enumerate(flat):  # loop over cells only (few), not samples
        row = row[np.isfinite(row)]
        if row.size == 0:
            continue
        means = []
        for b in range(0, n_boot, chunk):
            nb = min(chunk, n_boot - b)
            means.append(row[rng.integers(0, row.size, size=(nb, row.size))].mean(1))
        means = np.concatenate(means)
        out[i] = row.mean(), np.quantile(means, lo_q), np.quantile(means, hi_q)
    return out.reshape(lead + (3,))


def median_difference_ci(a: np.ndarray, b: np.ndarray, n_boot: int = 1000, ci: float = 0.95, seed: int = 0,
                         chunk: int = 256) -> np.ndarray:
    """Medians of ``a`` and of ``b`` over their last axes and of their difference median(a) - median(b), each with a
    percentile-bootstrap interval (a and b resampled independently: two samples, not pairs); NaNs are ignored.

    Returns (..., 6): median(a), its lower and upper ends, median(a) - median(b), its lower and upper ends
    (NaN where either has no finite value).  The leading axes of ``a`` and ``b`` broadcast; one index matrix
    per chunk of ``chunk`` replicates (no Python loop over samples).

    Examples
    --------
    >>> out = median_difference_ci(np.arange(101.0), np.arange(101.0) + 10, n_boot=200)
    >>> out[0], out[3]
    (np.float64(50.0), np.float64(-10.0))
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    lead = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    fa = np.broadcast_to(a, lead + a.shape[-1:]).reshape(-1, a.shape[-1])
    fb = np.broadcast_to(b, lead + b.shape[-1:]).reshape(-1, b.shape[-1])
    out = np.full((fa.shape[0], 6), np.nan)
    q = [(1 - ci) / 2, 1 - (1 - ci) / 2]
    for i in range(fa.shape[0]):  # loop over cells only (few), not samples
        rng = np.random.default_rng(seed)  # the same stream in every cell: intervals do not depend on cell order
        x, y = fa[i][np.isfinite(fa[i])], fb[i][np.isfinite(fb[i])]
        if x.size == 0:
            continue
        mx, dx = [], []
        for start in range(0, n_boot, chunk):
            nb = min(chunk, n_boot - start)
            bx = np.median(x[rng.integers(0, x.size, size=(nb, x.size))], axis=1)
            mx.append(bx)
            if y.size:
                dx.append(bx - np.median(y[rng.integers(0, y.size, size=(nb, y.size))], axis=1))
        mx = np.concatenate(mx)
        out[i, :3] = np.median(x), *np.quantile(mx, q)
        if y.size:
            out[i, 3:] = np.median(x) - np.median(y), *np.quantile(np.concatenate(dx), q)
    return out.reshape(lead + (6,))


def crossing(x: np.ndarray, y: np.ndarray, level: float, log: bool = True) -> float:
    """First x where y crosses ``level`` (linear interpolation, in log x when ``log``); NaN if none."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & ((x > 0) if log else True)
    x, y = x[ok], y[ok]
    if x.size < 2:
        return np.nan
    order = np.argsort(x)
    x, y = x[order], y[order]
    u = np.log(x) if log else x
    s = np.sign(y - level)
    for k in range(x.size - 1):  # a handful of sweep points
        if s[k] == 0:
            return float(x[k])
        if s[k] * s[k + 1] < 0:
            f = (level - y[k]) / (y[k + 1] - y[k])
            val = u[k] + f * (u[k + 1] - u[k])
            return float(np.exp(val) if log else val)
    return float(x[-1]) if s[-1] == 0 else np.nan


def integrated_residual(residual: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time-integrated residual with the sampler's coefficient: sum_k 2 dt_k (alpha_k / h_k) |e_k|.

    In the reverse SDE x <- x + (x + 2 s) dt + ..., a denoiser error e changes the score by
    alpha e / h, so step k displaces the state by 2 dt_k alpha_k / h_k e_k.  residual
    (..., K, d), t (K,) decreasing -> (...,) in data units.
    """
    r = np.asarray(residual, dtype=float)
    t = np.asarray(t, dtype=float)
    dt = t[:-1] - t[1:]
    ou = OU()
    coef = ou.diffusion_squared * dt * ou.alpha(t[:-1]) / ou.h(t[:-1])
    return (np.linalg.norm(r[..., :-1, :], axis=-1) * coef).sum(-1)


# ---------------------------------------------------------------------------- distribution metrics
def _unit_directions(d: int, n_projections: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed).standard_normal((d, n_projections))
    return g / np.linalg.norm(g, axis=0, keepdims=True)


def score_errors(model: np.ndarray, population: np.ndarray, empirical: np.ndarray) -> dict[str, np.ndarray]:
    """Bonnaire et al.'s score errors of a network over evaluation points (their ``compute_ratio_gen_mem`` and
    ``compute_ratio_gen_mem2``, tbonnair/Why-Diffusion-Models-Don-t-Memorize, ``GMM_data_scores.py``).

    With the mean Euclidean norms over the points

    - ``e_gen`` = mean ``||s_theta - s_pop||`` (the network against the population score),
    - ``e_emp`` = mean ``||s_theta - s_emp||`` (against the empirical score of its training set),
    - ``e_mem`` = mean ``||s_pop - s_emp||`` (the gap between the two exact scores),

    ``ratio`` = e_gen / e_mem (0: the population score; 1 where the network sits on the empirical one) and
    ``signed`` = (e_emp - e_gen) / e_mem (+1: the population score, -1: the empirical score); both NaN where
    e_mem = 0.

    Parameters
    ----------
    model, population, empirical : (..., P, d) arrays of scores at the same P points

    Returns
    -------
    dict of (...,) arrays: ``e_gen``, ``e_emp``, ``e_mem``, ``ratio``, ``signed``

    Examples
    --------
    >>> pop, emp = np.zeros((3, 2)), np.ones((3, 2))
    >>> out = score_errors(emp, pop, emp)
    >>> float(out["ratio"]), float(out["signed"]), bool(np.isclose(out["e_mem"], np.sqrt(2)))
    (1.0, -1.0, True)
    """
    model, population, empirical = (np.asarray(a, dtype=np.float64) for a in (model, population, empirical))
    if not (model.shape == population.shape == empirical.shape) or model.ndim < 2:
        raise ValueError(f"`model`, `population` and `empirical` must be (..., P, d) arrays of one shape; got "
                         f"{model.shape}, {population.shape}, {empirical.shape}")

    def mean_norm(a, b):
        return np.linalg.norm(a - b, axis=-1).mean(axis=-1)

    e_gen, e_emp, e_mem = mean_norm(model, population), mean_norm(model, empirical), mean_norm(population, empirical)
    gap = np.where(e_mem > 0, e_mem, np.nan)  # the two exact scores equal: no scale, the ratios undefined
    return {"e_gen": e_gen, "e_emp": e_emp, "e_mem": e_mem, "ratio": e_gen / gap, "signed": (e_emp - e_gen) / gap}


def wasserstein_1d(x: np.ndarray, y: np.ndarray, *, p: int = 1) -> np.ndarray:
    """p-Wasserstein distance between the empirical laws of the last axes of x (..., n) and y (..., m).

    Exact: the two step quantile functions compared on the union of their breakpoints (k/n and j/m), no
    interpolation; the leading dimensions broadcast (a batch of pairs, e.g. bootstrap replicates).  Units of
    x and y.

    Examples
    --------
    >>> float(wasserstein_1d(np.array([0.0, 1.0]), np.array([0.5, 1.5, 2.5])).round(6))
    1.0
    """
    x = np.sort(np.asarray(x, dtype=float), axis=-1)
    y = np.sort(np.asarray(y, dtype=float), axis=-1)
    n, m = x.shape[-1], y.shape[-1]
    if n == 0 or m == 0:
        raise ValueError(f"`x` and `y` need at least one value each along the last axis; got {n} and {m}")
    edges = np.unique(np.concatenate([np.arange(n + 1) / n, np.arange(m + 1) / m]))
    mid, width = 0.5 * (edges[1:] + edges[:-1]), np.diff(edges)
    qx = np.take(x, np.minimum((mid * n).astype(int), n - 1), axis=-1)
    qy = np.take(y, np.minimum((mid * m).astype(int), m - 1), axis=-1)
    return (np.abs(qx - qy) ** p * width).sum(-1) ** (1 / p)


def sliced_wasserstein(x: np.ndarray, y: np.ndarray, *, n_projections: int = 128, p: int = 2,
                       seed: int = 0) -> float:
    """Sliced p-Wasserstein distance between the empirical laws of x (n, d) and y (m, d).

    SW_p = (mean over random unit directions theta of W_p^p(<x, theta>, <y, theta>))^(1/p),
    each 1-D W_p computed exactly by :func:`wasserstein_1d`, all directions at once.  Data units.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"`x` and `y` must be (n, d) and (m, d); got {x.shape} and {y.shape}")
    theta = _unit_directions(x.shape[1], n_projections, seed)
    wp = wasserstein_1d((x @ theta).T, (y @ theta).T, p=p)
    return float((wp ** p).mean() ** (1 / p))


def mmd2(x: np.ndarray, y: np.ndarray, *, bandwidth: float | None = None) -> float:
    """Unbiased squared maximum mean discrepancy with the Gaussian kernel exp(-|a-b|^2 / (2 s^2)).

    ``bandwidth`` s defaults to the median pairwise distance of the pooled sample (the median
    heuristic).  Near 0 (either sign) for two samples of one law; grows as the laws separate.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    z = np.concatenate([x, y])
    sq = (z * z).sum(1)
    d2 = np.maximum(sq[:, None] - 2 * z @ z.T + sq[None], 0.0)
    if bandwidth is None:
        bandwidth = float(np.sqrt(np.median(d2[np.triu_indices(len(z), 1)])))
    k = np.exp(-d2 / (2 * bandwidth**2))
    n, m = len(x), len(y)
    kxx, kyy, kxy = k[:n, :n], k[n:, n:], k[:n, n:]
    return float((kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
                 - 2 * kxy.mean())


def hausdorff(a: np.ndarray, b: np.ndarray) -> float:
    """Hausdorff distance max(max_a min_b |a - b|, max_b min_a |a - b|) between point sets (n, d), (m, d)."""
    da = nearest_two(a, np.concatenate([b, b]) if len(b) == 1 else b)[0]
    db = nearest_two(b, np.concatenate([a, a]) if len(a) == 1 else a)[0]
    return float(max(np.nanmax(da), np.nanmax(db)))


def novelty(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Nearest-training distance of each x (..., d) over the median nearest-neighbour spacing of ``train``.

    About 1 or more: as far from the training set as its points are from each other; << 1:
    on top of a training point.
    """
    spacing = np.median(nearest_two(train, train)[1])  # second-nearest of a training point = its neighbour
    return nearest_two(x, train)[0] / spacing


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


def pooled_share_ci(k: np.ndarray, n: np.ndarray, *, k_ref: np.ndarray | None = None,
                    n_ref: np.ndarray | None = None, n_boot: int = 2000, ci: float = 0.95,
                    seed: int = 0) -> np.ndarray:
    """Pooled share sum_m k_m / sum_m n_m over an ensemble of M draws (last axis), with a
    percentile-bootstrap interval over draws (draws resampled with replacement, the pooled share
    recomputed); with ``k_ref, n_ref`` the paired difference share(k, n) - share(k_ref, n_ref),
    both resampled with the same draws (:func:`pooled_contrast_ci` with weights (1, -1)).

    Parameters
    ----------
    k, n : arrays (..., M), counts in a region and of valid samples per draw (n >= 0)
    k_ref, n_ref : arrays (..., M), optional, the reference ensemble (paired draw by draw)
    n_boot : int, bootstrap replicates
    ci : float in (0, 1)
    seed : int

    Returns
    -------
    array (..., 3): pooled share (or difference), lower, upper; NaN where no sample is valid.

    Examples
    --------
    >>> float(pooled_share_ci(np.array([1.0, 3.0]), np.array([4.0, 4.0]), n_boot=10)[0])
    0.5
    """
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if k_ref is None:
        return pooled_contrast_ci(k[..., None, :], n[..., None, :], np.ones(1), n_boot=n_boot, ci=ci, seed=seed)
    k_ref, n_ref = np.asarray(k_ref, dtype=float), np.asarray(n_ref, dtype=float)
    return pooled_contrast_ci(np.stack([k, k_ref], -2), np.stack([n, n_ref], -2), np.array([1.0, -1.0]),
                              n_boot=n_boot, ci=ci, seed=seed)


def pooled_contrast_ci(k: np.ndarray, n: np.ndarray, weights, *, n_boot: int = 2000, ci: float = 0.95,
                       seed: int = 0) -> np.ndarray:
    """A weighted sum of E ensembles' pooled shares, sum_e w_e (sum_m k_em / sum_m n_em), with a
    percentile-bootstrap interval over draws: the M draw positions are resampled with replacement,
    the same positions for every ensemble (paired), and the contrast recomputed.

    A difference of two shares is weights (1, -1); a difference of differences (a prediction's
    effect against a measured one) is (1, -1, -1, 1).

    Parameters
    ----------
    k, n : arrays (..., E, M), counts in a region and of valid samples per ensemble and draw (n >= 0)
    weights : (E,) floats
    n_boot : int, bootstrap replicates
    ci : float in (0, 1)
    seed : int

    Returns
    -------
    array (..., 3): the contrast, lower, upper; NaN where an ensemble has no valid sample.

    Examples
    --------
    >>> k = np.array([[3.0, 1.0], [1.0, 1.0]]); n = np.full((2, 2), 4.0)
    >>> float(pooled_contrast_ci(k, n, [1.0, -1.0], n_boot=10)[0])  # 4/8 - 2/8
    0.25
    """
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    w = np.asarray(weights, dtype=float)
    if k.ndim < 2 or k.shape != n.shape:
        raise ValueError(f"`k` and `n` must have one shape (..., E, M); got {k.shape} and {n.shape}")
    if w.shape != (k.shape[-2],):
        raise ValueError(f"`weights` must have shape ({k.shape[-2]},), one per ensemble; got {w.shape}")
    m = k.shape[-1]
    idx = np.random.default_rng(seed).integers(0, m, size=(n_boot, m))

    def contrast(kk, nn):  # (..., E) pooled counts -> (...) weighted sum of shares
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(nn > 0, kk / np.where(nn > 0, nn, 1.0), np.nan)
        out = share[..., 0] * w[0]
        for e in range(1, w.size):  # in order, so that (1, -1) is exactly share_0 - share_1
            out = out + share[..., e] * w[e]
        return out

    point = contrast(k.sum(-1), n.sum(-1))
    boot = contrast(np.moveaxis(k[..., idx].sum(-1), -1, -2), np.moveaxis(n[..., idx].sum(-1), -1, -2))
    with warnings.catch_warnings():  # an all-NaN cell (no valid sample) gives NaN, as documented
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanquantile(boot, [(1 - ci) / 2, (1 + ci) / 2], axis=-1)
    return np.stack([point, lo, hi], -1)


def gaussian_ensemble(draws: np.ndarray, n: int, *, mean: np.ndarray | None = None, seed: int = 0,
                      z: np.ndarray | None = None) -> np.ndarray:
    """``n`` Gaussian draws with the first two moments of an ensemble: mean + sum_m z_m (x_m - xbar) / sqrt(M - 1).

    With z ~ N(0, I_M) each draw has exactly the ensemble's sample covariance (in the span of its
    M - 1 deviations) around ``mean`` (default: the ensemble's mean xbar).  A model linear in these
    parameters (a random-feature readout A) then has a learned function that is a Gaussian field
    with the ensemble's mean and covariance kernel: the second-cumulant (Gaussian) approximation of
    the ensemble.

    Parameters
    ----------
    draws : (M, ...) array, M >= 2 ensemble members
    n : int, number of Gaussian draws
    mean : array of shape ``draws.shape[1:]``, optional; the draws' mean when None
    seed : int, of the z's (ignored when ``z`` is given)
    z : (n, M) array, optional: given standard normals (common random numbers across calls)

    Returns
    -------
    (n, ...) array.

    Examples
    --------
    >>> x = np.array([[0.0], [2.0]])
    >>> gaussian_ensemble(x, 1, z=np.array([[1.0, -1.0]])).ravel().tolist()  # 1 + (-1 - 1) / 1
    [-1.0]
    """
    draws = np.asarray(draws, dtype=float)
    if draws.ndim < 1 or draws.shape[0] < 2:
        raise ValueError(f"`draws` must hold at least 2 ensemble members on its first axis; got shape {draws.shape}")
    n = check_int(n, "n", min_val=1)
    m = draws.shape[0]
    centre = draws.mean(0) if mean is None else np.asarray(mean, dtype=float)
    if centre.shape != draws.shape[1:]:
        raise ValueError(f"`mean` must have shape {draws.shape[1:]}; got {centre.shape}")
    if z is None:
        z = np.random.default_rng(check_int(seed, "seed", min_val=0)).standard_normal((n, m))
    z = np.asarray(z, dtype=float)
    if z.shape != (n, m):
        raise ValueError(f"`z` must have shape ({n}, {m}); got {z.shape}")
    dev = (draws - draws.mean(0)).reshape(m, -1)
    return (centre.reshape(1, -1) + z @ dev / math.sqrt(m - 1)).reshape((n,) + draws.shape[1:])


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


# ------------------------------------------------------------------------ training time scales (issue 41)
#: how :func:`censored_slope` treats a censored time: a Tobit likelihood, or dropped (and counted)
CENSORED_FITS = ("tobit", "drop")


def memorized_share_ci(ratios: np.ndarray, ratio: float = MEMORIZED_RATIO, *, n_boot: int = 2000, ci: float = 0.95,
                       seed: int = 0) -> np.ndarray:
    """f_mem: the share of samples with d1/d2 < ``ratio``, with a percentile-bootstrap interval.

    The bootstrap resamples the S finite ratios of a cell with replacement; the number of memorized
    samples in a resample is then Binomial(S, f) with f the observed share, so the replicates are drawn
    as such (one ``binomial`` call for every cell and replicate: the same distribution as resampling the
    indices, without an (n_boot, S) index matrix), from the stream ``default_rng([seed, S, count])``: the
    interval of a cell depends on its counts alone, not on the cells (dask chunks) computed with it.
    Like every percentile bootstrap the interval is [0, 0] at f = 0 and [1, 1] at f = 1.

    Parameters
    ----------
    ratios : (..., S) array
        d1/d2 of each sample (the store's ``nearest_ratio``); NaN (diverged or not observed) are
        left out of the share and counted out of ``n_valid``.
    ratio : float in (0, 1)
        The memorization threshold (Bonnaire et al.: 1/3).
    n_boot, ci, seed : bootstrap replicates, interval level, seed of ``numpy.random.default_rng``.

    Returns
    -------
    (..., 4) array: share, lower, upper, n_valid (NaN share and bounds where n_valid = 0).

    Examples
    --------
    >>> memorized_share_ci(np.array([0.1, 0.2, 0.5, np.nan]), n_boot=200)[[0, 3]].tolist()
    [0.6666666666666666, 3.0]
    """
    r = np.asarray(ratios, dtype=float)
    valid = np.isfinite(r)
    n = valid.sum(-1)
    k = (valid & (r < ratio)).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, k / np.maximum(n, 1), np.nan)
    low, high = np.full(n.shape, np.nan), np.full(n.shape, np.nan)
    for kk, nn in {(int(a), int(b)) for a, b in zip(k.ravel(), n.ravel()) if b > 0}:
        # the interval is a function of (k, n): drawn from its own stream, so it does not depend on which
        # other cells (dask chunks) are computed with it
        boot = np.random.default_rng([int(seed), nn, kk]).binomial(nn, kk / nn, size=int(n_boot)) / nn
        at = (k == kk) & (n == nn)
        low[at], high[at] = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2])
    bad = n == 0
    return np.stack([share, np.where(bad, np.nan, low), np.where(bad, np.nan, high), n.astype(float)], -1)


def quality_reached(quality: np.ndarray, low: np.ndarray | None = None, high: np.ndarray | None = None, *,
                    tol: float = 0.1, higher_is_better: bool = False, rule: str = "gap", factor: float = 2.0,
                    null: np.ndarray | None = None, null_low: np.ndarray | None = None,
                    null_high: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Which checkpoints have a good enough quality, by one of three rules: surely and possibly.

    For a measure where lower is better (a distance; with ``higher_is_better`` the inequalities flip and
    the factors divide), best and worst over the checkpoints of the curve:

    - ``rule="gap"``: the gap g_k = (q_k - best) / (worst - best) is at most ``tol``;
    - ``rule="best"``: q_k <= ``factor`` x best (within a factor of the curve's own best; a positive measure);
    - ``rule="null"``: q_k <= ``factor`` x ``null`` (within a factor of what a perfect sampler scores).

    A checkpoint passes surely when the bound of its interval on the bad side does, possibly when the one
    on the good side does (without bounds: both are q_k).  With the null's interval (``null_low``,
    ``null_high``: the same interval of a perfect sampler), rule ``"null"`` compares like with like: the
    bad-side bound with ``factor`` x the null's bad-side bound, the good-side with the null's good side (so
    a perfect sampler passes surely, whatever the interval's bias).

    Parameters
    ----------
    quality : (..., K) array, checkpoints in training order; NaN (not run) is never within tolerance
    low, high : (..., K) arrays, optional: the interval of each quality
    tol : float in [0, 1): the gap rule's share
    higher_is_better : bool
    rule : one of :data:`ridgexr.choices.QUALITY_RULES` ("gap", "best", "null")
    factor : float >= 1: the ratio rules' factor
    null : (..., K) or (...,) array: the null's quality, needed by ``rule="null"``
    null_low, null_high : arrays like ``null``, optional: its interval (default ``null`` for both)

    Returns
    -------
    sure, possible : (..., K) bool

    Examples
    --------
    >>> sure, _ = quality_reached(np.array([5.0, 2.0, 1.2, 1.0, 1.05]), tol=0.1)
    >>> sure.tolist()
    [False, False, True, True, True]
    >>> quality_reached(np.array([5.0, 2.0, 1.2, 1.0, 1.05]), rule="best", factor=1.5)[0].tolist()
    [False, False, True, True, True]
    >>> quality_reached(np.array([5.0, 2.0, 1.2, 1.0, 1.05]), rule="null", factor=2.0, null=np.array(0.8))[0].tolist()
    [False, False, True, True, True]
    """
    q = np.asarray(quality, dtype=float)
    lo = q if low is None else np.asarray(low, dtype=float)
    hi = q if high is None else np.asarray(high, dtype=float)
    bad, good = (lo, hi) if higher_is_better else (hi, lo)  # the interval's end on each side
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN curve: nothing reached
        best = (np.nanmax if higher_is_better else np.nanmin)(q, axis=-1, keepdims=True)
        worst = (np.nanmin if higher_is_better else np.nanmax)(q, axis=-1, keepdims=True)
    if rule == "gap":
        t_bad = t_good = best + tol * (worst - best)
    elif rule == "best":
        t_bad = t_good = best / factor if higher_is_better else best * factor
    elif rule == "null":
        if null is None:
            raise ValueError("`null` is needed by rule='null'")

        def ref(x):
            x = np.asarray(null if x is None else x, dtype=float)
            x = x[..., None] if x.ndim == q.ndim - 1 else x
            return x / factor if higher_is_better else x * factor

        # each end of the interval against the same end of the null's (both the null itself without one)
        t_bad, t_good = (ref(null_low), ref(null_high)) if higher_is_better else (ref(null_high), ref(null_low))
    else:
        raise ValueError(f"`rule` must be one of {QUALITY_RULES}; got {rule!r}")
    with np.errstate(invalid="ignore"):
        if higher_is_better:
            return bad >= t_bad, good >= t_good
        return bad <= t_bad, good <= t_good


def first_reached(checkpoints: np.ndarray, sure: np.ndarray, possible: np.ndarray | None = None, *,
                  last_is_censored: bool = False) -> np.ndarray:
    """The first checkpoint at which a condition surely holds, with its interval and a censoring flag.

    tau = c[k*], k* the first checkpoint where ``sure`` holds.  Its interval is (c[j* - 1], c[k*]], j* the
    first checkpoint where ``possible`` holds (j* <= k*; c[-1] := 0 when j* = 0): the crossing lies after
    the last checkpoint at which it surely had not happened.  When ``sure`` never holds the time was not
    reached in the run: tau = c[K - 1] is a lower bound (censored = 1), the interval (c[j* - 1], inf)
    (c[K - 1] when ``possible`` never holds either).  With ``last_is_censored``, a time first reached at
    the last checkpoint is censored too (the curve may not have settled).

    Parameters
    ----------
    checkpoints : (K,) increasing positive training times
    sure, possible : (..., K) bool; ``possible`` defaults to ``sure`` (and is or-ed with it)
    last_is_censored : bool

    Returns
    -------
    (..., 4) array: tau, lower, upper, censored (0 or 1).

    Examples
    --------
    >>> c = np.array([1.0, 10.0, 100.0, 1000.0])
    >>> first_reached(c, np.array([False, False, True, True]), np.array([False, True, True, True])).tolist()
    [100.0, 1.0, 100.0, 0.0]
    >>> first_reached(c, np.array([False, False, False, False])).tolist()
    [1000.0, 1000.0, inf, 1.0]
    """
    c = np.asarray(checkpoints, dtype=float)
    s = np.asarray(sure, dtype=bool)
    p = s if possible is None else (np.asarray(possible, dtype=bool) | s)
    K = c.shape[0]
    prev = np.concatenate([[0.0], c[:-1]])
    any_s, any_p = s.any(-1), p.any(-1)
    k = np.argmax(s, axis=-1)
    j = np.argmax(p, axis=-1)
    censored = ~any_s | (last_is_censored & any_s & (k == K - 1))
    tau = np.where(any_s, c[k], c[-1])
    low = np.where(any_p, prev[j], c[-1])
    high = np.where(censored, np.inf, c[k])
    return np.stack([tau, low, high, censored.astype(float)], -1)


def _tobit_fit(x: np.ndarray, y: np.ndarray, censored: np.ndarray, sigma_floor: float) -> tuple[float, float]:
    """(a, b) of y = a + b x + sigma e, e ~ N(0, 1), with y a lower bound where ``censored`` (right-censored
    Tobit likelihood; sigma = sigma_floor + exp(s))."""
    from scipy import optimize, stats

    obs = ~censored
    a0, b0 = _ols(x[obs], y[obs])
    if not censored.any():
        return a0, b0
    r0 = y[obs] - a0 - b0 * x[obs]
    s0 = np.log(max(float(np.std(r0)), sigma_floor) + 1e-12)

    def nll(theta):
        a, b, s = theta
        sig = sigma_floor + np.exp(s)
        z = (y - a - b * x) / sig
        return -(stats.norm.logpdf(z[obs]).sum() - obs.sum() * np.log(sig) + stats.norm.logsf(z[censored]).sum())

    res = optimize.minimize(nll, np.array([a0, b0, s0]), method="Nelder-Mead",
                            options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
    return float(res.x[0]), float(res.x[1])


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    xc = x - x.mean()
    b = float((xc * (y - y.mean())).sum() / (xc * xc).sum())
    return float(y.mean() - b * x.mean()), b


def censored_slope(n: np.ndarray, tau: np.ndarray, censored: np.ndarray, *, method: str = "tobit",
                   sigma_floor: float = 0.05) -> np.ndarray:
    """Fit log tau = a + b log n where some tau are censored lower bounds.

    ``method="tobit"``: maximum likelihood with normal residuals in log tau, a censored point entering
    through P(log tau > its bound) (a right-censored Tobit model); the residual scale is at least
    ``sigma_floor`` (a few points on a line would otherwise drive it to 0 and the likelihood to infinity).
    Without censored points this is least squares.  ``method="drop"``: least squares on the uncensored
    points alone (biased low when the largest n are censored; kept for comparison).

    Parameters
    ----------
    n, tau : (P,) positive arrays; non-finite pairs are left out
    censored : (P,) bool
    method : "tobit" or "drop"
    sigma_floor : float > 0, in units of log tau

    Returns
    -------
    (2,) array: a, b; NaN when fewer than 2 distinct n are uncensored.

    Examples
    --------
    >>> n = np.array([64.0, 128.0, 256.0, 512.0])
    >>> censored_slope(n, 3.0 * n, np.zeros(4, bool)).round(6).tolist()
    [1.098612, 1.0]
    """
    x = np.log(np.asarray(n, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(np.asarray(tau, dtype=float))
    cen = np.asarray(censored, dtype=bool)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, cen = x[ok], y[ok], cen[ok]
    if np.unique(x[~cen]).size < 2:
        return np.array([np.nan, np.nan])
    if method == "drop":
        return np.array(_ols(x[~cen], y[~cen]))
    if method != "tobit":
        raise ValueError(f"`method` must be one of {CENSORED_FITS}; got {method!r}")
    return np.array(_tobit_fit(x, y, cen, sigma_floor))


def loss_gen_time(checkpoints: np.ndarray, error: np.ndarray, *, tol: float = 0.1) -> np.ndarray:
    """The first checkpoint at which a loss curve has closed all but ``tol`` of its fall from the untrained
    model: (e - min) / (e[0] - min) <= tol, e[0] the first checkpoint's value (:func:`first_reached`, censored
    when first reached at the last checkpoint).  A curve that never falls below e[0] has no such time (NaN).

    Returns (..., 4): tau, lower, upper, censored.

    Examples
    --------
    >>> c = np.array([1.0, 10.0, 100.0, 1000.0])
    >>> loss_gen_time(c, np.array([1.0, 0.5, 0.05, 0.3])).tolist()
    [100.0, 10.0, 100.0, 0.0]
    """
    e = np.asarray(error, dtype=float)
    lo = np.min(e, axis=-1, keepdims=True)
    fall = e[..., :1] - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        share = (e - lo) / fall
    out = first_reached(checkpoints, share <= tol, last_is_censored=True)
    return np.where((fall > 0), out, np.nan)


def loss_min_time(checkpoints: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Where a loss curve turns up: its minimum over the checkpoints, with the interval (c[k - 1], c[k + 1])
    of the neighbouring checkpoints (c[-1] := 0); censored (upper end inf) when the minimum is the last
    checkpoint: the curve was still falling at the end of the run, and the time is a lower bound.

    Returns (..., 4): tau, lower, upper, censored.

    Examples
    --------
    >>> c = np.array([1.0, 10.0, 100.0, 1000.0])
    >>> loss_min_time(c, np.array([1.0, 0.5, 0.4, 0.6])).tolist()
    [100.0, 10.0, 1000.0, 0.0]
    >>> loss_min_time(c, np.array([1.0, 0.5, 0.4, 0.3])).tolist()
    [1000.0, 100.0, inf, 1.0]
    """
    c = np.asarray(checkpoints, dtype=float)
    v = np.asarray(loss, dtype=float)
    k = np.argmin(v, axis=-1)
    K = c.size
    prev = np.concatenate([[0.0], c[:-1]])
    nxt = np.concatenate([c[1:], [np.inf]])
    censored = k == K - 1
    return np.stack([c[k], prev[k], np.where(censored, np.inf, nxt[k]), censored.astype(float)], axis=-1)


def slope_range(n: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The slopes b of every line log tau = a + b log n that passes through every tau's interval: what the
    checkpoint spacing alone allows, before any sampling noise.

    A tau known to lie in (low, high] (its checkpoint interval: :func:`first_reached`; high = inf where
    censored, low = 0 before the first checkpoint) constrains a line to log low <= a + b log n <= log high.
    The least and the largest b over the lines meeting every constraint (two linear programs).  A fit of the
    checkpoint labels alone can put b's bootstrap interval well inside this range when the labels happen to
    lie on a line (docs/timescales.md, timescales-fashion).

    Parameters
    ----------
    n : (P,) positive sizes; low, high : (P,) the intervals' ends (non-finite ``low`` pairs are left out)

    Returns
    -------
    (2,) array: b_min, b_max (inf where unbounded); NaN, NaN when fewer than 2 distinct n are left or no line
    meets every interval.

    Examples
    --------
    >>> slope_range(np.array([16.0, 64.0]), np.array([1000.0, 2000.0]), np.array([2000.0, 4000.0])).round(6).tolist()
    [0.0, 1.0]
    >>> slope_range(np.array([16.0, 64.0]), np.array([1000.0, 2000.0]), np.array([2000.0, np.inf])).tolist()
    [0.0, inf]
    """
    from scipy import optimize

    x = np.log(np.asarray(n, dtype=float))
    lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    ok = np.isfinite(x) & ~np.isnan(lo) & ~np.isnan(hi) & (hi > 0)
    x, lo, hi = x[ok], lo[ok], hi[ok]
    if np.unique(x).size < 2:
        return np.array([np.nan, np.nan])
    with np.errstate(divide="ignore"):
        ylo, yhi = np.log(np.maximum(lo, 0.0)), np.log(hi)
    rows, rhs = [], []  # A @ (a, b) <= rhs
    for xi, l, h in zip(x, ylo, yhi):
        if np.isfinite(l):
            rows.append([-1.0, -xi])
            rhs.append(-l)
        if np.isfinite(h):
            rows.append([1.0, xi])
            rhs.append(h)
    out = []
    for sign in (1.0, -1.0):  # minimise b, then -b
        res = optimize.linprog([0.0, sign], A_ub=np.array(rows) if rows else None, b_ub=np.array(rhs) if rows else None,
                               bounds=[(None, None), (None, None)], method="highs")
        if res.status == 2:  # infeasible: no line meets every interval
            return np.array([np.nan, np.nan])
        out.append(sign * res.fun if res.status == 0 else sign * -np.inf)
    return np.array([out[0], out[1]])


def censored_slope_ci(n: np.ndarray, tau: np.ndarray, censored: np.ndarray, *, method: str = "tobit",
                      sigma_floor: float = 0.05, n_boot: int = 2000, ci: float = 0.95, seed: int = 0) -> np.ndarray:
    """The slope b of :func:`censored_slope` with a pairs-bootstrap percentile interval.

    The (n, tau, censored) points are resampled with replacement and refitted; a replicate with fewer
    than two distinct uncensored n has no slope and is dropped (counted in the output).

    Returns
    -------
    (6,) array: a, b, b_lower, b_upper, points used (finite), replicates dropped.

    Examples
    --------
    >>> n = np.array([64.0, 128.0, 256.0, 512.0, 1024.0])
    >>> out = censored_slope_ci(n, 2.0 * n, np.zeros(5, bool), n_boot=100)
    >>> out[1].round(6), out[2].round(6), out[3].round(6)
    (np.float64(1.0), np.float64(1.0), np.float64(1.0))
    """
    n = np.asarray(n, dtype=float)
    tau = np.asarray(tau, dtype=float)
    cen = np.asarray(censored, dtype=bool)
    ok = np.isfinite(n) & np.isfinite(tau) & (n > 0) & (tau > 0)
    n, tau, cen = n[ok], tau[ok], cen[ok]
    a, b = censored_slope(n, tau, cen, method=method, sigma_floor=sigma_floor)
    if not np.isfinite(b):
        return np.array([a, b, np.nan, np.nan, float(n.size), float(n_boot)])
    idx = np.random.default_rng(seed).integers(0, n.size, size=(int(n_boot), n.size))
    boot = np.array([censored_slope(n[i], tau[i], cen[i], method=method, sigma_floor=sigma_floor)[1] for i in idx])
    kept = boot[np.isfinite(boot)]
    lo, hi = np.quantile(kept, [(1 - ci) / 2, (1 + ci) / 2]) if kept.size else (np.nan, np.nan)
    return np.array([a, b, lo, hi, float(n.size), float(n_boot - kept.size)])


def order_verdict(gen_low: np.ndarray, gen_high: np.ndarray, mem_low: np.ndarray, mem_high: np.ndarray,
                  mem_censored: np.ndarray) -> str:
    """The verdict on "tau_gen < tau_mem" over the n of one curve family, by the criterion written before
    the timescales runs (docs/timescales.md).

    Per n, tau_gen's interval (gen_low, gen_high] lies below tau_mem's (mem_low, mem_high] when
    gen_high <= mem_low, and above it when mem_high <= gen_low.  "agrees" when at least one n has an
    uncensored tau_mem and every such n has tau_gen's interval below tau_mem's; "disagrees" when some n
    has tau_mem's interval below tau_gen's; else "inconclusive" (every tau_mem censored included).

    Parameters
    ----------
    gen_low, gen_high, mem_low, mem_high : (n,) the two intervals' ends (inf where censored)
    mem_censored : (n,) bool

    Examples
    --------
    >>> order_verdict(np.array([5.0, 5.0]), np.array([10.0, 10.0]), np.array([50.0, 80.0]), np.array([60.0, 100.0]),
    ...               np.array([False, True]))
    'agrees'
    >>> order_verdict(np.array([5.0]), np.array([10.0]), np.array([50.0]), np.inf * np.ones(1), np.array([True]))
    'inconclusive'
    """
    gen_low, gen_high, mem_low, mem_high = (np.asarray(a, dtype=float) for a in (gen_low, gen_high, mem_low, mem_high))
    reached = ~np.asarray(mem_censored, dtype=bool)
    if np.any(mem_high <= gen_low):
        return "disagrees"
    if reached.any() and np.all(gen_high[reached] <= mem_low[reached]):
        return "agrees"
    return "inconclusive"
