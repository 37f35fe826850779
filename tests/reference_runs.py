"""Helpers of the run-robustness tests (tests/test_run_robustness.py, test_run_kills.py, test_run_signals.py,
test_store_integrity.py, test_run.py's kill test) and of their larger trials in benchmarks/bench_robustness.py:
an uninterrupted reference run, a run in its own process, comparisons of stores and folders, and a metadata file
edited in place.  The reference runs themselves are session fixtures in conftest.py (``reference``,
``small_reference``, ``long_reference``, ``new_reference``).

A module of plain functions, not fixtures, because the benchmark imports it too (it puts tests/ on ``sys.path``,
as conftest.py has it): the trials it runs are these tests' at a larger size, and compare stores by the same
rules."""

import json
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


def same_store(a_path, b_path) -> bool:
    """Every variable of the two stores equal (NaN equal to NaN); False where either does not open (a store that
    does not open is not the uninterrupted one)."""
    try:
        a, b = ridgexr.open_dataset(a_path), ridgexr.open_dataset(b_path)
        return set(a.variables) == set(b.variables) and all(
            np.array_equal(a[n].values, b[n].values, equal_nan=a[n].dtype.kind == "f") for n in a.variables)
    except Exception:  # noqa: BLE001 -- any failure to open or read is "not the same store"
        return False


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


def without_verified(files):
    """{file: bytes} of :func:`file_bytes` with the root ``zarr.json`` parsed and its ``verified`` attribute (what
    verify records) left out: what a verify that repairs nothing may change."""
    out = dict(files)
    root = json.loads(out.pop("zarr.json"))
    root["attributes"].pop("verified", None)
    out["zarr.json"] = root
    return out


def edit_json(f, edit):
    """Apply ``edit`` (a function changing a dict in place) to the JSON file ``f``."""
    meta = json.loads(f.read_text())
    edit(meta)
    f.write_text(json.dumps(meta))


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".creating-" in p.name or p.name.endswith(".ridgexr-swap"))


def old_store(reference, folder):
    """A copy of the reference store at ``folder/tiny.zarr`` (the store the overwrite will replace)."""
    store = folder / "tiny.zarr"
    shutil.copytree(reference[2], store)
    return store
