"""The Zarr v3 store of an experiment: what a user needs to open, list, check and lock a store.

The table of stored variables is :mod:`ridgexr.schema` (below this package, so the observation layer reads it).
One concept per module, lowest first (each imports only those above it):

- :mod:`~ridgexr.store.record`: the record a store keeps of its creation (a checksummed copy of what it held and
  of its metadata and configuration), read as JSON;
- :mod:`~ridgexr.store.layout`: shape and chunking (:class:`~ridgexr.store.layout.StoreLayout`) and the template;
  it lays a store out and reads or changes none;
- :mod:`~ridgexr.store.opening`: the one module that opens a store, and reads it (the metadata checked against
  the record, reads pinned to the store opened); :mod:`ridgexr.reader` and the xarray backend open through it;
- :mod:`~ridgexr.store.update`: changes to an existing store's metadata and marks (consolidation, root attributes,
  completion marks cleared);
- :mod:`~ridgexr.store.lock`: the writer lock;
- :mod:`~ridgexr.store.lifecycle`: create, stage, commit and recover, and what a run does with its store path;
- :mod:`~ridgexr.store.integrity`: digests, ``verify``, schema check and repair;
- :mod:`~ridgexr.store.write`: blocks of steps, the per-cell variables and the completion mark.

This package exports the names of :data:`__all__`; every other name is imported from the module that owns it
(``from ridgexr.store.lifecycle import create_store``), as ridgexr's own modules do.
"""

from ..catalog.folders import is_store
from .integrity import VerifyReport, verify_and_repair, verify_store
from .layout import is_exact_cell
from .opening import StoreDamagedError, StoreReplacedError, StoreWarning, cells, complete_cells, json_attr, open_store
from .lifecycle import ConfigMismatchError
from .lock import StoreLock, StoreLockedError

__all__ = ["open_store", "is_store", "cells", "complete_cells", "is_exact_cell", "json_attr", "verify_store",
           "verify_and_repair", "VerifyReport", "StoreLock", "StoreLockedError", "StoreWarning", "StoreDamagedError",
           "StoreReplacedError", "ConfigMismatchError"]

#: names this package exported before it kept only :data:`__all__` -> the module that owns each, named by the
#: AttributeError they raise here
_OWNERS = {
    **dict.fromkeys(("CELL_DIAGNOSTICS", "CELL_DIMS", "CELL_QUALITY", "CF_ATTRS", "COORD_ATTRS", "DEGENERATE_FLAGS",
                     "QUALITY_VARIABLES", "SCHEMA_VERSION", "SINCE", "STEP_BOOL", "STEP_INT", "STEP_OPTIONAL",
                     "STEP_SCALAR", "STEP_VARIABLES", "STEP_VECTOR", "VARIABLE_ATTRS", "VARIABLES", "Variable",
                     "schema_older", "ARRAYS_SCHEMA"), "ridgexr.schema"),
    **dict.fromkeys(("CODECS", "ROOT_ATTRS", "StoreLayout", "chunk_keys", "write_template"), "ridgexr.store.layout"),
    **dict.fromkeys(("EAGER_COORDS", "IN_PROCESS", "PinnedStore", "cell_label", "is_consolidated", "per_cell_arrays"),
                    "ridgexr.store.opening"),
    **dict.fromkeys(("clear_completion", "consolidate", "set_root_attrs"), "ridgexr.store.update"),
    "LOCK_NAME": "ridgexr.store.lock",
    **dict.fromkeys(("IDENTIFYING_ARRAYS", "SWAP_NAME", "Opening", "chunk_leftover", "commit_staging",
                     "create_staging", "create_store", "damaged_root", "finish_interrupted", "interrupted",
                     "journal_path", "foreign_entries", "open_for_run", "recover_store", "remove_partial_creations",
                     "remove_partial_files", "replace_store"), "ridgexr.store.lifecycle"),
    **dict.fromkeys(("CONSOLIDATED", "NOT_DIGESTED", "Damage", "cell_digest", "check_schema", "creation_array",
                     "missing_chunks", "repair_schema", "restore_marks"), "ridgexr.store.integrity"),
    **dict.fromkeys(("DECODING_ATTRS", "SCHEMA_FIELDS", "RECORD", "read_record"), "ridgexr.store.record"),
    **dict.fromkeys(("CellWriter", "copy_cell", "write_block", "write_cell_end"), "ridgexr.store.write"),
}


def __getattr__(name: str):
    if name in _OWNERS:
        raise AttributeError(f"ridgexr.store.{name} is not exported by ridgexr.store: import it from "
                             f"{_OWNERS[name]} (ridgexr.store exports {', '.join(__all__)})")
    raise AttributeError(f"module 'ridgexr.store' has no attribute {name!r}")
