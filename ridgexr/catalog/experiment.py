"""One catalog entry: :class:`Experiment`, its derived cell layout and its config hash.

The model blocks are validated by their kind's spec from :data:`ridgexr.models.REGISTRY`
(torch-free).  ``config_hash`` covers every field that changes a store's numbers, except
the fields of :data:`HASH_NEUTRAL` (and each model block's kind's
:meth:`~ridgexr.models.ModelSpec.neutral_fields`) while they hold the neutral value they were
introduced with (so a release that adds a field orphans no store).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
import re
from typing import Annotated, Literal

import numpy as np
from pydantic import BeforeValidator, Field, SerializeAsAny, field_validator, model_validator

from .. import defaults
from ..choices import SCHEDULE_NAMES
from ..models import MODEL_CELL_DIMS, ModelSpec, model_kind, validate_block
from ..models.model_spec import hashed_diagnostics
from ..spec import Spec
from .data import DatasetSpec
from .sections import ClaimSpec, ProcessSpec, RidgeSpec, SamplerSpec, SeedSpec, TimescaleSpec, TrainingSpec

__all__ = ["Experiment", "NOT_HASHED", "HASH_NEUTRAL", "hashed_config", "STORE_NAME"]

STORE_NAME = re.compile(r"[A-Za-z0-9_./-]+")

#: a model block: validated by its kind's spec (the registry), dumped with all of that kind's fields
Block = Annotated[SerializeAsAny[ModelSpec], BeforeValidator(validate_block)]


#: Experiment fields that do not change a store's numbers (left out of the config hash)
NOT_HASHED = ("description", "store", "source", "name", "claims", "timescales")

#: Fields left out of the config hash while they hold the neutral value they were introduced
#: with: the value that reproduces the numbers of the release before the field existed.  A field
#: added later goes here with its neutral default, so adding it orphans no store or checkpoint
#: (the hash of an entry that does not use it is unchanged).  Dotted paths into
#: ``Experiment.model_dump()``.  A model block's fields are declared by its kind's spec
#: (``hash_neutral``, :meth:`ridgexr.models.ModelSpec.neutral_fields`), not here.
HASH_NEUTRAL: dict[str, object] = {
    "ridge.stop_degenerate": None,  # 0.3
    "ridge.accelerate": False,  # 0.4
    "ridge.logits": "float64",  # 0.4
    "ridge.d_star_alt": [],  # 0.2
    "ridge.observe": True,  # 0.5
    "dataset.n_train": None,  # 0.3
    "dataset.images": None,  # 0.4
    "dataset.mnist.space": "latent",  # 0.4
    "sampler.scheduler_class": None,  # 0.4 (sampler kind scheduler)
    "sampler.eta": None,  # 0.4
    "training.draws": 1,  # 0.4
    "training.redraw": "noise",  # 0.5
    "dataset.manifold.draws": 1,  # 0.4
}


class Experiment(Spec):
    """One catalog entry."""

    name: str = Field(description="entry name (the key in the catalog)")
    description: str = Field("", description="free text")
    dataset: DatasetSpec = Field(description="the training set")
    process: ProcessSpec = Field(ProcessSpec(), description="the sampler's time grid")
    model: Block | None = Field(None,
        description="the denoiser block (one of model and models): a mapping with `kind` (default "
                    "random_features) and that kind's fields (docs/models.md, and the tables below)")
    models: list[Block] | None = Field(None, min_length=1,
        description="several model blocks, labelled along a `model` cell dimension (one of model and models)")
    training: TrainingSpec = Field(TrainingSpec(), description="the score-matching fit")
    schedules: list[str] | None = Field(None, min_length=1,
        description="loss-weight schedules w(t): '1', 'h', 'h2' (required with random_features or mlp models; "
                    "default ['h'], the standard epsilon loss, when every trained block is a unet; a label only "
                    "for modules)")
    sampler: SamplerSpec = Field(SamplerSpec(), description="the sampler")
    n_samples: int = Field(defaults.N_SAMPLES, ge=1, description="trajectories per cell; the paper's 2-D runs: 2000")
    d_star: int | Literal["auto"] = Field(1,
        description="ridge dimension, or 'auto' (largest gap of the posterior-covariance spectrum)")
    ridge: RidgeSpec = Field(RidgeSpec(), description="ridge projection settings")
    seeds: SeedSpec = Field(SeedSpec(), description="seeds")
    store: str = Field(description="store path relative to the data folder, ending in NAME.zarr")
    claims: list[ClaimSpec] = Field([], description="claims about the cells, each with the criterion its kind fixes "
                                    "(docs/claims.md); written before the run, not hashed")
    timescales: TimescaleSpec | None = Field(None, description="how tau_gen is read from a store that sweeps training "
                                             "time (docs/timescales.md); written before the run, not hashed")
    source: str = Field("", description="the catalog file (set by the loader)")

    @field_validator("schedules")
    @classmethod
    def _schedules(cls, v):
        if v is None:
            return v
        bad = [s for s in v if s not in SCHEDULE_NAMES]
        if bad:
            raise ValueError(f"unknown schedule(s) {bad}; choose from {list(SCHEDULE_NAMES)}")
        if len(set(v)) != len(v):
            raise ValueError("schedules must be distinct")
        return v

    @field_validator("d_star")
    @classmethod
    def _d_star(cls, v):
        if v != "auto" and v < 1:  # the ridge has at least one tangent direction; < d is checked against the data
            raise ValueError("d_star must be an integer >= 1 or 'auto'")
        return v

    @field_validator("store")
    @classmethod
    def _store(cls, v):
        p = Path(v)
        if (p.is_absolute() or ".." in p.parts or not v.endswith(".zarr") or not STORE_NAME.fullmatch(v)
                or any(part.startswith(".") for part in p.parts)):
            raise ValueError("store must be a relative path of letters, digits, '_', '-', '.' and '/' ending in "
                             "NAME.zarr (no '..', no hidden parts such as '.zarr' alone)")
        return v

    @model_validator(mode="after")
    def _blocks(self):
        if (self.model is None) == (self.models is None):
            raise ValueError("give exactly one of `model` (one block) and `models` (several blocks)")
        blocks = self.blocks
        labels = [b.label for b in blocks]
        if len(set(labels)) != len(labels):
            raise ValueError(f"model blocks need distinct names; got {labels}")
        trained = [b for b in blocks if b.trained_per_schedule]
        if trained and not self.schedules:
            defaults_ = {b.default_schedules for b in trained}
            if len(defaults_) != 1 or None in defaults_:
                raise ValueError(f"`schedules` is required with models of kind {sorted({b.kind for b in trained})}")
            # the kind's own default (unet: the epsilon loss, w = h), set once while validating (the model is frozen)
            object.__setattr__(self, "schedules", list(defaults_.pop()))
        for b in blocks:
            if b.diagnostics is not None:  # null: none (the image-scale kinds' default)
                b.diagnostics.check_training(self.training)
            b.check_entry(self)
        if self.sampler.kind == "marginal" and (any(b.kind != "exact" for b in blocks) or self.legacy_exact):
            raise ValueError("`sampler.kind: marginal` draws the exact score's own marginals: every model block must be "
                             f"of kind exact; got {sorted({b.kind for b in blocks})}"
                             + (" (and the exact schedule of a random-feature block)" if self.legacy_exact else ""))
        return self

    # ---------------------------------------------------------------- derived
    @property
    def blocks(self) -> list[ModelSpec]:
        """The model blocks (``[model]`` or ``models``)."""
        return [self.model] if self.model is not None else list(self.models)

    @property
    def model_dim(self) -> bool:
        """Whether the store has a ``model`` dimension: several blocks, or a module or exact block alone."""
        return self.models is not None or self.model.always_labelled

    @property
    def base_dir(self) -> Path | None:
        """Folder of the catalog file (relative data files are resolved against it)."""
        return Path(self.source).parent if self.source else None

    @property
    def loss_t_min(self) -> float:
        """Smallest time of the training loss: ``training.t_min``, else the sampler's ``process.t_min``."""
        return self.training.t_min or self.process.t_min

    @property
    def legacy_exact(self) -> bool:
        """A single random-feature block with the exact denoiser as schedule 'exact' (the 0.1-0.3 form)."""
        return self.model is not None and self.model.adds_exact_schedule()

    def cell_coords(self) -> tuple[tuple[str, tuple], ...]:
        """Every cell dimension of the store, (name, labels), in ``schema.CELL_DIMS`` order."""
        blocks = self.blocks
        out: list[tuple[str, tuple]] = []
        if self.model_dim:
            out.append(("model", tuple(b.label for b in blocks)))
        if self.cell_schedules:
            out.append(("schedule", tuple(self.cell_schedules)))
        for dim in MODEL_CELL_DIMS:  # width, tau, epoch: a dimension when a block sweeps it
            if any(b.swept(dim) for b in blocks):
                out.append((dim, tuple(sorted({v for b in blocks for v in b.values(dim)}))))
        return tuple(out) + self.sweeps()

    def sweeps(self) -> tuple[tuple[str, tuple], ...]:
        """Cell dimensions from the training and dataset blocks, (name, labels), in store order."""
        return self.training.sweeps() + self.dataset.sweeps()

    @property
    def cell_schedules(self) -> list[str]:
        """Schedule labels of the store: the loss schedules plus "exact" in the single random-feature form;
        a module-only entry without schedules has none (no schedule dimension)."""
        if self.schedules is None:
            return []
        return list(self.schedules) + (["exact"] if self.legacy_exact else [])

    def config_hash(self, train: np.ndarray) -> str:
        """SHA-256 of everything that determines the store's numbers (not its path or text).

        ``train`` is the loaded training set (:func:`ridgexr.datasets.load_training_set`).
        """
        cfg = hashed_config(self.model_dump(exclude=set(NOT_HASHED)))
        h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
        h.update(np.ascontiguousarray(train, dtype=np.float64).tobytes())
        return h.hexdigest()


def hashed_config(cfg: dict) -> dict:
    """``cfg`` (an ``Experiment.model_dump()``) without the fields of :data:`HASH_NEUTRAL`, and those of
    each model block's kind (:meth:`ridgexr.models.ModelSpec.neutral_fields`), that hold their neutral
    value (a copy; ``cfg`` is not changed).  A block's ``diagnostics`` that cut nothing from the training
    sample count as neutral (:func:`ridgexr.models.model_spec.hashed_diagnostics`)."""
    cfg = copy.deepcopy(cfg)
    n_time, n_noise = cfg["training"]["n_time"], cfg["training"]["n_noise"]
    for block in (cfg.get("models") or []) + ([cfg["model"]] if cfg.get("model") else []):
        # a held-out sample that cuts nothing is the one before the field existed; null (none) is hashed as null
        if block.get("diagnostics") is not None:
            block["diagnostics"] = hashed_diagnostics(block["diagnostics"], n_time,
                                                      n_noise if isinstance(n_noise, list) else [n_noise])
        for leaf, neutral in model_kind(block["kind"]).spec_class().neutral_fields().items():
            if leaf in block and block[leaf] == neutral:
                del block[leaf]
    for path, neutral in HASH_NEUTRAL.items():
        head, _, leaf = path.rpartition(".")
        parent = cfg
        for part in head.split("."):
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and leaf in parent and parent[leaf] == neutral:
            del parent[leaf]
    return cfg
