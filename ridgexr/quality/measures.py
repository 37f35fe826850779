"""Array layer of the sample-quality measures: numpy in, floats out.

Does a cell's model *generate* -- make new samples of its training law -- or not?  These
measures answer, each with its interval and its reference value:

- the **nearest ratio** (:func:`nearest_ratio`): the median distance of the samples to their
  nearest training point over the same median for held-out reals (fresh draws of the law).
  About 1 for a sampler of the law; << 1 for one that copies training points; >> 1 for one
  whose samples lie off the data (noise, blur, artefacts).
- the **class share** (:func:`class_share`): the share of samples a classifier assigns to the
  cell's classes (images only), with its Wilson interval.  The classifier's recall on held-out
  reals of the classes for a sampler of the law.
- the **Frechet distance** between Gaussians fitted to features (:func:`frechet_distance`):
  biased upward by the number of points, so it is read against a floor (held-out reals) and a
  ceiling (a crude model) computed at the same size (:func:`ridgexr.quality.image_quality`), and
  for point sets the **sliced Wasserstein distance** with its fresh-draw null (:func:`point_quality`);
- the **Wasserstein distance along the law's first principal axis** (:func:`axis_wasserstein`, with
  :func:`principal_axis`): for a law with separated modes (a two-component mixture) the direction in which a
  blob between the modes and the mixture differ most, which random directions in d dimensions rarely meet.

The verdict comes from one place, :mod:`ridgexr.quality.gate` (:data:`~ridgexr.quality.GATE`,
:func:`~ridgexr.quality.gate_verdict`); the coverage of held-out reals is there too.

This module imports numpy and ridgexr's array layer only (no torch, no xarray of its own); the
nearest search is :func:`ridgexr.analysis.arrays.nearest_two` (exact, chunked over queries).
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_float, check_int
from ..analysis.arrays import (RESAMPLE_LIMIT, bootstrap_medians, nearest_two, proportion_ci, sliced_wasserstein,
                               wasserstein_1d)
from .gate import gate_verdict

__all__ = ["frechet_distance", "frechet_from_moments", "gaussian_moments", "nearest_ratio", "class_share",
           "point_quality", "principal_axis", "axis_wasserstein", "NEAREST_BUDGET", "check_points", "check_ci",
           "nearest_distances", "ratio_interval"]

#: bytes of (queries x training points) squared distances held at once by the nearest search
NEAREST_BUDGET = 64 * 2**20


# ---------------------------------------------------------------------------------------------- checks
def check_points(x, name: str, *, k: int | None = None, min_rows: int = 1, finite: bool = True) -> np.ndarray:
    """``x`` as a float64 (n, k) array with n >= min_rows (finite unless ``finite=False``); ValueError naming
    ``name`` otherwise (the one input check of the quality measures: points, features, flattened images)."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or (k is not None and a.shape[1] != k):
        want = f"(n, {k})" if k is not None else "(n, k)"
        raise ValueError(f"`{name}` must be a 2-D array of shape {want}; got shape {a.shape}")
    if a.shape[0] < min_rows:
        raise ValueError(f"`{name}` must have at least {min_rows} rows; got {a.shape[0]}")
    if finite and not np.isfinite(a).all():
        raise ValueError(f"`{name}` must be finite; got {int((~np.isfinite(a).all(1)).sum())} rows with NaN or inf")
    return a


def check_ci(ci) -> float:
    """``ci`` as a float in (0, 1) (an interval's coverage); ValueError naming it otherwise."""
    return check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")


# -------------------------------------------------------------------------------------------- Frechet
def _sqrt_psd(c: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric PSD matrix (eigenvalues below 0 from rounding clipped to 0)."""
    w, v = np.linalg.eigh(0.5 * (c + c.T))
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_from_moments(mu1, cov1, mu2, cov2) -> float:
    """Frechet (2-Wasserstein squared) distance between N(mu1, cov1) and N(mu2, cov2).

    d^2 = |mu1 - mu2|^2 + tr(C1 + C2 - 2 (C1^{1/2} C2 C1^{1/2})^{1/2}),

    with both square roots from symmetric eigendecompositions whose tiny negative eigenvalues
    (rounding) are clipped to 0, so the result is real; it is clipped at 0 from below.

    Parameters
    ----------
    mu1, mu2 : (k,) arrays
        Means (feature units).
    cov1, cov2 : (k, k) arrays
        Symmetric positive semi-definite covariances.

    Returns
    -------
    float >= 0, in squared feature units.

    Raises
    ------
    ValueError
        Shapes that do not match, or values that are not finite.

    Examples
    --------
    >>> round(frechet_from_moments(np.zeros(2), np.eye(2), np.ones(2), 4 * np.eye(2)), 12)  # 2 + 2 (2 - 1)^2
    4.0
    """
    m1 = np.asarray(mu1, dtype=np.float64)
    m2 = np.asarray(mu2, dtype=np.float64)
    c1 = np.asarray(cov1, dtype=np.float64)
    c2 = np.asarray(cov2, dtype=np.float64)
    if m1.ndim != 1:
        raise ValueError(f"`mu1` must be 1-D; got shape {m1.shape}")
    k = m1.shape[0]
    for name, a, shape in (("mu2", m2, (k,)), ("cov1", c1, (k, k)), ("cov2", c2, (k, k))):
        if a.shape != shape:
            raise ValueError(f"`{name}` must have shape {shape}; got {a.shape}")
    for name, a in (("mu1", m1), ("mu2", m2), ("cov1", c1), ("cov2", c2)):
        if not np.isfinite(a).all():
            raise ValueError(f"`{name}` must be finite")
    s1 = _sqrt_psd(c1)
    inner = s1 @ (0.5 * (c2 + c2.T)) @ s1
    lam = np.linalg.eigvalsh(0.5 * (inner + inner.T))
    cross = np.sqrt(np.clip(lam, 0.0, None)).sum()
    diff = m1 - m2
    return float(max(diff @ diff + np.trace(c1) + np.trace(c2) - 2.0 * cross, 0.0))


def gaussian_moments(x) -> tuple[np.ndarray, np.ndarray]:
    """Mean (k,) and unbiased (ddof=1) covariance (k, k) of the rows of x (n >= 2, k), in float64.

    The moments :func:`frechet_distance` fits; computed once for a reference set that several
    distances share (:func:`frechet_from_moments`).

    Examples
    --------
    >>> mu, cov = gaussian_moments(np.array([[0.0, 1.0], [2.0, 3.0]]))
    >>> mu.tolist(), cov.tolist()
    ([1.0, 2.0], [[2.0, 2.0], [2.0, 2.0]])
    """
    a = check_points(x, "x", min_rows=2)
    mu = a.mean(0)
    xc = a - mu
    return mu, xc.T @ xc / (a.shape[0] - 1)


def frechet_distance(x, y) -> float:
    """Frechet distance between Gaussians fitted to two feature sets (mean, unbiased covariance).

    d^2 = |mu_x - mu_y|^2 + tr(C_x + C_y - 2 (C_x^{1/2} C_y C_x^{1/2})^{1/2})
    (:func:`frechet_from_moments`).  Biased upward at finite n, m (two sets of one law score > 0,
    falling as 1/n): compare values at equal sizes only.  In the classifier's features this is
    "the Frechet distance in the classifier's features", not FID (FID uses Inception features).

    Parameters
    ----------
    x : (n, k) array, n >= 2
    y : (m, k) array, m >= 2
        Finite features (any units; the result is in those units squared).

    Returns
    -------
    float >= 0; 0 for identical sets.

    Raises
    ------
    ValueError
        Not 2-D, different k, fewer than 2 rows, or not finite.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(50, 3))
    >>> frechet_distance(x, x) < 1e-10, round(frechet_distance(x, x + 1.0), 10)  # a shift by (1, 1, 1)
    (True, 3.0)
    """
    a = check_points(x, "x", min_rows=2)
    b = check_points(y, "y", k=a.shape[1], min_rows=2)
    return frechet_from_moments(*gaussian_moments(a), *gaussian_moments(b))


# ----------------------------------------------------------------------------------- nearest ratio
def nearest_distances(queries: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Distance of each query (M, d) to its nearest training point (N, d): one chunked exact search."""
    chunk = max(1, NEAREST_BUDGET // (8 * train.shape[0]))
    pts = train if train.shape[0] >= 2 else np.concatenate([train, train])  # nearest_two wants two points
    return nearest_two(queries, pts, chunk=chunk)[0]


def ratio_interval(ds: np.ndarray, dr: np.ndarray, n_boot: int, ci: float, seed: int) -> tuple[float, float]:
    """The nearest ratio's interval from the two sets of nearest distances (validated by the caller): the
    percentile interval of median(ds*) / median(dr*), ds and dr resampled independently with replacement.

    One index matrix per chunk of replicates (bounded memory), medians along axis 1; above
    :data:`~ridgexr.analysis.arrays.RESAMPLE_LIMIT` values (either set) each set's bootstrap medians are drawn
    from the same law by :func:`~ridgexr.analysis.arrays.bootstrap_medians` (10^3 x 9 x 10^5 medians took
    minutes per cell of a 4 x 10^5-sample run).
    """
    rng = np.random.default_rng(seed)
    if max(ds.size, dr.size) > RESAMPLE_LIMIT:  # the medians' bootstrap laws through order statistics
        with np.errstate(divide="ignore", invalid="ignore"):
            boot = bootstrap_medians(ds, n_boot, rng) / bootstrap_medians(dr, n_boot, rng)
        lo, hi = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2])
        return float(lo), float(hi)
    chunk = max(1, (4 * 2**20) // (ds.size + dr.size))
    boot = np.empty(n_boot)
    for b in range(0, n_boot, chunk):  # chunks of replicates, not points
        nb = min(chunk, n_boot - b)
        num = np.median(ds[rng.integers(0, ds.size, size=(nb, ds.size))], axis=1)
        den = np.median(dr[rng.integers(0, dr.size, size=(nb, dr.size))], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            boot[b:b + nb] = num / den
    lo, hi = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2])
    return float(lo), float(hi)


def nearest_ratio(samples, reals, train, *, n_boot: int = 1000, ci: float = 0.95,
                  seed: int = 0) -> tuple[float, float, float]:
    """Median nearest-training distance of the samples over that of held-out reals, with a bootstrap interval.

    ratio = median_s min_i |x_s - x_i| / median_r min_i |y_r - x_i|

    over the samples x_s, the held-out reals y_r (fresh draws of the law, not in the training set)
    and the training points x_i.  About 1 for a sampler of the law, << 1 for copies of training
    points, >> 1 for samples off the data.  The interval is a percentile bootstrap: samples and reals
    resampled independently, with replacement, ``n_boot`` times.

    Rows of ``samples`` that are not finite (diverged samples) are left out here; the caller counts
    them (:func:`ridgexr.quality.image_quality` reports ``n_finite`` next to the number of samples).

    Parameters
    ----------
    samples : (S, d) array
        Generated points (data units).
    reals : (R, d) array, R >= 1
        Held-out real points of the same law, finite.
    train : (N, d) array, N >= 1
        The training set, finite.
    n_boot : int
        Bootstrap replicates.
    ci : float in (0, 1)
        Coverage of the interval.
    seed : int
        Seed of the resampling.

    Returns
    -------
    ratio, lower, upper : float
        Dimensionless; NaN when no sample is finite.

    Raises
    ------
    ValueError
        Shapes that do not match, non-finite reals or training points, or bad ``n_boot``, ``ci``, ``seed``.

    Examples
    --------
    >>> train = np.array([[0.0], [10.0]])
    >>> ratio, lo, hi = nearest_ratio(np.array([[1.0], [2.0], [3.0]]), np.array([[1.0], [1.0], [1.0]]), train,
    ...                               n_boot=50)
    >>> ratio, lo <= ratio <= hi  # median 2 over median 1
    (2.0, True)
    """
    s = check_points(samples, "samples", min_rows=0, finite=False)
    d = s.shape[1]
    r = check_points(reals, "reals", k=d)
    tr = check_points(train, "train", k=d)
    n_boot = check_int(n_boot, "n_boot", min_val=1)
    ci = check_ci(ci)
    seed = check_int(seed, "seed", min_val=0)
    s = s[np.isfinite(s).all(1)]
    if s.shape[0] == 0:
        return math.nan, math.nan, math.nan
    dist = nearest_distances(np.concatenate([s, r]), tr)
    ds, dr = dist[:s.shape[0]], dist[s.shape[0]:]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(np.median(ds) / np.median(dr))
    lo, hi = ratio_interval(ds, dr, n_boot, ci, seed)
    return ratio, lo, hi


# ------------------------------------------------------------------------------------- class share
def class_share(predicted, classes, ci: float = 0.95) -> tuple[float, float, float]:
    """Share of predicted labels that lie in ``classes``, with its Wilson score interval.

    share = #{s : predicted_s in classes} / S, interval from
    :func:`ridgexr.analysis.arrays.proportion_ci` (Wilson, z = Phi^-1((1 + ci) / 2)).

    Parameters
    ----------
    predicted : (S,) int array
        A classifier's labels of the (finite) samples.
    classes : sequence of int
        The cell's classes.
    ci : float in (0, 1)

    Returns
    -------
    share, lower, upper : float
        In [0, 1]; NaN when S = 0.

    Examples
    --------
    >>> share, lo, hi = class_share(np.array([0, 0, 0, 3]), [0])
    >>> share, round(lo, 4), round(hi, 4)
    (0.75, 0.3006, 0.9544)
    """
    p = np.asarray(predicted)
    if p.ndim != 1 or (p.size and p.dtype.kind not in "iu"):
        raise ValueError(f"`predicted` must be a 1-D integer array; got shape {p.shape}, dtype {p.dtype}")
    c = np.asarray(classes)
    if c.ndim != 1 or c.size == 0 or c.dtype.kind not in "iu":
        raise ValueError(f"`classes` must be a non-empty sequence of integers; got {classes!r}")
    ci = check_ci(ci)
    n = p.size
    k = int(np.isin(p, c).sum())
    if n == 0:
        return math.nan, math.nan, math.nan
    lo, hi = proportion_ci(k, n, ci, "wilson")
    return k / n, float(lo), float(hi)


# ------------------------------------------------------------------------------------- point sets
def point_quality(samples, train, fresh, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> dict:
    """Quality of samples of a point set or of latents, where fresh draws of the law exist.

    - the nearest ratio (:func:`nearest_ratio`) of the finite samples, with all of ``fresh`` as the
      held-out reals;
    - the sliced 2-Wasserstein distance (:func:`ridgexr.analysis.arrays.sliced_wasserstein`) of the S
      finite samples to the reference set ``fresh[S:]``, and its null: the same distance from the
      independent fresh set ``fresh[:S]`` (what a perfect sampler of S points scores) to the same
      reference; both with the same projections (``seed``);
    - the gate's verdict on the nearest ratio alone (no classifier).

    Parameters
    ----------
    samples : (S, d) array
        Generated points; non-finite rows (diverged) are left out and counted (``n_finite``).
    train : (N, d) array
        The training set.
    fresh : (F, d) array, F > S_finite
        Fresh draws of the law, independent of ``train``.
    n_boot, ci, seed
        As for :func:`nearest_ratio`.

    Returns
    -------
    dict of floats: ``nearest_ratio``, ``nearest_ratio_lower``, ``nearest_ratio_upper``,
    ``sliced_wasserstein``, ``sliced_wasserstein_null`` (data units), ``n_draws`` (S), ``n_finite``, and
    ``gate`` (str).

    Raises
    ------
    ValueError
        Shapes that do not match, too few fresh draws, non-finite ``train`` or ``fresh``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q = point_quality(rng.normal(size=(100, 2)), rng.normal(size=(200, 2)), rng.normal(size=(400, 2)),
    ...                   n_boot=200)
    >>> q["gate"], 0.7 < q["nearest_ratio"] < 1.4
    ('generates', True)
    """
    s = check_points(samples, "samples", min_rows=1, finite=False)
    d = s.shape[1]
    tr = check_points(train, "train", k=d)
    fr = check_points(fresh, "fresh", k=d)
    finite = s[np.isfinite(s).all(1)]
    n_fin = finite.shape[0]
    if fr.shape[0] <= n_fin:
        raise ValueError(f"`fresh` must have more rows than the {n_fin} finite samples (the first {n_fin} are the "
                         f"null's perfect sampler, the rest the reference); got {fr.shape[0]}")
    ratio, lo, hi = nearest_ratio(finite, fr, tr, n_boot=n_boot, ci=ci, seed=seed)
    if n_fin:
        sw = sliced_wasserstein(finite, fr[n_fin:], seed=seed)
        sw_null = sliced_wasserstein(fr[:n_fin], fr[n_fin:], seed=seed)
    else:
        sw = sw_null = math.nan
    return {"nearest_ratio": ratio, "nearest_ratio_lower": lo, "nearest_ratio_upper": hi,
            "sliced_wasserstein": sw, "sliced_wasserstein_null": sw_null, "n_draws": float(s.shape[0]),
            "n_finite": float(n_fin), "gate": gate_verdict(nearest_ratio=ratio)}


# ------------------------------------------------------------------------------ along the principal axis
#: replicates resampled at once by :func:`axis_wasserstein` (bounds its memory: replicates x (S + M) floats)
AXIS_BOOT_BLOCK = 250


def principal_axis(x) -> np.ndarray:
    """The unit eigenvector (d,) of the largest eigenvalue of the covariance of ``x`` (n, d), with its entry of
    largest magnitude positive (a fixed sign).

    >>> principal_axis(np.array([[1.0, -2.0], [2.0, -4.0], [-1.0, 2.0], [-2.0, 4.0]])).round(3).tolist()  # (1, -2) / sqrt(5)
    [-0.447, 0.894]
    """
    a = check_points(x, "x", min_rows=2)
    _, v = np.linalg.eigh(np.cov(a, rowvar=False).reshape(a.shape[1], a.shape[1]))
    u = v[:, -1]
    return u * np.sign(u[np.argmax(np.abs(u))])


def axis_wasserstein(samples, reference, axis, *, n_boot: int = 2000, ci: float = 0.95,
                     seed: int = 0) -> tuple[float, float, float, int]:
    """The 1-Wasserstein distance between the finite ``samples`` and ``reference`` projected on ``axis``, with
    a percentile-bootstrap interval.

    W1 of the two empirical laws of <x, u> (u = axis / norm(axis)), exact (:func:`ridgexr.analysis.arrays.
    wasserstein_1d`); data units.  The interval resamples the samples and the reference independently
    (``n_boot`` replicates, seeded); as for any distance, a replicate's value is biased upward, so the interval
    sits above a small distance rather than around it: compare it with the same interval of a perfect
    sampler (fresh draws of the law), not with 0.

    Parameters
    ----------
    samples : (S, d) array
        Generated points; non-finite rows (diverged) are left out and counted.
    reference : (M, d) array, finite
        Draws of the law.
    axis : (d,) array, nonzero
        The direction (e.g. :func:`principal_axis` of ``reference``).
    n_boot, ci, seed : int >= 1, float in (0, 1), int >= 0

    Returns
    -------
    (distance, lower, upper, number of finite samples); NaN for the first three when no sample is finite.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> ref = rng.normal(size=(2000, 2))
    >>> w, lo, hi, n = axis_wasserstein(ref[:500] + [1.0, 0.0], ref[500:], [1.0, 0.0], n_boot=200)
    >>> lo < 1.0 < hi + 0.1, n
    (True, 500)
    """
    s = check_points(samples, "samples", finite=False)
    d = s.shape[1]
    ref = check_points(reference, "reference", k=d)
    u = np.asarray(axis, dtype=np.float64)
    if u.shape != (d,) or not np.isfinite(u).all() or not np.linalg.norm(u) > 0:
        raise ValueError(f"`axis` must be a finite nonzero vector of length {d}; got shape {u.shape}")
    n_boot = check_int(n_boot, "n_boot", min_val=1)
    ci = check_ci(ci)
    seed = check_int(seed, "seed", min_val=0)
    u = u / np.linalg.norm(u)
    ps = s[np.isfinite(s).all(1)] @ u
    pr = ref @ u
    n, m = len(ps), len(pr)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    rng = np.random.default_rng(seed)
    boots = np.concatenate([
        wasserstein_1d(ps[rng.integers(0, n, (b, n))], pr[rng.integers(0, m, (b, m))])
        for b in np.diff(np.r_[0:n_boot:AXIS_BOOT_BLOCK, n_boot])])
    lo, hi = np.quantile(boots, [(1 - ci) / 2, (1 + ci) / 2])
    return float(wasserstein_1d(ps, pr)), float(lo), float(hi), n
