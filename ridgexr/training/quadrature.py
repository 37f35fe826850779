"""Time quadrature of the training loss: nodes t_j and weights w_j with int f dt ~ sum_j w_j f(t_j).

The loss integrates over t in [t_min, T] (the paper's definition: an integral, not a time
average).  Three rules:

- ``"simpson-t"`` -- composite Simpson's rule in linear t on ``n`` equally spaced nodes
  (``n`` odd, >= 3).  The authors' code uses this rule with 2001 nodes: the default.
  Exact for cubics; error O(h^4) for smooth integrands.
- ``"trapezoid-log-t"`` -- the trapezoid rule in u = log t (nodes equally spaced in log t,
  weights carry the Jacobian dt = t du).  Exact for f(t) = 1/t; error O(du^2).
- ``"gauss-legendre-log-t"`` -- n-point Gauss-Legendre in u = log t (ridgexr 0.1's only
  rule): exact for f(t) t a polynomial of degree <= 2n - 1 in log t; the cheap option at
  small n (e.g. 64 nodes), because the loss weights 1/h_t^2 concentrate near t_min.

The rule matters at tau = inf, where the fit is the minimum-norm minimiser of the
discretised loss (see docs/findings.md, sensitivity table).
"""

from __future__ import annotations

import math

import numpy as np

from .. import defaults
from .._validation import check_float, check_int, check_option
from ..choices import QUADRATURES

__all__ = ["QUADRATURES", "DEFAULT_QUADRATURE", "PAPER_N_TIME", "PAPER_N_NOISE", "time_nodes"]

#: the authors' rule (Simpson's rule in linear t), from :mod:`ridgexr.defaults`
DEFAULT_QUADRATURE = defaults.QUADRATURE
#: the authors' sample: 2001 Simpson nodes, 2000 noise draws per (point, node)
PAPER_N_TIME = defaults.N_TIME
PAPER_N_NOISE = defaults.N_NOISE


def time_nodes(quadrature: str, n: int, t_min: float, T: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes (n,) and weights (n,) of ``quadrature`` on [t_min, T]: int f dt ~ sum w f(t).

    Parameters
    ----------
    quadrature : {"simpson-t", "trapezoid-log-t", "gauss-legendre-log-t"}
    n : int
        Number of nodes (odd and >= 3 for Simpson, >= 2 for the trapezoid rule, >= 1 for
        Gauss-Legendre).
    t_min, T : float
        0 < t_min < T, OU time.

    Returns
    -------
    t : (n,) increasing nodes in [t_min, T];  w : (n,) positive weights (they integrate f = 1
        exactly for Simpson's rule, approximately for the rules in log t).

    Raises
    ------
    ValueError
        For an unknown rule or a node count the rule cannot use.

    Examples
    --------
    >>> t, w = time_nodes("simpson-t", 5, 0.0 + 1e-9, 1.0)
    >>> round(float(w @ t**3), 9)  # int_0^1 t^3 dt, exact for Simpson
    0.25
    """
    check_option(quadrature, "quadrature", QUADRATURES)
    t_min = check_float(t_min, "t_min", min_val=0, include_boundaries="neither")
    T = check_float(T, "T", min_val=t_min, include_boundaries="neither")
    if quadrature == "simpson-t":
        n = check_int(n, "n_time", min_val=3)
        if n % 2 == 0:
            raise ValueError(f"`n_time` must be odd for quadrature 'simpson-t' (composite Simpson); got {n}")
        t = np.linspace(t_min, T, n)
        w = np.full(n, 2.0)
        w[1::2] = 4.0
        w[0] = w[-1] = 1.0
        return t, w * (t[1] - t[0]) / 3.0
    lo, hi = math.log(t_min), math.log(T)
    if quadrature == "trapezoid-log-t":
        n = check_int(n, "n_time", min_val=2)
        u = np.linspace(lo, hi, n)
        w = np.full(n, u[1] - u[0])
        w[0] = w[-1] = 0.5 * (u[1] - u[0])
    else:
        n = check_int(n, "n_time", min_val=1)
        xi, gw = np.polynomial.legendre.leggauss(n)
        u = 0.5 * (lo + hi) + 0.5 * (hi - lo) * xi
        w = gw * 0.5 * (hi - lo)
    t = np.exp(u)
    if quadrature == "trapezoid-log-t":
        t[0], t[-1] = t_min, T  # the end nodes exactly (exp(log t) can miss by an ulp)
    return t, w * t
