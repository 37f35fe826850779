"""The ``.ridge`` accessor namespace on xarray objects (third layer).

Importing :mod:`ridgexr` registers it.  Every method carries the name of the labelled
function it forwards to (as xskillscore's accessor does), with the accessor's object
passed where that function takes it:

- ``DataArray.ridge``: :func:`ridgexr.labelled.project_to_ridge`, ``ridge_residual`` and
  ``ridge_frame`` with the DataArray as ``x``;
- ``Dataset.ridge``: the analyses of :mod:`ridgexr.analysis` with the Dataset as ``ds``.

The short names of release 0.1 (``project``, ``residual``, ``frame``, ``position``,
``memorization``, ``summary``) still work and emit a ``FutureWarning``.

Examples
--------
>>> import numpy as np, xarray as xr, ridgexr
>>> p = ridgexr.SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
>>> x = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "dim"))
>>> x.ridge.project_to_ridge(p, 1).ridge_projection.values.round(6).tolist()
[[1.0, 0.0]]
"""

from __future__ import annotations

from typing import Callable

import xarray as xr

from . import analysis, labelled
from ._deprecation import warn_renamed

__all__ = ["RidgeDataArrayAccessor", "RidgeDatasetAccessor"]


def _forward(func: Callable, position: int) -> Callable:
    """A method calling ``func`` with the accessor's object inserted at argument ``position``."""

    def method(self, *args, **kwargs):
        args = args[:position] + (self._obj,) + args[position:]
        return func(*args, **kwargs)

    method.__name__ = method.__qualname__ = func.__name__
    method.__doc__ = (f"Forwards to :func:`{func.__module__}.{func.__name__}` with this object as its "
                      f"argument number {position + 1}.\n\n{func.__doc__ or ''}")
    return method


def _alias(old: str, new: str) -> Callable:
    """A deprecated short name of method ``new``."""

    def method(self, *args, **kwargs):
        warn_renamed(f".ridge.{old}()", f".ridge.{new}()")
        return getattr(self, new)(*args, **kwargs)

    method.__name__ = method.__qualname__ = old
    method.__doc__ = f"Deprecated alias of :meth:`{new}`."
    return method


class _Accessor:
    def __init__(self, obj):
        self._obj = obj


@xr.register_dataarray_accessor("ridge")
class RidgeDataArrayAccessor(_Accessor):
    """``da.ridge``: ridge geometry of the points held in a DataArray (the ``x`` argument)."""

    project_to_ridge = _forward(labelled.project_to_ridge, 1)
    ridge_residual = _forward(labelled.ridge_residual, 1)
    ridge_frame = _forward(labelled.ridge_frame, 1)
    project = _alias("project", "project_to_ridge")
    residual = _alias("residual", "ridge_residual")
    frame = _alias("frame", "ridge_frame")


@xr.register_dataset_accessor("ridge")
class RidgeDatasetAccessor(_Accessor):
    """``ds.ridge``: the analyses of :mod:`ridgexr.analysis` on a store's Dataset (lazy)."""

    distance_curves = _forward(analysis.distance_curves, 0)
    phase_times = _forward(analysis.phase_times, 0)
    spread_curves = _forward(analysis.spread_curves, 0)
    ridge_position = _forward(analysis.ridge_position, 0)
    position_histogram = _forward(analysis.position_histogram, 0)
    mode_counts = _forward(analysis.mode_counts, 0)
    memorization_fraction = _forward(analysis.memorization_fraction, 0)
    theory_check = _forward(analysis.theory_check, 0)
    summary_table = _forward(analysis.summary_table, 0)
    position = _alias("position", "ridge_position")
    memorization = _alias("memorization", "memorization_fraction")
    summary = _alias("summary", "summary_table")
