"""The ``.ridge`` accessor namespace on xarray objects (third layer).

Importing :mod:`ridgexr` registers it.  Every method carries the name of the labelled
function it forwards to (as xskillscore's accessor does), with the accessor's object
passed where that function takes it:

- ``DataArray.ridge``: :func:`ridgexr.labelled.project_to_ridge`, ``ridge_residual`` and
  ``ridge_frame`` with the DataArray as ``x``;
- ``Dataset.ridge``: the analyses of :mod:`ridgexr.analysis` with the Dataset as ``ds``.

Examples
--------
>>> import numpy as np, xarray as xr, ridgexr
>>> p = ridgexr.SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
>>> x = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "dim"))
>>> x.ridge.project_to_ridge(p, 1).ridge_projection.values.round(6).tolist()
[[1.0, 0.0]]
"""

from __future__ import annotations

import importlib
from typing import Callable

import xarray as xr

__all__ = ["RidgeDataArrayAccessor", "RidgeDatasetAccessor"]


def _forward(module: str, name: str, position: int) -> Callable:
    """A method calling ``ridgexr.<module>.<name>`` with the accessor's object inserted at ``position``.

    The target is imported on the first call, so registering the accessor (on ``import
    ridgexr``) costs only the xarray import.
    """

    def method(self, *args, **kwargs):
        func = getattr(importlib.import_module(f"ridgexr.{module}"), name)
        args = args[:position] + (self._obj,) + args[position:]
        return func(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"Forwards to :func:`ridgexr.{module}.{name}` with this object as its argument number "
                      f"{position + 1}; see there for the parameters and the result.")
    return method


class _Accessor:
    def __init__(self, obj):
        self._obj = obj


def _forwarding(module: str, position: int, names: tuple[str, ...]):
    """Class decorator: one forwarding method per function name of ``ridgexr.<module>``."""

    def decorate(cls):
        for name in names:
            setattr(cls, name, _forward(module, name, position))
        cls.__doc__ += "\n\nMethods: " + ", ".join(f":meth:`{n}`" for n in names) + "."
        return cls

    return decorate


@xr.register_dataarray_accessor("ridge")
@_forwarding("labelled", 1, ("project_to_ridge", "ridge_residual", "ridge_frame"))
class RidgeDataArrayAccessor(_Accessor):
    """``da.ridge``: ridge geometry of the points held in a DataArray (the ``x`` argument)."""


@xr.register_dataset_accessor("ridge")
@_forwarding("analysis", 0, ("distance_curves", "ridge_dimension", "ridge_motion", "degenerate_share", "phase_times", "spread_curves", "ridge_position", "position_histogram",
                           "mode_counts", "memorization_fraction", "near_mode_fraction", "position_density",
                           "target_effect", "theory_check", "summary_table", "manifold_distance", "novelty",
                           "manifold_density", "distribution_distance", "ridge_vs_manifold", "pool_draws", "gap_mass",
                           "coverage", "smoothed_target_distance"))
class RidgeDatasetAccessor(_Accessor):
    """``ds.ridge``: the analyses of :mod:`ridgexr.analysis` on a store's Dataset (lazy)."""

    @property
    def config(self) -> dict:
        """The store's configuration (attr ``config``, the validated catalog entry) as a dict."""
        from .store import json_attr

        return json_attr(self._obj, "config")

    @property
    def provenance(self) -> dict:
        """Package versions, host, device, scheduler and creation time (attr ``provenance``) as a dict."""
        from .store import json_attr

        return json_attr(self._obj, "provenance")
