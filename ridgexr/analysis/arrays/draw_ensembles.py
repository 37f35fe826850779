"""Ensembles over training-noise draws, array layer: pooled shares and their contrasts with a bootstrap over the draws,
and the Gaussian ensemble with an ensemble's first two moments.

Draws along the last axis (``(..., M)``) or the first (:func:`gaussian_ensemble`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..._validation import check_int

__all__ = ["pooled_share_ci", "pooled_contrast_ci", "gaussian_ensemble"]


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
