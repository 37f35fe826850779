"""Training sets: the paper's built-in 2-D point sets and user array files.

Each loader returns a float64 numpy array of shape (N, d).
"""

from .points import POINT_SETS, point_set, load_array_file

__all__ = ["POINT_SETS", "point_set", "load_array_file"]
