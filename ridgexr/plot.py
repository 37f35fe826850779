"""Holoviews plots of stores and analyses.

Every function returns a holoviews object (render with ``hv.save(obj, "x.png",
backend="matplotlib")`` headless, or ``backend="bokeh"`` for interactive HTML) and loads
only what it shows from a lazily opened store (a selection of cells and steps).
"""

from __future__ import annotations

from typing import Sequence

import holoviews as hv
from holoviews.core.options import SkipRendering
import numpy as np
import xarray as xr

from . import analysis, units
from ._validation import check_option
from .choices import QUALITY_LABELS
from .store.layout import is_exact_cell
from .store.opening import cells as store_cells
from .store.opening import json_attr


def ensure_backends() -> None:
    """Load holoviews' bokeh and matplotlib renderers, leaving every global choice as it is.

    Neither matplotlib's backend nor holoviews' current backend (``hv.Store.current_backend``,
    the one a user's ``.opts(...)`` without ``backend=`` reaches) changes: ridgexr passes
    ``backend=`` wherever it sets options or renders.  Importing :mod:`ridgexr.plot` calls
    nothing; every plotting function loads the renderers on first use.  In a notebook, call
    ``hv.extension("bokeh")`` (or ``"matplotlib"``) yourself to display the figures inline.
    """
    if {"bokeh", "matplotlib"} <= set(hv.Store.renderers):
        return
    current = hv.Store.current_backend
    for backend in ("bokeh", "matplotlib"):
        hv.renderer(backend)
    # hv.renderer makes the first backend it loads current when the current one is not loaded yet
    hv.Store.current_backend = current

__all__ = ["ensure_backends", "cell_selection", "cell_styles", "matplotlib_figure", "save_figure", "DPI", "ordered_cells", "is_mnist", "decoded_samples", "decoded_trajectories",
           "is_image_store", "image_grid_values", "image_grid", "cell_title", "unit_text", "identical_groups",
           "group_title", "drawn_per_cell", "view_bounds", "final_samples_grid", "fixed_size",
           "ridge_points", "samples_over_time", "snapshot_grid", "distance_curves_plot", "degenerate_share_plot", "spread_curves_plot", "phase_time_hist",
           "phase_diagram", "annotation_colour", "contrast_ratio", "mode_count_bars", "theory_scatter"]

#: the cell dimensions that do not apply to the exact denoiser (its cells along them are one model)
EXACT_FREE_DIMS = ("width", "tau", "epoch", "target", "n_noise")
#: the exact denoiser's colour in every per-cell figure (no width level's)
EXACT_COLOUR = "#000000"


def cell_title(cell: dict) -> str:
    """A cell's label in figure titles and legends: its labels in words (``"schedule h2, width 256"``; the
    exact denoiser's cells ``"exact denoiser, width 64"``).

    >>> cell_title({"schedule": "h2", "width": 256}), cell_title({"schedule": "exact", "width": 64})
    ('schedule h2, width 256', 'exact denoiser, width 64')
    """
    words = ["exact denoiser"] if is_exact_cell(cell) else []
    words += [f"{k} {v}" for k, v in cell.items() if not (is_exact_cell(cell) and k in ("schedule", "model"))]
    return ", ".join(words)


_label = cell_title


#: units strings (ridgexr.units) as a figure's axis labels say them
_UNIT_TEXT = {units.DATA: "data units", units.INV_DATA: "1 / data unit", units.INV_DATA2: "1 / data unit²",
              units.LOSS: "loss units", units.FEATURE2: "feature units²"}


def unit_text(unit: str | None) -> str | None:
    """A units string in words for an axis label (``"data_unit"`` -> ``"data units"``); None for none or ``"1"``."""
    if unit in (None, "", "1"):
        return None
    return _UNIT_TEXT.get(unit, unit)


def identical_groups(cells: Sequence[dict], values: Sequence, *, rtol: float = 1e-9) -> list[list[dict]]:
    """The cells grouped by what a figure draws for them: cells whose ``values`` (arrays, one per cell) are
    equal to ``rtol`` (NaN equal to NaN) share a group; groups in the order of their first cell.  A cell whose
    values are all NaN (nothing drawn) is a group of its own.

    >>> identical_groups([{"w": 1}, {"w": 2}, {"w": 3}], [[1.0, 2.0], [1.0, 3.0], [1.0, 2.0]])
    [[{'w': 1}, {'w': 3}], [{'w': 2}]]
    """
    groups: list[list[dict]] = []
    firsts: list[np.ndarray] = []
    for cell, v in zip(cells, values):  # one comparison per pair of cells, not per point
        v = np.asarray(v, dtype=float)
        if not np.isfinite(v).any():  # nothing drawn is not the same drawing: a cell of its own
            groups.append([cell])
            firsts.append(np.full(1, np.inf))
            continue
        for group, first in zip(groups, firsts):
            if first.shape == v.shape and np.allclose(v, first, rtol=rtol, atol=0.0, equal_nan=True):
                group.append(cell)
                break
        else:
            groups.append([cell])
            firsts.append(v)
    return groups


def group_title(ds: xr.Dataset, group: Sequence[dict]) -> str:
    """The title of one panel drawn for a group of identical cells (:func:`identical_groups`): the labels they
    share in words, and "every <dim>" (or the labels) along the dimensions where they differ; "every cell (n)"
    when the group is every run cell.

    >>> import xarray as xr
    >>> ds = xr.Dataset(coords={"schedule": ["1", "exact"], "width": [64, 256]})
    >>> group_title(ds, [{"schedule": "exact", "width": 64}, {"schedule": "exact", "width": 256}])
    'exact denoiser, every width'
    """
    group = list(group)
    if len(group) == 1:
        return cell_title(group[0])
    dims = list(group[0])
    same = {d: group[0][d] for d in dims if len({c[d] for c in group}) == 1}
    words = [cell_title(same)] if same else []
    if not same and len(group) == len(ordered_cells(ds)):
        return f"every cell ({len(group)})"
    for d in dims:
        if d in same:
            continue
        values = list(dict.fromkeys(c[d] for c in group))
        words.append(f"every {d}" if len(values) == ds.sizes.get(d, -1) else f"{d} {', '.join(map(str, values))}")
    return ", ".join(w for w in words if w)


def drawn_per_cell(ds: xr.Dataset, what: str, *, r: float = 0.5) -> dict[tuple, np.ndarray]:
    """{cell labels (tuple, reading order): the numbers a per-cell figure draws for it}: ``"distance"`` (the
    mean ridge distance and its 10 / 90 % quantiles over t), ``"spread"`` (the mean tangential spread over t),
    ``"reach_time"`` (the trajectories' reach times), ``"final"`` (the last recorded states) or ``"near_mode"``
    (the near-mode share and its interval).  :func:`identical_groups` of these values decides which panels are
    drawn once."""
    run = ordered_cells(ds)
    if what == "distance":
        c = analysis.distance_curves(ds, quantiles=(0.1, 0.9)).compute()
        data = [np.concatenate([c["distance_mean"].sel(cell).values.ravel(),
                                c["distance_quantile"].sel(cell).values.ravel()]) for cell in run]
    elif what == "spread":
        sp = analysis.spread_curves(ds)["spread_mean"].compute()
        data = [sp.sel(cell).values for cell in run]
    elif what == "reach_time":
        ph = analysis.phase_times(ds, r=r)["reach_time"].compute()
        data = [ph.sel(cell).values for cell in run]
    elif what == "final":
        last = ds["trajectory"].isel(step=-1)
        data = [last.sel(cell).values for cell in run]
    elif what == "near_mode":
        nm = analysis.near_mode_fraction(ds, r=r).compute()
        data = [np.array([float(nm[v].sel(cell)) for v in ("near_mode", "near_mode_low", "near_mode_high")])
                for cell in run]
    else:
        raise ValueError(f"`what` must be one of 'distance', 'spread', 'reach_time', 'final', 'near_mode'; got {what!r}")
    return {tuple(cell.values()): np.asarray(v, dtype=float) for cell, v in zip(run, data)}


def _groups(ds: xr.Dataset, what: str, collapse: bool, **kwargs) -> list[list[dict]]:
    """The panels of a per-cell figure: groups of identical cells (one panel each) or, without ``collapse``,
    one cell a panel."""
    run = ordered_cells(ds)
    if not collapse:
        return [[c] for c in run]
    drawn = drawn_per_cell(ds, what, **kwargs)
    return identical_groups(run, [drawn[tuple(c.values())] for c in run])


def ordered_cells(ds: xr.Dataset) -> list[dict]:
    """The cells that are run, in reading order: numeric labels ascending (width 64 < 256 < 1024,
    whatever the catalog's order), text labels (schedule, model) in store order.

    Every per-cell figure lists its panels, legend entries and bars in this order (holoviews
    would otherwise sort the text of the labels: 1024 < 256 < 64).
    """
    position = {d: {v: i for i, v in enumerate(ds[d].values.tolist())} for d in ds.dims}

    def key(cell):
        return tuple(v if isinstance(v, (int, float)) and not isinstance(v, bool) else position[d][v]
                     for d, v in cell.items())

    return sorted(store_cells(ds), key=key)


def cell_selection(schedule, width, tau=None, **sweeps) -> dict:
    """The ``.sel`` dict of one store cell (``tau`` only for a training-time sweep; ``target``,
    ``n_noise`` only where the entry sweeps them)."""
    return {"schedule": schedule, "width": width} | ({"tau": tau} if tau is not None else {}) | sweeps


#: colours of the levels of one variable (matplotlib's tab10, then tab20): no two levels share one
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf")
#: line styles of the levels of the other variable: (matplotlib, bokeh)
_LINE_STYLES = (("-", "solid"), ("--", "dashed"), (":", "dotted"), ("-.", "dashdot"), ((0, (5, 1, 1, 1, 1, 1)),
                                                                                        "dotdash"))


def _colours(n: int) -> list[str]:
    """``n`` distinct colours: tab10, tab20 beyond 10, evenly spaced on viridis beyond 20."""
    import matplotlib

    if n <= len(_PALETTE):
        return list(_PALETTE[:n])
    cmap = matplotlib.colormaps["tab20" if n <= 20 else "viridis"]
    return [matplotlib.colors.to_hex(cmap(i if n <= 20 else i / (n - 1))) for i in range(n)]


def cell_styles(ds: xr.Dataset) -> dict[tuple, dict]:
    """{cell labels (tuple, in :func:`ordered_cells`'s order): {"color", "linestyle", "line_dash"}}: one colour
    per level of the width (else of the model, or the first cell dimension) and one line style per schedule;
    the exact denoiser's cells in black (:data:`EXACT_COLOUR`: it has no width) with a line style of its own.

    Cell dimensions other than the two share the colour variable (a colour per combination), so no two
    cells of a figure draw the same colour and style (but the exact denoiser's cells along the dimensions it
    does not have, :data:`EXACT_FREE_DIMS`: one model, drawn once where the figure collapses identical
    cells); beyond five schedules the styles repeat with distinct colours (every cell then gets its own colour).
    """
    run = ordered_cells(ds)
    dims = list(run[0])
    style_dim = "schedule" if "schedule" in dims and len(dims) > 1 else None
    colour_dims = [d for d in dims if d != style_dim]
    styles = list(dict.fromkeys(c[style_dim] for c in run)) if style_dim else [None]
    if len(styles) > len(_LINE_STYLES):  # too many schedules for distinct styles: colour every cell
        colour_dims, styles, style_dim = dims, [None], None
    levels = list(dict.fromkeys(tuple(c[d] for d in colour_dims) for c in run if not is_exact_cell(c)))
    colours = dict(zip(levels, _colours(len(levels))))
    exact_dims = [d for d in colour_dims if d not in EXACT_FREE_DIMS + ("model",)]
    exact_levels = list(dict.fromkeys(tuple(c[d] for d in exact_dims) for c in run if is_exact_cell(c)))
    # one exact denoiser: black; several (one per training set): greys from black
    greys = {lv: (EXACT_COLOUR if len(exact_levels) == 1 else
                  _grey(i / max(1, len(exact_levels) - 1))) for i, lv in enumerate(exact_levels)}
    out = {}
    for c in run:
        mpl, bokeh = _LINE_STYLES[styles.index(c[style_dim]) if style_dim else 0]
        colour = greys[tuple(c[d] for d in exact_dims)] if is_exact_cell(c) else colours[tuple(c[d] for d in colour_dims)]
        if is_exact_cell(c) and not style_dim:  # no schedule dimension: the exact denoiser's own style
            mpl, bokeh = _LINE_STYLES[3]
        out[tuple(c.values())] = {"color": colour, "linestyle": mpl, "line_dash": bokeh}
    return out


def _grey(share: float) -> str:
    """A grey from black (0) to mid-grey (1)."""
    import matplotlib

    return matplotlib.colors.to_hex((0.55 * share,) * 3)


def _styled_curve(curve: hv.Curve, style: dict, **options) -> hv.Curve:
    """A curve with its cell's colour and line style on both backends (``options`` too, on both)."""
    ensure_backends()
    return curve.opts(hv.opts.Curve(color=style["color"], linestyle=style["linestyle"], **options, backend="matplotlib"),
                      hv.opts.Curve(color=style["color"], line_dash=style["line_dash"], **options, backend="bokeh"))


#: resolution of the report's PNG figures (dots per inch); an SVG is written beside each PNG
DPI = 150
#: the font size (points) of a figure's texts; titles one point larger
FONT_SIZE = 9


def matplotlib_figure(obj):
    """Render a holoviews object with matplotlib, laid out for print (a :class:`matplotlib.figure.Figure`).

    The figure keeps the size its plot function gave it (``fig_inches``) and gets matplotlib's constrained
    layout, so titles, axis labels, tick labels and legends outside the axes never overlap one another or a
    neighbouring panel, and nothing leaves the canvas.  A colour bar holoviews drew beside an image is drawn
    again in a slot of the layout (its own axes, never over the data); where every panel of a layout has the
    same legend, one legend is drawn to the right of the whole figure instead.  Texts are ``FONT_SIZE``
    points, the resolution ``DPI``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    ensure_backends()
    inches = getattr(obj, FIXED_INCHES, None)
    with plt.rc_context({"font.size": FONT_SIZE, "axes.titlesize": FONT_SIZE + 1, "axes.labelsize": FONT_SIZE,
                         "legend.fontsize": FONT_SIZE - 1, "legend.title_fontsize": FONT_SIZE - 1,
                         "xtick.labelsize": FONT_SIZE - 1, "ytick.labelsize": FONT_SIZE - 1,
                         "figure.titlesize": FONT_SIZE + 1}):
        fig = hv.render(obj, backend="matplotlib")
    FigureCanvasAgg(fig)
    fig.set_dpi(DPI)
    if inches is not None:  # holoviews recomputes a layout's height from its panels' aspects: the size asked for
        fig.set_size_inches(*inches)
    for text in _all_texts(fig):  # holoviews sets sizes of its own: one scale for every figure
        text.set_fontsize(min(text.get_fontsize(), FONT_SIZE + 1))
    _regrid(fig)
    fig.set_layout_engine("constrained", h_pad=0.06, w_pad=0.06, hspace=0.04, wspace=0.04)
    for ax in list(fig.axes):
        for mappable in ax.images + ax.collections:
            bar = getattr(mappable, "colorbar", None)
            if bar is not None and bar.ax in fig.axes:
                label = bar.ax.get_ylabel()
                bar.remove()
                fig.colorbar(mappable, ax=ax, label=label, fraction=0.08, pad=0.03)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    labels = [tuple(t.get_text() for t in lg.get_texts()) for lg in legends]
    if len(legends) > 1 and len(set(labels)) == 1:
        handles = legends[0].legend_handles
        for lg in legends:
            lg.remove()
        fig.legend(handles, labels[0], loc="outside right center")  # "upper" meets a suptitle
    _fit_titles(fig)
    return fig


def _fit_titles(fig) -> None:
    """Wrap every axes title wider than its axes (after a layout pass) into lines that fit: a panel titled with
    several cell labels, or a long title over a narrow panel, would otherwise run over its neighbours or off the
    canvas.  A log axis's minor tick labels (drawn where it spans less than a decade) are dropped where any two
    tick labels collide."""
    import textwrap

    from matplotlib.ticker import NullFormatter

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:  # a log axis spanning less than a decade labels its minor ticks: dropped where they collide
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            boxes = sorted((b.x0, b.x1) if axis is ax.xaxis else (b.y0, b.y1) for b in (
                t.get_window_extent(renderer) for t in axis.get_ticklabels(minor=False) + axis.get_ticklabels(minor=True)
                if t.get_visible() and t.get_text()))
            if any(b[0] < a[1] for a, b in zip(boxes, boxes[1:])):
                axis.set_minor_formatter(NullFormatter())
    for ax in fig.axes:
        title = ax.title
        text = title.get_text()
        if not text or not ax.get_visible():
            continue
        wide, room = title.get_window_extent(renderer).width, ax.get_window_extent(renderer).width
        if wide <= room:
            continue
        longest = max(len(line) for line in text.split("\n"))
        chars = max(12, int(longest * room / wide))
        title.set_text("\n".join(textwrap.fill(line, chars) for line in text.split("\n")))


#: the attribute :func:`fixed_size` sets on a holoviews object
FIXED_INCHES = "ridgexr_fig_inches"


def fixed_size(obj, inches: tuple[float, float]):
    """``obj`` marked to be drawn at exactly ``inches`` (width, height) by :func:`matplotlib_figure` (holoviews
    keeps a layout's width but recomputes its height from its panels' aspects: equal-aspect 2-D panels then
    shrink to a fraction of the width).  Returns ``obj``; an ``.opts`` call after it returns a clone without the
    mark."""
    setattr(obj, FIXED_INCHES, (float(inches[0]), float(inches[1])))
    return obj


def _regrid(fig) -> None:
    """Put the panels of a holoviews figure on one GridSpec of the figure, rows and columns as holoviews placed
    them, for constrained layout (holoviews' own grids have no figure, spare slots for adjoined plots and fixed
    gaps); its empty slots are removed and a layout's title becomes the figure's suptitle."""
    from matplotlib.gridspec import GridSpec

    bars = {getattr(m, "colorbar", None).ax for ax in fig.axes for m in ax.images + ax.collections
            if getattr(m, "colorbar", None) is not None}
    panels = []
    for ax in list(fig.axes):
        if ax in bars:
            continue
        if not ax.axison and not (ax.images or ax.lines or ax.collections or ax.patches or ax.texts):
            fig.delaxes(ax)  # an empty slot of holoviews' grid
            continue
        panels.append(ax)
    if not panels:
        return

    def levels(values):
        out = []
        for v in sorted(values):
            if not out or abs(v - out[-1]) > 1e-3:
                out.append(v)
        return out

    boxes = {ax: ax.get_position() for ax in panels}
    cols = levels([b.x0 for b in boxes.values()])
    rows = levels([-b.y1 for b in boxes.values()])  # top row first
    grid = GridSpec(len(rows), len(cols), figure=fig)
    for ax, b in boxes.items():
        r = min(range(len(rows)), key=lambda i: abs(rows[i] + b.y1))
        c = min(range(len(cols)), key=lambda i: abs(cols[i] - b.x0))
        ax.set_subplotspec(grid[r, c])
    titles = [t for t in fig.texts if t.get_text()]
    if fig._suptitle is None and len(titles) == 1:  # holoviews writes a layout's title as a figure text
        text = titles[0].get_text()
        titles[0].remove()
        fig.suptitle(text)


def _all_texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_text()]


def save_figure(obj, path) -> list:
    """Write a holoviews object as ``path`` (PNG at ``DPI``) and an SVG beside it, laid out by
    :func:`matplotlib_figure`; returns the two paths."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    fig = matplotlib_figure(obj)
    png = Path(path).with_suffix(".png")
    svg = png.with_suffix(".svg")
    try:
        fig.savefig(png, dpi=DPI)
        fig.savefig(svg)
    finally:
        plt.close(fig)
    return [png, svg]


def both(obj, **options):
    """Apply ``options`` on both backends (holoviews keeps options per backend, and an option given
    without ``backend=`` only reaches the current one, which ``hv.save``/``hv.render`` may have changed)."""
    ensure_backends()
    return obj.opts(**options, backend="bokeh").opts(**options, backend="matplotlib")


def _colored(el, color: str, alpha: float):
    """The same colour on both backends (holoviews stores options per backend)."""
    ensure_backends()
    return el.opts(hv.opts.Points(color=color, alpha=alpha, backend="bokeh"),
                   hv.opts.Points(color=color, alpha=alpha, backend="matplotlib"))


def ridge_points(train: np.ndarray, t: float, *, d_star: int = 1, lim: float = 8.0, n_grid: int = 40,
                 bounds: tuple | None = None) -> np.ndarray:
    """Points on the ridge R_t of a 2-D training set: an n_grid^2 grid projected by SCMS (on-ridge only).

    The grid spans [-lim, lim]^2, or ``bounds`` ((x_low, x_high), (y_low, y_high)) where given (the view of a
    panel, :func:`view_bounds`)."""
    from .empirical import SmoothedEmpirical
    from .ridge import project_to_ridge

    (x0, x1), (y0, y1) = bounds if bounds is not None else ((-lim, lim), (-lim, lim))
    grid = np.stack(np.meshgrid(np.linspace(x0, x1, n_grid), np.linspace(y0, y1, n_grid)), -1).reshape(-1, 2)
    res = project_to_ridge(SmoothedEmpirical(train, t), grid, d_star, max_iter=100)
    return res.point[res.on_ridge & ~res.degenerate]


#: share of the drawn points a 2-D panel may leave outside its view at each end of an axis (view_bounds)
VIEW_QUANTILE = 0.02


def view_bounds(train: np.ndarray, points: np.ndarray | None = None, *, pad: float = 0.3,
                q: float = VIEW_QUANTILE) -> tuple[tuple[float, float], tuple[float, float]]:
    """The ranges ((x_low, x_high), (y_low, y_high)) a 2-D panel shows, sized to the data: the training points'
    box widened by ``pad`` x its longest side (at least 1 data unit) each way, and widened further to the
    ``q`` .. 1 - ``q`` quantiles of ``points`` (..., 2) per axis -- so the few samples a model throws far away do
    not shrink everything else to a corner (the panels say how many lie outside).

    >>> view_bounds(np.array([[-3.0, 0.0], [3.0, 0.0]]))
    ((-4.8, 4.8), (-1.8, 1.8))
    """
    tr = np.asarray(train, dtype=float)[:, :2]
    tr = tr[np.isfinite(tr).all(1)]
    lo, hi = tr.min(0), tr.max(0)
    margin = max(1.0, pad * float((hi - lo).max()))
    lo, hi = lo - margin, hi + margin
    if points is not None:
        p = np.asarray(points, dtype=float).reshape(-1, np.shape(points)[-1])[:, :2]
        p = p[np.isfinite(p).all(1)]
        if len(p):
            lo = np.minimum(lo, np.quantile(p, q, axis=0))
            hi = np.maximum(hi, np.quantile(p, 1 - q, axis=0))
    return (round(float(lo[0]), 9), round(float(hi[0]), 9)), (round(float(lo[1]), 9), round(float(hi[1]), 9))


def _outside(points: np.ndarray, bounds) -> int:
    """How many finite rows of ``points`` (n, 2) lie outside ``bounds``."""
    p = np.asarray(points, dtype=float)[:, :2]
    p = p[np.isfinite(p).all(1)]
    (x0, x1), (y0, y1) = bounds
    return int(((p[:, 0] < x0) | (p[:, 0] > x1) | (p[:, 1] < y0) | (p[:, 1] > y1)).sum())


#: the 2-D panels' layers: (label, colour, alpha, matplotlib marker area in points^2, bokeh size in px), drawn in
#: this order -- the ridge under everything, the projections small and under the samples (they mark where each
#: sample projects without hiding it), the training points on top
_LAYERS = {"ridge": ("ridge R_t", "#bbbbbb", 0.6, 6, 3), "projection": ("ridge projections", "#d62728", 0.7, 3, 2),
           "samples": ("samples", "#1f77b4", 0.45, 14, 5), "train": ("training points α_t x_i", "black", 1.0, 60, 10)}
_XY = [hv.Dimension("x0", label="coordinate 1"), hv.Dimension("x1", label="coordinate 2")]


def _layer(points: np.ndarray, which: str) -> hv.Points:
    """One layer of a 2-D panel (:data:`_LAYERS`), styled on both backends; the training points as open rings
    (the samples that collapse onto them stay visible inside)."""
    label, colour, alpha, area, size = _LAYERS[which]
    ensure_backends()
    pts = hv.Points(points, kdims=_XY, label=label)
    if which == "train":
        return pts.opts(hv.opts.Points(fill_alpha=0.0, line_color=colour, line_width=2, size=size, backend="bokeh"),
                        hv.opts.Points(facecolors="none", edgecolors=colour, linewidth=1.4, s=area,
                                       backend="matplotlib"))
    return pts.opts(hv.opts.Points(color=colour, alpha=alpha, size=size, backend="bokeh"),
                    hv.opts.Points(color=colour, alpha=alpha, s=area, backend="matplotlib"))


def samples_over_time(ds: xr.Dataset, *, schedule, width, tau=None, n_frames: int = 25,
                      max_samples: int = 256, show_ridge: bool = True, **sweeps) -> hv.HoloMap:
    """Samples, their ridge projections, the ridge R_t and the scaled training points (2-D data).

    A step slider runs over ``n_frames`` steps of one cell (only those are loaded); the
    ridge is drawn by projecting a 40 x 40 grid of the view onto R_t at each frame's time.  Every frame shows
    the same view, sized to the data (:func:`view_bounds` of the training points and the frames' samples);
    a frame's title says how many of its samples lie outside it.  The projections are small marks under the
    samples (:data:`_LAYERS`).
    """
    if ds.sizes["dim"] != 2:
        raise ValueError(f"samples_over_time needs 2-D data, the store has dim={ds.sizes['dim']}")
    sel = cell_selection(schedule, width, tau, **sweeps)
    cell = ds.sel(sel)
    steps = np.unique(np.linspace(0, ds.sizes["step"] - 1, n_frames).round().astype(int))
    cell = cell.isel(step=steps, sample=slice(0, max_samples))
    x = cell["trajectory"].transpose("sample", "step", "dim").values  # (sample, frame, 2)
    p = cell["ridge_projection"].transpose("sample", "step", "dim").values
    train = ds["train_data"].values
    alpha = cell["alpha"].values
    t = cell["t"].values
    bounds = view_bounds(train, x, q=0.005)  # one cell's frames: the Gaussian at t = T shown whole
    frames = {}
    for k, step in enumerate(steps):  # a handful of frames
        layers = _layer(p[:, k], "projection") * _layer(x[:, k], "samples") * _layer(train * alpha[k], "train")
        if show_ridge:
            d_star = int(ds.attrs.get("d_star", 1))
            layers = _layer(ridge_points(train, float(t[k]), d_star=d_star, bounds=bounds), "ridge") * layers
        out = _outside(x[:, k], bounds)
        title = f"{cell_title(sel)}, t = {t[k]:.3g}"
        frames[int(step)] = both(layers, legend_position="right").opts(
            # the data area's own size on bokeh: a plot width shared with the legend left ~60 px of data in the
            # built tutorial
            hv.opts.Overlay(frame_width=380, frame_height=380, title=title + (f" ({out} outside)" if out else ""),
                            backend="bokeh"),  # the legend off the data
            hv.opts.Overlay(title=title + (f"\n{out} sample{'s' * (out != 1)} outside the view" if out else ""),
                            backend="matplotlib"))
    hm = hv.HoloMap(frames, kdims=["step"])
    return hm.redim.range(x0=bounds[0], x1=bounds[1])


def _panel_inches(bounds, width: float = 3.0) -> tuple[float, float]:
    """(width, height) in inches of one equal-aspect 2-D panel of ``width`` inches of data, with room for its
    title and axis labels."""
    (x0, x1), (y0, y1) = bounds
    ratio = (y1 - y0) / (x1 - x0)
    return width + 0.7, min(max(width * ratio, 0.4), 2.2 * width) + 0.9


def snapshot_grid(frames: hv.HoloMap, *, cols: int = 2) -> hv.Layout:
    """The frames of :func:`samples_over_time` side by side, ``cols`` a row, sized for both backends (one legend
    for the figure on matplotlib, :func:`matplotlib_figure`); a panel's height follows its data's aspect."""
    ncols = max(1, min(cols, len(frames)))
    nrows = -(-len(frames) // ncols)
    # bokeh: one legend, right of the first row's last panel (matplotlib draws one for the figure)
    grid = hv.Layout([frame.opts(hv.opts.Overlay(show_legend=i == ncols - 1, backend="bokeh"), clone=True)
                      for i, frame in enumerate(frames.values())]).cols(ncols)
    w, h = _panel_inches((frames.get_dimension("x0").range, frames.get_dimension("x1").range), width=2.6)
    inches = (w * ncols + 2.6, h * nrows)
    return fixed_size(grid.opts(hv.opts.Overlay(width=470, height=330, backend="bokeh"),
                                hv.opts.Layout(fig_inches=inches, sublabel_format="", backend="matplotlib"),
                                hv.opts.Overlay(aspect="equal", backend="matplotlib")), inches)


def final_samples_grid(ds: xr.Dataset, *, collapse: bool = True, max_samples: int = 256) -> hv.Layout:
    """The final samples of every cell (the last recorded states) over the ridge R_t at that time and the
    scaled training points, one panel per cell, one row per schedule (2-D data).

    Every panel shows the same view (:func:`view_bounds` of the training points and all cells' samples); its
    title says how many of its samples lie outside.  With ``collapse`` (default) cells whose final samples are
    identical (:func:`identical_groups`: the exact denoiser at every width) share one panel.
    """
    from .analysis.selection import cell_train

    if ds.sizes["dim"] != 2:
        raise ValueError(f"final_samples_grid needs 2-D data, the store has dim={ds.sizes['dim']}")
    last = ds.isel(step=-1, sample=slice(0, max_samples))
    t, alpha = float(last["t"]), float(last["alpha"])
    x = last["trajectory"].compute()
    trains = cell_train(last).compute()
    groups = _groups(ds, "final", collapse)
    bounds = view_bounds(ds["train_data"].values * alpha, x.values)
    d_star = int(ds.attrs.get("d_star", 1))
    ridges: dict = {}
    panels = []
    for i, group in enumerate(groups):
        cell = group[0]
        train = trains.sel({k: v for k, v in cell.items() if k in trains.dims}).values
        train = train[np.isfinite(train).all(1)]
        key = train.tobytes()
        if key not in ridges:  # one ridge per training set
            ridges[key] = ridge_points(train, t, d_star=d_star, bounds=bounds)
        xs = x.sel(cell).transpose("sample", "dim").values
        out = _outside(xs, bounds)
        title = group_title(ds, group)
        panel = _layer(ridges[key], "ridge") * _layer(xs, "samples") * _layer(train * alpha, "train")
        panels.append(both(panel, legend_position="right").opts(
            hv.opts.Overlay(title=title + (f" ({out} outside)" if out else ""), backend="bokeh"),
            hv.opts.Overlay(title=title + (f"\n{out} outside the view" if out else ""), backend="matplotlib")))
    ncols = ds.sizes["width"] if "width" in ds.dims and "model" not in ds.dims else 3
    ncols = max(1, min(ncols, len(panels)))
    # bokeh: one legend, right of the first row's last panel (matplotlib draws one for the figure)
    panels = [p.opts(hv.opts.Overlay(show_legend=i == ncols - 1, frame_width=260, frame_height=260, backend="bokeh"))
              for i, p in enumerate(panels)]
    nrows = -(-len(panels) // ncols)
    w, h = _panel_inches(bounds, width=1.8)
    inches = (w * ncols + 2.6, h * nrows + 0.4)
    layout = hv.Layout(panels).cols(ncols).redim.range(x0=bounds[0], x1=bounds[1])
    return fixed_size(both(layout, title=f"final samples (t = {t:.3g}) on the ridge R_t").opts(
        hv.opts.Layout(fig_inches=inches, sublabel_format="", backend="matplotlib"),
        hv.opts.Overlay(aspect="equal", backend="matplotlib")), inches)


def _value_dim(name: str, label: str, unit: str | None) -> hv.Dimension:
    """A plot dimension whose axis label carries the unit in words (:func:`unit_text`; none shown for "1")."""
    return hv.Dimension(name, label=label, unit=unit_text(unit))


def _time_dim(ds: xr.Dataset) -> hv.Dimension:
    return _value_dim("t", "diffusion time t (OU, dimensionless)", ds["t"].attrs.get("units"))


def distance_curves_plot(ds: xr.Dataset, *, statistic: str = "mean", collapse: bool = True) -> hv.NdLayout:
    """Mean (or median) ridge distance vs t with the 10-90 % band, one panel per cell (log-log axes); where the
    store has the exact denoiser, its curve (black, dashed) in every other panel: the ridge distance of the
    forward process's own states, which reach is measured against.

    With ``collapse`` (default), cells whose curves and bands are identical (:func:`identical_groups`: the exact
    denoiser's cells at every width; every cell of a store where no model errs in the normal direction) share
    one panel, titled for all of them (:func:`group_title`).  States whose ridge frame is degenerate are masked
    (:func:`ridgexr.analysis.distance_curves`); where a cell has any, its curve's label says how many (the
    largest share over steps and the time from which it is reached), and :func:`degenerate_share_plot` draws
    the share.
    """
    if statistic not in ("mean", "median"):
        raise ValueError(f"`statistic` must be 'mean' or 'median'; got {statistic!r}")
    curves = analysis.distance_curves(ds, quantiles=(0.1, 0.9)).compute()
    t = ds["t"].values
    unit = ds["ridge_distance"].attrs.get("units", "")
    ydim = _value_dim("distance", "ridge distance", unit)  # the layout's title says which statistic
    items = {}
    log = dict(logx=True, logy=True)
    groups = _groups(ds, "distance", collapse)
    for group in groups:
        cell = group[0]
        c = curves.sel(cell)
        band = hv.Area((t, c["distance_quantile"].sel(quantile=0.1).values,
                        c["distance_quantile"].sel(quantile=0.9).values),
                       kdims=[_time_dim(ds)], vdims=[ydim, "distance_high"])
        band = both(band, alpha=0.3, **log)
        label = ""  # unlabelled unless some states are masked
        if "degenerate_share" in c and float(c["degenerate_share"].max()) > 0:
            share = c["degenerate_share"].values
            k = int(np.nanargmax(share))
            label = f"{statistic} (degenerate frames masked: up to {share[k]:.0%}, at t = {t[k]:.3g})"
        line = both(hv.Curve((t, c[f"distance_{statistic}"].values), kdims=[_time_dim(ds)], vdims=[ydim], label=label),
                    **log)
        panel = band * line
        reference = _exact_of(ds, cell)
        if reference is not None and not any(is_exact_cell(c) for c in group):  # the memorizer's beside each model's
            panel = panel * _styled_curve(hv.Curve((t, curves.sel(reference)[f"distance_{statistic}"].values),
                                                   kdims=[_time_dim(ds)], vdims=[ydim], label="exact denoiser"),
                                          {"color": EXACT_COLOUR, "linestyle": "--", "line_dash": "dashed"}, **log)
        # the panel's title says what the label says, short (a legend of one long entry is wider than a panel)
        title = group_title(ds, group) + (f"\nup to {share[k]:.0%} masked" if label else "")
        if len(groups) == 1:  # one panel: holoviews draws no layout title above it, so the panel says what it is
            title = f"{statistic} ridge distance, {title}"
        items[tuple(cell.values())] = both(panel, title=title, show_legend=False)
    wide = "width" in ds.dims and "model" not in ds.dims
    ncols = min(ds.sizes["width"] if wide else 3, len(items))
    nrows = -(-len(items) // ncols)
    layout = hv.NdLayout(items, kdims=list(ordered_cells(ds)[0]), sort=False).cols(ncols)
    layout = both(layout, title=f"{statistic} ridge distance and its 10-90 % band over samples")
    # ~3 x 2.3 inches a panel (a 9-inch figure holds three): axis labels and titles fit beside the next panel
    inches = _grid_inches([group_title(ds, g) for g in groups], ncols, nrows, col=3.0, row=2.3,
                          extra_lines=any("masked" in str(hv.Store.lookup_options("matplotlib", p, "plot").kwargs.get(
                              "title", "")) for p in items.values()))
    return fixed_size(layout.opts(hv.opts.NdLayout(fig_inches=inches, backend="matplotlib"),
                                  hv.opts.Curve(width=280, height=240, backend="bokeh"),
                                  hv.opts.Area(width=280, height=240, backend="bokeh")), inches)


#: characters of an 8-point legend entry an inch holds (DejaVu Sans)
LEGEND_CHARS_PER_INCH = 15.0
#: characters of a 9-point title an inch of panel holds (DejaVu Sans)
TITLE_CHARS_PER_INCH = 12.5


def _grid_inches(titles: Sequence[str], ncols: int, nrows: int, *, col: float, row: float,
                 extra_lines: bool = False) -> tuple[float, float]:
    """(width, height) in inches of a grid of ``ncols`` x ``nrows`` panels of about ``col`` x ``row`` inches, wider
    where the longest title would need more than two lines (several cell labels) and taller by the lines the
    titles take (:func:`_fit_titles` wraps them to their panel's width); ``extra_lines``: a title has a second line
    of its own."""
    import math

    longest = max((len(t) for t in titles), default=0)
    room = col - 0.8  # the panel's data width: the y label and ticks take the rest
    if longest > 2 * room * TITLE_CHARS_PER_INCH:
        col = min(1.6 * col, longest / 2 / TITLE_CHARS_PER_INCH + 0.8)
        room = col - 0.8
    lines = math.ceil(longest / (room * TITLE_CHARS_PER_INCH)) + int(extra_lines) if longest else 0
    return max(4.5, col * ncols), 0.5 + (row + 0.18 * max(0, lines - 1)) * nrows


def _exact_of(ds: xr.Dataset, cell: dict) -> dict | None:
    """The exact denoiser's run cell with the training set of ``cell`` (its labels but along the dimensions the
    exact denoiser does not have), or None where the store has none."""
    keep = [d for d in cell if d not in EXACT_FREE_DIMS + ("schedule", "model")]
    return next((c for c in ordered_cells(ds) if is_exact_cell(c) and all(c[d] == cell[d] for d in keep)), None)


def degenerate_share_plot(ds: xr.Dataset, *, collapse: bool = True) -> hv.NdOverlay:
    """Share of the observed states whose ridge frame is degenerate (masked in every summary) vs t, one curve
    per cell (cells with identical curves drawn once with ``collapse``): the companion of
    :func:`distance_curves_plot`."""
    share = analysis.distance_curves(ds)["degenerate_share"].compute() if "ridge_degenerate" in ds else None
    if share is None:
        raise ValueError("`ds` has no ridge_degenerate flags (stores of schema >= 1.3 have them)")
    t = ds["t"].values
    ydim = _value_dim("degenerate_share", "share of degenerate frames", "1")
    styles = cell_styles(ds)
    run = ordered_cells(ds)
    groups = identical_groups(run, [share.sel(c).values for c in run]) if collapse else [[c] for c in run]
    # a share on a linear axis from 0 to 1: a step with none is drawn at 0, not left out as on a log axis
    overlay = {group_title(ds, g): _styled_curve(hv.Curve((t, share.sel(g[0]).values), kdims=[_time_dim(ds)],
                                                          vdims=[ydim]),
                                                 styles[tuple(g[0].values())], logx=True, logy=False, ylim=(0.0, 1.02))
               for g in groups}
    return _curve_overlay(overlay, "degenerate ridge frames (masked in the summaries)")


def spread_curves_plot(ds: xr.Dataset, *, collapse: bool = True) -> hv.NdOverlay:
    """Mean distance of ridge projections to the nearest alpha_t x_i vs t, one curve per schedule and width:
    one colour per width, one line style per schedule, the exact denoiser in black (:func:`cell_styles`).

    With ``collapse`` (default) cells whose curves are identical are drawn once, named for all of them
    (:func:`group_title`: the exact denoiser's cells at every width are one model and one curve).
    """
    sp = analysis.spread_curves(ds)["spread_mean"].compute()
    t = ds["t"].values
    # the title and the report's caption say what the spread is: the axis label stays shorter than the axis
    ydim = _value_dim("spread", "spread along the ridge", sp.attrs.get("units", ""))
    styles = cell_styles(ds)
    run = ordered_cells(ds)
    groups = identical_groups(run, [sp.sel(c).values for c in run]) if collapse else [[c] for c in run]
    overlay = {}
    for g in groups:
        curve = _styled_curve(hv.Curve((t, sp.sel(g[0]).values), kdims=[_time_dim(ds)], vdims=[ydim]),
                              styles[tuple(g[0].values())], logx=True, logy=True)
        if is_exact_cell(g[0]):  # the reference every model is compared with: drawn heavier
            curve = curve.opts(hv.opts.Curve(linewidth=2.2, backend="matplotlib"),
                               hv.opts.Curve(line_width=3, backend="bokeh"))
        overlay[group_title(ds, g)] = curve
    return _curve_overlay(overlay, "tangential spread along the ridge")


def _one_series(tt: xr.Dataset, keep: tuple[str, ...]) -> xr.Dataset:
    """``tt`` with every dimension but ``keep`` (and ``sample``) of size 1 dropped; a ValueError naming any
    other dimension of size > 1 (select one of its labels first)."""
    extra = [d for d in tt.dims if d not in keep and tt.sizes[d] > 1]
    if extra:
        raise ValueError(f"`tt` varies along {extra}: select one label of each (tt.sel({extra[0]}=...)) first")
    return tt.squeeze([d for d in tt.dims if d not in keep], drop=True)


def _tau_text(tt: xr.Dataset, name: str) -> str:
    v = float(tt[name])
    if not np.isfinite(v):
        return "nan"
    return f">={v:.3g}" if bool(tt[f"{name}_censored"]) else f"{v:.3g} ({float(tt[f'{name}_low']):.3g}, {v:.3g}]"


def training_time_curves(tt: xr.Dataset, *, time_dim: str = "epoch", size_dim: str = "n_train") -> hv.Layout:
    """The memorized share tau_mem reads (its interval shaded) and sample quality against training time (log
    axis), one colour per training-set size, with each size's tau_gen (dashed) and tau_mem (dotted) marked where
    reached.

    ``tt``: the output of :func:`ridgexr.analysis.training_timescales` (one schedule / width: select the
    others away first).  The share is f_mem - f_fresh (``f_mem_excess``) where tau_mem was read on it (attribute
    ``tau_mem_measure``), else f_mem.  The legend gives each size's tau_gen and tau_mem with their intervals
    (">= x": censored, not reached by the last checkpoint x).
    """
    tt = _one_series(tt, (time_dim, size_dim))
    x = tt[time_dim].values.astype(float)
    sizes = tt[size_dim].values
    colours = _colours(len(sizes))
    tdim = hv.Dimension(time_dim, label=f"training time ({time_dim})")
    excess = tt.attrs.get("tau_mem_measure") == "f_mem - f_fresh"
    share = "f_mem_excess" if excess else "f_mem"
    fdim = (hv.Dimension(share, label="f_mem - f_fresh (d1/d2 < 1/3)", range=(-1.02, 1.02)) if excess
            else hv.Dimension(share, label="f_mem (d1/d2 < 1/3)", range=(0, 1.02)))
    qdim = hv.Dimension("quality", label=QUALITY_LABELS.get(tt.attrs.get("quality"), "sample quality"))
    fm, qu, marks = {}, {}, []
    for n, colour in zip(sizes, colours):
        c = tt.sel({size_dim: n})
        label = f"n = {n}: gen {_tau_text(c, 'tau_gen')}, mem {_tau_text(c, 'tau_mem')}"
        f, lo, hi = (c[v].values for v in (share, f"{share}_low", f"{share}_high"))
        style = {"color": colour, "linestyle": "-", "line_dash": "solid"}
        fm[label] = _styled_curve(hv.Curve((x, f), tdim, fdim), style, logx=True) * both(
            hv.Spread((x, f, f - lo, hi - f), tdim, [fdim, "neg", "pos"]), color=colour, alpha=0.2, logx=True)
        qu[label] = _styled_curve(hv.Curve((x, c["quality"].values), tdim, qdim), style, logx=True)
        for name, dash in (("tau_gen", ("--", "dashed")), ("tau_mem", (":", "dotted"))):
            if np.isfinite(float(c[name])) and not bool(c[f"{name}_censored"]):
                marks.append(hv.VLine(float(c[name])).opts(
                    hv.opts.VLine(color=colour, linestyle=dash[0], linewidth=1, backend="matplotlib"),
                    hv.opts.VLine(color=colour, line_dash=dash[1], line_width=1, backend="bokeh")))
    over_marks = hv.Overlay(marks) if marks else None
    left = hv.NdOverlay(fm, kdims=["size"], sort=False)
    right = hv.NdOverlay(qu, kdims=["size"], sort=False)
    if over_marks is not None:
        left, right = left * over_marks, right * over_marks
    left = both(left, title=("excess " if excess else "") + "memorized share along training", show_legend=False)
    right = both(right, title="sample quality along training", legend_position="right")
    return (left + right).cols(2).opts(
        hv.opts.Layout(fig_inches=(12, 3.8), sublabel_format="", backend="matplotlib"),
        hv.opts.Overlay(aspect=1.3, backend="matplotlib"),
        hv.opts.Overlay(width=480, height=340, backend="bokeh"))


#: the factor by which timescale_law draws tau_mem's markers right of their n (and tau_gen's left)
LAW_OFFSET = 1.04


def timescale_law(tt: xr.Dataset, *, size_dim: str = "n_train") -> hv.Overlay:
    """tau_gen and tau_mem against the training-set size n (log-log), each with its interval (censored taus
    drawn as triangles: lower bounds) and the fitted law tau = exp(a) n^b, its b with interval and verdict
    in the legend (:func:`ridgexr.analysis.training_timescales`; the verdict: the claims registry's
    ``timescale-slope``).  The markers of tau_gen sit at n x
    :data:`LAW_OFFSET`**-1 and those of tau_mem at n x LAW_OFFSET, so that equal taus at one n (two
    lower bounds at the last checkpoint) do not hide each other; the fitted lines are drawn at n itself."""
    keep = (size_dim,)
    tt = _one_series(tt.drop_dims([d for d in ("epoch", "sample") if d in tt.dims]), keep)
    n = tt[size_dim].values.astype(float)
    ndim = hv.Dimension(size_dim, label=f"training-set size ({size_dim})")
    tdim = hv.Dimension("tau", label="tau (training time)")
    from .claims.timescale_slope import slope_claims

    # the legend says "untestable" without its reason (too few runs: the claims table says it in full)
    verdicts = {c.labels["time scale"]: c.verdict.split(":")[0] for c in slope_claims(tt)}
    parts = {}
    for name, colour, shift in (("tau_gen", _PALETTE[0], 1 / LAW_OFFSET), ("tau_mem", _PALETTE[3], LAW_OFFSET)):
        tau, lo, cen = tt[name].values, tt[f"{name}_low"].values, tt[f"{name}_censored"].values.astype(bool)
        at = n * shift  # where this tau's markers are drawn
        b, bl, bh = (float(tt[f"{name}_slope{s}"]) for s in ("", "_low", "_high"))
        verdict = verdicts[name]
        shown = [round(v, 2) + 0.0 for v in (b, bl, bh)]  # + 0.0: a -1e-30 from the optimizer reads 0.00, not -0.00
        law = (f"{name}: b = {shown[0]:.2f} [{shown[1]:.2f}, {shown[2]:.2f}] ({verdict})" if np.isfinite(b)
               else f"{name}: no fit ({verdict})")
        ok = np.isfinite(tau) & ~cen
        cen = cen & np.isfinite(tau)
        layers = []
        if ok.any():
            layers.append(both(hv.Scatter((at[ok], tau[ok]), ndim, tdim), color=colour, logx=True, logy=True).opts(
                hv.opts.Scatter(marker="o", s=30, backend="matplotlib"), hv.opts.Scatter(size=7, backend="bokeh")))
            low = np.where(np.isfinite(lo) & (lo > 0), lo, tau)
            layers.append(hv.ErrorBars((at[ok], tau[ok], (tau - low)[ok], np.zeros(ok.sum())), ndim,
                                       [tdim, "neg", "pos"]).opts(
                hv.opts.ErrorBars(edgecolor=colour, backend="matplotlib"), hv.opts.ErrorBars(color=colour, backend="bokeh")))
        if cen.any():
            layers.append(both(hv.Scatter((at[cen], tau[cen]), ndim, tdim), color=colour, logx=True, logy=True).opts(
                hv.opts.Scatter(marker="^", s=40, backend="matplotlib"),
                hv.opts.Scatter(marker="triangle", size=9, backend="bokeh")))
        if np.isfinite(b):
            a = float(tt[f"{name}_intercept"])
            grid = np.geomspace(n.min(), n.max(), 20)
            layers.append(_styled_curve(hv.Curve((grid, np.exp(a) * grid ** b), ndim, tdim),
                                        {"color": colour, "linestyle": "--", "line_dash": "dashed"}))
        if layers:
            parts[law] = hv.Overlay(layers)
    if not parts:
        raise SkipRendering("no tau_gen or tau_mem to draw: every one is NaN")
    return both(hv.NdOverlay(parts, kdims=["law"], sort=False), title="time scales against n (triangles: lower "
                "bounds)", legend_position="right", logx=True, logy=True).opts(
        hv.opts.NdOverlay(fig_inches=(9.5, 3.8), aspect=1.3, backend="matplotlib"),
        hv.opts.NdOverlay(width=700, height=380, backend="bokeh"))


def _curve_overlay(curves: dict, title: str) -> hv.NdOverlay:
    """One curve per cell (``curves``: {cell label: styled curve}) with the legend to the right of the axes:
    6.5 x 3.8 inches on matplotlib (~1000 px wide at ``DPI``), wider where long labels would make the legend more
    than a third of the figure, the legend in one column up to 14 cells, two beyond."""
    over = both(hv.NdOverlay(curves, kdims=["cell"], sort=False), title=title, legend_position="right")
    ncols = 1 if len(curves) <= 14 else 2
    legend = ncols * (max(map(len, map(str, curves)), default=0) / LEGEND_CHARS_PER_INCH + 0.7)  # inches
    width = max(6.5 + 1.6 * (ncols - 1), 3 * legend)
    return over.opts(hv.opts.NdOverlay(fig_inches=(width, 3.8), aspect=1.6, legend_cols=ncols,
                                       backend="matplotlib"),
                     hv.opts.NdOverlay(width=800, height=380, backend="bokeh"))


def phase_time_hist(ds: xr.Dataset, *, which: str = "reach_time", r: float = 0.5, bins: int = 30,
                    collapse: bool = True) -> hv.NdLayout:
    """Histograms of a phase time (``reach_time``, ``align_time``, ``slide_chord``) per cell; with ``collapse``
    (default) cells whose values are identical share one panel (:func:`identical_groups`, :func:`group_title`)."""
    ph = analysis.phase_times(ds, r=r)[which].compute()
    run = ordered_cells(ds)
    groups = identical_groups(run, [ph.sel(c).values for c in run]) if collapse else [[c] for c in run]
    items = {}
    for group in groups:
        v = ph.sel(group[0]).values
        v = v[np.isfinite(v)]
        if v.size == 0:
            continue
        freq, edges = np.histogram(v, bins=bins)
        items[group_title(ds, group)] = hv.Histogram((edges, freq), kdims=[_value_dim(
            which, which.replace("_", " "), ph.attrs.get("units", ""))], vdims=["count"])
    ncols = max(1, min(3, len(items)))
    nrows = -(-len(items) // ncols)
    layout = hv.NdLayout(items, kdims=["cell"], sort=False).cols(ncols)
    layout = both(layout, title=f"{which.replace('_', ' ')} per cell (r = {r})")
    inches = _grid_inches(list(items), ncols, nrows, col=2.8, row=2.2)
    for key in layout.keys():  # the panel's title: its cells in words, not "cell: ..."
        # one panel: holoviews draws no layout title above it, so the panel says what it is
        layout[key] = both(layout[key], title=key if len(items) > 1 else
                           f"{which.replace('_', ' ')} (r = {r}), {key}")
    return fixed_size(layout.opts(hv.opts.NdLayout(fig_inches=inches, backend="matplotlib"),
                                  hv.opts.Histogram(width=260, height=200, backend="bokeh")), inches)


#: the memorization measures a phase diagram can show: name -> (function, description)
PHASE_METRICS = {
    "memorized": ("memorization_fraction", "memorized share (d1/d2 < 1/3)"),
    "near_mode": ("near_mode_fraction", "near-mode share (within 0.5 of a training point)"),
}


def phase_diagram(ds: xr.Dataset, *, x: str = "width", y: str = "schedule", metric: str = "memorized") -> hv.Overlay:
    """A memorization measure over (x, y) cells, e.g. width x schedule or tau x schedule, values printed.

    ``metric``: ``"memorized"`` (d1/d2 < 1/3, :func:`ridgexr.analysis.memorization_fraction`) or
    ``"near_mode"`` (within 0.5 of a training point, the paper's count,
    :func:`ridgexr.analysis.near_mode_fraction`).

    Drawn as an ``hv.Image`` on integer positions with labelled ticks (plus the values as
    text), not as ``hv.HeatMap``: holoviews' matplotlib HeatMap draws categorical cells
    flipped against their tick labels, which put values in the wrong cells of the PNG.
    Other cell dims are fixed at their first label that is run (a store with a ``model``
    dimension masks the combinations a block does not use).
    """
    check_option(metric, "metric", PHASE_METRICS)
    func, label = PHASE_METRICS[metric]
    memo = getattr(analysis, func)(ds)[metric].compute()
    if "cell_applies" in ds:
        memo = memo.where(ds["cell_applies"].compute())
    for d in [d for d in memo.dims if d not in (x, y)]:
        memo = memo.isel({d: memo.notnull().argmax(d)})  # per (x, y): the first label that was run
    memo = memo.transpose(y, x)
    xl, yl = [str(v) for v in memo[x].values], [str(v) for v in memo[y].values]
    z = memo.values.astype(float)
    # an array with explicit bounds (row 0 on top), so one width or one schedule still has extent
    share = hv.Dimension(metric, label=f"{metric.replace('_', '-')} share", range=(0.0, 1.0))  # the colour bar's words
    img = hv.Image(z[::-1], bounds=(-0.5, -0.5, len(xl) - 0.5, len(yl) - 0.5), kdims=[x, y], vdims=[share],
                   label=label)
    img = both(img, xticks=list(enumerate(xl)), yticks=list(enumerate(yl)), clim=(0.0, 1.0), cmap="viridis",
               colorbar=True).opts(tools=["hover"], backend="bokeh")
    xx, yy = np.meshgrid(np.arange(len(xl)), np.arange(len(yl)))
    # each value in black or white, whichever contrasts more with its cell's colour (white on yellow is unreadable)
    ink = np.array([annotation_colour(v) for v in z.ravel()])
    values = np.array([f"{v:.2f}" for v in z.ravel()])
    xs, ys = xx.ravel(), yy.ravel()  # z[i, j] is drawn at (j, i): the image holds z[::-1] with row 0 on top
    texts = [hv.Labels((xs[ink == c], ys[ink == c], values[ink == c]), kdims=[x, y], vdims=["value"]).opts(
        hv.opts.Labels(text_color=c, backend="bokeh"), hv.opts.Labels(color=c, backend="matplotlib"))
        for c in ("black", "white") if (ink == c).any()]
    ticks = dict(xticks=list(enumerate(xl)), yticks=list(enumerate(yl)))  # on the overlay too: bokeh reads its axes there
    # the axes name x and y; a title that repeats them does not fit above the frame
    over = hv.Overlay([img, *texts])
    inches = (max(3.6, 1.1 * len(xl) + 2.0), max(2.6, 0.6 * len(yl) + 1.4))
    return both(over, title=label, **ticks).opts(width=620, height=360, backend="bokeh").opts(
        hv.opts.Overlay(fig_inches=inches, aspect=inches[0] / inches[1] * 0.8, backend="matplotlib"))


def _luminance(rgb) -> float:
    """Relative luminance (WCAG 2) of an sRGB colour (components in [0, 1])."""
    c = np.asarray(rgb, dtype=float)[:3]
    c = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(c @ [0.2126, 0.7152, 0.0722])


def contrast_ratio(a, b) -> float:
    """WCAG 2 contrast ratio of two colours (any matplotlib colour), from 1 (same) to 21 (black on white)."""
    import matplotlib.colors as mcolors

    la, lb = sorted((_luminance(mcolors.to_rgb(a)), _luminance(mcolors.to_rgb(b))), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def annotation_colour(value: float, cmap: str = "viridis", clim: tuple = (0.0, 1.0)) -> str:
    """``"black"`` or ``"white"``, whichever contrasts more with ``value``'s colour on ``cmap`` (a NaN cell is
    drawn white: black)."""
    import matplotlib

    if not np.isfinite(value):
        return "black"
    bg = matplotlib.colormaps[cmap]((value - clim[0]) / (clim[1] - clim[0]))
    return "black" if contrast_ratio("black", bg) >= contrast_ratio("white", bg) else "white"


def mode_count_bars(ds: xr.Dataset, *, r: float = 0.5, collapse: bool = True) -> hv.Overlay:
    """Share of final samples within ``r`` of a training point (alpha_t x_i) per cell, as bars with their 95 %
    Wilson intervals and their values printed above them (a share of zero is a printed 0 and a line on the
    axis, not a missing bar); a linear axis from 0 to 1.

    Values: :func:`ridgexr.analysis.near_mode_fraction` (the paper's count at ``r`` = 0.5; the same share as
    :func:`ridgexr.analysis.mode_counts`' ``share_any``).  With ``collapse`` (default) cells with identical shares
    and intervals (:func:`identical_groups`: the exact denoiser at every width) are one bar, named for all of them.
    """
    nm = analysis.near_mode_fraction(ds, r=r).compute()
    run = ordered_cells(ds)
    values = [np.array([float(nm[v].sel(c)) for v in ("near_mode", "near_mode_low", "near_mode_high")]) for c in run]
    groups = _groups(ds, "final", collapse)  # cells whose final samples are identical, not merely their shares
    first = {tuple(c.values()): v for c, v in zip(run, values)}
    # short labels (no overlap): the exact denoiser by its name, other cells by their labels
    names = [("exact" if is_exact_cell(g[0]) else " / ".join(str(v) for v in g[0].values())) for g in groups]
    shares = [first[tuple(g[0].values())] for g in groups]
    cell_dim = hv.Dimension("cell", label=" / ".join(d for d in run[0]))
    share_dim = _value_dim("share", f"share within {r:g} of a training point", "1")
    bars = hv.Bars([(n, v[0]) for n, v in zip(names, shares)], kdims=[cell_dim], vdims=[share_dim])
    errors = hv.ErrorBars([(n, v[0], v[0] - v[1], v[2] - v[0]) for n, v in zip(names, shares)], kdims=[cell_dim],
                          vdims=[share_dim, "neg", "pos"])
    # each value printed just above its interval: a zero share is visible as its number
    texts = hv.Labels([(n, min(v[2], 1.0) + 0.02, f"{v[0]:.2f}") for n, v in zip(names, shares)],
                      kdims=[cell_dim, share_dim], vdims=["value"])
    rotation = 90 if max(map(len, names)) > 12 else 45 if len(names) > 6 else 0
    bars = both(bars, xrotation=rotation)
    errors = errors.opts(hv.opts.ErrorBars(color="black", linewidth=1.2, capsize=3, backend="matplotlib"),
                         hv.opts.ErrorBars(color="black", line_width=1.2, backend="bokeh"))
    texts = texts.opts(hv.opts.Labels(text_font_size="9pt", text_baseline="bottom", text_color="black", backend="bokeh"),
                       hv.opts.Labels(size=FONT_SIZE - 1, color="black", verticalalignment="bottom",
                                      backend="matplotlib"))
    # edged bars on an axis from just below 0: a zero share is a black line above the axis
    bars = bars.opts(hv.opts.Bars(edgecolor="black", backend="matplotlib"),
                     hv.opts.Bars(line_color="black", backend="bokeh"))
    title = f"share of final samples within {r:g} of a training point (95 % intervals)"
    over = both(bars * errors * texts, title=title, ylim=(-0.03, 1.12), xrotation=rotation)
    width = max(500, 56 * len(names))
    inches = (max(6.5, 0.62 * len(names) + 2.0), 3.8)
    return over.opts(width=width, height=360, backend="bokeh").opts(
        hv.opts.Overlay(fig_inches=inches, aspect=(inches[0] - 1.2) / (inches[1] - 1.6), backend="matplotlib"))


def theory_scatter(ds: xr.Dataset, *, cells: Sequence[dict] | None = None) -> hv.NdLayout:
    """Slide vs time-integrated tangential residual per trajectory, per cell."""
    tc = analysis.theory_check(ds).compute()
    items = {}
    for cell in cells or ordered_cells(ds):
        c = tc.sel(cell)
        items[_label(cell)] = hv.Scatter((c["integrated_tangent"].values, c["slide_chord"].values),
                                         kdims=["integrated tangential residual"], vdims=["slide (chord)"])
    return hv.NdLayout(items, kdims=["cell"], sort=False).cols(3)


def is_mnist(ds: xr.Dataset) -> bool:
    """Whether the store's training set is MNIST latents (attr ``dataset_provenance``)."""
    return json_attr(ds, "dataset_provenance").get("dataset") == "mnist"


def _decoder(ds: xr.Dataset):
    from .autoencoder import load_vae

    prov = json_attr(ds, "dataset_provenance")
    if prov.get("dataset") not in ("mnist", "images") or "vae_cache" not in prov:
        raise ValueError("decoded plots need a store of VAE latents (attr dataset_provenance: dataset 'mnist' or "
                         "'images' with a vae_cache)")
    model = load_vae(prov["vae_cache"])
    hw = tuple(prov.get("image_hw", (28, 28)))

    def decode(z: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return model.decode(torch.tensor(z, dtype=torch.float32)).double().numpy().reshape(-1, *hw)

    return decode


def is_image_store(ds: xr.Dataset) -> bool:
    """Whether a store's points are images: pixel space (attr ``image_shape``) or VAE latents (a ``vae_cache``)."""
    return "image_shape" in ds.attrs or "vae_cache" in json_attr(ds, "dataset_provenance")


def _to_images(ds: xr.Dataset):
    """(points (M, d) -> images (M, H, W) in [0, 1]) of an image store: pixel stores reshaped by
    ``image_shape`` (first channel) and mapped from the entry's pixel scale to [0, 1] (clipped);
    latent stores decoded by the cached VAE."""
    if "image_shape" not in ds.attrs:
        return _decoder(ds)
    c, h, w = (int(v) for v in ds.attrs["image_shape"])
    symmetric = json_attr(ds, "dataset_provenance").get("scale") == "symmetric"

    def show(x: np.ndarray) -> np.ndarray:
        img = np.asarray(x, dtype=float).reshape(-1, c, h, w)[:, 0]
        return np.clip((img + 1) / 2 if symmetric else img, 0.0, 1.0)

    return show


def _grid(images: np.ndarray, pad: int = 1, fill: float = np.nan) -> np.ndarray:
    """Tile images (rows, cols, H, W) into one canvas with ``pad`` pixels of ``fill`` between them."""
    rows, cols, h, w = images.shape
    canvas = np.full((rows * (h + pad) - pad, cols * (w + pad) - pad), fill)
    for r in range(rows):  # a handful of tiles
        for c in range(cols):
            canvas[r * (h + pad):r * (h + pad) + h, c * (w + pad):c * (w + pad) + w] = images[r, c]
    return canvas


def image_grid_values(ds: xr.Dataset, cell: dict | None = None, *, n_samples: int = 6, n_times: int = 4,
                      steps: list[int] | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The image grid of :func:`image_grid` as numbers: (canvas (rows, cols) in [0, 1], NaN between
    tiles; the times shown (n_times,); the cell).

    Rows are the first ``n_samples`` trajectories; for each of ``n_times`` recorded steps (from the
    first to the last, evenly spaced; or the store steps ``steps``) three columns: the state x / alpha_t,
    its ridge projection / alpha_t and the nearest training point (argmin_i |x - alpha_t x_i|, over the
    cell's training set).  A store with the scheduler's final output (``final_sample``, t = 0) gets
    three more columns at t = 0: that output, an empty tile (p_0 has no ridge) and its nearest
    training point.  Pixel stores show the pixels; latent stores the VAE decoding of the latents.
    """
    from .analysis.arrays import nearest_two

    if not is_image_store(ds):
        raise ValueError("image grids need an image store (attr image_shape, or VAE latents)")
    cell = dict(cell) if cell is not None else store_cells(ds)[0]
    show = _to_images(ds)
    if steps is None:
        steps = np.unique(np.linspace(0, ds.sizes["step"] - 1, n_times).round().astype(int))
    steps = np.asarray(steps, dtype=int)
    sub = ds.sel(cell).isel(step=steps, sample=slice(0, n_samples))
    alpha = sub["alpha"].values[None, :, None]
    x = sub["trajectory"].transpose("sample", "step", "dim").values / alpha  # (n, k, d)
    proj = sub["ridge_projection"].transpose("sample", "step", "dim").values / alpha
    times = sub["t"].values
    if "final_sample" in ds.variables:  # the scheduler's output at t = 0: no ridge projection there
        final = ds["final_sample"].sel(cell).isel(sample=slice(0, n_samples)).transpose("sample", "dim").values
        x = np.concatenate([x, final[:, None]], 1)
        proj = np.concatenate([proj, np.full_like(final[:, None], np.nan)], 1)
        times = np.append(times, 0.0)
    train = ds["train_data"].values
    if "n_train" in cell:
        train = train[:int(cell["n_train"])]
    _, _, idx = nearest_two(x, train)  # |x/alpha - x_i| = |x - alpha x_i| / alpha: the same argmin
    tiles = np.stack([show(v.reshape(-1, v.shape[-1])).reshape(x.shape[:2] + show(train[:1]).shape[1:])
                      for v in (x, proj, train[idx.reshape(-1)].reshape(x.shape))], 2)  # (n, k, 3, H, W)
    n, k = x.shape[:2]
    tiles = np.where(np.isfinite(tiles), tiles, np.nan)
    return _grid(tiles.reshape(n, 3 * k, *tiles.shape[-2:])), times, cell


def sample_gallery_values(ds: xr.Dataset, *, n: int = 8) -> tuple[np.ndarray, list[str]]:
    """The sample gallery of :func:`sample_gallery` as numbers: (canvas (rows, cols) in [0, 1], NaN between
    tiles; the row labels).

    One row per run cell (reading order, :func:`ordered_cells`): its first ``n`` final samples -- the
    scheduler's output at t = 0 where the store has it (``final_sample``), else the last state over
    alpha_t --; a last row of ``n`` training images (the first ``n`` of ``train_data``).  Rows of cells whose
    final samples are not finite are NaN (blank).
    """
    if not is_image_store(ds):
        raise ValueError("sample galleries need an image store (attr image_shape, or VAE latents)")
    show = _to_images(ds)
    last = ds.isel(step=-1)
    rows, labels = [], []
    for cell in ordered_cells(ds):
        if "final_sample" in ds.variables:
            x = ds["final_sample"].sel(cell).isel(sample=slice(0, n)).transpose("sample", "dim").values
        else:
            x = last["trajectory"].sel(cell).isel(sample=slice(0, n)).transpose("sample", "dim").values
            x = x / float(last["alpha"])
        finite = np.isfinite(x).all(1)
        img = np.full((x.shape[0],) + show(ds["train_data"].values[:1]).shape[1:], np.nan)
        if finite.any():
            img[finite] = show(x[finite])
        rows.append(img)
        labels.append(_label(cell))
    rows.append(show(ds["train_data"].values[:n]))
    labels.append("training images")
    width = max(r.shape[0] for r in rows)
    tiles = np.full((len(rows), width) + rows[0].shape[1:], np.nan)
    for i, r in enumerate(rows):
        tiles[i, :r.shape[0]] = r
    return _grid(tiles), labels


def sample_gallery(ds: xr.Dataset, *, n: int = 8, gates: dict | None = None) -> hv.Image:
    """Every cell's final samples, one row each, above real training images (grey images).

    ``gates`` maps a row label (``"model=unet schedule=h"``) to the quality gate's verdict, shown beside it
    in the title.  Values drawn: :func:`sample_gallery_values`.
    """
    ensure_backends()
    canvas, labels = sample_gallery_values(ds, n=n)
    named = [f"{lab} [{gates[lab]}]" if gates and lab in gates else lab for lab in labels]
    title = "final samples, rows top to bottom: " + "; ".join(named)
    img = hv.Image(canvas, bounds=(0, 0, canvas.shape[1], canvas.shape[0]))
    rows, cols = canvas.shape
    inches = (max(6.0, cols * GRID_SCALE / 72), max(2.0, rows * GRID_SCALE / 72 + 0.8))
    return img.opts(
        hv.opts.Image(cmap="gray_r", clim=(0, 1), title=_wrap(title, int(inches[0] * 14)), xaxis=None, yaxis=None,
                      fig_inches=inches, fontsize={"title": 8}, backend="matplotlib"),
        hv.opts.Image(cmap="gray_r", clim=(0, 1), title=title, xaxis=None, yaxis=None,
                      width=max(600, int(cols * GRID_SCALE)), height=max(200, int(rows * GRID_SCALE) + 60),
                      backend="bokeh"))


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, max(20, width)))


#: figure pixels per image pixel of an image grid (matplotlib at hv.save's 72 dpi, of which the axes take
#: ~70 %; bokeh)
GRID_SCALE = 3.5


def image_grid(ds: xr.Dataset, cell: dict | None = None, *, n_samples: int = 6, n_times: int = 4) -> hv.Image:
    """Samples at several t beside their ridge projections and nearest training images (grey images).

    For each of ``n_times`` recorded steps, three columns per sample row: the state x / alpha_t,
    its projection onto the ridge R_t (/ alpha_t) and the nearest training image (and the scheduler's
    final output at t = 0 with its nearest training image, when the store has it); pixel stores
    directly (mapped to [0, 1] from the entry's pixel scale), latent stores decoded by the cached
    VAE (the nearest training latent decoded too).  Values drawn: :func:`image_grid_values`.
    """
    ensure_backends()
    canvas, t, cell = image_grid_values(ds, cell, n_samples=n_samples, n_times=n_times)
    times = ", ".join(f"{v:.3g}" for v in t)
    title = (f"{_label(cell)}: per t in ({times}): sample | ridge projection | nearest training image"
             + (" (decoded)" if "image_shape" not in ds.attrs else ""))
    img = hv.Image(canvas, bounds=(0, 0, canvas.shape[1], canvas.shape[0]))  # a numpy array's row 0 is the top
    rows, cols = canvas.shape
    # ~GRID_SCALE x 0.7 drawn pixels per image pixel (a 28 x 28 tile drawn at ~20 pixels is a blur)
    inches = (max(6.0, cols * GRID_SCALE / 72), max(2.0, rows * GRID_SCALE / 72 + 0.5))
    return img.opts(
        hv.opts.Image(cmap="gray_r", clim=(0, 1), title=title, xaxis=None, yaxis=None, fig_inches=inches,
                      fontsize={"title": 8}, backend="matplotlib"),
        hv.opts.Image(cmap="gray_r", clim=(0, 1), title=title, xaxis=None, yaxis=None,
                      width=max(600, int(cols * GRID_SCALE)), height=max(200, int(rows * GRID_SCALE) + 40),
                      backend="bokeh"))


def _gray(img: hv.Image, title: str) -> hv.Image:
    """Grayscale image options for both backends, no axes."""
    ensure_backends()
    return img.opts(
        hv.opts.Image(cmap="gray_r", title=title, xaxis=None, yaxis=None, fig_inches=(9, 3), fontsize={"title": 8},
                      backend="matplotlib"),
        hv.opts.Image(cmap="gray_r", title=title, xaxis=None, yaxis=None, width=900, height=300,
                      backend="bokeh"))


def _tile(images: np.ndarray, rows: int, cols: int) -> np.ndarray:
    h, w = images.shape[1:]
    canvas = np.ones((rows * (h + 2), cols * (w + 2)))
    for i, img in enumerate(images[: rows * cols]):
        r, c = divmod(i, cols)
        canvas[r * (h + 2):r * (h + 2) + h, c * (w + 2):c * (w + 2) + w] = img
    return canvas


def decoded_samples(ds: xr.Dataset, *, schedule, width, tau=None, n: int = 8, **sweeps) -> hv.Image:
    """Decoded final samples (top) next to their nearest training images in latent space (bottom).

    The title reports the mean latent and pixel distances to those nearest images.
    """
    from .analysis.arrays import nearest_two

    decode = _decoder(ds)
    sel = cell_selection(schedule, width, tau, **sweeps)
    last = ds.sel(sel).isel(step=-1, sample=slice(0, n))
    z = last["trajectory"].values / float(last["alpha"])
    train = ds["train_data"].values
    d1, _, idx = nearest_two(z, train)
    gen, near = decode(z), decode(train[idx])
    pix = np.sqrt(((gen - near) ** 2).sum((1, 2)))
    img = _tile(np.concatenate([gen, near]), 2, len(gen))
    return _gray(hv.Image(img, bounds=(0, 0, img.shape[1], img.shape[0])),  # a numpy array's row 0 is the top
                 f"{_label(sel)}: samples (top) vs nearest training latents (bottom); "
                 f"mean latent dist {np.nanmean(d1):.2f}, pixel dist {np.nanmean(pix):.2f}")


def decoded_trajectories(ds: xr.Dataset, *, schedule, width, tau=None, n_samples: int = 4,
                         n_frames: int = 8, **sweeps) -> hv.Image:
    """A grid of decoded states (rows: trajectories, columns: steps from T to t_min), latents / alpha_t."""
    decode = _decoder(ds)
    sel = cell_selection(schedule, width, tau, **sweeps)
    steps = np.unique(np.linspace(0, ds.sizes["step"] - 1, n_frames).round().astype(int))
    cell = ds.sel(sel).isel(step=steps, sample=slice(0, n_samples))
    z = cell["trajectory"].values / cell["alpha"].values[None, :, None]  # (sample, frame, d)
    imgs = decode(z.reshape(-1, z.shape[-1]))
    grid = _tile(imgs, z.shape[0], z.shape[1])
    return _gray(hv.Image(grid, bounds=(0, 0, grid.shape[1], grid.shape[0])),  # a numpy array's row 0 is the top
                 f"{_label(sel)}: decoded trajectories, t from {float(cell.t[0]):.3g} to {float(cell.t[-1]):.3g}")
