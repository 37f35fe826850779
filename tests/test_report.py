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
    assert "near mode [95 % CI]" in heads and "memorized [95 % CI]" in heads
    value, interval = first[heads.index("near mode [95 % CI]")].split(" ", 1)
    assert float(value) == pytest.approx(near, abs=5e-3)
    low, high = (float(v) for v in interval.strip("[]").split(","))
    assert low <= float(value) <= high
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


# per bokeh figure of the page: its title and y-axis labels with their rendered text widths (canvas
# measureText in the figure's fonts), the frame's size, and where its legends and colour bars sit
_FIGURES = """() => {
  const ctx = document.createElement("canvas").getContext("2d");
  const width = (text, size, style, font) => { ctx.font = `${style} ${size} ${font}`; return ctx.measureText(text).width; };
  const kind = (m) => m.constructor.__name__;
  const out = [];
  for (const doc of window.Bokeh.documents) {
    for (const root of doc.roots()) {
      const figures = [];
      const walk = (m) => {
        if (m == null || typeof m !== "object") return;
        if (Array.isArray(m)) { m.forEach(walk); return; }
        if (kind(m) === "Figure" || kind(m) === "Plot") { figures.push(m); return; }
        if (m.children !== undefined) walk(m.children);
      };
      walk(root);
      for (const f of figures) {
        const t = f.title;
        out.push({
          root: root.name,
          title: t && t.text ? [t.text, width(t.text, t.text_font_size, t.text_font_style, t.text_font)] : null,
          ylabels: f.left.filter((a) => a.axis_label).map((a) => [a.axis_label,
            width(a.axis_label, a.axis_label_text_font_size, a.axis_label_text_font_style, a.axis_label_text_font)]),
          inner: [f.inner_width, f.inner_height],
          legend_inside: f.center.some((r) => kind(r) === "Legend"),
          legend_labels: [].concat(...[...f.right, ...f.center].filter((r) => kind(r) === "Legend").map(
            (l) => l.items.map((i) => i.label && (i.label.value ?? i.label)))),
          colorbar_inside: f.center.some((r) => kind(r) === "ColorBar"),
          colorbars: [...f.right, ...f.center].filter((r) => kind(r) === "ColorBar").length,
        });
      }
    }
  }
  return out;
}"""


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs the Debian package)")
def test_report_layout_in_chromium_fits_the_page_and_orders_cells_numerically(report_paths, tiny_store):
    from PIL import Image

    playwright = pytest.importorskip("playwright.sync_api")
    ds = ridgexr.open_dataset(tiny_store)
    widths = sorted(int(w) for w in ds.width.values)
    assert sorted(map(str, widths)) != [str(w) for w in widths]  # the store's widths (8, 16) sort differently as text
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(paths_uri := report_paths["html"].as_uri())
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0 && "
                               "Bokeh.documents[0].roots().length > 0", timeout=60000)
        # layout: the frames' inner sizes are set after the first paint; wait until they are set and the same at
        # two polls in a row (the page's own state, not a clock)
        page.wait_for_function(f"""() => {{
          const sizes = JSON.stringify(({_FIGURES})().map((f) => f.inner));
          const same = window.__ridgexr_sizes === sizes;
          window.__ridgexr_sizes = sizes;
          return same && ({_FIGURES})().every((f) => f.inner[0] > 0 && f.inner[1] > 0);
        }}""", polling=100, timeout=60000)
        table = page.evaluate("() => document.querySelector('table#summary').getBoundingClientRect().right")
        viewport = page.evaluate("() => document.documentElement.clientWidth")
        figures = page.evaluate(_FIGURES)
        config_rows = page.evaluate("() => Array.from(document.querySelectorAll('table#config th'), (th) => th.textContent)")
        browser.close()
    assert paths_uri.endswith("report.html")
    assert table <= viewport, f"the summary table ({table:.0f} px) is wider than the page ({viewport} px)"
    assert {f["root"] for f in figures} >= {"distance_curves", "reach_times", "mode_counts", "phase_diagram",
                                            "samples"}
    for f in figures:
        where = f"{f['root']}: {f['title'] and f['title'][0]!r}"
        assert f["inner"][0] > 50 and f["inner"][1] > 50, where  # laid out
        if f["title"]:
            assert f["title"][1] <= f["inner"][0], f"{where}: the title is {f['title'][1]:.0f} px over a " \
                                                   f"{f['inner'][0]} px frame"
        for label, w in f["ylabels"]:
            assert w <= f["inner"][1], f"{where}: y label {label!r} is {w:.0f} px along a {f['inner'][1]} px frame"
        assert not f["legend_inside"], f"{where}: a legend is drawn over the data"
        assert not f["colorbar_inside"], f"{where}: a colour bar is drawn over the data"
    assert sum(f["colorbars"] for f in figures if f["root"] == "phase_diagram") == 1
    # panels and legend entries in numeric order of width (and store order of schedule)
    reach = [f["title"][0] for f in figures if f["root"] == "reach_times" and f["title"]]
    expected = [f"cell: schedule={s} width={w}" for s in ds.schedule.values for w in widths]
    assert reach == expected
    spread = next(f["legend_labels"] for f in figures if f["root"] == "spread_curves")
    assert spread == [f"schedule={s} width={w}" for s in ds.schedule.values for w in widths]
    # the configuration lists the fields of the store's model kind, none of another kind's
    from ridgexr.models import REGISTRY

    kind = ds.ridge.config["model"]["kind"]
    # (a nested block such as ``diagnostics`` is listed as ``diagnostics.n_time`` ...)
    assert {r.split(".", 2)[1] for r in config_rows if r.startswith("model.")} == \
        set(REGISTRY[kind].spec_class().model_fields)
    # the mode-count PNG is large enough for its labels
    width, height = Image.open(report_paths["mode_counts"]).size
    assert width >= 500 and height >= 250, (width, height)


def test_mode_count_bars_labels_do_not_overlap(tiny_store):
    import holoviews as hv

    from ridgexr import analysis, plot

    ds = ridgexr.open_dataset(tiny_store)
    plot.ensure_backends()
    fig = hv.render(plot.mode_count_bars(ds), backend="matplotlib")
    fig.canvas.draw()
    ax = fig.axes[0]
    boxes = sorted((b.x0, b.x1) for b in (t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()))
    assert len(boxes) == ds.sizes["schedule"] * ds.sizes["width"]
    assert all(right <= left for (_, right), (left, _) in zip(boxes, boxes[1:])), boxes
    # the bars in reading order with their values
    share = analysis.mode_counts(ds).share_any.compute()
    drawn = [(t.get_text(), p.get_height()) for t, p in zip(ax.get_xticklabels(), ax.patches)]
    expected = [(f"{s} / {w}", float(share.sel(schedule=s, width=w))) for s in ds.schedule.values
                for w in sorted(ds.width.values.tolist())]
    assert [d[0] for d in drawn] == [e[0] for e in expected]
    assert [d[1] for d in drawn] == pytest.approx([e[1] for e in expected])


def test_distance_caption_explains_identical_panels_only_when_they_are(tiny_store):
    import xarray as xr

    from ridgexr.report import identical_curves_note

    ds = ridgexr.open_dataset(tiny_store)
    d = ds.ridge_distance.where(~ds.ridge_degenerate).mean("sample").compute()
    assert float(abs(d - d.isel(schedule=0, width=0)).max()) > 1e-6  # this store's cells differ
    assert identical_curves_note(ds) == ""
    same = xr.broadcast(ds.ridge_distance.isel(schedule=0, width=0, drop=True), ds.ridge_distance)[0]
    equal = ds.assign(ridge_distance=same.transpose(*ds.ridge_distance.dims), ridge_degenerate=ds.ridge_degenerate & False,
                      residual_normal=ds.residual_normal * 0.0)
    note = identical_curves_note(equal)
    assert f"The {ds.sizes['schedule'] * ds.sizes['width']} panels are identical" in note
    assert "same sampler noise" in note and "normal direction" in note
    noisy = equal.assign(residual_normal=equal.residual_normal + 0.1)
    assert "normal direction" not in identical_curves_note(noisy)


def _report_figures_drawn(ds, problems_of):
    """{name: (matplotlib figure as the report saves it, the problems figure_layout_problems finds)} of every figure
    of ``ds``'s report (those holoviews skips for want of data left out)."""
    from holoviews.core.options import SkipRendering

    from ridgexr import plot
    from ridgexr.report import report_figures

    out = {}
    for name, (obj, _) in report_figures(ds, n_frames=3).items():
        try:
            fig = plot.matplotlib_figure(obj)
        except SkipRendering:
            continue
        out[name] = (fig, problems_of(fig))
    return out


def _line_styles(ax):
    """{legend entry: (colour, line style)} of an axes' legend (holoviews names each curve's cell there)."""
    from matplotlib.colors import to_hex

    legend = ax.get_legend() or ax.figure.legends[0]
    return {t.get_text(): (to_hex(h.get_color()), str(h.get_linestyle())) for t, h in
            zip(legend.get_texts(), legend.legend_handles)}


@pytest.mark.parametrize("kind", ["points", "image"])
def test_every_report_figure_is_readable_with_nothing_overlapping_or_clipped(kind, tiny_store, image_stores,
                                                                           figure_layout_problems):
    """Every figure of the report, as it is saved (plot.matplotlib_figure): no text over another text or over a data
    area, no legend over the data, colour bars beside their image, nothing outside the canvas, texts at least 11 px
    high, legends at most 40 % of the width (conftest.figure_layout_problems, from matplotlib's renderer extents).
    The same check fails on holoviews' own layout of degenerate_share (title over the y label) and, at the 72 dpi
    hv.save wrote, on spread_curves (10 px texts).  The image store's ridge frames are made degenerate for one sample
    from the middle step on, so its report has the degenerate-share figure and masked distance curves."""
    import matplotlib

    from ridgexr import plot

    if kind == "points":
        ds = ridgexr.open_dataset(tiny_store)
    else:
        ds = ridgexr.open_dataset(image_stores["pixel"])
        late = (ds["step"] >= ds.sizes["step"] // 2) & (ds["sample"] == 0)
        ds = ds.assign(ridge_degenerate=ds["ridge_degenerate"] | late)
    drawn = _report_figures_drawn(ds, figure_layout_problems)
    expected = {"distance_curves", "spread_curves", "mode_counts"} | (
        {"phase_diagram", "near_mode_diagram", "samples", "reach_times"} if kind == "points" else
        {"sample_gallery", "image_grid_0", "degenerate_share"})
    assert expected <= set(drawn)
    problems = [f"{name}: {p}" for name, (_, found) in drawn.items() for p in found]
    assert not problems, "\n".join(problems)
    # one colour per width (per model where there is no width), one line style per schedule: no two cells alike
    styles = plot.cell_styles(ds)
    for name in ("spread_curves", "degenerate_share"):
        if name not in drawn:
            continue
        lines = _line_styles(drawn[name][0].axes[0])
        assert len(lines) == len(plot.ordered_cells(ds)) == len(set(lines.values())), lines
        for cell in plot.ordered_cells(ds):
            got = lines[plot.cell_title(cell)]
            assert got[0] == styles[tuple(cell.values())]["color"]
        if "width" in ds.dims:
            by_width = {}
            for cell in plot.ordered_cells(ds):
                by_width.setdefault(cell["width"], set()).add(lines[plot.cell_title(cell)][0])
            assert all(len(c) == 1 for c in by_width.values()), by_width  # a width keeps its colour
            assert len({next(iter(c)) for c in by_width.values()}) == len(by_width)  # widths differ
    if "degenerate_share" in drawn:  # a share on a linear axis from 0: steps without degenerate frames are drawn at 0
        ax = drawn["degenerate_share"][0].axes[0]
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] <= 0 <= ax.get_ylim()[1]
        assert any((ln.get_ydata() == 0).any() for ln in ax.get_lines())
    for name in ("phase_diagram", "near_mode_diagram"):  # each value printed in the colour that contrasts more
        if name not in drawn:
            continue
        ax = drawn[name][0].axes[0]
        cmap = matplotlib.colormaps["viridis"]
        for text in ax.texts:
            bg = cmap(float(text.get_text()))
            assert plot.contrast_ratio(text.get_color(), bg) >= 4.5, (text.get_text(), text.get_color())
    for fig, _ in drawn.values():
        matplotlib.pyplot.close(fig)


def test_report_writes_an_svg_beside_each_png_at_the_stated_resolution(report_paths):
    from PIL import Image

    from ridgexr import plot

    for name in ("distance_curves", "spread_curves", "phase_diagram", "samples"):
        png, svg = report_paths[name], report_paths[f"{name}_svg"]
        assert svg == png.with_suffix(".svg") and svg.read_text().lstrip().startswith(("<?xml", "<svg"))
        dpi = Image.open(png).info["dpi"]
        assert dpi[0] == pytest.approx(plot.DPI, abs=0.5)
        assert Image.open(png).size[0] >= 600, name  # at least ~4 inches at plot.DPI


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs the Debian package)")
def test_report_page_offline_makes_no_request_that_fails(report_paths):
    """report.html is self-contained: opened with the network off, every request it makes is answered (no file it
    names is missing: panel's es-module-shims, which bokeh listed because panel's models are registered in the
    process, was one) and none leaves the machine."""
    playwright = pytest.importorskip("playwright.sync_api")
    failed, external = [], []
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(offline=True)
        page = context.new_page()
        page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
        page.on("request", lambda r: external.append(r.url) if not r.url.startswith(("file:", "data:", "blob:"))
                else None)
        page.goto(report_paths["html"].as_uri(), wait_until="load")
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=60000)
        page.wait_for_load_state("networkidle")  # the requests the documents' rendering makes are answered or failed
        browser.close()
    assert not failed, failed
    assert not external, external
