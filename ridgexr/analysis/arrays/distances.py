"""Distances to a point set and between two samples, array layer: the nearest and second-nearest training point
(memorization, near-mode, novelty), Hausdorff, 1-D and sliced Wasserstein, MMD^2, and a network's score errors.

Points are ``(..., d)`` arrays; vectorised (and chunked) over queries.
"""

from __future__ import annotations

import numpy as np

from ...defaults import MEMORIZED_RATIO

__all__ = ["KD_TREE_MAX_DIM", "nearest_two", "memorized", "near_mode", "score_errors", "wasserstein_1d",
           "SLICED_BLOCK", "sliced_wasserstein", "mmd2", "hausdorff", "novelty"]


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


#: values per block of :func:`sliced_wasserstein` (directions x (n + m) of the 1-D quantile arrays): 2^24 float64
#: values, 128 MB, whatever the sample sizes (all 128 directions at once held 4 x 2.6 GB at 10^6 + 1.5 x 10^6)
SLICED_BLOCK = 1 << 24


def sliced_wasserstein(x: np.ndarray, y: np.ndarray, *, n_projections: int = 128, p: int = 2,
                       seed: int = 0) -> float:
    """Sliced p-Wasserstein distance between the empirical laws of x (n, d) and y (m, d).

    SW_p = (mean over random unit directions theta of W_p^p(<x, theta>, <y, theta>))^(1/p),
    each 1-D W_p computed exactly by :func:`wasserstein_1d`, in blocks of directions whose quantile arrays
    hold at most :data:`SLICED_BLOCK` values (memory O(SLICED_BLOCK), the numbers of all directions at once).
    Data units.

    Examples
    --------
    >>> x = np.zeros((3, 1)); y = np.full((4, 1), 2.0)  # one dimension: every direction is +-1, W_2 = 2
    >>> round(sliced_wasserstein(x, y, n_projections=4), 12)
    2.0
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"`x` and `y` must be (n, d) and (m, d); got {x.shape} and {y.shape}")
    theta = _unit_directions(x.shape[1], n_projections, seed)
    step = max(1, SLICED_BLOCK // (x.shape[0] + y.shape[0] + 2))
    wp = np.concatenate([wasserstein_1d((x @ theta[:, i:i + step]).T, (y @ theta[:, i:i + step]).T, p=p)
                         for i in range(0, n_projections, step)])
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
