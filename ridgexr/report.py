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
from markupsafe import Markup

from . import analysis, defaults, plot
from .schema import CELL_DIMS
from .store.layout import is_exact_cell
from .store.opening import cells, json_attr

__all__ = ["make_report", "report_figures", "snapshot_cell"]

#: the page: every value is escaped (autoescape) but the library's own markup, marked safe where it is made
#: (:class:`markupsafe.Markup`: BokehJS, its CSS, the tables built with escaped cells) or here (bokeh's script and
#: root divs, which bokeh builds from ids and escaped JSON): a title, a description, a label or a caption from a
#: store or a catalog is text, never markup
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
table#claims-glance td.agrees { color: #1a7f37; }
table#claims-glance td.disagrees { color: #cf222e; }
table#claims-glance td.inconclusive { color: #9a6700; }
table#claims-glance td.untestable { color: #57606a; }
details { margin-bottom: 1.5em; }
</style>
</head>
<body>
<h1>{{ report_title }}</h1>
<p class="description">{{ description }}</p>
{% if claims_glance %}<h2>Claims</h2>
<p class="claims">{{ claims_source }}</p>
{{ claims_glance }}
<details><summary>Every claim with its statement, criterion, interval and null</summary>
{{ claims_table }}
</details>
{% endif %}<h2>Figures</h2>
<p class="explore">Interactive: {{ explore_hint }}</p>
{% for fig in figures %}
<figure id="{{ fig.name }}">
{{ embed(roots[fig.name]) | safe }}
<figcaption>{{ fig.caption }}</figcaption>
</figure>
{% endfor %}
<h2>Summary per cell (final step)</h2>
{{ summary_table }}
{% if quality_table %}<h2>Sample quality per cell</h2>
<p class="quality">{{ quality_note }}</p>
{{ quality_table }}
{% endif %}<h2>Configuration</h2>
{{ config_table }}
<h2>Provenance</h2>
{{ provenance_table }}
{{ plot_script | safe | indent(4) }}
</body>
</html>
""", autoescape=True)


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


def _html_table(rows: list[tuple[str, str]], css_id: str) -> Markup:
    """A two-column table of ``rows`` (key, value), each cell escaped."""
    import html

    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return Markup(f'<table class="ridgexr" id="{html.escape(css_id)}"><tbody>{body}</tbody></table>')


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


def _why_identical(ds: xr.Dataset, group: list[dict], what: str) -> str:
    """Why the cells of ``group`` draw identical ``what`` (:func:`ridgexr.plot.drawn_per_cell`)."""
    varying = [d for d in group[0] if len({c[d] for c in group}) > 1]
    if all(is_exact_cell(c) for c in group) and set(varying) <= set(plot.EXACT_FREE_DIMS):
        return (f"the exact denoiser has no {' or '.join(varying)}: its cells are one model, sampled with the same "
                "noise (seeds.sampler)")
    why = "these cells draw the same sampler noise (seeds.sampler)"
    if what in ("distance", "reach_time") and "residual_normal" in ds:
        worst = float(abs(ds["residual_normal"].sel({d: [c[d] for c in group] for d in varying}) if varying else
                          ds["residual_normal"]).max())
        scale = max(1.0, float(abs(ds["train_data"]).max())) if "train_data" in ds else 1.0
        if worst < 1e-6 * scale:  # rounding of the ridge frame, not a model's error
            why += (f" and no model errs in the normal direction (largest |residual_normal| {worst:.1e}), so the "
                    "normal coordinate, hence the distance to the ridge, follows the same path in every cell")
            return why + ("; the cells differ along the ridge (the figures above)" if len(group) == len(cells(ds))
                          else "")
    return why + ("; the cells differ along the ridge (the figures above)" if len(group) == len(cells(ds)) else
                  "; their models move the samples alike")


def identical_panels_note(ds: xr.Dataset, what: str, *, noun: str = "panels", r: float = 0.5) -> str:
    """A sentence for a per-cell figure's caption naming the cells drawn once because what the figure draws for
    them is identical (:func:`ridgexr.plot.identical_groups` of :func:`ridgexr.plot.drawn_per_cell`), and why;
    an empty string when every cell is drawn.  ``what``: as :func:`ridgexr.plot.drawn_per_cell`."""
    run = plot.ordered_cells(ds)
    if len(run) < 2:
        return ""
    drawn = plot.drawn_per_cell(ds, what, r=r)
    groups = [g for g in plot.identical_groups(run, [drawn[tuple(c.values())] for c in run]) if len(g) > 1]
    if len(groups) == 1 and len(groups[0]) == len(run):
        return (f" The {len(run)} {noun} are identical and drawn as one: "
                + _why_identical(ds, groups[0], what) + ".")
    parts = [f"{plot.group_title(ds, g)} ({len(g)} cells): {_why_identical(ds, g, what)}" for g in groups]
    return f" Identical {noun} are drawn once: " + "; ".join(parts) + "." if parts else ""


def identical_curves_note(ds: xr.Dataset) -> str:
    """The distance figure's :func:`identical_panels_note`: its panels drawn once, and why (every cell of a store
    where no model errs in the normal direction, as on the two-point set, whose ridge is the x-axis: the normal
    coordinate, hence the distance to the ridge, follows the same path in every cell; the exact denoiser at
    every width: one model)."""
    return identical_panels_note(ds, "distance")


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
    return Markup(out.to_html(index=False, border=0, classes="ridgexr", table_id="summary", escape=True))


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
    table, _, note = claims_by_spec(ds)
    return table, note


def claims_by_spec(ds: xr.Dataset):
    """(the claims table as :func:`claim_rows` gives it, or None; [(a short name of each declared claim: its kind
    and times, its claims)], in the entry's order; the sentence on where the criteria come from)."""
    from .claims import claim_specs, store_claims
    from .verdicts import claims_frame

    specs, source = claim_specs(ds)
    per_spec = [(_spec_name(spec), store_claims(ds, [spec])) for spec in specs]
    claims = [c for _, found in per_spec for c in found]
    if not claims:
        return None, [], source
    note = (f"Each claim's measure, reference, null and criterion are fixed by its kind (docs/claims.md); {source}; "
            "a criterion chosen after the numbers were seen says 'post hoc'. A claim about a network whose samples "
            "fail the quality gate is untestable.")
    return claims_frame(claims).drop(columns=["measure"]), [(n, f) for n, f in per_spec if f], note


def _spec_name(spec) -> str:
    """A declared claim in a few words: its kind and times (``"slide-slower, t 0.1 -> 0.01"``)."""
    times = " -> ".join(f"{v:g}" for v in spec.t or [])
    return spec.kind + (f", t {times}" if times else "")


#: the words a verdict starts with (the rest: "untestable: why", a post hoc mark)
VERDICT_CLASSES = ("agrees", "disagrees", "inconclusive", "untestable")


def claims_glance_html(per_spec) -> str:
    """The claims at a glance (HTML): one row per cell, one column per declared claim (and time), each entry the
    verdict and the measured contrast with its interval -- what differs between the cells, before the figures.
    ``per_spec``: :func:`claims_by_spec`'s list."""
    import html

    columns, rows = [], {}
    for name, found in per_spec:
        several = len({x.labels.get("t") for x in found}) > 1  # one claim per time (align): a column per time
        for c in found:
            labels = {k: v for k, v in c.labels.items() if k != "t"}
            col = f"{name.split(',')[0]}, t {c.labels['t']:.3g}" if several else name
            if col not in columns:
                columns.append(col)
            key = tuple(labels.items())
            word = c.verdict.split(":")[0].split(" ")[0]
            text = c.verdict.split(":")[0] if word == "untestable" else \
                f"{c.verdict} {c.row()['measured [95 %]']}"
            rows.setdefault(key, {})[col] = (word if word in VERDICT_CLASSES else "", text)
    dims = list(dict.fromkeys(k for key in rows for k, _ in key))
    head = "".join(f"<th>{html.escape(str(d))}</th>" for d in dims) + "".join(
        f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for key, entries in rows.items():
        labels = dict(key)
        cells_html = "".join(f"<td>{html.escape(str(labels.get(d, '')))}</td>" for d in dims)
        for col in columns:
            cls, text = entries.get(col, ("", ""))
            cells_html += f'<td class="{cls}">{html.escape(text)}</td>'
        body.append(f"<tr>{cells_html}</tr>")
    return (f'<table class="ridgexr" id="claims-glance"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


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


#: the report's figures in the order the page shows them: first what the cells' samples look like (where the
#: cells differ most visibly), then what differs between cells along the ridge (spread, memorization), then reach
#: and align (where the theory expects the cells alike; identical panels drawn once)
FIGURE_ORDER = ("sample_gallery", "final_samples", "image_grid", "decoded_samples", "decoded_trajectories", "samples",
                "training_time", "timescale_law", "spread_curves", "phase_diagram", "near_mode_diagram",
                "mode_counts", "distance_curves", "degenerate_share", "reach_times")


def _figure_rank(name: str) -> int:
    """The position of a figure in :data:`FIGURE_ORDER` (numbered figures by their stem: ``image_grid_0``)."""
    stem = name.rstrip("0123456789").rstrip("_")
    return FIGURE_ORDER.index(stem) if stem in FIGURE_ORDER else len(FIGURE_ORDER)


def report_figures(ds: xr.Dataset, *, r: float = 0.5, n_frames: int = defaults.REPORT_N_FRAMES) -> dict:
    """The report's figures: {name: (holoviews object, caption)}, in the page's order (:data:`FIGURE_ORDER`: the
    samples and what differs between cells first, reach and align after; see :func:`make_report`).

    Per-cell figures draw cells whose values are identical once (:func:`ridgexr.plot.identical_groups`), and
    their captions say which and why (:func:`identical_panels_note`).  Each plot function sizes its own figure;
    :func:`ridgexr.plot.save_figure` lays it out and writes it.
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
        "spread_curves": (plot.spread_curves_plot(ds), "How far the samples slide along the ridge: the mean "
                          "distance from each sample's ridge projection to the nearest scaled training point "
                          "alpha_t x_i, against t; one colour per width, one line style per schedule, the exact "
                          "denoiser (the memorizer, whose samples end on the training points) in black."
                          + identical_panels_note(ds, "spread", noun="curves")),
        "reach_times": (plot.phase_time_hist(ds, which="reach_time", r=r), f"Time at which each trajectory enters "
                        f"and stays in the tube of radius {r} around the ridge."
                        + identical_panels_note(ds, "reach_time", r=r)),
        "mode_counts": (plot.mode_count_bars(ds, r=r), f"Share of final samples within {r} of a training point "
                        "(the paper's memorization count) per cell, with its 95 % Wilson interval; a share of 0 is "
                        "the printed 0.00 and a line on the axis." + identical_panels_note(ds, "final", noun="bars")),
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
        figures["sample_gallery"] = (plot.sample_gallery(ds, gates=gates), "The final samples of every cell "
                                     "(the scheduler's output at t = 0, else the last state over alpha_t), one row "
                                     "each, above real training images; the quality gate's verdict beside each "
                                     "cell's label.")
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
        share = ("share of final samples with d1/d2 < 1/3 less that of fresh draws of the law (f_mem - f_fresh, "
                 "the memorization claims' interval shaded)" if tt.attrs.get("tau_mem_measure") == "f_mem - f_fresh"
                 else "share of final samples with d1/d2 < 1/3 (f_mem, its bootstrap interval shaded)")
        figures[f"training_time_{i}"] = (plot.training_time_curves(tt), "Along training time" + where + ": the "
                                         f"{share} and the sample quality per training-set size; tau_gen (dashed) "
                                         "and tau_mem (dotted) where reached, with their intervals in the legend "
                                         "(docs/timescales.md).")
        figures[f"timescale_law_{i}"] = (plot.timescale_law(tt), "tau_gen and tau_mem against the training-set "
                                         "size" + where + ", with the fitted law tau ~ n^b, b's interval and the "
                                         "verdict of the criteria fixed before the run (triangles: not reached by "
                                         "the last checkpoint, lower bounds).")
    if ds.sizes["dim"] == 2:
        figures["final_samples"] = (plot.final_samples_grid(ds), "Where each cell's samples end: the last "
                                    "recorded states (t = t_min) of every cell (blue) on the ridge R_t (grey), "
                                    "with the training points alpha_t x_i (rings); a panel's title says how many "
                                    "samples lie outside the view." + identical_panels_note(ds, "final"))
        hm = plot.samples_over_time(ds, **memo_cell, n_frames=n_frames)
        figures["samples"] = (plot.snapshot_grid(hm, cols=2), f"{len(hm)} snapshots over time of the cell "
                              f"{plot.cell_title(memo_cell)}, the one that memorizes least ({memo_share:.0%} of "
                              "final samples with d1/d2 < 1/3): samples (blue), their ridge projections (small red "
                              "marks under them), the ridge R_t (grey), the training points alpha_t x_i (rings). "
                              "Every cell and step: " + explore_hint)
    return dict(sorted(figures.items(), key=lambda item: _figure_rank(item[0])))


def make_report(ds: xr.Dataset, out_dir: str | Path, *, title: str = "ridgexr report", r: float = 0.5,
                n_frames: int = defaults.REPORT_N_FRAMES) -> dict:
    """Write PNG figures and ``report.html`` for a store's Dataset; returns {name: path}.

    The page leads with what differs between the cells: the entry's claims at a glance (one row per cell, one
    column per claim: verdict and interval; every claim in full below it), then the figures in
    :data:`FIGURE_ORDER` -- for 2-D data the final samples of every cell and a grid of ``n_frames`` snapshots
    over time of the cell that memorizes least, the tangential spread, the memorization shares, then the ridge
    distance and reach times, whose identical panels are drawn once with a note saying why -- then the summary
    per cell, the sample quality (left out when no cell's could be assessed), the configuration and the
    provenance.  Per-cell panels, legend entries and summary rows are in reading order
    (:func:`ridgexr.plot.ordered_cells`).  The page says how to open the interactive explorer
    (:mod:`ridgexr.explore`) of the store.
    """
    from bokeh.embed import file_html
    from bokeh.embed.bundle import bundle_for_objs_and_resources
    from bokeh.resources import INLINE

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = report_figures(ds, r=r, n_frames=n_frames)
    explore_hint = _explore_hint(ds)
    quality = quality_rows(ds)
    if quality is not None and (quality["gate"] == "not assessed").all():
        quality = None  # no cell's quality could be assessed (a point set has no held-out reals): no section
    claims, per_spec, claims_source = claims_by_spec(ds)
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
            inline_js=Markup("\n".join(f"<script>{js}</script>" for js in bundle.js_raw)),  # BokehJS: ours to inline
            inline_css=Markup("\n".join(f"<style>{css}</style>" for css in bundle.css_raw)),
            report_title=title, description=ds.attrs.get("description", ""), summary_table=summary_html,
            quality_table="" if quality is None else Markup(quality.to_html(  # pandas escapes every cell
                index=False, border=0, classes="ridgexr", table_id="quality", escape=True)),
            quality_note=QUALITY_NOTE,
            claims_table="" if claims is None else Markup(claims.to_html(
                index=False, border=0, classes="ridgexr", table_id="claims", escape=True)),
            claims_glance=Markup(claims_glance_html(per_spec)) if per_spec else "",  # escapes every cell itself
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
