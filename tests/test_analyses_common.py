"""analyses/_common.py, the helpers the analysis scripts share: the cells they walk and the median they quote."""

import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ridgexr.analysis.arrays import median_interval
from ridgexr.choices import CELL_DIMS

ANALYSES = Path(__file__).resolve().parents[1] / "analyses"


@pytest.fixture(scope="module")
def common():
    """analyses/_common.py as a module (the analysis scripts are not a package)."""
    spec = importlib.util.spec_from_file_location("_common", ANALYSES / "_common.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_common"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("_common", None)


def _store(sizes: dict, seed: int) -> xr.Dataset:
    """A store-shaped Dataset over the cell dims ``sizes`` (in the order given) and 3 samples; cell_applies and
    cell_complete drawn at random; ``x`` numbers each cell.  ``target`` gets string labels, ``draw`` none."""
    rng = np.random.default_rng(seed)
    dims = list(sizes)
    shape = tuple(sizes.values())
    coords = {d: (["a", "b", "c"][:n] if d == "target" else np.arange(n) * 10 + 1) for d, n in sizes.items()
              if d != "draw"}
    return xr.Dataset({"cell_applies": (dims, rng.random(shape) < 0.7),
                       "cell_complete": (dims, rng.random(shape) < 0.7),
                       "x": (dims + ["sample"], np.arange(np.prod(shape) * 3).reshape(shape + (3,)))},
                      coords=coords)


@pytest.mark.parametrize("sizes", [
    {"schedule": 2, "width": 3},
    {"n_train": 3, "schedule": 2, "width": 2},  # stored order differs from CELL_DIMS'
    {"model": 2, "schedule": 1, "width": 2, "epoch": 2, "target": 2, "draw": 3, "n_train": 2},
    {"tau": 2, "n_noise": 2, "data_draw": 2, "width": 2},
])
def test_complete_cells_walks_every_cell_dim_of_the_store(common, sizes):
    """Each applying, complete cell once, labelled by every cell dim the store has in CELL_DIMS' order, and
    ``cell`` the store at that cell (brute force over the index product).  Before, a store with n_train, draw
    or target failed: those dims stayed in ``cell``, and its cell_applies was not one value."""
    ds = _store(sizes, seed=len(sizes))
    got = list(common.complete_cells(ds))
    order = [d for d in CELL_DIMS if d in sizes]
    expected = []
    for idx in itertools.product(*(range(sizes[d]) for d in order)):
        at = dict(zip(order, idx))
        if ds.cell_applies.isel(at).item() and ds.cell_complete.isel(at).item():
            expected.append(({d: ds[d].values[i].item() if d in ds.coords else i for d, i in at.items()},
                             ds.x.isel(at).values))
    assert [label for label, _ in got] == [label for label, _ in expected]
    assert all(list(label) == order for label, _ in got)
    for (_, cell), (_, x) in zip(got, expected):
        assert cell.x.dims == ("sample",)
        np.testing.assert_array_equal(cell.x.values, x)


def test_median_ci_text_is_the_librarys_median_interval(common):
    """One median interval: the scripts' text is :func:`ridgexr.analysis.arrays.median_interval`, its large-sample
    path included (above arrays.RESAMPLE_LIMIT values), NaNs ignored; "-" when nothing is finite."""
    rng = np.random.default_rng(3)
    for v in (rng.standard_normal(50), np.r_[rng.exponential(size=30_000), np.nan]):
        med, low, high, n = median_interval(v)
        assert n == np.isfinite(v).sum()
        assert med == pytest.approx(np.median(v[np.isfinite(v)]))
        assert common.median_ci_text(v) == f"{med:.3g} [{low:.3g}, {high:.3g}]"
    assert common.median_ci_text(np.array([np.nan])) == "-"
    assert not hasattr(common, "median_ci")
    assert common.CELL_DIMS is CELL_DIMS  # the library's list, not a copy
