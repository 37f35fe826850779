"""Model kinds: one subpackage per kind, one registry line per kind.

===================  =============================================================
kind                 subpackage (spec, torch-free) / ``denoiser`` (torch) / ``fit_adapter``
===================  =============================================================
``random_features``  :mod:`ridgexr.models.random_features` (the paper's model)
``exact``            :mod:`ridgexr.models.exact` (the memorizing reference)
``mlp``              :mod:`ridgexr.models.mlp` (the paper's MLP score network)
``module``           :mod:`ridgexr.models.module` (your own trained model)
``diffusers``        :mod:`ridgexr.models.diffusers` (your own diffusers UNet2DModel + scheduler)
``unet``             :mod:`ridgexr.models.unet` (a diffusers UNet2DModel trained here by DSM)
===================  =============================================================

Each kind's ``__init__`` holds its spec (a :class:`ModelSpec` subclass: its fields and their
defaults, from :mod:`ridgexr.defaults` where the paper fixes them, and the fields the config hash
leaves out at their neutral value, ``hash_neutral``); its ``denoiser`` module the torch network and
``build(exp, block, task, train, device)``; its ``fit_adapter`` module the kind's fit entry point
``fit(context, block_index, block, cells)`` (it adapts the block's cells to :mod:`ridgexr.training`, which
imports no kind, and returns what the builder reads); its ``cost`` module (optional) the planner's time and
memory model, a :class:`ridgexr.models.cost.KindCost` (without one, a kind is costed as a small
network trained elsewhere, as ``module`` is).  :data:`REGISTRY` names them by import path, so the
catalog (which reads only the specs) imports neither torch nor xarray.  Adding a
kind = one subpackage + one line below (+ its row in docs/models.md; a test checks all three).

The networks are importable from here too (``from ridgexr.models import RandomFeatureDenoiser``);
they load torch on first access.
"""

from __future__ import annotations

import difflib
import importlib

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from .kind import FitContext, FittedCell, ModelKind
from .model_spec import MODEL_CELL_DIMS, ModelSpec

__all__ = ["REGISTRY", "DEFAULT_KIND", "ModelKind", "ModelSpec", "FitContext", "FittedCell", "MODEL_CELL_DIMS",
           "model_kind", "validate_block", "RandomFeatureDenoiser", "ExactDenoiser", "MLPDenoiser", "ModuleDenoiser",
           "DiffusersDenoiser", "UNetDenoiser"]

#: kind -> its spec, builder and trainer (import paths)
REGISTRY: dict[str, ModelKind] = {k.name: k for k in (
    ModelKind("random_features", "ridgexr.models.random_features:RandomFeaturesSpec",
              "ridgexr.models.random_features.denoiser:build", "ridgexr.models.random_features.fit_adapter:fit",
              "ridgexr.models.random_features.fit_adapter:check", cost="ridgexr.models.random_features.cost:COST"),
    ModelKind("exact", "ridgexr.models.exact:ExactSpec",
              "ridgexr.models.exact.denoiser:build", "ridgexr.models.exact.fit_adapter:fit",
              cost="ridgexr.models.exact.cost:COST"),
    ModelKind("mlp", "ridgexr.models.mlp:MLPSpec",
              "ridgexr.models.mlp.denoiser:build", "ridgexr.models.mlp.fit_adapter:fit",
              cost="ridgexr.models.mlp.cost:COST"),
    ModelKind("module", "ridgexr.models.module:ModuleSpec",
              "ridgexr.models.module.denoiser:build", "ridgexr.models.module.fit_adapter:fit",
              "ridgexr.models.module.fit_adapter:check"),
    ModelKind("diffusers", "ridgexr.models.diffusers:DiffusersSpec",
              "ridgexr.models.diffusers.denoiser:build", "ridgexr.models.diffusers.fit_adapter:fit",
              "ridgexr.models.diffusers.fit_adapter:check", cost="ridgexr.models.diffusers.cost:COST",
              scheduler="ridgexr.models.diffusers.denoiser:block_scheduler"),
    ModelKind("unet", "ridgexr.models.unet:UNetSpec",
              "ridgexr.models.unet.denoiser:build", "ridgexr.models.unet.fit_adapter:fit",
              "ridgexr.models.unet.fit_adapter:check", cost="ridgexr.models.unet.cost:COST",
              scheduler="ridgexr.models.unet.denoiser:block_scheduler"),
)}

#: the kind of a model block that names none
DEFAULT_KIND = "random_features"


def model_kind(kind: str) -> ModelKind:
    """The registry entry of ``kind``; a ValueError naming the known kinds (and the closest) otherwise."""
    if kind not in REGISTRY:
        close = difflib.get_close_matches(str(kind), list(REGISTRY), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown model kind {kind!r}{hint} (known: {', '.join(REGISTRY)})")
    return REGISTRY[kind]


def validate_block(value) -> ModelSpec:
    """A model block (a mapping or a spec) validated by its kind's spec (``kind`` defaults to
    :data:`DEFAULT_KIND`).  Errors keep their field locations; a field of another kind is
    reported as not a field of this kind."""
    if isinstance(value, ModelSpec):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"a model block must be a mapping; got {type(value).__name__}")
    kind = value.get("kind", DEFAULT_KIND)
    spec = model_kind(kind).spec_class()
    try:
        return spec.model_validate({**value, "kind": kind})
    except ValidationError as err:
        errors = err.errors()
        if not any(e["type"] == "extra_forbidden" for e in errors):
            raise
        fields = ", ".join(f for f in spec.model_fields if f != "kind")
        raise ValidationError.from_exception_data(spec.__name__, [
            InitErrorDetails(type=PydanticCustomError(
                "extra_forbidden", f"not a field of model kind {kind!r} (its fields: {fields})"), loc=e["loc"],
                input=e["input"])
            if e["type"] == "extra_forbidden" else
            InitErrorDetails(type=PydanticCustomError(e["type"], e["msg"].replace("{", "{{").replace("}", "}}"),
                                                      e.get("ctx")), loc=e["loc"], input=e["input"])
            for e in errors]) from None


_NETWORKS = {
    "RandomFeatureDenoiser": "random_features.denoiser", "ExactDenoiser": "exact.denoiser",
    "MLPDenoiser": "mlp.denoiser", "ModuleDenoiser": "module.denoiser",
    "DiffusersDenoiser": "diffusers.denoiser", "UNetDenoiser": "unet.denoiser",
}


def __getattr__(name: str):
    if name in _NETWORKS:
        value = getattr(importlib.import_module(f".{_NETWORKS[name]}", __name__), name)
        globals()[name] = value
        return value
    if name == "spec":
        raise AttributeError("ridgexr.models.spec was renamed ridgexr.models.model_spec (same names)")
    raise AttributeError(f"module 'ridgexr.models' has no attribute {name!r}")
