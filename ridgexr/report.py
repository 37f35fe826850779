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

from . import analysis, defaults, plot
from .store import CELL_DIMS, cells, is_exact_cell, json_attr

__all__ = ["make_report", "report_figures", "snapshot_cell"]

PAGE = Template("""{% from macros import embed %}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
{{ inline_css }}
{{ inline_js }}
<style>
body { font-family: sans-serif; margin: 1.5em; }
table.ridgexr { border-collapse: collapse; font-size: 0.85em; margin-bottom: 1.5em; }
table.ridgexr td, table.ridgexr th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
table#summary { max-width: 100%; }
table#summary th { white-space: normal; vertical-align: bottom; }
table#summary td { white-space: nowrap; }
figcaption { color: #444; margin: 0.3em 0 1.5em 0; }
</style>
</head>
<body>
<h1>{{ report_title }}</h1>
<p class="description">{{ description }}</p>
{% if quality_table %}<h2>Sample quality per cell</h2>
<p class="quality">{{ quality_note }}</p>
{{ quality_table }}
{% endif %}{% if claims_table %}<h2>Claims</h2>
<p class="claims">{{ claims_source }}</p>
{{ claims_table }}
{% endif %}<h2>Summary per cell (final step)</h2>
{{ summary_table }}
<h2>Figures</h2>
<p class="explore">Interactive: {{ explore_hint }}</p>
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

    The final samples are the last recorded states, or the scheduler's output at t = 0 where the
    store has it (``final_sample``, :func:`ridgexr.analysis.final_state`).  Returns its labels and
    its memorized share.
    """
    final = analysis.final_state(ds) if "final_sample" in ds.variables else ds
    memo = analysis.memorization_fraction(final)["memorized"].compute()
    best, share = None, np.inf
    for cell in cells(ds):
        value = float(memo.sel(cell))
        if cell.get("schedule") != "exact" and value < share:
            best, share = cell, value
    if best is None:
        best = cells(ds)[0]
        share = float(memo.sel(best))
    return best, share


def identical_curves_note(ds: xr.Dataset) -> str:
    """A sentence for the distance figure's caption when every cell's mean ridge distance is the same
    curve (to 1e-9 relative), saying why; an empty string otherwise.

    Every cell draws the same sampler noise (``seeds.sampler``); where no model errs in the normal
    direction (``residual_normal`` zero, as on the two-point set, whose ridge is the x-axis), the
    normal coordinate, hence the distance to the ridge, follows the same path in every cell
    (``residual_normal`` below 1e-6 of the training set's scale counts as zero: the frame's rounding).
    """
    run = cells(ds)
    if len(run) < 2:
        return ""
    mean = analysis.distance_curves(ds, quantiles=(0.5,))["distance_mean"].compute()
    curves = np.stack([np.asarray(mean.sel(c).values, dtype=float) for c in run])
    if not np.allclose(curves, curves[:1], rtol=1e-9, atol=0.0, equal_nan=True):
        return ""
    note = f" The {len(run)} panels are identical: every cell draws the same sampler noise (seeds.sampler)"
    if "residual_normal" in ds:
        worst = float(abs(ds["residual_normal"]).max())
        scale = max(1.0, float(abs(ds["train_data"]).max())) if "train_data" in ds else 1.0
        if worst < 1e-6 * scale:  # rounding of the ridge frame, not a model's error
            note += (f" and no model errs in the normal direction (largest |residual_normal| {worst:.1e}), so the "
                     "normal coordinate, hence the distance to the ridge, follows the same path in every cell")
    return note + "; the cells differ along the ridge (spread, mode counts, memorization below)."


def _summary_html(df) -> str:
    """The summary table as HTML that fits a page: a share and its interval bounds (``x``, ``x_low``,
    ``x_high``) in one column ``x [95 % CI]``, headers with spaces (so they wrap), 3 significant digits."""
    import pandas as pd

    shares = [c for c in df.columns if f"{c}_low" in df.columns and f"{c}_high" in df.columns]
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        if c.endswith(("_low", "_high")) and c.rsplit("_", 1)[0] in shares:
            continue
        if c in shares:
            out[f"{c.replace('_', ' ')} [95 % CI]"] = [f"{v:.2f} [{lo:.2f}, {hi:.2f}]" for v, lo, hi in
                                                    zip(df[c], df[f"{c}_low"], df[f"{c}_high"])]
        else:
            out[c.replace("_", " ")] = [fmt(v) for v in df[c]]
    return out.to_html(index=False, border=0, classes="ridgexr", table_id="summary")


def quality_rows(ds: xr.Dataset):
    """The report's sample-quality table (a DataFrame, one row per run cell in reading order; None for a store
    without quality variables): each measure with its interval and reference values, and the gate's verdict."""
    import pandas as pd

    from .quality import gated_verdict, sample_quality

    if not any(str(n).startswith("quality_") for n in ds.data_vars):
        return None
    q = sample_quality(ds)
    rows = []
    for cell in plot.ordered_cells(ds):
        c = q.sel(cell)
        v = {n.removeprefix("quality_"): float(c[n]) for n in c.data_vars if n != "gate"}
        row = dict(cell)

        def fmt(name, lo, hi, digits="3g"):
            if not np.isfinite(v.get(name, np.nan)):
                return "-"
            return f"{v[name]:.{digits}} [{v[lo]:.{digits}}, {v[hi]:.{digits}}]"

        row["nearest ratio [95 % CI]"] = fmt("nearest_ratio", "nearest_ratio_lower", "nearest_ratio_upper")
        row["class share [95 % CI]"] = fmt("class_share", "class_share_lower", "class_share_upper", "2f")
        row["class share of real images"] = (f"{v['class_share_heldout']:.2f}"
                                             if np.isfinite(v.get("class_share_heldout", np.nan)) else "-")
        row["class share bound"] = (f"{v['class_share_min']:.2f}"
                                    if np.isfinite(v.get("class_share_min", np.nan)) else "-")
        row["coverage (perfect sampler)"] = (f"{v['coverage']:.2f} ({v['coverage_null']:.2f})"
                                             if np.isfinite(v.get("coverage", np.nan)) else "-")
        row["Frechet (floor / ceiling)"] = (f"{v['frechet']:.3g} ({v['frechet_floor']:.3g} / {v['frechet_ceiling']:.3g})"
                                            if np.isfinite(v.get("frechet", np.nan)) else "-")
        row["sliced W2 (null)"] = (f"{v['sliced_wasserstein']:.3g} ({v['sliced_wasserstein_null']:.3g})"
                                   if np.isfinite(v.get("sliced_wasserstein", np.nan)) else "-")
        row["samples used"] = f"{v.get('n_finite', np.nan):.0f}" if np.isfinite(v.get("n_finite", np.nan)) else "-"
        row["decision size"] = f"{v['gate_size']:.0f}" if np.isfinite(v.get("gate_size", np.nan)) else "-"
        row["gate"] = str(c.gate.item())
        row["claims about the cell"] = gated_verdict("testable", row["gate"])
        rows.append(row)
    return pd.DataFrame(rows)


def claim_rows(ds: xr.Dataset):
    """The report's claims table (a DataFrame, one row per claim and cell; None when the store's entry declares
    no claims) and a sentence saying where its criteria come from (:func:`ridgexr.claims.claim_specs`)."""
    from .claims import claim_specs, store_claims
    from .verdicts import claims_frame

    specs, source = claim_specs(ds)
    claims = store_claims(ds, specs) if specs else []
    if not claims:
        return None, source
    note = (f"Each claim's measure, reference, null and criterion are fixed by its kind (docs/claims.md); {source}; "
            "a criterion chosen after the numbers were seen says 'post hoc'. A claim about a network whose samples "
            "fail the quality gate is untestable.")
    return claims_frame(claims).drop(columns=["measure"]), note


QUALITY_NOTE = ("The gate (docs/quality.md): a Fashion-MNIST cell is scored on 320 draws of its own; it generates "
                "when the share of them the classifier puts in the training classes reaches the bound set from the "
                "classifier's measured confusion (a perfect sampler passes 96 % of the time, one with 20 % of its "
                "draws from another class at most 5 %, at the decision size), their median distance to the nearest "
                "training point is at most 1.5 x that of held-out real points, and they cover at least 0.7 of what a "
                "perfect sampler covers of held-out reals; other datasets read the nearest ratio alone. A claim "
                "about a cell that does not generate is untestable. '-': the cell's dataset allows no such measure.")


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


def _explore_hint(ds: xr.Dataset) -> str:
    source = ds.encoding.get("source")
    return (f"ridgexr explore {source}" if source else "ridgexr explore STORE") + \
        " (or ds.ridge.explore() in a notebook) serves an interactive explorer: every cell dimension as a " \
        "widget, a step slider with t in the plot's title, the samples and the cell's distance curve."


def training_time_series(ds: xr.Dataset) -> list[tuple[dict, xr.Dataset]]:
    """[(cell labels, :func:`ridgexr.analysis.training_timescales` of that series)] for a store that sweeps
    training time (``epoch``, >= 2 checkpoints) and ``n_train`` (>= 2 sizes) and keeps the sample quality: one
    series per combination of its other cell dimensions whose cells ran, tau_gen by the quality and rule its
    entry wrote before the run (:func:`ridgexr.claims.timescale_rule`); [] for any other store."""
    from .claims import timescale_rule, with_timescale_quality
    from .quality import AXIS_QUALITY

    if not (ds.sizes.get("epoch", 0) >= 2 and ds.sizes.get("n_train", 0) >= 2 and "nearest_ratio" in ds):
        return []
    spec, _ = timescale_rule(ds)
    if spec.quality != AXIS_QUALITY and spec.quality not in ds:
        return []
    ds = with_timescale_quality(ds, spec)
    others = [d for d in CELL_DIMS if d in ds.dims and d not in ("epoch", "n_train")]
    run = (ds["cell_applies"] & ds["cell_complete"]).compute() if "cell_applies" in ds else ds["cell_complete"]
    out = []
    for idx in np.ndindex(*(ds.sizes[d] for d in others)):
        sel = dict(zip(others, idx))
        if not bool(run.isel(sel).all()):  # a series with a masked or unfinished checkpoint: not drawn
            continue
        cell = {d: ds[d].values[i].item() if hasattr(ds[d].values[i], "item") else ds[d].values[i]
                for d, i in sel.items() if ds.sizes[d] > 1}
        out.append((cell, analysis.training_timescales(ds.isel(sel), quality=spec.quality, rule=spec.rule,
                                                       factor=spec.factor, quality_null=spec.quality_null).compute()))
    return out


def report_figures(ds: xr.Dataset, *, r: float = 0.5, n_frames: int = defaults.REPORT_N_FRAMES) -> dict:
    """The report's figures: {name: (holoviews object, caption)}, in the page's order (see :func:`make_report`).

    Each plot function sizes its own figure; :func:`ridgexr.plot.save_figure` lays it out and writes it.
    """
    plot.ensure_backends()
    memo_cell, memo_share = snapshot_cell(ds) if ds.sizes.get("train", 0) >= 2 else (cells(ds)[0], np.nan)
    figures = {
        "distance_curves": (plot.distance_curves_plot(ds), "Mean distance of the samples to the ridge R_t "
                            "against diffusion time (log-log), one panel per cell; the band spans the 10-90 % "
                            "quantiles over samples." + identical_curves_note(ds)),
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
    explore_hint = _explore_hint(ds)
    x, y = phase_axes(ds)
    if ds.sizes.get("train", 0) >= 2 and x != y:
        figures["phase_diagram"] = (plot.phase_diagram(ds, x=x, y=y), "Share of final samples with d1/d2 < 1/3 "
                                    "(nearest over second-nearest training distance) per cell.")
    if x != y:  # a store of one model block and no other cell dimension has no diagram
        figures["near_mode_diagram"] = (plot.phase_diagram(ds, x=x, y=y, metric="near_mode"),
                                        "Share of final samples within 0.5 of a training point (the paper's "
                                        "memorization count) per cell.")
    if plot.is_mnist(ds):
        picked = [c for c in cells(ds) if not is_exact_cell(c)][:1] + [c for c in cells(ds) if is_exact_cell(c)][:1]
        for i, cell in enumerate(picked):
            figures[f"decoded_samples_{i}"] = (plot.decoded_samples(ds, **cell), f"Decoded samples of {cell}.")
            figures[f"decoded_trajectories_{i}"] = (plot.decoded_trajectories(ds, **cell),
                                                    f"Decoded trajectories of {cell}.")
    if plot.is_image_store(ds):  # an image model's figures start with its samples, beside real images
        quality = quality_rows(ds)
        gates = None if quality is None else {  # quality_rows lists the cells in reading order too
            plot.cell_title(cell): gate for cell, gate in zip(plot.ordered_cells(ds), quality["gate"])}
        figures = {"sample_gallery": (plot.sample_gallery(ds, gates=gates), "The final samples of every cell "
                   "(the scheduler's output at t = 0, else the last state over alpha_t), one row each, above real "
                   "training images; the quality gate's verdict beside each cell's label.")} | figures
    if plot.is_image_store(ds):  # pixel images, or VAE latents decoded
        picked = [c for c in cells(ds) if not is_exact_cell(c)][:1] + [c for c in cells(ds) if is_exact_cell(c)][-1:]
        for i, cell in enumerate(picked):
            figures[f"image_grid_{i}"] = (plot.image_grid(ds, cell), f"Cell {cell}: samples at several t (rows: "
                                          "trajectories), each beside its ridge projection and its nearest "
                                          "training image" + ("; last, the scheduler's output at t = 0 (no "
                                                              "ridge) beside its nearest training image"
                                                              if "final_sample" in ds.variables else "")
                                          + ("" if "image_shape" in ds.attrs else
                                                               ", latents decoded through the VAE") + ".")
    for i, (cell, tt) in enumerate(training_time_series(ds)):
        where = f" ({', '.join(f'{k} {v}' for k, v in cell.items())})" if cell else ""
        figures[f"training_time_{i}"] = (plot.training_time_curves(tt), "Along training time" + where + ": the "
                                         "share of final samples with d1/d2 < 1/3 (f_mem, its bootstrap interval "
                                         "shaded) and the sample quality per training-set size; tau_gen (dashed) "
                                         "and tau_mem (dotted) where reached, with their intervals in the legend "
                                         "(docs/timescales.md).")
        figures[f"timescale_law_{i}"] = (plot.timescale_law(tt), "tau_gen and tau_mem against the training-set "
                                         "size" + where + ", with the fitted law tau ~ n^b, b's interval and the "
                                         "verdict of the criteria fixed before the run (triangles: not reached by "
                                         "the last checkpoint, lower bounds).")
    if ds.sizes["dim"] == 2:
        hm = plot.samples_over_time(ds, **memo_cell, n_frames=n_frames)
        figures["samples"] = (plot.snapshot_grid(hm, cols=2), f"{len(hm)} snapshots over time of the cell {memo_cell}, the one that "
                              f"memorizes least ({memo_share:.0%} of final samples with d1/d2 < 1/3): samples "
                              "(blue), their ridge projections (red), the ridge R_t (grey), alpha_t x_i (black). "
                              "Every cell and step: " + explore_hint)
    return figures


def make_report(ds: xr.Dataset, out_dir: str | Path, *, title: str = "ridgexr report", r: float = 0.5,
                n_frames: int = defaults.REPORT_N_FRAMES) -> dict:
    """Write PNG figures and ``report.html`` for a store's Dataset; returns {name: path}.

    Figures: ridge distance per cell (faceted), tangential spread, reach times, mode counts,
    the memorization phase diagram, and for 2-D data a grid of ``n_frames`` snapshots over
    time of the cell that memorizes least (named in the caption).  Per-cell panels, legend
    entries and summary rows are in reading order (:func:`ridgexr.plot.ordered_cells`).  The
    page says how to open the interactive explorer (:mod:`ridgexr.explore`) of the store.
    """
    from bokeh.embed import file_html
    from bokeh.embed.bundle import bundle_for_objs_and_resources
    from bokeh.resources import INLINE

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = report_figures(ds, r=r, n_frames=n_frames)
    explore_hint = _explore_hint(ds)
    quality = quality_rows(ds)
    claims, claims_source = claim_rows(ds)
    paths = {}
    rendered = {}
    with _quiet():
        for name, (fig, _) in list(figures.items()):
            target = out / f"{name}.png"
            try:  # every plot function sizes its own figure
                plot.save_figure(fig, target)
            except SkipRendering:  # nothing to draw (e.g. no trajectory reached the tube): left out of the page
                del figures[name]
                continue
            except ValueError as exc:  # a log axis with no positive value: every value masked (e.g. all frames
                if "log-scaled" not in str(exc):  # degenerate at d = 784), nothing to draw either
                    raise
                del figures[name]
                continue
            paths[name] = target
            paths[f"{name}_svg"] = target.with_suffix(".svg")
            model = hv.render(fig, backend="bokeh")
            model.name = name
            rendered[name] = model
    summary = analysis.summary_table(ds, r=r).compute().to_dataframe().reset_index()
    keep = [c for c in summary.columns if c in CELL_DIMS] + \
        [c for c in summary.columns if c not in CELL_DIMS + ("quantile", "step", "t", "alpha", "h",
                                                   "sampler_step", "stat")]
    dims = [c for c in keep if c in CELL_DIMS]  # rows in reading order: numbers ascending, text in store order
    position = {d: {v: i for i, v in enumerate(ds[d].values.tolist())} for d in dims}
    summary = summary.sort_values(dims, key=lambda col: col if col.dtype.kind in "iuf" else col.map(position[col.name]),
                                  kind="stable") if dims else summary
    summary_html = _summary_html(summary[keep])
    # BokehJS and the extensions the figures use, inlined; no file references: other packages register models
    # process-wide whose external files bokeh would list (panel's es-module-shims, a path that exists only
    # under panel's server), and the page loads nothing
    bundle = bundle_for_objs_and_resources(list(rendered.values()), INLINE)
    page = file_html(
        list(rendered.values()), resources=INLINE, title=title, template=PAGE,
        template_variables=dict(
            inline_js="\n".join(f"<script>{js}</script>" for js in bundle.js_raw),
            inline_css="\n".join(f"<style>{css}</style>" for css in bundle.css_raw),
            report_title=title, description=ds.attrs.get("description", ""), summary_table=summary_html,
            quality_table="" if quality is None else quality.to_html(index=False, border=0, classes="ridgexr",
                                                                     table_id="quality"),
            quality_note=QUALITY_NOTE,
            claims_table="" if claims is None else claims.to_html(index=False, border=0, classes="ridgexr",
                                                                  table_id="claims"),
            claims_source=claims_source,
            explore_hint=explore_hint,
            figures=[{"name": n, "caption": cap} for n, (_, cap) in figures.items()],
            config_table=_html_table(_kv_table(json_attr(ds, "config")), "config"),
            provenance_table=_html_table(_kv_table(json_attr(ds, "provenance")), "provenance"),
        ))
    html_path = out / "report.html"
    html_path.write_text(page)
    paths["html"] = html_path
    return paths
