"""Run an experiment: fit every (schedule, width[, tau]) cell, sample, observe, store.

Steps of :func:`run_experiment`:

1. Load the training set and fit the models of the cells still to run (random features with
   :func:`ridgexr.fit_sweep`: nested features, one shared training sample; cheap next to sampling); a
   resume neither refits nor diagnoses again the models of its complete cells.
2. Create the Zarr v3 store from a lazy template, or reopen it to resume: a store written
   by a different configuration is refused unless ``overwrite=True``.
3. Run every cell not yet marked complete, locally one after another, or as tasks on a
   dask.distributed cluster (each task writes its own region).  A cell streams its
   trajectory in blocks of ``sampler.block_steps`` recorded steps: each block is observed
   (ridge projection, residuals) and written before the next is computed.
4. Mark each cell complete after all of its data is written.

Every cell uses the same sampler seed, so all models start from the same noise and see the
same Brownian increments (common random numbers): differences between cells come from the
models alone.  Reruns with the same seeds reproduce the store exactly.

Modules (imports point downward): :mod:`.plan` (layout, fits, one task per cell),
:mod:`.cell` (sample, observe and write one cell; runs in a worker too),
:mod:`.provenance` (store attributes), :mod:`.cluster` (dask clients),
:mod:`.experiment` (:func:`plan_run` builds a :class:`Plan` once, :func:`execute` carries it out,
:func:`run_experiment` is the two), :mod:`.verification` (a store checked against its configuration: the
template, the config-hash checks, repair; ``ridgexr verify``), :mod:`.scores` (Bonnaire et al.'s score errors of a stored run's
networks, read back from its checkpoints), :mod:`.memorized_null` (the memorized share's null written into a store
made before it existed).  Reading stores back is :mod:`ridgexr.reader`.
"""

from ..reader import open_dataset, store_path, summarize
from .cell import run_cell
from .cluster import dask_client, resolve_scheduler
from .runner import (ConfigMismatchError, Plan, ResourceError, RunResult, check_resources, check_scheduler, execute,
                     plan_run, run_experiment, validate_experiment)
from .memorized_null import fill_memorized_null
from .plan import CellTask, estimate_resources, plan_layout, plan_tasks, resolve_d_star
from .provenance import provenance, store_attrs
from .scores import SCORE_ERROR_VARIABLES, score_errors
from .verification import (RESOLUTIONS, check_config_hash, check_identity, check_store_schema, repair_config_hash,
                           resolve_config, schema_reference, stored_config_hash, verify)

__all__ = ["run_experiment", "Plan", "plan_run", "execute", "RunResult", "ConfigMismatchError", "plan_layout", "plan_tasks", "run_cell",
           "CellTask", "open_dataset", "store_path", "summarize", "dask_client", "resolve_scheduler",
           "resolve_d_star", "provenance", "store_attrs", "ResourceError", "check_resources",
           "check_scheduler", "validate_experiment", "estimate_resources", "schema_reference", "check_store_schema",
           "check_config_hash", "repair_config_hash", "stored_config_hash", "score_errors", "SCORE_ERROR_VARIABLES",
           "check_identity", "resolve_config", "RESOLUTIONS", "verify", "fill_memorized_null"]


def __getattr__(name: str):
    if name == "experiment":
        raise AttributeError("ridgexr.run.experiment was renamed ridgexr.run.runner (same functions; "
                             "ridgexr.catalog.experiment is the catalog entry)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
