"""The phases of a sampled trajectory, array layer: when it reaches the ridge's tube and aligns with the ridge, how
far it slides along it, the tangential distance to the nearest training point, the time-integrated residual, and
where a sweep curve crosses a level.

Steps along the next-to-last axis of a ``(..., K, d)`` array (or the last of ``(..., K)``), in sampling order (t
decreasing); vectorised over the leading axes.
"""

from __future__ import annotations

import numpy as np

from ...process import OU
from .distances import nearest_two

__all__ = ["enter_and_stay_time", "reach_time", "align_time", "slide_distance", "tangential_distance",
           "integrated_residual", "crossing"]


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

    from ...empirical import SmoothedEmpirical
    from ...scms import frame_flat

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
