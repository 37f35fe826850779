"""Array layer of the time laws in n: times known within intervals, their law log tau = a + b log n, and collapse.

Numpy in, numpy out, no xarray.  A training time read off checkpoints is known only within an interval: it
happened after the last checkpoint at which it surely had not and by the first at which it surely had
(:func:`ridgexr.analysis.arrays.first_reached`), or later than the last checkpoint (right-censored).  These
kernels carry those intervals into the law's slope instead of fitting the checkpoint labels:

- :func:`separation_time`: when two loss curves (train, test) separate by a stated amount;
- :func:`interval_slope`: the maximum-likelihood line log tau = a + b log n through interval-censored times, seeds as
  replicates (normal scatter sigma in log tau), with b's profile-likelihood interval;
- :func:`collapse_exponent`: the b at which curves f(tau) measured at several n fall onto one curve of
  tau / n^b (the share of memorized samples, say), with a bootstrap interval over seeds and samples.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_float, check_int

__all__ = ["separation_time", "interval_slope", "interval_loglik", "collapse_cost", "collapse_exponent",
           "simulate_interval_times"]


def separation_time(checkpoints: np.ndarray, lower: np.ndarray, upper: np.ndarray, amount: float, *,
                    start: int = 0) -> np.ndarray:
    """The first checkpoint at which ``upper - lower`` reaches ``amount``, with its interval.

    For loss curves along training time (``lower`` the train loss, ``upper`` the test loss): the time at which
    they have separated by ``amount``.  The interval is (c[k - 1], c[k]] (c[-1] := 0); never reached: censored,
    tau = the last checkpoint as a lower bound, interval (c[K - 1], inf).  Checkpoints before index ``start`` are
    not searched.

    Parameters
    ----------
    checkpoints : (K,) increasing positive times
    lower, upper : (..., K) the two curves
    amount : float, the separation
    start : int, first checkpoint searched

    Returns
    -------
    (..., 4): tau, lower end, upper end, censored (0 or 1)

    Examples
    --------
    >>> c = np.array([1.0, 10.0, 100.0, 1000.0])
    >>> separation_time(c, np.zeros(4), np.array([0.0, 0.05, 0.2, 0.5]), 0.1).tolist()
    [100.0, 10.0, 100.0, 0.0]
    >>> separation_time(c, np.zeros(4), np.array([0.0, 0.05, 0.06, 0.07]), 0.1).tolist()
    [1000.0, 1000.0, inf, 1.0]
    """
    c = np.asarray(checkpoints, dtype=float)
    gap = np.asarray(upper, dtype=float) - np.asarray(lower, dtype=float)
    reached = gap >= amount
    reached[..., :start] = False
    any_r = reached.any(-1)
    k = np.argmax(reached, axis=-1)
    prev = np.concatenate([[0.0], c[:-1]])
    tau = np.where(any_r, c[k], c[-1])
    low = np.where(any_r, prev[k], c[-1])
    high = np.where(any_r, c[k], np.inf)
    return np.stack([tau, low, high, (~any_r).astype(float)], -1)


def _log_interval_prob(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """log(Phi(hi) - Phi(lo)) for lo < hi, stable in both tails."""
    from scipy.special import log_ndtr

    flip = lo > 0  # both in the upper tail: Phi(hi) - Phi(lo) = Phi(-lo) - Phi(-hi)
    a = np.where(flip, -hi, lo)
    b = np.where(flip, -lo, hi)
    lb, la = log_ndtr(b), log_ndtr(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        return lb + np.log1p(-np.exp(np.minimum(la - lb, 0.0)))


def interval_loglik(a: float, b: float, sigma: float, x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Log-likelihood of y = a + b x + sigma e, e ~ N(0, 1), for y known to lie in (lo, hi] (lo = hi: observed).

    ``lo`` may be -inf (left-censored), ``hi`` +inf (right-censored).  An observed point enters through its
    density, an interval through Phi((hi - mu) / sigma) - Phi((lo - mu) / sigma).

    Examples
    --------
    >>> x = np.zeros(1)
    >>> round(interval_loglik(0.0, 1.0, 1.0, x, np.array([-np.inf]), np.array([0.0])), 6) == round(math.log(0.5), 6)
    True
    """
    mu = a + b * x
    exact = lo == hi
    out = 0.0
    if exact.any():
        z = (lo[exact] - mu[exact]) / sigma
        out += float(np.sum(-0.5 * z * z - 0.5 * math.log(2 * math.pi) - math.log(sigma)))
    if (~exact).any():
        m = ~exact
        out += float(np.sum(_log_interval_prob((lo[m] - mu[m]) / sigma, (hi[m] - mu[m]) / sigma)))
    return out


def _prepare(n, low, high):
    x = np.log(np.asarray(n, dtype=float))
    lo = np.asarray(low, dtype=float)
    hi = np.asarray(high, dtype=float)
    with np.errstate(divide="ignore"):
        ylo = np.where(lo > 0, np.log(np.where(lo > 0, lo, 1.0)), -np.inf)
        yhi = np.where(np.isfinite(hi) & (hi > 0), np.log(np.where(hi > 0, hi, 1.0)), np.inf)
    ok = np.isfinite(x) & ~np.isnan(lo) & ~np.isnan(hi) & (yhi >= ylo)
    return x[ok], ylo[ok], yhi[ok]


def _start(x, ylo, yhi):
    """A starting line: least squares through the intervals' midpoints (a censored end replaced by the other)."""
    mid = np.where(np.isfinite(ylo) & np.isfinite(yhi), 0.5 * (ylo + yhi), np.where(np.isfinite(ylo), ylo, yhi))
    xc = x - x.mean()
    b = float((xc * (mid - mid.mean())).sum() / max((xc * xc).sum(), 1e-300))
    a = float(mid.mean() - b * x.mean())
    resid = mid - a - b * x
    widths = (yhi - ylo)[np.isfinite(yhi - ylo)]
    scale = max(float(np.std(resid)), float(np.median(widths)) / 2 if widths.size else 0.0, 1e-3)
    return a, b, math.log(scale)


def _fit(x, ylo, yhi, sigma_min, b_fixed=None, init=None):
    """Maximise the likelihood over (a, b, log sigma), or over (a, log sigma) at b = b_fixed."""
    from scipy import optimize

    a0, b0, s0 = init if init is not None else _start(x, ylo, yhi)

    def nll(theta):
        if b_fixed is None:
            a, b, s = theta
        else:
            (a, s), b = theta, b_fixed
        sig = sigma_min + math.exp(min(s, 50.0))
        val = -interval_loglik(a, b, sig, x, ylo, yhi)
        return val if np.isfinite(val) else 1e300

    theta0 = np.array([a0, b0, s0] if b_fixed is None else [a0 + (b0 - b_fixed) * x.mean(), s0])
    best = None
    for _ in range(3):  # Nelder-Mead, restarted from its own optimum (the likelihood can be flat in sigma)
        res = optimize.minimize(nll, theta0, method="Nelder-Mead",
                                options={"xatol": 1e-7, "fatol": 1e-9, "maxiter": 4000})
        if best is None or res.fun < best.fun - 1e-12:
            best = res
            theta0 = res.x
        else:
            break
    if b_fixed is None:
        a, b, s = best.x
    else:
        (a, s), b = best.x, b_fixed
    return float(a), float(b), sigma_min + math.exp(min(float(s), 50.0)), -float(best.fun)


def interval_slope(n: np.ndarray, low: np.ndarray, high: np.ndarray, *, ci: float = 0.95,
                   sigma_min: float = 1e-4, b_span: float = 20.0) -> np.ndarray:
    """The law log tau = a + b log n fitted to times known within intervals, with b's profile-likelihood interval.

    Each point (n_i, tau_i) -- seeds are replicates: several points at one n -- is known only to lie in
    (low_i, high_i] (high = inf: right-censored; low = 0: before the first checkpoint; low = high: observed
    exactly).  The model: log tau_i = a + b log n_i + sigma e_i, e_i ~ N(0, 1) independent (sigma the seeds'
    scatter and the law's misfit); the likelihood multiplies Phi((log high_i - mu_i) / sigma) - Phi((log low_i -
    mu_i) / sigma) (:func:`interval_loglik`), maximised over (a, b, sigma >= ``sigma_min``).  b's interval is the set
    of b whose profile log-likelihood lies within q / 2 of the maximum, with q = N log(1 + t^2 / (N - 2)), t the
    (1 + ci) / 2 quantile of Student's t with N - 2 degrees of freedom and N the number of points: the threshold
    that makes the interval exact for N observed normal points (the usual t interval), carried to intervals.
    When every interval admits one common line sigma goes to ``sigma_min`` and the interval becomes the slopes of
    the lines through every interval (:func:`ridgexr.analysis.arrays.slope_range`), widened by the likelihood's
    tails.

    Parameters
    ----------
    n : (N,) positive sizes
    low, high : (N,) the intervals' ends (low >= 0, high > 0, inf allowed); NaN pairs are left out
    ci : float in (0, 1)
    sigma_min : float > 0, in log tau
    b_span : float > 0, how far from the estimate the interval's ends are searched (an end beyond is inf)

    Returns
    -------
    (6,) array: a, b, b_low, b_high, sigma, points used; NaN (and the count) when fewer than 3 points or 2 distinct
    n are left.

    Examples
    --------
    >>> n = np.repeat([16.0, 64.0, 256.0], 2)
    >>> out = interval_slope(n, 10 * n / 1.2, 10 * n * 1.2)
    >>> bool(out[2] < 1.0 < out[3])
    True
    """
    from scipy import optimize, stats

    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    sigma_min = check_float(sigma_min, "sigma_min", min_val=0, include_boundaries="neither")
    x, ylo, yhi = _prepare(n, low, high)
    N = x.size
    if N < 3 or np.unique(x).size < 2:
        return np.array([np.nan, np.nan, np.nan, np.nan, np.nan, float(N)])
    a, b, sig, ll = _fit(x, ylo, yhi, sigma_min)
    q = N * math.log1p(stats.t.ppf(0.5 + ci / 2, N - 2) ** 2 / (N - 2))
    init = (a, b, math.log(max(sig - sigma_min, 1e-12)))

    def excess(bb):
        return 2.0 * (ll - _fit(x, ylo, yhi, sigma_min, b_fixed=bb, init=init)[3]) - q

    ends = []
    for sign in (-1.0, 1.0):
        step, prev = 0.05, b
        end = sign * np.inf
        while abs(prev - b) < b_span:
            nxt = prev + sign * step
            if excess(nxt) > 0:
                end = optimize.brentq(excess, min(prev, nxt), max(prev, nxt), xtol=1e-5)
                break
            prev, step = nxt, step * 1.6
        ends.append(end)
    return np.array([a, b, ends[0], ends[1], sig, float(N)])


def simulate_interval_times(n: np.ndarray, checkpoints: np.ndarray, *, a: float, b: float, sigma: float,
                            seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Times drawn from log tau = a + b log n + sigma e and read off ``checkpoints`` as :func:`first_reached` reads
    them: the interval (c[k - 1], c[k]] holding each tau, (c[-1], inf) beyond the last checkpoint.

    For coverage checks of :func:`interval_slope` at a run's own size (its n, seeds and checkpoint grid).

    Returns
    -------
    low, high : (N,) arrays, N = len(n)
    """
    rng = np.random.default_rng(seed)
    x = np.log(np.asarray(n, dtype=float))
    tau = np.exp(a + b * x + sigma * rng.standard_normal(x.shape))
    c = np.asarray(checkpoints, dtype=float)
    k = np.searchsorted(c, tau, side="left")  # c[k - 1] < tau <= c[k]
    prev = np.concatenate([[0.0], c])
    nxt = np.concatenate([c, [np.inf]])
    return prev[k], nxt[k]


def collapse_cost(log_tau: list, n: np.ndarray, values: list, variances: list, b: float, *,
                  informative: float = 0.02) -> tuple[float, int]:
    """How far curves f_i(tau) measured at sizes n_i are from one curve of x = log tau - b log n.

    Every point (x_ik, f_ik) of curve i is compared with each other curve j whose x-range covers x_ik (linear
    interpolation of f_j in x): (f_ik - f_j(x_ik))^2 / (var_ik + var_j(x_ik)), counted only where the point is
    informative (f_ik or f_j(x_ik) above ``informative``: two curves still at 0 agree for any b).  The cost is the
    mean over the compared pairs.

    Parameters
    ----------
    log_tau : list of (K_i,) increasing arrays
    n : (C,) sizes of the curves (curves at one n are replicates, compared like the others)
    values, variances : lists of (K_i,) arrays (variances > 0)
    b : float

    Returns
    -------
    cost, number of compared pairs (cost inf when there is none)
    """
    xs = [np.asarray(lt, dtype=float) - b * math.log(float(m)) for lt, m in zip(log_tau, n)]
    total, count = 0.0, 0
    for i, (xi, fi, vi) in enumerate(zip(xs, values, variances)):
        for j, (xj, fj, vj) in enumerate(zip(xs, values, variances)):
            if i == j:
                continue
            inside = (xi >= xj[0]) & (xi <= xj[-1])
            if not inside.any():
                continue
            fji = np.interp(xi[inside], xj, fj)
            vji = np.interp(xi[inside], xj, vj)
            keep = np.maximum(fi[inside], fji) > informative
            if not keep.any():
                continue
            diff = fi[inside][keep] - fji[keep]
            total += float(np.sum(diff * diff / (vi[inside][keep] + vji[keep])))
            count += int(keep.sum())
    return (total / count if count else np.inf), count


def _best_b(log_tau, n, values, variances, bounds, informative):
    from scipy import optimize

    grid = np.linspace(bounds[0], bounds[1], 61)
    costs = np.array([collapse_cost(log_tau, n, values, variances, g, informative=informative)[0] for g in grid])
    if not np.isfinite(costs).any():
        return np.nan
    k = int(np.nanargmin(np.where(np.isfinite(costs), costs, np.nan)))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    res = optimize.minimize_scalar(lambda g: collapse_cost(log_tau, n, values, variances, g,
                                                           informative=informative)[0],
                                   bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
    return float(res.x) if res.fun <= costs[k] else float(grid[k])


def collapse_exponent(tau: list, n: np.ndarray, shares: list, samples: list, *, bounds: tuple = (-1.0, 3.0),
                      n_boot: int = 200, ci: float = 0.95, seed: int = 0, informative: float = 0.02) -> np.ndarray:
    """The exponent b at which shares f(tau) at several n collapse onto one curve of tau / n^b, with its interval.

    ``shares`` are binomial proportions (f_mem: the share of ``samples`` final samples memorized) at the
    checkpoints ``tau`` of each curve, one curve per (n, seed); the curves of one n (its seeds, on one checkpoint
    grid) are pooled into one share per checkpoint (counts summed).  b minimises :func:`collapse_cost` over the
    pooled curves (variance of a share f(1 - f) / S, floored at 1 / S^2) within ``bounds``.  The interval is a
    bootstrap of both sources of noise: per n its seeds resampled with replacement (the training's randomness) and
    every share redrawn as Binomial(S, f) / S (the samples'), pooled and b re-estimated; the ``ci`` percentile
    interval of the replicates.  For Bonnaire et al.'s tau_mem proportional to n the shares collapse at b = 1.

    Parameters
    ----------
    tau : list of (K_i,) increasing positive checkpoints
    n : (C,) sizes
    shares : list of (K_i,) proportions in [0, 1]
    samples : list of (K_i,) sample counts S (or one int per curve)
    bounds : (float, float), the b searched
    n_boot : int >= 1, ci : float, seed : int
    informative : float, see :func:`collapse_cost`

    Returns
    -------
    (4,) array: b, b_low, b_high, bootstrap replicates without a collapse (no informative overlap: left out)

    Raises
    ------
    ValueError
        Inputs of different lengths, or curves of one n on different checkpoints.

    Examples
    --------
    >>> c = np.logspace(0, 4, 33)
    >>> n = np.array([10.0, 40.0, 160.0])
    >>> f = [1 / (1 + (100 * m / c) ** 4) for m in n]  # f depends on tau / n only
    >>> out = collapse_exponent([c] * 3, n, f, [10**6] * 3, n_boot=20)
    >>> bool(abs(out[0] - 1.0) < 0.01)
    True
    """
    n = np.asarray(n, dtype=float)
    n_boot = check_int(n_boot, "n_boot", min_val=1)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    if not (len(tau) == len(shares) == len(samples) == n.size):
        raise ValueError(f"`tau`, `shares`, `samples` and `n` must have one entry per curve; got {len(tau)}, "
                         f"{len(shares)}, {len(samples)}, {n.size}")
    sizes = np.unique(n)
    groups = [np.flatnonzero(n == m) for m in sizes]
    grids = []
    for g in groups:
        grid = np.asarray(tau[g[0]], dtype=float)
        if any(np.asarray(tau[k], dtype=float).shape != grid.shape or not np.allclose(tau[k], grid) for k in g):
            raise ValueError("the curves of one n must share their checkpoints (`tau`)")
        grids.append(np.log(grid))
    f = [np.clip(np.asarray(s, dtype=float), 0.0, 1.0) for s in shares]
    S = [np.broadcast_to(np.asarray(s, dtype=float), fi.shape) for s, fi in zip(samples, f)]

    def pooled(members, draw=None):
        vals, vars_ = [], []
        for g in members:
            k = sum(draw(f[i], S[i]) if draw else f[i] * S[i] for i in g)
            tot = sum(S[i] for i in g)
            share = k / tot
            vals.append(share)
            vars_.append(np.maximum(share * (1 - share) / tot, 1.0 / tot ** 2))
        return vals, vars_

    vals, vars_ = pooled(groups)
    b = _best_b(grids, sizes, vals, vars_, bounds, informative)
    if not np.isfinite(b):
        return np.array([np.nan, np.nan, np.nan, float(n_boot)])
    rng = np.random.default_rng(seed)

    def binomial(fi, si):
        return rng.binomial(si.astype(np.int64), fi).astype(float)

    boot = []
    for _ in range(n_boot):
        members = [rng.choice(g, size=g.size, replace=True) for g in groups]
        bv, bvar = pooled(members, binomial)
        boot.append(_best_b(grids, sizes, bv, bvar, bounds, informative))
    boot = np.asarray(boot)
    kept = boot[np.isfinite(boot)]
    lo, hi = np.quantile(kept, [(1 - ci) / 2, (1 + ci) / 2]) if kept.size else (np.nan, np.nan)
    return np.array([b, lo, hi, float(n_boot - kept.size)])
