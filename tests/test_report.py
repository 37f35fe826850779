import re
import shutil
import subprocess

import pytest
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
    html = paths["html"].read_text()
    assert "<h1>tiny</h1>" in html and "memorized" in html
    assert "cdn.bokeh.org" not in html  # BokehJS is inlined: the page works offline


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs the Debian package)")
def test_report_html_renders_in_headless_chromium_without_js_errors(report_paths):
    paths = report_paths
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--virtual-time-budget=15000", "--dump-dom", paths["html"].as_uri()],
                          capture_output=True, text=True, timeout=180)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    errors = [line for line in console if re.search(r"error|uncaught|exception", line, re.I)]
    assert not errors, "\n".join(errors)
    assert any("bokeh" in line for line in console)  # BokehJS ran
    roots = re.findall(r'data-root-id="([^"]+)"', proc.stdout)
    assert len(roots) >= 1  # the document embedded its plots
    assert proc.stdout.count("bk-") >= 5  # bokeh rendered its DOM


def test_cli_report_and_analyze(tiny_store, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["analyze", str(tiny_store)])
    assert r.exit_code == 0, r.output
    assert "memorized" in r.output and "reach" in r.output
    r = runner.invoke(app, ["report", str(tiny_store), "--out", str(tmp_path / "rep"), "--frames", "2"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rep" / "report.html").is_file()


@pytest.mark.slow
def test_cli_analyze_on_local_cluster(tiny_store):
    r = CliRunner().invoke(app, ["analyze", str(tiny_store), "--scheduler", "local", "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert "on local" in r.output
