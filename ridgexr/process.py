"""The forward (noising) process: an Ornstein-Uhlenbeck diffusion and its time grids.

dX = -X dt + sqrt(2) dW, so X_t | X_0 = x0 ~ N(alpha_t x0, h_t I) with
alpha_t = exp(-t) and h_t = 1 - exp(-2 t).  Time is dimensionless (the OU time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ._validation import check_float, check_int, check_option
from .choices import GRID_KINDS

__all__ = ["OU", "time_grid", "GRID_KINDS", "MAX_DATA_SCALE", "data_scale_limit"]



@dataclass(frozen=True)
class OU:
    """Ornstein-Uhlenbeck forward process dX = -X dt + sqrt(2) dW.

    The marginal of X_t given X_0 = x0 is N(alpha(t) x0, h(t) I).

    Examples
    --------
    >>> ou = OU()
    >>> round(float(ou.alpha(1.0)), 6), round(float(ou.h(1.0)), 6)
    (0.367879, 0.864665)
    """

    def alpha(self, t: Any) -> Any:
        """Signal scale alpha_t = exp(-t); float, numpy or torch in, the same kind out."""
        if isinstance(t, torch.Tensor):
            return torch.exp(-t)
        return np.exp(-np.asarray(t, dtype=float)) if np.ndim(t) else math.exp(-float(t))

    def h(self, t: Any) -> Any:
        """Noise variance h_t = 1 - exp(-2 t), computed as -expm1(-2 t) for small t."""
        if isinstance(t, torch.Tensor):
            return -torch.expm1(-2.0 * t)
        return -np.expm1(-2.0 * np.asarray(t, dtype=float)) if np.ndim(t) else -math.expm1(-2.0 * float(t))

    def drift(self, x: Any, t: Any = None) -> Any:
        """Forward drift f(x) = -x."""
        return -x

    @property
    def diffusion_squared(self) -> float:
        """g^2 = 2, the squared diffusion coefficient of dW."""
        return 2.0

    @property
    def diffusion(self) -> float:
        """Diffusion coefficient g = sqrt(2) of dW."""
        return math.sqrt(self.diffusion_squared)

    def reverse_drift(self, x: Any, score: Any) -> Any:
        """Drift of the reverse-time SDE in reverse time, -f(x) + g^2 score = x + 2 score."""
        return -self.drift(x) + self.diffusion_squared * score

    def flow_velocity(self, x: Any, score: Any) -> Any:
        """Velocity of the probability-flow ODE in reverse time, -f(x) + g^2/2 score = x + score."""
        return -self.drift(x) + (0.5 * self.diffusion_squared) * score


def time_grid(n_steps: int, T: float, t_min: float, kind: str = "exponential") -> np.ndarray:
    """Decreasing time grid from ``T`` to ``t_min`` with ``n_steps + 1`` points.

    Parameters
    ----------
    n_steps : int
        Number of sampler steps (>= 1); the grid has ``n_steps + 1`` times.
    T : float
        Start (largest) time, > t_min.
    t_min : float
        End (smallest) time, > 0.
    kind : {"exponential", "linear", "cosine"}
        ``exponential``: t_i = T q^(-i) with q = (T / t_min)^(1/n_steps) (uniform in log t);
        ``linear``: uniform in t;
        ``cosine``: t_i = t_min + (T - t_min) (1 + cos(pi i / n_steps)) / 2, dense near both ends.

    Returns
    -------
    numpy.ndarray, shape (n_steps + 1,), float64, strictly decreasing,
    with ``grid[0] == T`` and ``grid[-1] == t_min`` exactly.

    Raises
    ------
    TypeError
        If ``n_steps`` is not an integer or ``T``/``t_min`` not real numbers.
    ValueError
        If ``n_steps < 1``, ``t_min <= 0``, ``T <= t_min`` or ``kind`` is unknown.

    Examples
    --------
    >>> time_grid(2, 1.0, 0.01).round(3).tolist()
    [1.0, 0.1, 0.01]
    """
    n_steps = check_int(n_steps, "n_steps", min_val=1)
    t_min = check_float(t_min, "t_min", min_val=0, include_boundaries="neither")
    T = check_float(T, "T", min_val=t_min, include_boundaries="neither")
    check_option(kind, "kind", GRID_KINDS)
    i = np.arange(n_steps + 1, dtype=float)
    if kind == "exponential":
        grid = T * np.exp(-i / n_steps * math.log(T / t_min))
    elif kind == "linear":
        grid = T + (t_min - T) * i / n_steps
    else:  # cosine
        grid = t_min + (T - t_min) * 0.5 * (1.0 + np.cos(np.pi * i / n_steps))
    grid[0], grid[-1] = T, t_min
    return grid


#: data farther than this many noise scales sqrt(h_t) from the origin are beyond what float64 resolves at
#: time t: SCMS's tolerance 1e-9 (1 + R) passes 1e-3 of the noise scale, a query near the origin loses its
#: offset against alpha_t x_i (docs/running.md, "Data scale")
MAX_DATA_SCALE = 1e6


def data_scale_limit(t_min: float) -> float:
    """Largest |x_i| resolved down to OU time ``t_min``, data units: ``MAX_DATA_SCALE`` x sqrt(h(t_min)).

    Examples
    --------
    >>> round(data_scale_limit(1e-3))
    44699
    """
    return MAX_DATA_SCALE * math.sqrt(OU().h(float(t_min)))
