"""ridgexr: where diffusion samples go when they do not memorize.

Array layer (numpy/torch in, same out): :class:`OU`, :func:`time_grid`,
:class:`SmoothedEmpirical`, :func:`ridge_frame`, :func:`ridge_residual`,
:func:`project_to_ridge`.  Labelled layer: :mod:`ridgexr.projection`.  Accessor:
``DataArray.ridge``.
"""

import importlib
import sys

import wrapt

from ._version import __version__


def _register_accessors(_module=None) -> None:
    """Register the ``.ridge`` accessors on xarray's DataArray and Dataset."""
    from . import accessor  # noqa: F401


# The accessors are registered as soon as xarray is imported -- now if it already is, else by a
# post-import hook -- so ``import ridgexr`` and ``ridgexr --help`` import neither xarray nor torch.
if "xarray" in sys.modules:
    _register_accessors()
else:
    wrapt.register_post_import_hook(_register_accessors, "xarray")

#: public name -> the module that defines it; imported on first access (PEP 562), so that
#: ``import ridgexr`` and ``ridgexr --help`` do not import torch
_LAZY = {
    "OU": "process", "time_grid": "process",
    "SmoothedEmpirical": "empirical", "Moments": "empirical",
    "RidgeFrame": "ridge", "RidgeProjection": "ridge", "ridge_frame": "ridge", "ridge_residual": "ridge",
    "project_to_ridge": "ridge",
    "RandomFeatureDenoiser": "models", "ExactDenoiser": "models", "MLPDenoiser": "models",
    "RandomFeatureFit": "training", "fit_random_features": "training", "fit_sweep": "training",
    "fits_to_dataset": "training", "fit_neural": "training", "NeuralFit": "training",
    "ModuleDenoiser": "models",
    "open_catalog": "catalog", "Experiment": "catalog", "Catalog": "catalog",
    "open_dataset": "reader", "run_experiment": "run",
}
_SUBMODULES = ("accessor", "projection", "analysis", "plot", "report", "store", "catalog", "datasets", "training", "run", "ridge",
               "scms", "empirical", "models", "process", "defaults", "choices", "spec", "sampling", "observe", "reader", "units", "cli", "quality",
               "claims", "verdicts", "schema")

#: modules renamed (old -> new): the old name says where its functions went
_RENAMED = {"labelled": "projection", "engine": "xarray_backend"}  # one labelled module per concept

__all__ = sorted(_LAZY) + ["projection", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    elif name in _RENAMED:
        raise AttributeError(f"ridgexr.{name} was renamed ridgexr.{_RENAMED[name]} (same functions)")
    else:
        raise AttributeError(f"module 'ridgexr' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
