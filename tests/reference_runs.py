"""Helpers of the run-robustness tests (tests/test_run_robustness.py, test_run_kills.py, test_run_signals.py,
test_run.py's kill test): an uninterrupted reference run, a run in its own process, and comparisons of stores
and folders.  The reference runs themselves are
session fixtures in conftest.py (``reference``, ``small_reference``, ``long_reference``, ``new_reference``)."""

import shutil
import time

import numpy as np

import ridgexr
from ridgexr.catalog import experiment_from_file
from ridgexr.run import run_experiment

#: ``python -c RUN_SCRIPT CATALOG STORE``: an uninterrupted run in its own process, for the tests to kill
RUN_SCRIPT = """
import sys
from ridgexr.catalog import experiment_from_file
from ridgexr.run import run_experiment
run_experiment(experiment_from_file(sys.argv[1]), store=sys.argv[2])
"""


def assert_same_store(a_path, b_path):
    a, b = ridgexr.open_dataset(a_path), ridgexr.open_dataset(b_path)
    assert set(a.variables) == set(b.variables)
    for name in a.variables:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def uninterrupted(folder, write_catalog, **size):
    """(catalog, experiment, store, seconds) of an uninterrupted run of the ``tiny`` catalog at ``size``."""
    cat = write_catalog(folder, **size)
    exp = experiment_from_file(cat)
    t0 = time.perf_counter()
    res = run_experiment(exp, store=folder / "ref.zarr")
    return cat, exp, res.store, time.perf_counter() - t0


def file_bytes(folder):
    """{relative path: bytes} of every file under ``folder`` (a store compared bit for bit, file by file)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".creating-" in p.name or p.name.endswith(".ridgexr-swap"))


def old_store(reference, folder):
    """A copy of the reference store at ``folder/tiny.zarr`` (the store the overwrite will replace)."""
    store = folder / "tiny.zarr"
    shutil.copytree(reference[2], store)
    return store
