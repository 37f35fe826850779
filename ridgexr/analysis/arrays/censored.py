"""Training time scales, array layer: the first checkpoint at which a quality is reached (right-censored at the last
one), from a quality curve or a loss curve, and the slope of log tau over log n with censored times (a Tobit
likelihood or dropped), its bootstrap interval and the range the checkpoint intervals allow, and the order of two
time scales.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...choices import QUALITY_RULES

__all__ = ["CENSORED_FITS", "quality_reached", "first_reached", "censored_slope", "loss_gen_time", "loss_min_time",
           "slope_range", "censored_slope_ci", "order_verdict"]


#: how :func:`censored_slope` treats a censored time: a Tobit likelihood, or dropped (and counted)
CENSORED_FITS = ("tobit", "drop")


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
