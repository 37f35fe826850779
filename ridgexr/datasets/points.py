"""The small 2-D point sets of the paper's experiments, and user array files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["POINT_SETS", "point_set", "load_array_file"]

_GRID = np.stack(np.meshgrid(np.arange(3.0), np.arange(3.0), indexing="xy"), -1).reshape(-1, 2)

POINT_SETS: dict[str, np.ndarray] = {
    "one-point": np.array([[5.0, 0.0]]),
    "two-points": np.array([[-3.0, 0.0], [3.0, 0.0]]),
    "two-points-asym": np.array([[0.0, 0.0], [5.0, 0.0]]),
    "three-points": np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]]),
    "square": np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0], [5.0, 5.0]]),
    "square-center": np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0], [5.0, 5.0], [2.5, 2.5]]),
    "grid-3x3": _GRID,
}
"""Built-in sets: one point (5,0); two points (-3,0),(3,0); (0,0),(5,0); three points
(0,0),(5,0),(0,5); the corners of a square of side 5; that square plus its centre; a 3x3
grid of spacing 1."""


def point_set(name: str) -> np.ndarray:
    """A copy of the built-in point set ``name`` (N, 2), float64.

    Examples
    --------
    >>> point_set("two-points").tolist()
    [[-3.0, 0.0], [3.0, 0.0]]
    """
    if name not in POINT_SETS:
        raise ValueError(f"unknown point set {name!r}; choose from {sorted(POINT_SETS)}")
    return POINT_SETS[name].copy()


def load_array_file(path: str | Path) -> np.ndarray:
    """Load a training set from ``.npy``, ``.csv`` or ``.txt`` (whitespace) as (N, d) float64.

    Raises ``ValueError`` naming the file when it is missing, not 2-D, empty or non-finite.
    """
    p = Path(path)
    if not p.is_file():
        tried = "" if p.is_absolute() else f" (looked for {str(p.absolute())!r})"
        what = "is a folder, not a file" if p.is_dir() else "does not exist"
        raise ValueError(f"training data file {str(p)!r} {what}{tried}")
    readers = {".npy": lambda: np.load(p, allow_pickle=False),
               ".csv": lambda: np.loadtxt(p, delimiter=",", ndmin=2),
               ".txt": lambda: np.loadtxt(p, ndmin=2), ".dat": lambda: np.loadtxt(p, ndmin=2)}
    if p.suffix not in readers:
        raise ValueError(f"training data file {str(p)!r}: unsupported suffix {p.suffix!r} "
                         "(use .npy, .csv or .txt)")
    try:
        arr = readers[p.suffix]()
    except (OSError, ValueError) as exc:
        raise ValueError(f"training data file {str(p)!r} could not be read: {exc}") from exc
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"training data file {str(p)!r} must hold a non-empty (N, d) array, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"training data file {str(p)!r} contains non-finite values")
    return arr
