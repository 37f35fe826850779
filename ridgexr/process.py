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

__all__ = ["OU", "time_grid", "GRID_KINDS"]

GRID_KINDS = ("exponential", "linear", "cosine")


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
        """Forward drift -x."""
        return -x

    @property
    def diffusion(self) -> float:
        """Diffusion coefficient sqrt(2) of dW."""
        return math.sqrt(2.0)


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
    ValueError
        If ``n_steps < 1``, ``t_min <= 0``, ``T <= t_min`` or ``kind`` is unknown.

    Examples
    --------
    >>> time_grid(2, 1.0, 0.01).round(3).tolist()
    [1.0, 0.1, 0.01]
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"n_steps must be an integer >= 1, got {n_steps!r}")
    T = float(T)
    t_min = float(t_min)
    if not (math.isfinite(t_min) and t_min > 0):
        raise ValueError(f"t_min must be a finite number > 0, got {t_min!r}")
    if not (math.isfinite(T) and T > t_min):
        raise ValueError(f"T must be finite and > t_min={t_min}, got {T!r}")
    i = np.arange(n_steps + 1, dtype=float)
    if kind == "exponential":
        grid = T * np.exp(-i / n_steps * math.log(T / t_min))
    elif kind == "linear":
        grid = T + (t_min - T) * i / n_steps
    elif kind == "cosine":
        grid = t_min + (T - t_min) * 0.5 * (1.0 + np.cos(np.pi * i / n_steps))
    else:
        raise ValueError(f"kind must be one of {GRID_KINDS}, got {kind!r}")
    grid[0], grid[-1] = T, t_min
    return grid
