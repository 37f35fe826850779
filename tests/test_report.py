import re
import shutil
import subprocess

import matplotlib.pyplot as plt
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


def test_report_page_leads_with_what_differs_and_leaves_out_unassessed_quality(report_paths, tiny_store):
    """The page, in order: the title and description, the figures -- the final samples of every cell first, the
    snapshots over time, the spread and the memorization shares, then the ridge distance and reach times -- then the
    summary per cell, the configuration and the provenance; no sample-quality section for a store none of whose
    cells could be assessed (a point set has no held-out reals), though the summary still lists every cell."""
    from ridgexr.report import FIGURE_ORDER, quality_rows

    dom = BeautifulSoup(report_paths["html"].read_text(), "html.parser")
    heads = [h.get_text(strip=True) for h in dom.find_all("h2")]
    assert heads == ["Figures", "Summary per cell (final step)", "Configuration", "Provenance"], heads
    ds = ridgexr.open_dataset(tiny_store)
    assert (quality_rows(ds)["gate"] == "not assessed").all() and dom.find("table", id="quality") is None
    figures = [f["id"] for f in dom.find_all("figure")]
    assert figures[:2] == ["final_samples", "samples"]
    assert figures == sorted(figures, key=lambda n: FIGURE_ORDER.index(n))
    assert figures.index("spread_curves") < figures.index("mode_counts") < figures.index("distance_curves") \
        < figures.index("reach_times")
    assert len(dom.select("table#summary tbody tr")) == len(ds.schedule) * len(ds.width)


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
          legend_inside: f.center.some((r) => kind(r) === "Legend" && r.items.length > 0),  // an empty one draws nothing
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
    # (the exact denoiser, the same model at every width, drawn once: "exact denoiser, every width", last)
    models = [s for s in ds.schedule.values if s != "exact"]
    expected = [f"schedule {s}, width {w}" for s in models for w in widths] + ["exact denoiser, every width"]
    distance = [f["title"][0].split("\n")[0] for f in figures if f["root"] == "distance_curves" and f["title"]]
    assert distance == expected
    spread = next(f["legend_labels"] for f in figures if f["root"] == "spread_curves")
    assert spread == expected
    # the configuration lists the fields of the store's model kind, none of another kind's
    from ridgexr.models import REGISTRY

    kind = ds.ridge.config["model"]["kind"]
    # (a nested block such as ``diagnostics`` is listed as ``diagnostics.n_time`` ...)
    assert {r.split(".", 2)[1] for r in config_rows if r.startswith("model.")} == \
        set(REGISTRY[kind].spec_class().model_fields)
    # the mode-count PNG is large enough for its labels
    width, height = Image.open(report_paths["mode_counts"]).size
    assert width >= 500 and height >= 250, (width, height)


def _final_far(ds, cell):
    """``ds`` with the final states of ``cell`` moved 10 data units off every training point (a share of 0)."""
    mask = ds["step"] == ds["step"][-1]
    for k, v in cell.items():
        mask = mask & (ds[k] == v)
    return ds.assign(trajectory=ds["trajectory"].where(~mask, ds["trajectory"] + 10.0))


def test_mode_count_share_bars_have_intervals_printed_values_and_visible_zeros(tiny_store):
    """The mode-count figure draws a share (titled so), one bar per cell in reading order (the exact denoiser once),
    each with its 95 % Wilson interval and its value printed above it; a cell with no sample near a training point
    is a printed 0.00 and an edged bar above the axis, not a gap.  Counted here by brute force, the interval by
    scipy; labels do not overlap."""
    import holoviews as hv
    from scipy import stats

    from ridgexr import plot

    ds = _final_far(ridgexr.open_dataset(tiny_store), {"schedule": "h2", "width": 8})
    plot.ensure_backends()
    fig = plot.matplotlib_figure(plot.mode_count_bars(ds))
    fig.canvas.draw()
    ax = fig.axes[0]
    assert "share" in ax.get_title() and "count" not in ax.get_title()
    boxes = sorted((b.x0, b.x1) for b in (t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()))
    assert all(right <= left for (_, right), (left, _) in zip(boxes, boxes[1:])), boxes
    train, last = ds["train_data"].values, ds.isel(step=-1)
    expected = []
    for s in ds.schedule.values:
        for w in sorted(ds.width.values.tolist()):
            if s == "exact" and w != min(ds.width.values):
                continue  # one model at every width: one bar
            x = last["trajectory"].sel(schedule=s, width=w).transpose("sample", "dim").values
            near = np.linalg.norm(x[:, None] - float(last["alpha"]) * train[None], axis=-1).min(1) <= 0.5
            ci = stats.binomtest(int(near.sum()), near.size).proportion_ci(0.95, method="wilson")
            expected.append(("exact" if s == "exact" else f"{s} / {w}", near.mean(), ci.low, ci.high))
    assert [t.get_text() for t in ax.get_xticklabels()] == [e[0] for e in expected]
    assert [p.get_height() for p in ax.patches] == pytest.approx([e[1] for e in expected])
    segments = [seg for coll in ax.collections for seg in coll.get_segments() if len(seg) == 2]
    drawn = [y for seg in sorted(segments, key=lambda seg: seg[0][0]) for y in (seg[0][1], seg[1][1])]
    assert drawn == pytest.approx([y for e in expected for y in (e[2], e[3])], abs=1e-9)
    printed = sorted(((t.get_window_extent().x0 + t.get_window_extent().x1) / 2, t.get_text()) for t in ax.texts)
    assert [p[1] for p in printed] == [f"{e[1]:.2f}" for e in expected]
    zero = [e[0] for e in expected].index("h2 / 8")
    assert expected[zero][1] == 0 and ax.get_ylim()[0] < 0  # the zero bar's edge is drawn above the axis line
    bar = ax.patches[zero]
    assert bar.get_edgecolor()[3] > 0 and bar.get_linewidth() > 0
    plt.close(fig)


def test_identical_panels_are_drawn_once_with_a_note_saying_which_and_why(tiny_store):
    """The exact denoiser's cells at every width are one model: its distance curves, reach times and final samples
    are drawn in one panel, named for every width, and the caption says so and why; a store where every cell's
    curves are identical (no model errs in the normal direction) draws one panel, and the caption says why; a store
    whose cells all differ draws every cell and says nothing."""
    import xarray as xr

    from ridgexr import analysis, plot
    from ridgexr.report import identical_curves_note, report_figures

    ds = ridgexr.open_dataset(tiny_store)
    d = ds.ridge_distance.where(~ds.ridge_degenerate).mean("sample").compute()
    models = ds.sel(schedule=[s for s in ds.schedule.values if s != "exact"])
    n_models = models.sizes["schedule"] * models.sizes["width"]
    assert float(abs(d.sel(schedule=models.schedule) - d.sel(schedule="1").isel(width=0)).max()) > 1e-6
    figures = report_figures(ds, n_frames=2)
    layout, caption = figures["distance_curves"]
    assert len(layout) == n_models + 1  # the models' panels and one for the exact denoiser
    titles = [plot.group_title(ds, g) for g in plot.identical_groups(
        plot.ordered_cells(ds), list(plot.drawn_per_cell(ds, "distance").values()))]
    assert titles[-1] == "exact denoiser, every width" and len(titles) == n_models + 1
    assert "exact denoiser, every width (2 cells): the exact denoiser has no width" in caption
    # two points on a line: every model predicts the normal coordinate exactly, so with the same sampler noise the
    # reach times (r = 0.5 at this store's 12 steps) are the same in every cell: one panel, and the caption says why
    reach = analysis.phase_times(ds, r=0.5)["reach_time"].compute()
    run = plot.ordered_cells(ds)
    distinct = {reach.sel(c).values.tobytes() for c in run}
    assert len(figures["reach_times"][0]) == len(distinct)
    if len(distinct) == 1:
        assert f"The {len(run)} panels are identical and drawn as one" in figures["reach_times"][1]
    assert identical_curves_note(models) == ""  # cells that differ: every one drawn, no note
    assert len(plot.distance_curves_plot(models)) == n_models
    same = xr.broadcast(ds.ridge_distance.isel(schedule=0, width=0, drop=True), ds.ridge_distance)[0]
    equal = ds.assign(ridge_distance=same.transpose(*ds.ridge_distance.dims), ridge_degenerate=ds.ridge_degenerate & False,
                      residual_normal=ds.residual_normal * 0.0)
    note = identical_curves_note(equal)
    cells = ds.sizes["schedule"] * ds.sizes["width"]
    assert f"The {cells} panels are identical and drawn as one" in note
    assert "same sampler noise" in note and "normal direction" in note
    one = plot.distance_curves_plot(equal)
    assert len(one) == 1 and plot.group_title(equal, plot.ordered_cells(equal)) == f"every cell ({cells})"
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


#: texts a figure must not show: store tokens and variable names where words belong
RAW_TOKENS = ("data_unit", "loss_unit", "schedule=", "width=", "cell: ")
RAW_NAMES = ("memorized", "near_mode", "share_any")


def _colour_bar_labels(fig):
    return [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"]


@pytest.mark.parametrize("kind", ["points", "points-degenerate", "image"])
def test_every_report_figure_is_readable_with_nothing_overlapping_or_clipped(kind, tiny_store, image_stores,
                                                                           figure_layout_problems):
    """Every figure of the report, as it is saved (plot.matplotlib_figure): no text over another text or over a data
    area, no legend over the data, colour bars beside their image, nothing outside the canvas, texts at least 11 px
    high, legends at most 40 % of the width (conftest.figure_layout_problems, from matplotlib's renderer extents);
    words, not store tokens, in every text and colour bar label.
    The same check fails on holoviews' own layout of degenerate_share (title over the y label) and, at the 72 dpi
    hv.save wrote, on spread_curves (10 px texts).  The image store's ridge frames, and those of the points store's
    model cells (``points-degenerate``), are made degenerate for one sample from the middle step on, so their
    reports have the degenerate-share figure and masked distance curves (whose panel titles then have two lines)."""
    import matplotlib

    from ridgexr import plot

    if kind.startswith("points"):
        ds = ridgexr.open_dataset(tiny_store)
    else:
        ds = ridgexr.open_dataset(image_stores["pixel"])
    if kind != "points":
        late = (ds["step"] >= ds.sizes["step"] // 2) & (ds["sample"] == 0)
        if "schedule" in ds.dims:  # a share that differs between the model cells, none for the exact denoiser
            late = (ds["step"] >= ds.sizes["step"] // 2) & (ds["schedule"] != "exact") & (
                ds["sample"] < 1 + (ds["width"] == ds["width"][-1]) + 2 * (ds["schedule"] == "h2"))
        ds = ds.assign(ridge_degenerate=ds["ridge_degenerate"] | late)
    drawn = _report_figures_drawn(ds, figure_layout_problems)
    expected = {"distance_curves", "spread_curves", "mode_counts"} | (
        {"phase_diagram", "near_mode_diagram", "samples", "final_samples", "reach_times"} if kind.startswith("points")
        else {"sample_gallery", "image_grid_0"}) | ({"degenerate_share"} if kind != "points" else set())
    assert expected <= set(drawn)
    problems = [f"{name}: {p}" for name, (_, found) in drawn.items() for p in found]
    assert not problems, "\n".join(problems)
    if kind == "points-degenerate":  # the masked share is in the panel titles, in two lines
        titles = [ax.get_title() for ax in drawn["distance_curves"][0].axes]
        assert sum("masked" in t for t in titles) == ds.sizes["width"] * (ds.sizes["schedule"] - 1), titles
    for name, (fig, _) in drawn.items():  # words, not tokens
        texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_visible()] + _colour_bar_labels(fig)
        bad = [t for t in texts if any(tok in t for tok in RAW_TOKENS) or t.strip() in RAW_NAMES]
        assert not bad, f"{name}: {bad}"
    # one colour per width (per model where there is no width), one line style per schedule: no two cells alike; the
    # exact denoiser (one model at every width) drawn once, in black, in a style of its own
    styles = plot.cell_styles(ds)
    run = plot.ordered_cells(ds)
    exact = [c for c in run if plot.is_exact_cell(c)]
    models = [c for c in run if not plot.is_exact_cell(c)]
    for name in ("spread_curves", "degenerate_share"):
        if name not in drawn:
            continue
        lines = _line_styles(drawn[name][0].axes[0])
        assert len(set(lines.values())) == len(lines), lines
        for cell in models:
            assert lines[plot.cell_title(cell)][0] == styles[tuple(cell.values())]["color"]
        if "width" in ds.dims and exact:
            assert lines["exact denoiser, every width"][0] == plot.EXACT_COLOUR
            assert not any(plot.cell_title(c) in lines for c in exact)
            assert len(lines) == len(models) + 1
        if "width" in ds.dims:
            by_width = {}
            for cell in models:
                by_width.setdefault(cell["width"], set()).add(lines[plot.cell_title(cell)][0])
            assert all(len(c) == 1 for c in by_width.values()), by_width  # a width keeps its colour
            assert len({next(iter(c)) for c in by_width.values()} | {plot.EXACT_COLOUR}) == len(by_width) + 1
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
        assert _colour_bar_labels(drawn[name][0]) == [f"{name.removesuffix('_diagram').replace('phase', 'memorized').replace('_', '-')} share"]
    for fig, _ in drawn.values():
        matplotlib.pyplot.close(fig)


def test_spread_curves_tell_schedule_1_from_the_exact_denoiser(tiny_store):
    """The spread figure's lines, as drawn: each model cell's curve in its width's colour and its schedule's line
    style, holding that cell's spread; the exact denoiser once, in black, holding its spread, in a line style no
    model cell has -- schedule 1 and the memorizer are told apart in the data and in the legend."""
    from matplotlib.colors import to_hex

    from ridgexr import analysis, plot

    ds = ridgexr.open_dataset(tiny_store)
    fig = plot.matplotlib_figure(plot.spread_curves_plot(ds))
    ax = fig.axes[0]
    spread = analysis.spread_curves(ds)["spread_mean"].compute()
    lines = [ln for ln in ax.get_lines() if len(ln.get_ydata()) == ds.sizes["step"]]
    drawn = {(to_hex(ln.get_color()), str(ln.get_linestyle())): np.asarray(ln.get_ydata()) for ln in lines}
    assert len(drawn) == len(lines)  # no two lines alike
    run = plot.ordered_cells(ds)
    exact = [c for c in run if plot.is_exact_cell(c)]
    models = [c for c in run if not plot.is_exact_cell(c)]
    assert len(lines) == len(models) + 1
    black = [k for k in drawn if k[0] == plot.EXACT_COLOUR]
    assert len(black) == 1
    np.testing.assert_allclose(drawn[black[0]], spread.sel(exact[0]).values)
    styles = plot.cell_styles(ds)
    for cell in models:
        st = styles[tuple(cell.values())]
        key = next(k for k in drawn if k[0] == st["color"] and np.allclose(drawn[k], spread.sel(cell).values))
        assert key[0] != plot.EXACT_COLOUR and key[1] != black[0][1]
    legend = _line_styles(ax)
    schedule_1 = [v for k, v in legend.items() if k.startswith("schedule 1,")]
    assert legend["exact denoiser, every width"] not in schedule_1
    assert {v[1] for v in schedule_1} != {legend["exact denoiser, every width"][1]}
    plt.close(fig)


def test_samples_panels_fit_the_data_and_projections_do_not_hide_samples(tiny_store):
    """The snapshots of one cell: every panel shows the same view, no wider than the data (the training points and the
    middle 99 % of the drawn samples) plus the fixed margin, with that middle 99 % inside and the count of the samples
    outside in its title; the ridge projections are drawn under the samples, with markers a third of their area or
    less, so that they do not hide them."""
    from ridgexr import plot

    ds = ridgexr.open_dataset(tiny_store)
    cell = {"schedule": "h2", "width": 8}
    hm = plot.samples_over_time(ds, **cell, n_frames=4)
    fig = plot.matplotlib_figure(plot.snapshot_grid(hm, cols=2))
    panels = [ax for ax in fig.axes if ax.collections]
    assert len(panels) == len(hm)
    steps = list(hm.keys())
    x = ds["trajectory"].sel(cell).isel(step=steps).transpose("step", "sample", "dim").values
    train = ds["train_data"].values
    lo = np.minimum(np.quantile(x.reshape(-1, 2), 0.005, axis=0), train.min(0))
    hi = np.maximum(np.quantile(x.reshape(-1, 2), 0.995, axis=0), train.max(0))
    margin = max(1.0, 0.3 * float((train.max(0) - train.min(0)).max()))
    views = {(ax.get_xlim(), ax.get_ylim()) for ax in panels}
    assert len(views) == 1
    (x0, x1), (y0, y1) = views.pop()
    for (low, high), a, b in (((x0, x1), lo[0], hi[0]), ((y0, y1), lo[1], hi[1])):
        assert low >= a - margin - 1e-9 and high <= b + margin + 1e-9, (low, high, a, b, margin)
    inside = (x[..., 0] >= x0) & (x[..., 0] <= x1) & (x[..., 1] >= y0) & (x[..., 1] <= y1)
    middle = ((x >= np.quantile(x.reshape(-1, 2), 0.005, axis=0)) & (x <= np.quantile(x.reshape(-1, 2), 0.995, axis=0))).all(-1)
    assert inside[middle].all()  # the middle 99 % of the samples in every view
    for ax, k in zip(panels, range(len(steps))):
        out = int((~inside[k]).sum())
        assert (f"{out} sample" in ax.get_title()) == (out > 0), ax.get_title()
        labels = {c.get_label(): i for i, c in enumerate(ax.collections)}
        prj, smp = ax.collections[labels["ridge projections"]], ax.collections[labels["samples"]]
        assert labels["ridge projections"] < labels["samples"]  # drawn first: under the samples
        assert prj.get_zorder() <= smp.get_zorder()
        assert float(np.max(prj.get_sizes())) <= float(np.min(smp.get_sizes())) / 3
    plt.close(fig)


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


SCRIPT_CATALOG = """
experiments:
  tiny:
    description: "<script>window.__injected = 'description'</script> <img src=x onerror=\\"window.__injected = 'img'\\">"
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 8}
    models:
      - {kind: random_features, name: "<img src=y onerror=\\"window.__injected = 'label'\\">", widths: [8],
         n_frequencies: 3}
      - {kind: exact}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: 8
    d_star: 1
    store: tiny.zarr
"""


@pytest.mark.slow  # a store, a report's figures and Chromium
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs the Debian package)")
def test_a_report_shows_script_bearing_text_as_text(tmp_path):
    """Issue 59, item 9: a catalog description ``<script>...</script> <img src=x onerror=...>`` was inserted raw
    into report.html (jinja2 without autoescape): a report built from someone else's store ran their script.  The
    description, the title and a model label all carry markup here; the page rendered in Chromium has no element
    they injected, nothing they ran, and shows each as text."""
    playwright = pytest.importorskip("playwright.sync_api")
    cat = tmp_path / "c.yaml"
    cat.write_text(SCRIPT_CATALOG)
    exp = experiment_from_file(cat)
    ds = ridgexr.open_dataset(run_experiment(exp, data_dir=tmp_path / "data").store)
    label = exp.blocks[0].label
    title = "<script>window.__injected = 'title'</script>"
    page_path = make_report(ds, tmp_path / "report", title=title, n_frames=2)["html"]
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(page_path.as_uri())
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=60000)
        page.wait_for_timeout(1000)
        got = page.evaluate("""() => ({
            injected: window.__injected === undefined ? null : window.__injected,
            images: Array.from(document.querySelectorAll('img'), (i) => i.getAttribute('src')),
            // code the page runs (bokeh's figure data are a script of type application/json: data, escaped)
            scripts: Array.from(document.querySelectorAll('script'))
                .filter((s) => s.type !== 'application/json' && s.textContent.includes('__injected')).length,
            title: document.title,
            h1: document.querySelector('h1').textContent,
            description: document.querySelector('p.description').textContent,
            summary: document.querySelector('table#summary').textContent,
        })""")
        browser.close()
    assert got["injected"] is None and not dialogs, got
    assert got["images"] == [] and got["scripts"] == 0, got
    assert got["title"] == title and got["h1"] == title
    assert got["description"] == exp.description
    assert label in got["summary"]  # the label is in the table, as text
