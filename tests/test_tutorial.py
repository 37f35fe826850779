from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ridgexr.catalog import experiment_from_file
from ridgexr.run import run_experiment

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "tutorial.ipynb"


@pytest.mark.slow
def test_tutorial_notebook_executes_against_a_small_store(tmp_path, monkeypatch, write_catalog):
    exp = experiment_from_file(write_catalog(tmp_path, steps=30, samples=16))
    store = run_experiment(exp, data_dir=tmp_path / "data").store
    monkeypatch.setenv("RIDGEXR_TUTORIAL_STORE", str(store))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "memorized" in text and "reach_time_median" in text
    assert "model: ['my-mlp']" in text and "near_mode" in text  # your own model, run and analysed
    assert (tmp_path / "my-model.zarr" / "zarr.json").is_file()
    assert (tmp_path / "distance_curves.png").read_bytes()[:4] == b"\x89PNG"  # the saved figure
    import xarray as xr

    back = xr.open_dataset(tmp_path / "slice.nc")  # the exported slice: 16 samples, t within the window
    assert back.sizes["sample"] == 16 and float(back.t.max()) <= 0.5 and float(back.t.min()) >= 0.01
