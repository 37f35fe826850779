import re
import shutil
import subprocess

import numpy as np
import pytest
from bs4 import BeautifulSoup
from typer.testing import CliRunner

import ridgexr
from ridgexr.catalog import experiment_from_file
from ridgexr.cli import app
from ridgexr.report import make_report
from ridgexr.run import run_experiment

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory, write_catalog):
    tmp = tmp_path_factory.mktemp("rep")
    exp = experiment_from_file(write_catalog(tmp, steps=12, samples=16))
    return run_experiment(exp, data_dir=tmp / "data").store


@pytest.fixture(scope="module")
def report_paths(tiny_store, tmp_path_factory):
    return make_report(ridgexr.open_dataset(tiny_store), tmp_path_factory.mktemp("r"), title="tiny", n_frames=3)


def test_report_writes_png_and_html(report_paths):
    paths = report_paths
    for name in ("distance_curves", "spread_curves", "reach_times", "mode_counts", "phase_diagram", "samples"):
        data = paths[name].read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
    assert "cdn.bokeh.org" not in paths["html"].read_text()  # BokehJS is inlined: the page works offline


def _drawn_bokeh_image(model):
    from bokeh.models import FixedTicker, GlyphRenderer, Image

    r = next(r for r in model.renderers if isinstance(r, GlyphRenderer) and isinstance(r.glyph, Image))
    arr = np.asarray(r.data_source.data["image"][0])  # bokeh draws row 0 at the bottom
    x0, y0 = float(r.data_source.data["x"][0]), float(r.data_source.data["y"][0])
    dw, dh = float(r.data_source.data["dw"][0]), float(r.data_source.data["dh"][0])
    ny, nx = arr.shape

    def labels(axis):
        ticks = axis.ticker.ticks if isinstance(axis.ticker, FixedTicker) else []
        return {round(float(t), 6): axis.major_label_overrides.get(t, axis.major_label_overrides.get(int(t), str(t)))
                for t in ticks}

    xt, yt = labels(model.xaxis[0]), labels(model.yaxis[0])
    return {(xt[round(x0 + (j + 0.5) * dw / nx, 6)], yt[round(y0 + (i + 0.5) * dh / ny, 6)]): float(arr[i, j])
            for i in range(ny) for j in range(nx)}


def test_phase_diagram_draws_each_value_in_its_cell_on_both_backends(tiny_store, drawn_matplotlib_image):
    import holoviews as hv

    from ridgexr import analysis, plot

    ds = ridgexr.open_dataset(tiny_store)
    plot.ensure_backends()
    memo = analysis.memorization_fraction(ds).memorized.compute()
    expected = {(str(w), str(s)): float(memo.sel(schedule=s, width=w)) for s in memo.schedule.values
                for w in memo.width.values}
    assert len(set(expected.values())) > 1  # a test of placement needs distinct values
    fig = plot.phase_diagram(ds)
    assert drawn_matplotlib_image(hv.render(fig, backend="matplotlib")) == pytest.approx(expected)
    assert _drawn_bokeh_image(hv.render(fig, backend="bokeh")) == pytest.approx(expected)
    texts = {t.get_text() for t in hv.render(fig, backend="matplotlib").axes[0].texts}
    assert {f"{v:.2f}" for v in expected.values()} <= texts  # the values are printed too


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs the Debian package)")
def test_report_page_in_headless_chromium_shows_title_tables_and_figures(report_paths, tiny_store):
    paths = report_paths
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--disable-background-networking", "--disable-component-update", "--no-first-run",
                           "--v=0", "--virtual-time-budget=15000", "--dump-dom", paths["html"].as_uri()],
                          capture_output=True, text=True, timeout=180)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    errors = [line for line in console if re.search(r"error|uncaught|exception", line, re.I)]
    assert not errors, "\n".join(errors)
    dom = BeautifulSoup(proc.stdout, "html.parser")
    assert dom.find("h1").get_text(strip=True) == "tiny"
    rows = dom.select("table#summary tbody tr")
    ds = ridgexr.open_dataset(tiny_store)
    assert len(rows) == ds.sizes["schedule"] * ds.sizes["width"]  # one row per cell
    first = [td.get_text(strip=True) for td in rows[0].find_all("td")]
    assert first[:2] == [str(ds.schedule.values[0]), str(ds.width.values[0])]
    heads = [th.get_text(strip=True) for th in dom.select("table#summary thead th")]
    from ridgexr import analysis

    near = float(analysis.near_mode_fraction(ds).near_mode.values.flat[0])  # the paper's count, beside d1/d2
    heads = heads[-len(first):]  # header rows may carry an index row; align with the cells
    assert "near_mode" in heads and "memorized" in heads
    assert float(first[heads.index("near_mode")]) == pytest.approx(near, abs=1e-4)
    assert dom.select_one("table#config") and "n_samples" in dom.select_one("table#config").get_text()
    assert "torch_version" in dom.select_one("table#provenance").get_text()
    figures = {f["id"] for f in dom.find_all("figure")}
    assert {"distance_curves", "phase_diagram", "samples"} <= figures
    caption = dom.select_one("figure#samples figcaption").get_text()
    assert "memorizes least" in caption
    # BokehJS rendered every figure into its placeholder
    assert len(re.findall(r"bk-", proc.stdout)) >= 5


def test_cli_report_and_analyze(tiny_store, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["analyze", str(tiny_store)])
    assert r.exit_code == 0, r.output
    assert "memorized" in r.output and "reach" in r.output and "near mode" in r.output
    r = runner.invoke(app, ["report", str(tiny_store), "--out", str(tmp_path / "rep"), "--n-frames", "2"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rep" / "report.html").is_file()


@pytest.mark.slow
def test_cli_analyze_on_local_cluster(tiny_store):
    r = CliRunner().invoke(app, ["analyze", str(tiny_store), "--scheduler", "local", "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert "on local" in r.output


def test_phase_diagram_with_a_single_width(tiny_store, drawn_matplotlib_image):
    import holoviews as hv

    from ridgexr import analysis, plot

    ds = ridgexr.open_dataset(tiny_store).isel(width=[1])
    plot.ensure_backends()
    memo = analysis.memorization_fraction(ds).memorized.compute()
    width = str(int(ds.width.values[0]))
    expected = {(width, str(s)): float(memo.sel(schedule=s).squeeze()) for s in memo.schedule.values}
    assert drawn_matplotlib_image(hv.render(plot.phase_diagram(ds), backend="matplotlib")) == pytest.approx(expected)
