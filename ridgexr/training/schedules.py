"""Loss-weight schedules w(t) of the weighted score-matching loss."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..choices import SCHEDULE_NAMES
from ..process import OU

__all__ = ["SCHEDULES", "schedule_weight", "schedule_name"]

SCHEDULES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "1": lambda t, h: np.ones_like(t),
    "h": lambda t, h: h,
    "h2": lambda t, h: h**2,
}
assert tuple(SCHEDULES) == SCHEDULE_NAMES  # the names the catalog checks (torch-free)


def schedule_weight(schedule: str | Callable, t: np.ndarray, process: OU | None = None) -> np.ndarray:
    """Loss weight w(t) of a named schedule ("1", "h", "h2") or a callable, as float64 array.

    Parameters
    ----------
    schedule : {"1", "h", "h2"} or callable t -> w(t)
    t : array of OU times
    process : OU, optional

    Raises
    ------
    ValueError
        For an unknown name, or weights that are negative or not finite.

    Examples
    --------
    >>> schedule_weight("h2", np.array([0.5])).round(4).tolist()
    [0.3996]
    """
    process = process or OU()
    t = np.asarray(t, dtype=float)
    if callable(schedule):
        w = np.asarray(schedule(t), dtype=float)
        if w.shape != t.shape:
            w = np.broadcast_to(w, t.shape).astype(float)
    elif schedule in SCHEDULES:
        w = SCHEDULES[schedule](t, process.h(t))
    else:
        raise ValueError(f"`schedule` must be one of {tuple(SCHEDULES)} or a callable; got {schedule!r}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"`schedule` {schedule!r} gives negative or non-finite weights")
    return w


def schedule_name(schedule: str | Callable) -> str:
    """The label of a schedule: its name, or a callable's ``__name__`` ("custom" without one)."""
    return schedule if isinstance(schedule, str) else getattr(schedule, "__name__", "custom")
