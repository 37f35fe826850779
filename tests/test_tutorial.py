import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import ridgexr
from ridgexr.catalog import experiment_from_file
from ridgexr.run import run_experiment

DOCS = Path(__file__).resolve().parent.parent / "docs"
NOTEBOOK = DOCS / "tutorial.ipynb"


@pytest.mark.slow
def test_tutorial_notebook_executes_against_its_store(tmp_path, monkeypatch):
    # the store the documentation build runs the tutorial on (docs/tutorial.yaml, read by docs/conf.py)
    exp = experiment_from_file(DOCS / "tutorial.yaml")
    store = run_experiment(exp, data_dir=tmp_path / "data").store
    ds = ridgexr.open_dataset(store)
    # results worth showing: no sample diverges, distances stay near the ridge, memorization differs by cell
    assert not bool(ds.diverged.any())
    assert float(ds.ridge_distance.isel(step=-1).mean()) < 0.5
    memo = ds.ridge.memorization_fraction().memorized.compute()
    assert float(memo.max() - memo.min()) > 0.2
    # what the tutorial says about the identical distance curves: x_1 is the same path in every cell
    x1 = ds.trajectory.isel(dim=1).values
    assert np.array_equal(x1, np.broadcast_to(x1[:1, :1], x1.shape)) and float(abs(ds.residual_normal).max()) < 1e-9
    monkeypatch.setenv("RIDGEXR_TUTORIAL_STORE", str(store))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "memorized" in text and "reach_time_median" in text
    assert "model: ['my-mlp']" in text and "near_mode" in text  # your own model, run and analysed
    first, last = (float(v) for v in re.search(r"first 10 epochs (\S+) -> of the last 10 (\S+)", text).groups())
    assert last < first  # the MLP's loss goes down
    assert (tmp_path / "my-model.zarr" / "zarr.json").is_file()
    assert (tmp_path / "distance_curves.png").read_bytes()[:4] == b"\x89PNG"  # the saved figure
    # the plot cells carry BokehJS inline (the built page renders them offline)
    bundles = [o.get("data", {}) for o in outputs]
    assert any("Bokeh" in str(b.get("application/javascript", "")) and len(str(b.get("application/javascript", "")))
               > 500_000 for b in bundles)
    import xarray as xr

    back = xr.open_dataset(tmp_path / "slice.nc")  # the exported slice: 16 samples, t within the window
    assert back.sizes["sample"] == 16 and float(back.t.max()) <= 0.5 and float(back.t.min()) >= 0.01
