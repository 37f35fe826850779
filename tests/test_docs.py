"""The documentation builds with warnings as errors, the built pages show what a reader needs, and the tutorial
notebook, executed once by that build, runs against its store and writes what it says it writes."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bs4 import BeautifulSoup

import ridgexr
from ridgexr.catalog import experiment_from_file

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    """(the copy of docs/ that was built, the HTML folder): one Sphinx build, warnings as errors, shared by the
    page tests and the tutorial test.  On a copy, because the build writes beside its sources (autosummary's
    generated/, conf.py's tutorial store under _build/) and nothing may be written into the checkout; the
    tutorial runs in that copy (RIDGEXR_DOCS_KEEP_TUTORIAL_FILES), so the files it writes can be checked."""
    root = tmp_path_factory.mktemp("docs-build")
    docs = root / "docs"
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns("_build", "generated", "*.zarr", "__pycache__",
                                                                ".ipynb_checkpoints"))
    shutil.copy(DOCS.parent / "CHANGELOG.md", root / "CHANGELOG.md")  # docs/changelog.md includes ../CHANGELOG.md
    out = root / "html"
    env = {**os.environ, "RIDGEXR_DOCS_KEEP_TUTORIAL_FILES": "1"}
    env.pop("RIDGEXR_TUTORIAL_STORE", None)  # conf.py builds the tutorial's own store
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(docs),
                           str(out)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return docs, out


@pytest.mark.slow
def test_sphinx_build_with_warnings_as_errors(built_docs):
    _, out = built_docs
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
    _check_navigation(out)
    _check_tutorial_plots_render(out / "tutorial.html")


@pytest.mark.slow
def test_tutorial_notebook_executes_against_its_store(built_docs):
    docs, out = built_docs
    # the store the build ran the tutorial on (docs/tutorial.yaml, run by docs/conf.py under _build/)
    folder = docs / "_build" / "tutorial-store"
    exp = experiment_from_file(folder / "tutorial.yaml")
    ds = ridgexr.open_dataset(folder / exp.store)
    # results worth showing: no sample diverges, distances stay near the ridge, memorization differs by cell
    assert not bool(ds.diverged.any())
    assert float(ds.ridge_distance.isel(step=-1).mean()) < 0.5
    memo = ds.ridge.memorization_fraction().memorized.compute()
    assert float(memo.max() - memo.min()) > 0.2
    # what the tutorial says about the identical distance curves: x_1 is the same path in every cell
    x1 = ds.trajectory.isel(dim=1).values
    assert np.array_equal(x1, np.broadcast_to(x1[:1, :1], x1.shape)) and float(abs(ds.residual_normal).max()) < 1e-9
    # what a reader sees: every output cell of the executed notebook, on the built page
    page = BeautifulSoup((out / "tutorial.html").read_text(), "html.parser")
    outputs = page.select("div.cell_output")
    assert outputs and not page.select("div.cell_output .output.traceback, div.cell_output .output.error")
    text = "".join(o.get_text() for o in outputs)
    assert "memorized" in text and "reach_time_median" in text
    assert "model: ['my-mlp']" in text and "near_mode" in text  # your own model, run and analysed
    first, last = (float(v) for v in re.search(r"first 10 epochs (\S+) -> of the last 10 (\S+)", text).groups())
    assert last < first  # the MLP's loss goes down
    # the files the notebook writes into its working folder
    assert (docs / "my-model.zarr" / "zarr.json").is_file()
    assert (docs / "distance_curves.png").read_bytes()[:4] == b"\x89PNG"  # the saved figure
    # the plot cells carry BokehJS inline (the built page renders them offline: the Chromium check above)
    assert any("Bokeh" in (s.string or "") and len(s.string) > 500_000 for s in page.select("script"))
    import xarray as xr

    back = xr.open_dataset(docs / "slice.nc")  # the exported slice: 16 samples, t within the window
    assert back.sizes["sample"] == 16 and float(back.t.max()) <= 0.5 and float(back.t.min()) >= 0.01


def _check_navigation(out):
    """The index starts with install and the tutorial; one page is the API reference; every page is in the
    sidebar; numpydoc pages show no raw reST markup."""
    index = BeautifulSoup((out / "index.html").read_text(), "html.parser").select_one("main")
    first = index.find("h2")
    assert first.get_text(strip=True).rstrip("#") == "Install and first run"
    section = first.find_parent("section")
    assert section.find("a", href="tutorial.html") and "pip install" in section.get_text()
    titles = {}
    for page in out.glob("*.html"):
        h1 = BeautifulSoup(page.read_text(), "html.parser").select_one("main h1")
        if h1:
            titles.setdefault(h1.get_text(strip=True).rstrip("#"), []).append(page.name)
    assert titles.get("API reference") == ["reference.html"], titles.get("API reference")
    pages = {p.stem for p in DOCS.glob("*.md")} | {"tutorial"}
    for name in ("running", "analysis", "tutorial"):
        nav = BeautifulSoup((out / f"{name}.html").read_text(), "html.parser").select("nav.bd-docs-nav a")
        linked = {a["href"].split("#")[0].removesuffix(".html") for a in nav} | {name}  # its own link is "#"
        assert linked >= pages - {"index"}, (name, pages - linked)
    opened = BeautifulSoup((out / "generated" / "ridgexr.open_dataset.html").read_text(), "html.parser")
    assert "``" not in opened.select_one("main").get_text()


def _check_tutorial_plots_render(page_path):
    """The tutorial's plot cells render in Chromium, offline: BokehJS is inline, each plot a bokeh document."""
    playwright = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("needs chromium (.ci/run installs the Debian package)")
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("http*://**", lambda route: route.abort())  # offline: nothing may come from a CDN
        page.goto(page_path.as_uri())
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length >= 2", timeout=60000)
        rendered = ("() => document.querySelectorAll('.bk-Canvas, canvas').length + "
                    "Array.from(document.querySelectorAll('[data-root-id]')).filter("
                    "(e) => e.shadowRoot || e.children.length).length")
        with contextlib.suppress(playwright.TimeoutError):  # until two plots are drawn (the assert below says if not)
            page.wait_for_function(f"() => ({rendered})() >= 2", timeout=60000)
        canvases = page.evaluate(rendered)
        documents = page.evaluate("() => Bokeh.documents.length")
        browser.close()
    assert documents >= 2 and canvases >= 2, (documents, canvases)
    assert not errors, errors
