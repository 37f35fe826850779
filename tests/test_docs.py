"""The documentation builds with warnings as errors, and the built pages show what a reader needs."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.slow
def test_sphinx_build_with_warnings_as_errors(tmp_path):
    # on a copy: the build writes beside its sources (autosummary's generated/, conf.py's tutorial store
    # under _build/), and nothing may be written into the checkout
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns("_build", "generated", "*.zarr", "__pycache__",
                                                                ".ipynb_checkpoints"))
    shutil.copy(DOCS.parent / "CHANGELOG.md", tmp_path / "CHANGELOG.md")  # docs/changelog.md includes ../CHANGELOG.md
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(docs),
                           str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    tutorial = BeautifulSoup((out / "tutorial.html").read_text(), "html.parser")
    text = tutorial.get_text()
    assert "reach_time_median" in text and "memorized_low" in text  # executed: the outputs are on the page
    assert "Traceback" not in text
    reference = BeautifulSoup((out / "reference.html").read_text(), "html.parser")
    linked = {a.get_text(strip=True) for a in reference.select("table.autosummary a")}
    assert {"project_to_ridge", "open_dataset", "memorization_fraction"} <= {n.split(".")[-1] for n in linked}
    api = BeautifulSoup((out / "generated" / "ridgexr.project_to_ridge.html").read_text(), "html.parser")
    assert "Parameters" in api.get_text() and "d_star" in api.get_text()  # numpydoc rendered the docstring
    catalogs = BeautifulSoup((out / "catalogs.html").read_text(), "html.parser")
    assert any("drop_tol" in row.get_text() for row in catalogs.select("table tr"))
    # one table per registered model kind, with its own fields
    headings = {h.get_text(strip=True).rstrip("#") for h in catalogs.select("h2")}
    assert {"RandomFeaturesSpec (kind: random_features)", "MLPSpec (kind: mlp)"} <= headings
    changelog = BeautifulSoup((out / "changelog.html").read_text(), "html.parser").get_text()
    assert "0.4.0" in changelog and "feature_period" in changelog
