"""The ``.ridge`` accessor namespace on xarray objects (third layer).

Importing :mod:`ridgexr` registers it.  Every method carries the name of the labelled
function it forwards to (as xskillscore's accessor does), with the accessor's object
passed as that function's argument named in the tables below:

- ``DataArray.ridge``: :data:`DATAARRAY_METHODS` (:func:`ridgexr.projection.project_to_ridge`,
  ``ridge_residual`` and ``ridge_frame`` with the DataArray as ``x``);
- ``Dataset.ridge``: :data:`DATASET_METHODS` (the analyses of :mod:`ridgexr.analysis` with the
  Dataset as ``ds``).

Each method's signature is its function's without that argument, and its docstring is the
function's (so Shift-Tab, ``help()`` and the API page show them); both are read from the
function on first access, so registering the accessor (on ``import ridgexr``) imports only
xarray.  Adding a method is one line in a table.

Examples
--------
>>> import inspect, numpy as np, xarray as xr, ridgexr
>>> p = ridgexr.SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
>>> x = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "dim"))
>>> x.ridge.project_to_ridge(p, 1).ridge_projection.values.round(6).tolist()
[[1.0, 0.0]]
>>> str(inspect.signature(x.ridge.ridge_residual)).split(",")[:2]
["(density: 'SmoothedEmpirical'", " d_star: 'int'"]
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

import xarray as xr

__all__ = ["RidgeDataArrayAccessor", "RidgeDatasetAccessor", "DATAARRAY_METHODS", "DATASET_METHODS"]

#: ``da.ridge.<name>`` -> (module of ridgexr, the argument that receives the DataArray)
DATAARRAY_METHODS: dict[str, tuple[str, str]] = {
    "project_to_ridge": ("projection", "x"),
    "ridge_residual": ("projection", "x"),
    "ridge_frame": ("projection", "x"),
}

#: ``ds.ridge.<name>`` -> (module of ridgexr, the argument that receives the Dataset)
DATASET_METHODS: dict[str, tuple[str, str]] = {
    "distance_curves": ("analysis", "ds"),
    "ridge_dimension": ("analysis", "ds"),
    "ridge_motion": ("analysis", "ds"),
    "tangential_distance": ("analysis", "ds"),
    "degenerate_share": ("analysis", "ds"),
    "phase_times": ("analysis", "ds"),
    "spread_curves": ("analysis", "ds"),
    "ridge_position": ("analysis", "ds"),
    "position_histogram": ("analysis", "ds"),
    "mode_counts": ("analysis", "ds"),
    "memorization_fraction": ("analysis", "ds"),
    "near_mode_fraction": ("analysis", "ds"),
    "position_density": ("analysis", "ds"),
    "target_effect": ("analysis", "ds"),
    "theory_check": ("analysis", "ds"),
    "summary_table": ("analysis", "ds"),
    "manifold_distance": ("analysis", "ds"),
    "novelty": ("analysis", "ds"),
    "manifold_density": ("analysis", "ds"),
    "distribution_distance": ("analysis", "ds"),
    "ridge_vs_manifold": ("analysis", "ds"),
    "pool_draws": ("analysis", "x"),
    "gap_mass": ("analysis", "ds"),
    "coverage": ("analysis", "ds"),
    "smoothed_target_distance": ("analysis", "ds"),
    "final_state": ("analysis", "ds"),
    "memorized_share": ("analysis", "ds"),
    "memorized_excess": ("analysis", "ds"),
    "training_window": ("analysis", "ds"),
    "training_timescales": ("analysis", "ds"),
    "sample_quality": ("quality", "ds"),
    "axis_quality": ("quality", "ds"),
}


class _Forwarded:
    """A method that calls ``ridgexr.<module>.<name>`` with the accessor's object as argument ``argument``.

    A descriptor: the function is imported on first access; from an instance it returns a
    function with the target's signature minus ``argument`` and the target's docstring, from the
    class one whose first parameter is ``self`` (what ``help`` and Sphinx read).
    """

    def __init__(self, module: str, argument: str):
        self.module, self.argument = module, argument
        self.name = ""
        self._target: tuple[Callable, inspect.Signature, str] | None = None

    def __set_name__(self, owner, name):
        self.name = name

    def target(self) -> tuple[Callable, inspect.Signature, str]:
        """(function, its signature without the object argument, docstring), built once."""
        if self._target is None:
            func = getattr(importlib.import_module(f"ridgexr.{self.module}"), self.name)
            sig = inspect.signature(func)
            params = list(sig.parameters.values())
            if self.argument not in sig.parameters or any(
                    p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL) for p in params):
                raise TypeError(f"ridgexr.{self.module}.{self.name} cannot be an accessor method: it needs an "
                                f"argument {self.argument!r} and no positional-only or *args parameters")
            rest = sig.replace(parameters=[p for p in params if p.name != self.argument])
            doc = inspect.getdoc(func) or ""
            head, _, body = doc.partition("\n\n")
            note = (f"Accessor form of :func:`ridgexr.{self.module}.{self.name}`, with this object as its "
                    f"``{self.argument}`` argument.")
            self._target = (func, rest, f"{head}\n\n{note}\n\n{body}".rstrip())
        return self._target

    def call(self, obj, args, kwargs):
        func, rest, _ = self.target()
        try:  # a wrong argument is refused with the method's own signature, before any work
            bound = rest.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        named: dict[str, Any] = {self.argument: obj}
        for name, value in bound.arguments.items():
            if rest.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return func(**named)

    def __get__(self, accessor, owner=None):
        _, rest, doc = self.target()
        if accessor is None:  # class access: an unbound method, for help() and the API docs
            def method(self_, *args, **kwargs):
                return forward.call(self_._obj, args, kwargs)

            self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            method.__signature__ = rest.replace(parameters=[self_param, *rest.parameters.values()])
        else:
            obj = accessor._obj

            def method(*args, **kwargs):
                return forward.call(obj, args, kwargs)

            method.__signature__ = rest
        forward = self
        method.__name__ = self.name
        method.__qualname__ = f"{owner.__name__}.{self.name}" if owner is not None else self.name
        method.__doc__ = doc
        method.__module__ = __name__
        return method


class _Accessor:
    def __init__(self, obj):
        self._obj = obj


def _forwarding(table: dict[str, tuple[str, str]]):
    """Class decorator: one :class:`_Forwarded` method per entry of ``table``."""

    def decorate(cls):
        for name, (module, argument) in table.items():
            forwarded = _Forwarded(module, argument)
            setattr(cls, name, forwarded)
            forwarded.__set_name__(cls, name)
        cls.__doc__ += "\n\nMethods: " + ", ".join(f":meth:`{n}`" for n in table) + "."
        return cls

    return decorate


@xr.register_dataarray_accessor("ridge")
@_forwarding(DATAARRAY_METHODS)
class RidgeDataArrayAccessor(_Accessor):
    """``da.ridge``: ridge geometry of the points held in a DataArray (the ``x`` argument)."""


@xr.register_dataset_accessor("ridge")
@_forwarding(DATASET_METHODS)
class RidgeDatasetAccessor(_Accessor):
    """``ds.ridge``: the analyses of :mod:`ridgexr.analysis` on a store's Dataset (lazy)."""

    def explore(self, *, max_samples: int = 256, show_ridge: bool = True):
        """An interactive explorer of this store (panel; displays inline in a notebook).

        See :func:`ridgexr.explore.explorer`: one widget per cell dimension, a t slider, the
        samples with their ridge projections, and the cell's distance curve with a t marker.
        """
        from .explore import explorer

        return explorer(self._obj, max_samples=max_samples, show_ridge=show_ridge)

    @property
    def config(self) -> dict:
        """The store's configuration (attr ``config``, the validated catalog entry) as a dict."""
        from .store.opening import json_attr

        return json_attr(self._obj, "config")

    @property
    def provenance(self) -> dict:
        """Package versions, host, device, scheduler and creation time (attr ``provenance``) as a dict."""
        from .store.opening import json_attr

        return json_attr(self._obj, "provenance")
