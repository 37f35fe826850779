"""The explorer (ridgexr.explore): its slices against the store, and ``ridgexr explore`` driven in Chromium."""

import contextlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import ridgexr
from ridgexr.cli import app
from ridgexr.explore import PROJECTIONS, SAMPLES, STEP_LABEL, TRAINING, ExplorerData, samples_overlay

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory, catalog_text, run_entry):
    return run_entry(catalog_text(steps=12, samples=16), tmp_path_factory.mktemp("explore"))[1].store


def test_explorer_slices_are_the_stores_values(tiny_store):
    ds = ridgexr.open_dataset(tiny_store)
    data = ExplorerData(ds, max_samples=5)
    cell = {"schedule": "h2", "width": 16}
    frame = data.frame(cell, 7)
    raw = ds.sel(cell).isel(step=7, sample=slice(0, 5))
    np.testing.assert_array_equal(frame[SAMPLES], raw["trajectory"].values)
    np.testing.assert_array_equal(frame[PROJECTIONS], raw["ridge_projection"].values)
    np.testing.assert_allclose(frame[TRAINING], ds["train_data"].values * float(raw["alpha"]))
    mean, low, high = data.curves(cell)
    d = ds["ridge_distance"].sel(cell).values  # (sample, step)
    ok = ~ds["ridge_degenerate"].sel(cell).values
    d = np.where(ok, d, np.nan)
    np.testing.assert_allclose(mean, np.nanmean(d, axis=0))
    np.testing.assert_allclose(low, np.nanquantile(d, 0.1, axis=0))
    np.testing.assert_allclose(high, np.nanquantile(d, 0.9, axis=0))


def test_accessor_explore_has_one_widget_per_cell_dim_and_a_step_slider(tiny_store):
    import panel as pn

    ds = ridgexr.open_dataset(tiny_store)
    view = ds.ridge.explore(max_samples=4)
    widgets = {w.label: w for w in view.select(pn.widgets.Widget)}
    assert list(widgets["schedule"].options.values()) == ds["schedule"].values.tolist()
    assert list(widgets["width"].options.values()) == ds["width"].values.tolist()
    slider = widgets[STEP_LABEL]  # an integer step slider: the plots' titles say its t
    assert isinstance(slider, pn.widgets.IntSlider) and (slider.start, slider.end, slider.step) == \
        (0, ds.sizes["step"] - 1, 1)
    assert not view.select(pn.widgets.DiscreteSlider)
    assert len(view.select(pn.pane.HoloViews)) == 2


def test_explorer_of_high_dimensional_data_draws_the_first_two_coordinates(tiny_store):
    import holoviews as hv
    import xarray as xr

    ds = ridgexr.open_dataset(tiny_store)
    points = {v: xr.concat([ds[v], 2 * ds[v]], "dim").assign_coords(dim=np.arange(4))
              for v in ("trajectory", "ridge_projection", "train_data")}
    ds3 = ds[["ridge_distance", "ridge_degenerate", "diverged"]].assign(points)  # d = 4
    data = ExplorerData(ds3)
    assert data.d == 4
    frame = data.frame({"schedule": "1", "width": 8}, 3)
    assert frame[SAMPLES].shape == (16, 2)
    np.testing.assert_array_equal(frame[SAMPLES], ds["trajectory"].sel(schedule="1", width=8).isel(step=3).values)

    title = hv.Store.lookup_options("bokeh", samples_overlay(data, {"schedule": "1", "width": 8}, 3, True),
                                    "plot").kwargs["title"]
    assert "first 2 of 4 coordinates" in title


def test_cli_explore_refuses_a_missing_store_in_one_line(tmp_path):
    r = CliRunner().invoke(app, ["explore", str(tmp_path / "none.zarr"), "--no-show", "--data-dir",
                                 str(tmp_path)])
    assert r.exit_code == 2
    assert len(r.output.strip().splitlines()) == 1, r.output


# what BokehJS holds: {legend label: {column: values}} of the glyphs and the t marker (Span) locations
_PLOTTED = """() => {
  const doc = window.Bokeh && window.Bokeh.documents[0];
  if (!doc) return null;
  const out = {points: {}, spans: []};
  for (const m of doc.all_models) {
    const kind = m.constructor.__name__;
    if (kind === "Legend") {
      for (const item of m.items) {
        const label = item.label && (item.label.value ?? item.label);
        const data = item.renderers[0].data_source.data;
        const get = (k) => (data instanceof Map ? data.get(k) : data[k]);
        if (get("x0") !== undefined) out.points[label] = {x0: Array.from(get("x0")), x1: Array.from(get("x1"))};
      }
    } else if (kind === "Span") {
      out.spans.push(m.location);
    }
  }
  return out;
}"""


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _wait_for_port(port, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            socket.create_connection(("localhost", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"ridgexr explore did not listen on {port} within {timeout} s")


def _plotted_when(page, t, timeout=60):
    """The plotted data once the t marker stands at ``t`` (the page updates asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = page.evaluate(_PLOTTED)
        if got and got["spans"] and np.isclose(got["spans"][-1], t) and SAMPLES in got["points"]:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"the t marker never reached t = {t}: {got and got['spans']}")


def _assert_points(got, ds, cell, step):
    raw = ds.sel(cell).isel(step=step)
    for label, values in ((SAMPLES, raw["trajectory"].values), (PROJECTIONS, raw["ridge_projection"].values),
                          (TRAINING, ds["train_data"].values * float(raw["alpha"]))):
        drawn = np.column_stack([got["points"][label]["x0"], got["points"][label]["x1"]])
        np.testing.assert_allclose(drawn, values, rtol=1e-12, err_msg=f"{label} at {cell}, step {step}")


@contextlib.contextmanager
def _explorer_page(store):
    """A ``ridgexr explore`` server of ``store`` in a subprocess and a Chromium page: yields (page, the server's
    URL), then closes the browser and stops the server with SIGINT (killed after 30 s)."""
    playwright = pytest.importorskip("playwright.sync_api")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ridgexr.cli", "explore", str(store), "--port", str(port),
                             "--no-show"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_port(port, proc)
        with playwright.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1300, "height": 800})
            try:
                yield page, f"http://localhost:{port}/"
            finally:
                browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow  # 34 s at load 13 on 2 cores (a server subprocess, Chromium, five updates)
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs the Debian package)")
def test_cli_explore_in_chromium_follows_the_t_slider_and_the_cell_widgets(tiny_store):
    ds = ridgexr.open_dataset(tiny_store)
    with _explorer_page(tiny_store) as (page, url):
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        t = ds["t"].values
        # the first cell at the first step (t = T)
        _assert_points(_plotted_when(page, t[0]), ds, {"schedule": "1", "width": 8}, 0)
        # the t slider by keyboard: End moves it to the last step (t = t_min)
        handle = page.locator(".noUi-handle").first
        handle.focus()
        handle.press("End")
        _assert_points(_plotted_when(page, t[-1]), ds, {"schedule": "1", "width": 8}, ds.sizes["step"] - 1)
        handle.press("ArrowLeft")
        _assert_points(_plotted_when(page, t[-2]), ds, {"schedule": "1", "width": 8}, ds.sizes["step"] - 2)
        # a cell widget: width 8 -> 16 keeps t and swaps the cell's samples
        before = page.evaluate(_PLOTTED)["points"][SAMPLES]
        page.locator("select").nth(1).select_option(label="16")
        deadline = time.monotonic() + 60
        while page.evaluate(_PLOTTED)["points"][SAMPLES] == before and time.monotonic() < deadline:
            time.sleep(0.2)
        _assert_points(_plotted_when(page, t[-2]), ds, {"schedule": "1", "width": 16}, ds.sizes["step"] - 2)
        page.locator("select").nth(0).select_option(label="exact")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                _assert_points(page.evaluate(_PLOTTED), ds, {"schedule": "exact", "width": 16}, ds.sizes["step"] - 2)
                break
            except AssertionError:
                time.sleep(0.2)
        _assert_points(page.evaluate(_PLOTTED), ds, {"schedule": "exact", "width": 16}, ds.sizes["step"] - 2)
    assert not errors, errors


# the step the slider shows (its own title, in the page's DOM) and the steps the two plots say they drew
_SHOWN = """() => {
  const doc = window.Bokeh && window.Bokeh.documents[0];
  if (!doc) return null;
  const titles = [];
  let slider = null;
  for (const m of doc.all_models) {
    const kind = m.constructor.__name__;
    if (kind === "Title" && m.text) titles.push(m.text);
    if (kind === "Slider") slider = m.value;
  }
  return {titles, model: slider};
}"""


def _shown(page):
    got = page.evaluate(_SHOWN)
    label = page.locator(".bk-slider-value").first.text_content()  # what a person reads beside the slider
    steps = [int(m) for t in got["titles"] for m in re.findall(r"\(step (\d+)\)", t)]
    return int(label.strip()), got["model"], steps, got["titles"]


@pytest.mark.slow  # a server subprocess and Chromium
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs the Debian package)")
def test_explorer_step_label_agrees_with_the_plots_after_fast_key_presses_and_a_drag(tiny_store):
    """Ten fast PageUp/PageDown/arrow presses, then a drag of the handle: once the page is quiet the step the
    slider shows is the step both plots name in their titles, and their t is the store's t of that step (panel's
    DiscreteSlider once read t: 1.759 beside a plot of t = 0.79, issue 42)."""
    ds = ridgexr.open_dataset(tiny_store)
    t = ds["t"].values
    with _explorer_page(tiny_store) as (page, url):
        page.goto(url)
        _plotted_when(page, t[0])
        handle = page.locator(".noUi-handle").first
        handle.focus()
        for key in ["PageUp"] * 2 + ["ArrowRight"] * 3 + ["PageDown", "ArrowLeft", "PageUp", "ArrowRight",
                                                          "ArrowLeft"]:
            page.keyboard.press(key, delay=0)  # ten presses without waiting for the server
        box = page.locator(".noUi-base").first.bounding_box()
        start = handle.bounding_box()
        page.mouse.move(start["x"] + start["width"] / 2, start["y"] + start["height"] / 2)
        page.mouse.down()
        for frac in (0.9, 0.2, 0.6, 0.35):  # a drag back and forth, then let go
            page.mouse.move(box["x"] + frac * box["width"], box["y"] + box["height"] / 2, steps=4)
        page.mouse.up()
        deadline, agreed, seen = time.monotonic() + 60, 0, None
        while time.monotonic() < deadline and agreed < 3:  # agreement three polls in a row: the page is quiet
            seen = _shown(page)
            label, model, steps, _ = seen
            agreed = agreed + 1 if label == model and len(steps) == 2 and set(steps) == {label} else 0
            time.sleep(0.5)
    label, model, steps, titles = seen
    assert agreed >= 3, f"the slider shows step {label} (model {model}); the plots' titles: {titles}"
    assert 0 < label < ds.sizes["step"] - 1  # the drag left it inside, away from where the keys started
    for title in titles:
        if f"(step {label})" in title:
            assert re.search(r"t = ([-+.\deE]+) \(step", title)
            assert float(re.search(r"t = ([-+.\deE]+) \(step", title).group(1)) == pytest.approx(t[label], rel=1e-3)


def _get(port, host):
    """(status, body) of GET / on 127.0.0.1:port with the ``Host`` header ``host``."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/", headers={"Host": host})
        res = conn.getresponse()
        return res.status, res.read()
    finally:
        conn.close()


def _stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_cli_explore_listens_on_this_machine_only_and_refuses_a_foreign_host(tiny_store):
    """Issue 59, item 8: the explorer printed http://localhost:PORT/ but listened on 0.0.0.0 and [::] and answered
    any Host header (HTTP 200 for ``Host: 10.1.2.3:PORT``).  Its listening sockets are read from the process
    (psutil), and a request naming another host is refused."""
    import psutil

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ridgexr.cli", "explore", str(tiny_store), "--port", str(port),
                             "--no-show"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_port(port, proc)
        listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(proc.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN}
        assert listening == {("127.0.0.1", port)}, listening
        status, body = _get(port, f"10.1.2.3:{port}")
        assert status == 403 and b"answers requests for 127.0.0.1, localhost only" in body
        assert _get(port, f"127.0.0.1:{port}")[0] == 200 and _get(port, f"localhost:{port}")[0] == 200
    finally:
        _stop(proc)
    assert f"http://127.0.0.1:{port}/" in proc.stdout.read()


def test_cli_explore_on_another_address_says_in_one_line_that_the_store_is_reachable(tiny_store):
    """Opting in: ``--address 0.0.0.0`` listens on every interface, with a one-line warning."""
    import psutil

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ridgexr.cli", "explore", str(tiny_store), "--port", str(port),
                             "--no-show", "--address", "0.0.0.0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        _wait_for_port(port, proc)
        listening = {c.laddr.ip for c in psutil.Process(proc.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        assert listening == {"0.0.0.0"}, listening
    finally:
        _stop(proc)
    out = proc.stdout.read()
    warned = [ln for ln in out.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and "whoever can reach this machine there can read the store" in warned[0], out
