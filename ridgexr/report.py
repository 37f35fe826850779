"""``ridgexr report``: PNG figures (matplotlib backend) and one self-contained HTML page (bokeh).

The page is a bokeh document written with :func:`bokeh.embed.file_html` through a Jinja
template: the title, the configuration, the provenance and the per-cell summary table are
real HTML elements of the page (not text spliced into BokehJS), and the figures are bokeh
models rendered from the same holoviews objects as the PNGs.  BokehJS is inlined, so the
page opens offline.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import holoviews as hv
from holoviews.core.options import SkipRendering
import numpy as np
import xarray as xr
from jinja2 import Template

from . import analysis, plot
from .store import CELL_DIMS, cells, json_attr

__all__ = ["make_report", "snapshot_cell"]

PAGE = Template("""{% from macros import embed %}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
{{ bokeh_css | indent(4) }}
{{ bokeh_js | indent(4) }}
<style>
body { font-family: sans-serif; margin: 1.5em; }
table.ridgexr { border-collapse: collapse; font-size: 0.85em; margin-bottom: 1.5em; }
table.ridgexr td, table.ridgexr th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
figcaption { color: #444; margin: 0.3em 0 1.5em 0; }
</style>
</head>
<body>
<h1>{{ report_title }}</h1>
<p class="description">{{ description }}</p>
<h2>Summary per cell (final step)</h2>
{{ summary_table }}
<h2>Figures</h2>
{% for fig in figures %}
<figure id="{{ fig.name }}">
{{ embed(roots[fig.name]) }}
<figcaption>{{ fig.caption }}</figcaption>
</figure>
{% endfor %}
<h2>Configuration</h2>
{{ config_table }}
<h2>Provenance</h2>
{{ provenance_table }}
{{ plot_script | indent(4) }}
</body>
</html>
""")


def phase_axes(ds) -> tuple[str, str]:
    """(x, y) cell dims of the report's phase diagrams: model against schedule (or width) when the store
    has a model dimension, else tau or width against schedule."""
    present = [d for d in ("model", "schedule", "tau", "width", "epoch") if d in ds.dims]
    if "model" in ds.dims:
        return next((d for d in ("schedule", "width", "epoch", "n_train") if d in ds.dims), "model"), "model"
    x = "tau" if "tau" in ds.dims else "width"
    return x, "schedule" if "schedule" in ds.dims else present[0]


def _kv_table(d: dict, prefix: str = "") -> list[tuple[str, str]]:
    rows = []
    for k, v in d.items():
        if isinstance(v, dict):
            rows += _kv_table(v, f"{prefix}{k}.")
        else:
            rows.append((f"{prefix}{k}", str(v)))
    return rows


def _html_table(rows: list[tuple[str, str]], css_id: str) -> str:
    import html

    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="ridgexr" id="{css_id}"><tbody>{body}</tbody></table>'


def snapshot_cell(ds: xr.Dataset) -> tuple[dict, float]:
    """The cell whose final samples memorize least (lowest d1/d2 share; ties: the first model cell).

    Returns its labels and its memorized share.
    """
    memo = analysis.memorization_fraction(ds)["memorized"].compute()
    best, share = None, np.inf
    for cell in cells(ds):
        value = float(memo.sel(cell))
        if cell.get("schedule") != "exact" and value < share:
            best, share = cell, value
    if best is None:
        best = cells(ds)[0]
        share = float(memo.sel(best))
    return best, share


@contextlib.contextmanager
def _quiet():
    """Silence third-party progress output and chatty loggers while rendering."""
    with contextlib.redirect_stdout(io.StringIO()):
        level = logging.getLogger("bokeh").level
        logging.getLogger("bokeh").setLevel(logging.ERROR)
        try:
            yield
        finally:
            logging.getLogger("bokeh").setLevel(level)


def _style(fig):
    """Sizes and options per backend (holoviews stores options per backend)."""
    fig = fig.opts(hv.opts.Curve(logx=True, logy=True, backend="bokeh", width=260, height=200),
                   hv.opts.Curve(logx=True, logy=True, backend="matplotlib"),
                   hv.opts.Area(logx=True, logy=True, backend="bokeh", width=260, height=200),
                   hv.opts.Area(logx=True, logy=True, backend="matplotlib"),
                   hv.opts.Histogram(width=260, height=200, backend="bokeh"),
                   hv.opts.Bars(xrotation=60, width=700, height=350, backend="bokeh"),
                   hv.opts.Bars(xrotation=60, fig_inches=(8, 4), backend="matplotlib"),
                   hv.opts.Image(width=520, height=320, tools=["hover"], backend="bokeh"),
                   hv.opts.Image(fig_inches=(6, 4), backend="matplotlib"),
                   hv.opts.NdOverlay(legend_position="right", width=800, height=380, backend="bokeh"),
                   hv.opts.NdOverlay(legend_position="right", fig_inches=(9, 4), backend="matplotlib"),
                   hv.opts.Overlay(width=330, height=300, backend="bokeh"))
    return fig


def make_report(ds: xr.Dataset, out_dir: str | Path, *, title: str = "ridgexr report", r: float = 0.5,
                n_frames: int = 6) -> dict:
    """Write PNG figures and ``report.html`` for a store's Dataset; returns {name: path}.

    Figures: ridge distance per cell (faceted), tangential spread, reach times, mode counts,
    the memorization phase diagram, and for 2-D data ``n_frames`` snapshots over time of
    the cell that memorizes least (named in the caption).
    """
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    plot.ensure_backends()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    memo_cell, memo_share = snapshot_cell(ds) if ds.sizes.get("train", 0) >= 2 else (cells(ds)[0], np.nan)
    figures = {
        "distance_curves": (plot.distance_curves_plot(ds), "Mean distance of the samples to the ridge R_t "
                            "against diffusion time (log-log), one panel per cell; the band spans the 10-90 % "
                            "quantiles over samples."),
        **({"degenerate_share": (plot.degenerate_share_plot(ds), "Share of the observed states whose ridge frame "
                                 "is numerically undetermined, against t; they are masked (not averaged) in the "
                                 "distance curves above and every summary.")}
           if "ridge_degenerate" in ds and bool(ds["ridge_degenerate"].any()) else {}),
        "spread_curves": (plot.spread_curves_plot(ds), "Distance of the ridge projections to the nearest scaled "
                          "training point alpha_t x_i: how far samples slide along the ridge."),
        "reach_times": (plot.phase_time_hist(ds, which="reach_time", r=r), f"Time at which each trajectory enters "
                        f"and stays in the tube of radius {r} around the ridge."),
        "mode_counts": (plot.mode_count_bars(ds, r=r), f"Share of final samples within {r} of a training point."),
    }
    x, y = phase_axes(ds)
    if ds.sizes.get("train", 0) >= 2 and x != y:
        figures["phase_diagram"] = (plot.phase_diagram(ds, x=x, y=y), "Share of final samples with d1/d2 < 1/3 "
                                    "(nearest over second-nearest training distance) per cell.")
    if x != y:  # a store of one model block and no other cell dimension has no diagram
        figures["near_mode_diagram"] = (plot.phase_diagram(ds, x=x, y=y, metric="near_mode"),
                                        "Share of final samples within 0.5 of a training point (the paper's "
                                        "memorization count) per cell.")
    if plot.is_mnist(ds):
        is_exact = lambda c: "exact" in (c.get("schedule"), c.get("model"))  # noqa: E731
        picked = [c for c in cells(ds) if not is_exact(c)][:1] + [c for c in cells(ds) if is_exact(c)][:1]
        for i, cell in enumerate(picked):
            figures[f"decoded_samples_{i}"] = (plot.decoded_samples(ds, **cell), f"Decoded samples of {cell}.")
            figures[f"decoded_trajectories_{i}"] = (plot.decoded_trajectories(ds, **cell),
                                                    f"Decoded trajectories of {cell}.")
    if plot.is_image_store(ds):  # pixel images, or VAE latents decoded
        is_exact = lambda c: "exact" in (c.get("schedule"), c.get("model"))  # noqa: E731
        picked = [c for c in cells(ds) if not is_exact(c)][:1] + [c for c in cells(ds) if is_exact(c)][-1:]
        for i, cell in enumerate(picked):
            figures[f"image_grid_{i}"] = (plot.image_grid(ds, cell), f"Cell {cell}: samples at several t (rows: "
                                          "trajectories), each beside its ridge projection and its nearest "
                                          "training image" + ("" if "image_shape" in ds.attrs else
                                                               ", latents decoded through the VAE") + ".")
    if ds.sizes["dim"] == 2:
        hm = plot.samples_over_time(ds, **memo_cell, n_frames=n_frames)
        figures["samples"] = (hm.layout().cols(3), f"Snapshots over time of the cell {memo_cell}, the one that "
                              f"memorizes least ({memo_share:.0%} of final samples with d1/d2 < 1/3): samples "
                              "(blue), their ridge projections (red), the ridge R_t (grey), alpha_t x_i (black).")
    paths = {}
    rendered = {}
    with _quiet():
        for name, (fig, _) in list(figures.items()):
            fig = _style(fig)
            target = out / f"{name}.png"
            try:
                hv.save(fig, target, backend="matplotlib", fmt="png")
            except SkipRendering:  # nothing to draw (e.g. no trajectory reached the tube): left out of the page
                del figures[name]
                continue
            paths[name] = target
            model = hv.render(fig, backend="bokeh")
            model.name = name
            rendered[name] = model
    summary = analysis.summary_table(ds, r=r).compute().to_dataframe().reset_index()
    keep = [c for c in summary.columns if c in CELL_DIMS] + \
        [c for c in summary.columns if c not in CELL_DIMS + ("quantile", "step", "t", "alpha", "h",
                                                   "sampler_step", "stat")]
    summary_html = summary[keep].round(4).to_html(index=False, border=0, classes="ridgexr", table_id="summary")
    page = file_html(
        list(rendered.values()), resources=INLINE, title=title, template=PAGE,
        template_variables=dict(
            report_title=title, description=ds.attrs.get("description", ""), summary_table=summary_html,
            figures=[{"name": n, "caption": cap} for n, (_, cap) in figures.items()],
            config_table=_html_table(_kv_table(json_attr(ds, "config")), "config"),
            provenance_table=_html_table(_kv_table(json_attr(ds, "provenance")), "provenance"),
        ))
    html_path = out / "report.html"
    html_path.write_text(page)
    paths["html"] = html_path
    return paths
