"""An interactive explorer of one store: ``ridgexr explore NAME|STORE`` and ``ds.ridge.explore()``.

A panel app around two holoviews ``DynamicMap`` s (bokeh):

- left: one cell's samples at one diffusion time t, their ridge projections, the scaled
  training points alpha_t x_i and, for 2-D data, the ridge R_t itself (an SCMS-projected
  grid, :func:`ridgexr.plot.ridge_points`); for d > 2 the first two coordinates are drawn
  and the title says so;
- right: that cell's mean ridge distance against t (log-log, the 10-90 % band over samples)
  with a vertical marker at the slider's t;
- below, for image stores (pixel space, or VAE latents decoded): the cell's first samples at the
  slider's t as images, each beside its ridge projection and its nearest training image
  (:func:`ridgexr.plot.image_grid_values` at that step);
- below, for a store that sweeps training time (``epoch``) and ``n_train``: the memorized share tau_mem reads
  (f_mem - f_fresh, else f_mem) and the sample quality
  along training per n with tau_gen and tau_mem (:func:`ridgexr.plot.training_time_curves` of the
  series of the selected schedule, width, ...), a grey line at the selected epoch.

Every cell dimension of the store (``schedule``, ``width``, ``model``, ``tau``, ...) is a
select widget and time is an integer slider over the store's steps; each plot's title says the step it
drew and its t (one source of truth: the slider shows no t of its own that could disagree with the plot).  Nothing is loaded up front but the
training set: each move reads one (cell, step) slice of the lazily opened store
(``isel`` on its dask arrays) and each cell's distance curve is computed when the cell is
first shown (:func:`ridgexr.analysis.distance_curves` on that cell only).

Rendering is local: the bokeh backend is passed where it is used, and holoviews' current
backend and matplotlib's backend are left as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

import holoviews as hv
import numpy as np
import panel as pn
import xarray as xr

from . import analysis
from ._validation import check_bool, check_int
from .schema import CELL_DIMS

__all__ = ["STEP_LABEL", "explorer", "ExplorerData", "samples_overlay", "distance_overlay", "images_view", "serve",
           "LOCAL_ADDRESS", "ExposedWarning", "allowed_hosts", "free_port"]

#: legend labels of the samples plot; the browser test finds the plotted data through them
SAMPLES, PROJECTIONS, TRAINING, RIDGE = "samples", "ridge projections", "alpha_t x_i (training)", "ridge R_t"
#: the label of the time control: a step slider (the plots' titles say its t)
STEP_LABEL = "step"
_COLORS = {SAMPLES: "#1f77b4", PROJECTIONS: "#d62728", TRAINING: "black", RIDGE: "#bbbbbb"}


@dataclass
class ExplorerData:
    """What the explorer reads from a store, one slice at a time.

    Parameters
    ----------
    ds : xarray.Dataset
        A store opened lazily (:func:`ridgexr.open_dataset`) with ``trajectory`` and
        ``ridge_projection`` (cells..., sample, step, dim), ``ridge_distance`` (cells...,
        sample, step), ``train_data`` (train, dim) and the ``t``, ``alpha`` coordinates.
    max_samples : int
        Samples drawn per frame (the first ``max_samples`` of the store).
    """

    ds: xr.Dataset
    max_samples: int = 256

    def __post_init__(self):
        missing = [v for v in ("trajectory", "ridge_projection", "ridge_distance", "train_data") if v not in self.ds]
        if missing:
            raise ValueError(f"`ds` is not a ridgexr store: it has no {', '.join(missing)}")
        self.max_samples = check_int(self.max_samples, "max_samples", min_val=1)
        self.time_dim = self.ds["t"].dims[0]
        self.cell_dims = [d for d in CELL_DIMS if d in self.ds.dims]
        self.d = int(self.ds.sizes["dim"])
        self.train = np.asarray(self.ds["train_data"].values, dtype=float)  # (train, dim): read once
        self.t = np.asarray(self.ds["t"].values, dtype=float)  # (step,)
        self.alpha = np.asarray(self.ds["alpha"].values, dtype=float)  # (step,)
        lim = float(np.abs(self.train[:, :2]).max()) * 1.6 + 1.0 if self.train.size else 4.0
        last = self.ds["trajectory"].isel({self.time_dim: -1, "dim": slice(0, 2)})
        if "diverged" in self.ds:
            last = last.where(~self.ds["diverged"])
        last = np.abs(np.asarray(last.values, dtype=float))
        last = last[np.isfinite(last)]  # one step of every cell: where the samples end (diverged ones aside)
        reach = 1.1 * float(np.quantile(last, 0.99)) if last.size else 0.0
        self.lim = max(lim, reach, 4.0)  # fixed axes over the frames; the prior's N(0, I) at t = T fits too
        self._curves: dict[tuple, tuple] = {}
        self._quality = None
        self._series = None
        #: the cell dims that name a training-time series (all but epoch and n_train)
        self.series_dims = [d for d in self.cell_dims if d not in ("epoch", "n_train")]

    def options(self, dim: str) -> dict:
        """{label text: label} of a cell dimension, in store order (plain Python values)."""
        return {str(v): v for v in self.ds[dim].values.tolist()}

    def cell(self, labels: dict) -> xr.Dataset:
        """The lazy Dataset of one cell (``labels``: {cell dim: label})."""
        return self.ds.sel({d: labels[d] for d in self.cell_dims})

    def frame(self, labels: dict, step: int) -> dict[str, np.ndarray]:
        """One (cell, step) slice: {legend label: (n, 2) points}, the first two coordinates.

        Reads ``trajectory`` and ``ridge_projection`` of that cell and step only.
        """
        sl = self.cell(labels).isel({self.time_dim: int(step), "sample": slice(0, self.max_samples)})
        return {SAMPLES: np.asarray(sl["trajectory"].values, dtype=float)[:, :2],
                PROJECTIONS: np.asarray(sl["ridge_projection"].values, dtype=float)[:, :2],
                TRAINING: self.train[:, :2] * self.alpha[int(step)]}

    @property
    def is_image(self) -> bool:
        """Whether the store's points are images (pixel space, or VAE latents)."""
        from .plot import is_image_store

        return is_image_store(self.ds)

    def image_frame(self, labels: dict, step: int, n_samples: int = 6) -> np.ndarray:
        """The image grid (rows, cols) in [0, 1] of one (cell, step): per row a sample / alpha_t, its ridge
        projection / alpha_t and its nearest training image (:func:`ridgexr.plot.image_grid_values`)."""
        from .plot import image_grid_values

        cell = {d: labels[d] for d in self.cell_dims}
        n = min(int(n_samples), self.max_samples, int(self.ds.sizes["sample"]))
        return image_grid_values(self.ds, cell, n_samples=n, steps=[int(step)])[0]

    def has_run(self, labels: dict) -> bool:
        """Whether the cell is complete (``cell_complete``; a masked or unfinished cell is drawn empty)."""
        if "cell_complete" not in self.ds:
            return True
        return bool(self.ds["cell_complete"].sel({d: labels[d] for d in self.cell_dims}).values)

    def quality_text(self, labels: dict) -> str:
        """Markdown: the cell's sample quality and the quality gate's verdict (:func:`ridgexr.quality.sample_quality`;
        docs/quality.md), or why there is none."""
        if not any(str(n).startswith("quality_") for n in self.ds.data_vars):
            return "**sample quality**: not stored (a store of schema < 1.7)"
        if self._quality is None:
            from .quality import sample_quality

            self._quality = sample_quality(self.ds)  # every cell at once: one scalar per cell and measure
        q = self._quality.sel({d: labels[d] for d in self.cell_dims})
        v = {n.removeprefix("quality_"): float(q[n]) for n in q.data_vars if n != "gate"}
        lines = [f"**sample quality: {q.gate.item()}**"]
        if np.isfinite(v.get("nearest_ratio", np.nan)):
            lines.append(f"nearest ratio {v['nearest_ratio']:.3g} [{v['nearest_ratio_lower']:.3g}, "
                         f"{v['nearest_ratio_upper']:.3g}] (gate <= 1.5)")
        if np.isfinite(v.get("class_share", np.nan)):
            bound = f"gate >= {v['class_share_min']:.2f}; " if np.isfinite(v.get("class_share_min", np.nan)) else ""
            lines.append(f"class share {v['class_share']:.2f} [{v['class_share_lower']:.2f}, "
                         f"{v['class_share_upper']:.2f}] ({bound}real images {v['class_share_heldout']:.2f})")
        if np.isfinite(v.get("coverage", np.nan)):
            lines.append(f"coverage of held-out reals {v['coverage']:.2f} (a perfect sampler's "
                         f"{v['coverage_null']:.2f}; gate >= 0.7 of it)")
        if np.isfinite(v.get("frechet", np.nan)):
            lines.append(f"Frechet {v['frechet']:.3g} (floor {v['frechet_floor']:.3g}, ceiling {v['frechet_ceiling']:.3g})")
        if len(lines) == 1:
            lines.append("no measure for this dataset")
        return "\n\n".join(lines)

    def curves(self, labels: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, 10 % quantile, 90 % quantile) of the cell's ridge distance per step, shapes (step,).

        Degenerate ridge frames are masked as in :func:`ridgexr.analysis.distance_curves`;
        computed once per cell (on that cell only).
        """
        key = tuple(labels[d] for d in self.cell_dims)
        if key not in self._curves:
            c = analysis.distance_curves(self.cell(labels), quantiles=(0.1, 0.9)).compute()
            q = c["distance_quantile"]
            self._curves[key] = tuple(np.asarray(v.values, dtype=float) for v in
                                      (c["distance_mean"], q.sel(quantile=0.1), q.sel(quantile=0.9)))
        return self._curves[key]


    def training_series(self) -> dict[tuple, xr.Dataset]:
        """{labels of the cell dims but ``epoch`` and ``n_train``: training_timescales of that series}
        (:func:`ridgexr.report.training_time_series`, computed once); {} for a store that sweeps no training time."""
        if self._series is None:
            from .report import training_time_series

            self._series = {}
            for cell, tt in training_time_series(self.ds):
                # a series names only its dims of size > 1; the key holds every dim's label
                key = tuple(cell.get(d, self.ds[d].values[0].item() if hasattr(self.ds[d].values[0], "item")
                                     else self.ds[d].values[0]) for d in self.series_dims)
                self._series[key] = tt
        return self._series


def training_view(data: ExplorerData, labels: dict) -> pn.pane.HoloViews | pn.pane.Markdown:
    """The memorized share tau_mem reads and quality along training of the selected cell's series
    (:func:`ridgexr.plot.training_time_curves`), a grey line at its epoch."""
    from . import plot

    series = data.training_series()
    tt = series.get(tuple(labels[d] for d in data.series_dims))
    if tt is None:
        return pn.pane.Markdown("**training time**: this cell's series has a checkpoint that did not run", width=480)
    epoch = float(labels["epoch"])
    mark = hv.VLine(epoch).opts(color="grey", line_width=1, backend="bokeh")
    layout = plot.training_time_curves(tt)
    return pn.pane.HoloViews(hv.Layout([panel * mark for panel in layout]).cols(2), backend="bokeh")


def _cell_text(labels: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in labels.items())


def samples_overlay(data: ExplorerData, labels: dict, step: int, show_ridge: bool) -> hv.Overlay:
    """The samples overlay of one (cell, step)."""
    pts = data.frame(labels, step)
    if show_ridge and data.d == 2:
        from .plot import ridge_points

        d_star = int(data.ds.attrs.get("d_star", 1))
        pts = {RIDGE: ridge_points(data.train, float(data.t[step]), d_star=d_star, lim=data.lim)} | pts
    layers = [hv.Points(p, kdims=["x0", "x1"], label=name).opts(color=_COLORS[name], size=4 if name != TRAINING else 6,
                                                                  alpha=1.0 if name == TRAINING else 0.6,
                                                                  backend="bokeh")
              for name, p in pts.items()]
    note = "" if data.d == 2 else f"; first 2 of {data.d} coordinates"
    state = "" if data.has_run(labels) else " (not run)"
    title = f"{_cell_text(labels)}{state}: t = {data.t[step]:.4g} (step {step}){note}"
    return hv.Overlay(layers).opts(
        hv.opts.Overlay(title=title, width=560, height=440, legend_position="right", xlim=(-data.lim, data.lim),
                        ylim=(-data.lim, data.lim), backend="bokeh"))


def distance_overlay(data: ExplorerData, labels: dict, step: int) -> hv.Overlay:
    """The cell's mean ridge distance and its 10-90 % band against t, a marker at the step's t."""
    mean, low, high = data.curves(labels)
    unit = data.ds["ridge_distance"].attrs.get("units", "")
    ydim = hv.Dimension("distance", label="ridge distance", unit=None if unit in ("", "1") else unit)
    tdim = hv.Dimension("t", label="diffusion time t")
    band = hv.Area((data.t, low, high), kdims=[tdim], vdims=[ydim, "distance_high"], label="10-90 % over samples")
    line = hv.Curve((data.t, mean), kdims=[tdim], vdims=[ydim], label="mean")
    marker = hv.VLine(float(data.t[step]))  # no label: the same bokeh Span moves with the slider
    style = dict(logx=True, logy=True, width=420, height=360, backend="bokeh")
    return (band.opts(alpha=0.3, color="#1f77b4", **style) * line.opts(color="#1f77b4", **style)
            * marker.opts(color="#d62728", line_dash="dashed", backend="bokeh")).opts(
        hv.opts.Overlay(title=f"ridge distance, {_cell_text(labels)}: marker at t = {data.t[step]:.4g} (step {step})",
                        legend_position="bottom_right",
                        backend="bokeh"))


def images_view(data: ExplorerData, labels: dict, step: int) -> hv.Image:
    """The image grid of one (cell, step) of an image store: sample | ridge projection | nearest training
    image, one row per sample (grey, 0 white to 1 black)."""
    canvas = data.image_frame(labels, step)
    title = f"{_cell_text(labels)}: t = {data.t[step]:.4g}: sample | ridge projection | nearest training image"
    return hv.Image(canvas, bounds=(0, 0, canvas.shape[1], canvas.shape[0])).opts(
        cmap="gray_r", clim=(0, 1), title=title, xaxis=None, yaxis=None, width=560,
        height=max(160, int(560 * canvas.shape[0] / max(canvas.shape[1], 1))), backend="bokeh")


def explorer(ds: xr.Dataset, *, max_samples: int = 256, show_ridge: bool = True) -> pn.viewable.Viewable:
    """The explorer of a store as a panel object (display it in a notebook, or serve it).

    One select widget per cell dimension, a step slider (the plots' titles give the step's t), the samples plot and the
    distance curves with a t marker (see the module's description).

    Parameters
    ----------
    ds : xarray.Dataset
        A store opened lazily (:func:`ridgexr.open_dataset`).
    max_samples : int
        Samples drawn per frame (the first ``max_samples``).
    show_ridge : bool
        Initial state of the "ridge R_t" checkbox (2-D data only: SCMS on a 40 x 40 grid per
        frame, a fraction of a second for small training sets).

    Returns
    -------
    panel.layout.Row
        Widgets and the two plots.

    Examples
    --------
    >>> import ridgexr                                   # doctest: +SKIP
    >>> ridgexr.open_dataset("two-points").ridge.explore()  # doctest: +SKIP
    """
    show_ridge = check_bool(show_ridge, "show_ridge")
    data = ExplorerData(ds, max_samples)
    hv.renderer("bokeh")  # loads the bokeh plotting classes; leaves hv.Store.current_backend as it was
    cell_widgets = {d: pn.widgets.Select(label=d, options=data.options(d), width=240) for d in data.cell_dims}
    # an integer slider over the store's steps; t is printed in the plots' titles, from the step they drew.  One
    # value, drawn by the browser's own slider: panel's DiscreteSlider (a t label per step) kept its label in
    # Python, updated from both ends, and fast moves left it at a t the plot did not show (issue 42)
    t_slider = pn.widgets.IntSlider(label=STEP_LABEL, start=0, end=len(data.t) - 1, step=1, value=0, width=240)
    ridge_box = pn.widgets.Checkbox(label="ridge R_t (SCMS on a grid)", value=show_ridge and data.d == 2,
                                    disabled=data.d != 2)

    def points(step, ridge, **cell):
        return samples_overlay(data, cell, step, ridge)

    def curve(step, **cell):
        return distance_overlay(data, cell, step)

    samples = hv.DynamicMap(pn.bind(points, step=t_slider, ridge=ridge_box, **cell_widgets))
    curves = hv.DynamicMap(pn.bind(curve, step=t_slider, **cell_widgets))
    name = ds.attrs.get("experiment", ds.attrs.get("title", "store"))
    note = ("" if data.d == 2 else f"\n\nThe data have d = {data.d} coordinates; the plot shows the first two.")
    controls = pn.Column(pn.pane.Markdown(f"### ridgexr explore: {name}\n\nsamples (blue), their ridge projections "
                                          f"(red), alpha_t x_i (black), the ridge R_t (grey, 2-D){note}", width=250),
                         *cell_widgets.values(), t_slider, ridge_box,
                         pn.pane.Markdown(pn.bind(lambda **cell: data.quality_text(cell), **cell_widgets), width=250),
                         width=260)
    plots = pn.Row(pn.pane.HoloViews(samples, backend="bokeh"), pn.pane.HoloViews(curves, backend="bokeh"))
    if data.is_image:  # the images themselves at the slider's t
        images = hv.DynamicMap(pn.bind(lambda step, **cell: images_view(data, cell, step), step=t_slider,
                                       **cell_widgets))
        plots = pn.Column(plots, pn.pane.HoloViews(images, backend="bokeh"))
    if data.training_series():  # a store that sweeps training time and n_train
        plots = pn.Column(plots, pn.bind(lambda **cell: training_view(data, cell), **cell_widgets))
    return pn.Row(controls, plots)


#: the address the explorer listens on unless told otherwise: this machine only
LOCAL_ADDRESS = "127.0.0.1"
#: the host names a browser on this machine sends for :data:`LOCAL_ADDRESS`
LOCAL_HOSTS = ("127.0.0.1", "localhost")
#: addresses that listen on every interface
ANY_ADDRESS = ("", "0.0.0.0", "::")


class ExposedWarning(UserWarning):
    """The explorer listens on an address other machines can reach: anyone who reaches it reads the store."""


def allowed_hosts(address: str) -> tuple[str, ...] | None:
    """The host names (the ``Host`` header without the port) the explorer answers when it listens on ``address``:
    :data:`LOCAL_HOSTS` for the loopback address, the address itself for another one; None (any host) for an
    address that listens on every interface.

    >>> allowed_hosts("127.0.0.1"), allowed_hosts("192.168.1.5"), allowed_hosts("0.0.0.0")
    (('127.0.0.1', 'localhost'), ('192.168.1.5',), None)
    """
    if address in ANY_ADDRESS:
        return None
    if address in LOCAL_HOSTS:
        return LOCAL_HOSTS
    return (address.strip("[]").lower(),)


def free_port(address: str = LOCAL_ADDRESS) -> int:
    """A port that is free on ``address`` now (the operating system's pick)."""
    import socket

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _refuse_foreign_hosts(app, hosts: tuple[str, ...]) -> None:
    """Answer 403 to a request whose ``Host`` names none of ``hosts`` (tornado routes by host first): a page of
    another site that a browser on this machine loads cannot reach the explorer through a DNS name that points
    here (DNS rebinding), and a request that names another host is not served."""
    import re

    from tornado.web import RequestHandler

    class Refused(RequestHandler):
        def prepare(self):
            self.set_status(403)
            self.finish(f"403: this explorer answers requests for {', '.join(hosts)} only")

    pattern = "^(?!(" + "|".join(re.escape(h) for h in hosts) + ")$).*$"
    app.add_handlers(pattern, [(r".*", Refused)])


def serve(ds: xr.Dataset, *, port: int = 0, show: bool = True, title: str = "ridgexr explore",
          address: str = LOCAL_ADDRESS, **kwargs):
    """Serve :func:`explorer` of ``ds`` on ``http://127.0.0.1:<port>/`` until interrupted (blocks).

    Each browser session gets its own explorer.  ``port=0`` picks a free port.  The server listens on ``address``,
    by default the loopback address (this machine only); it answers only requests whose ``Host`` names that address
    (:func:`allowed_hosts`: ``127.0.0.1`` or ``localhost``), and its websocket only pages loaded from there.  Another
    ``address`` (e.g. ``0.0.0.0``: every interface) makes the store readable by whoever reaches the machine: a
    :class:`ExposedWarning` says so.  ``kwargs`` go to :func:`explorer`.
    """
    import warnings

    port = check_int(port, "port", min_val=0, max_val=65535)
    if not isinstance(address, str):
        raise TypeError(f"`address` must be a str; got {type(address).__name__}")
    port = port or free_port(address or "0.0.0.0")
    hosts = allowed_hosts(address)
    if hosts != LOCAL_HOSTS:
        warnings.warn(f"the explorer listens on {address or 'every interface'!r} port {port}: whoever can reach this "
                      "machine there can read the store (the default, 127.0.0.1, is this machine only)",
                      ExposedWarning, stacklevel=2)
    origins = [f"{h}:{port}" for h in hosts] if hosts is not None else ["*"]
    server = pn.serve(lambda: explorer(ds, **kwargs), port=port, address=address, websocket_origin=origins,
                      show=show, title=title, threaded=False, start=False, verbose=False)
    if hosts is not None:
        _refuse_foreign_hosts(server._tornado, hosts)
    server.start()
    try:
        server.io_loop.start()
    except RuntimeError:  # the loop was stopped (Ctrl-C)
        pass
    return server
