"""YAML experiment catalogs, validated with pydantic: configuration only, no data loading.

Modules (imports point downward): :mod:`.errors`; :mod:`.data` (the ``dataset`` section);
:mod:`.sections` (``process``, ``training``, ``sampler``, ``ridge``, ``seeds``);
:mod:`.experiment` (one entry, its cell layout and config hash; model blocks are validated by
their kind's spec from :data:`ridgexr.models.REGISTRY`); :mod:`.folders` (the data folder);
:mod:`.files` (reading YAML, the :class:`Catalog`); :mod:`.reference` (docs/catalogs.md).
Loading a catalog imports neither torch nor xarray.

**Where catalogs come from** (entry names must be unique across all of them):

1. the built-in catalogs, installed as package data ``ridgexr.catalogs``;
2. ``$RIDGEXR_CATALOGS``: folders or files, separated by ``os.pathsep``;
3. ``<data folder>/catalogs/*.yaml`` (a file there that cannot be read is skipped with a
   :class:`CatalogWarning`, and its error is raised only when an entry no other file defines is asked for);
4. files given explicitly (``ridgexr ... --catalog FILE``, ``open_catalog(files=[...])``).

**Where stores go**, and how a name finds a store that no catalog read defines (the entry name a
store records): see :mod:`.folders`.
"""

from .errors import CatalogError, CatalogWarning
from .data import DatasetSpec, ManifoldSpec, MnistSpec
from .sections import SEED_MAX, ClaimSpec, ProcessSpec, RidgeSpec, SamplerSpec, SeedSpec, TimescaleSpec, TrainingSpec
from .experiment import HASH_NEUTRAL, NOT_HASHED, Experiment, hashed_config
from .folders import data_dir_source, default_data_dir, resolve_store, stores_in, stores_named
from .files import (Catalog, builtin_catalog_files, catalog_files, describe, experiment_from_file, load_catalog_file,
                    open_catalog)
from .reference import schema_markdown

__all__ = ["CatalogError", "CatalogWarning", "DatasetSpec", "ManifoldSpec", "MnistSpec", "ProcessSpec", "RidgeSpec", "SamplerSpec",
           "SeedSpec", "TrainingSpec", "SEED_MAX", "ClaimSpec", "TimescaleSpec", "Experiment", "NOT_HASHED", "HASH_NEUTRAL", "hashed_config",
           "default_data_dir", "data_dir_source", "resolve_store", "stores_in", "stores_named", "Catalog", "builtin_catalog_files", "catalog_files",
           "describe", "experiment_from_file", "load_catalog_file", "open_catalog", "schema_markdown"]
