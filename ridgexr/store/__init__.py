"""The Zarr v3 store of an experiment: its variables, layout, writes, lifecycle on disk, integrity and lock.

One concept per module, lowest first (each imports only those above it):

- :mod:`~ridgexr.schema` (below the package): the one table of stored variables (dims, dtype, fill, attributes, schema
  version, degenerate flag) and everything read off it;
- :mod:`~ridgexr.store.record`: the record a store keeps of its creation (a checksummed copy of what it held and
  of its metadata and configuration), read as JSON;
- :mod:`~ridgexr.store.layout`: shape and chunking (:class:`StoreLayout`), the template, opening and reading (the
  metadata checked against the record, reads pinned to the store opened);
- :mod:`~ridgexr.store.lock`: the writer lock;
- :mod:`~ridgexr.store.lifecycle`: create, stage, commit and recover, and what a run does with its store path;
- :mod:`~ridgexr.store.integrity`: digests, ``verify``, schema check and repair;
- :mod:`~ridgexr.store.write`: blocks of steps, the per-cell variables and the completion mark.

Every name is re-exported here: ``from ridgexr.store import X`` is the way to use them.
"""

from ..catalog.folders import is_store  # re-exported: whether a folder is a ridgexr store
from ..schema import (CELL_DIAGNOSTICS, CELL_DIMS, CELL_QUALITY, CF_ATTRS, COORD_ATTRS, DEGENERATE_FLAGS,
                        QUALITY_VARIABLES, SCHEMA_VERSION, SINCE, STEP_BOOL, STEP_INT, STEP_OPTIONAL, STEP_SCALAR,
                        STEP_VARIABLES, STEP_VECTOR, VARIABLE_ATTRS, VARIABLES, Variable, schema_older, ARRAYS_SCHEMA)
from .layout import (CODECS, EAGER_COORDS, IN_PROCESS, ROOT_ATTRS, StoreDamagedError, StoreLayout, StoreWarning,
                     PinnedStore, StoreReplacedError, cell_label, cells, chunk_keys, clear_completion, complete_cells,
                     consolidate, is_consolidated, is_exact_cell, json_attr, open_store, per_cell_arrays,
                     set_root_attrs, write_template)
from .lock import LOCK_NAME, StoreLock, StoreLockedError
from .lifecycle import (IDENTIFYING_ARRAYS, SWAP_NAME, ConfigMismatchError, Opening, chunk_leftover, commit_staging,
                        create_staging, create_store, damaged_root, finish_interrupted, interrupted, journal_path,
                        foreign_entries, open_for_run, recover_store, remove_partial_creations, remove_partial_files,
                        replace_store)
from .integrity import (CONSOLIDATED, DECODING_ATTRS, NOT_DIGESTED, SCHEMA_FIELDS, Damage, VerifyReport, cell_digest,
                        check_schema, creation_array, missing_chunks, repair_schema, restore_marks, verify_and_repair,
                        verify_store)
from .record import RECORD, read_record
from .write import CellWriter, copy_cell, write_block, write_cell_end

__all__ = ["CELL_DIMS", "is_exact_cell", "journal_path", "CellWriter", "STEP_VARIABLES", "consolidate",
           "is_consolidated", "COORD_ATTRS", "CF_ATTRS", "SCHEMA_VERSION", "ARRAYS_SCHEMA", "schema_older", "StoreLayout",
           "create_store", "write_block", "write_cell_end", "open_store", "StoreLock", "StoreLockedError", "cells",
           "complete_cells", "cell_label", "json_attr", "VARIABLE_ATTRS", "CELL_DIAGNOSTICS", "CELL_QUALITY",
           "QUALITY_VARIABLES", "is_store", "chunk_leftover", "remove_partial_creations", "replace_store",
           "recover_store", "finish_interrupted", "interrupted", "damaged_root", "create_staging", "commit_staging",
           "StoreWarning", "StoreDamagedError", "missing_chunks", "cell_digest", "per_cell_arrays", "chunk_keys",
           "check_schema", "repair_schema", "write_template", "Damage", "verify_store", "clear_completion",
           "copy_cell", "CODECS", "IN_PROCESS",
           # new with the package: the table, the run's decision, the verify sequence
           "VARIABLES", "Variable", "Opening", "open_for_run", "ConfigMismatchError", "VerifyReport",
           "verify_and_repair",
           # public before, now listed
           "STEP_VECTOR", "STEP_SCALAR", "STEP_BOOL", "STEP_INT", "STEP_OPTIONAL", "DEGENERATE_FLAGS", "SINCE",
           "EAGER_COORDS", "ROOT_ATTRS", "LOCK_NAME", "SWAP_NAME", "IDENTIFYING_ARRAYS", "NOT_DIGESTED",
           "CONSOLIDATED", "SCHEMA_FIELDS", "DECODING_ATTRS", "set_root_attrs",
           # the record of a store's creation, pinned reads, what a kill leaves, repair that keeps what verifies
           "RECORD", "read_record", "PinnedStore", "StoreReplacedError", "remove_partial_files", "foreign_entries",
           "creation_array", "restore_marks"]
