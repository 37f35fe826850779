"""``ridgexr report``: PNG figures (matplotlib backend) and one self-contained HTML page (bokeh)."""

from __future__ import annotations

import html
from pathlib import Path

import holoviews as hv
import xarray as xr

from . import analysis, plot
from ._deprecation import renamed_kwargs
from .store import cells

__all__ = ["make_report"]


def _style(fig, **common):
    """Apply the same options to both backends (options are stored per backend)."""
    fig = fig.opts(**common, backend="bokeh") if common else fig
    fig = fig.opts(**common, backend="matplotlib") if common else fig
    leaf = fig.last if isinstance(fig, hv.HoloMap) else fig
    if isinstance(leaf, hv.NdOverlay):
        fig = fig.opts(hv.opts.NdOverlay(legend_position="right", fig_inches=(7, 4), backend="matplotlib"),
                       hv.opts.NdOverlay(legend_position="right", width=700, height=350, backend="bokeh"))
    elif isinstance(leaf, (hv.Bars, hv.HeatMap)):
        fig = fig.opts(hv.opts.Bars(xrotation=60, fig_inches=(8, 4), backend="matplotlib"),
                       hv.opts.Bars(xrotation=60, width=700, height=350, backend="bokeh"),
                       hv.opts.HeatMap(colorbar=True, fig_inches=(6, 4), backend="matplotlib"),
                       hv.opts.HeatMap(colorbar=True, width=500, height=300, tools=["hover"], backend="bokeh"))
    elif isinstance(leaf, hv.Overlay):
        fig = fig.opts(hv.opts.Overlay(fig_inches=(5, 5), legend_position="right", backend="matplotlib"),
                       hv.opts.Overlay(width=500, height=450, backend="bokeh"))
    return fig


@renamed_kwargs(frames="n_frames")
def make_report(ds: xr.Dataset, out_dir: str | Path, *, title: str = "ridgexr report", r: float = 0.5,
                n_frames: int = 12) -> dict:
    """Write PNG figures and ``report.html`` for a store's Dataset; returns {name: path}.

    The HTML embeds BokehJS (``resources="inline"``), so it opens offline; the sample
    scatter (2-D data) has a step slider with ``n_frames`` steps (each frame is embedded, so
    the page size and rendering time grow with it).  ``frames=`` is the deprecated
    spelling of ``n_frames``.
    """
    plot.ensure_backends()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = {
        "distance_curves": plot.distance_curves_plot(ds),
        "spread_curves": plot.spread_curves_plot(ds),
        "reach_times": plot.phase_time_hist(ds, which="reach_time", r=r),
        "mode_counts": plot.mode_count_bars(ds),
    }
    if ds.sizes.get("train", 0) >= 2:
        x = "tau" if "tau" in ds.dims else "width"
        figures["phase_diagram"] = plot.phase_diagram(ds, x=x)
    if plot.is_mnist(ds):
        picked = [c for c in cells(ds) if c.get("schedule") != "exact"][:1] + \
            [c for c in cells(ds) if c.get("schedule") == "exact"][:1]
        for i, cell in enumerate(picked):
            figures[f"decoded_samples_{i}"] = plot.decoded_samples(ds, **cell)
            figures[f"decoded_trajectories_{i}"] = plot.decoded_trajectories(ds, **cell)
    if ds.sizes["dim"] == 2:
        figures["samples"] = plot.samples_over_time(ds, **cells(ds)[0], n_frames=n_frames)
    for name, fig in figures.items():
        logs = dict(logx=True, logy=name == "distance_curves") if name.endswith("curves") else {}
        figures[name] = _style(fig, **logs)
    paths = {}
    for name, fig in figures.items():
        target = out / f"{name}.png"
        if isinstance(fig, hv.HoloMap):  # a PNG shows the last frame
            fig = fig.last
        hv.save(fig, target, backend="matplotlib", fmt="png")
        paths[name] = target
    summary = analysis.summary_table(ds, r=r).compute().to_dataframe()
    layout = hv.Layout([figures[k].opts(title=k) if not isinstance(figures[k], hv.HoloMap) else figures[k]
                        for k in figures]).cols(2)
    html_path = out / "report.html"
    hv.save(layout, html_path, backend="bokeh", resources="inline", title=title)
    table = summary.round(4).to_html(border=0)
    text = html_path.read_text()
    text = text.replace("<body>", f"<body><h1>{html.escape(title)}</h1>{table}", 1)
    html_path.write_text(text)
    paths["html"] = html_path
    return paths
