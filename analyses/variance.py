"""Generalization through variance: does fitting the noisy DSM target instead of its mean
move samples off the training points, and does the effect vanish as the noise draws grow?

Run:  python analyses/variance.py [--data DIR] [--figures DIR] [--entries ...] [--catalog FILE]
Runs (or resumes) the entries variance-two-points, variance-three-points and variance-ensemble.
variance-ensemble (the fair test of issue 27): per (schedule, width, n_noise) the pooled gap
mass of both targets with intervals over draws, their paired difference, the V-kernel in the
gap, and the criteria of docs/variance.md evaluated.  The other two: per
(schedule, width, n_noise) the near-mode share (within 0.5 of a training point) and the
tangential spread for both targets with the paired DSM - ideal difference and its bootstrap
interval, and writes docs/figures/variance_<entry>.png (the differences against n_noise).
"""

from __future__ import annotations

from pathlib import Path

import holoviews as hv
import numpy as np

from _common import experiment_for, markdown_table, parser, save_png, store_for

from ridgexr import analysis
from ridgexr.claims import ENTRIES_SEEN, KINDS
from ridgexr.claims.gap_mass_correlates import spearman_ci
from ridgexr.claims.gap_mass_grows import GAP_MARGIN
from ridgexr.claims.vkernel_predicts import ANALYTIC_WRITTEN
from ridgexr.verdicts import Claim, Null, claims_markdown


def effect_table(ds):
    eff = analysis.target_effect(ds).compute()
    held = ds.excess_loss.compute()
    df = eff.to_dataframe().reset_index()
    df["excess_dsm"] = [float(held.sel(schedule=s, width=w, n_noise=n, target="dsm").squeeze())
                        for s, w, n in zip(df.schedule, df.width, df.n_noise)]
    df["excess_ideal"] = [float(held.sel(schedule=s, width=w, n_noise=n, target="ideal").squeeze())
                          for s, w, n in zip(df.schedule, df.width, df.n_noise)]
    cols = ["schedule", "width", "n_noise", "near_mode_dsm", "near_mode_ideal", "near_mode_diff", "near_mode_diff_low",
            "near_mode_diff_high", "spread_dsm", "spread_ideal", "spread_diff", "spread_diff_low", "spread_diff_high",
            "excess_dsm", "excess_ideal"]
    return df[[c for c in cols if c in df.columns]]


def effect_figure(df, name: str) -> hv.Layout:
    panels = []
    for var, label, lim in (("near_mode_diff", "near-mode share, DSM - ideal", 1.0),
                            ("spread_diff", "spread along the ridge, DSM - ideal", 1.0)):
        curves, bands = {}, {}
        for (s, w), g in df.groupby(["schedule", "width"]):
            g = g.sort_values("n_noise")
            key = f"w={s}, p={w}"
            curves[key] = hv.Curve((g.n_noise, g[var]), "noise draws per (point, node)", label)
            bands[key] = hv.Area((g.n_noise, g[f"{var}_low"], g[f"{var}_high"]), "noise draws per (point, node)",
                                 [label, "high"]).opts(alpha=0.15, backend="matplotlib")
        zero = hv.HLine(0).opts(color="black", linewidth=0.8, backend="matplotlib")
        panels.append((hv.NdOverlay(bands, kdims=["cell"]) * hv.NdOverlay(curves, kdims=["cell"]) * zero)
                      .opts(logx=True, ylim=(-lim, lim), title=f"{name}: {label}", legend_position="right",
                            aspect=2.5, fontsize={"legend": 7}, backend="matplotlib"))
    # cells whose samples left the data (differences of 1e4) fall off the axis: they are in the tables
    return hv.Layout(panels).opts(sublabel_format="", shared_axes=False, fig_inches=8,
                                  backend="matplotlib").cols(1)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entries", nargs="+", default=["variance-two-points", "variance-three-points",
                                                        "variance-ensemble"])
    ap.add_argument("--catalog", default=None, help="a catalog file holding the entries (default: the built-in ones)")
    ap.add_argument("--step-refinement", action="store_true",
                    help="ensembles: refit the most divergent cells and sample them at 10x the steps (a few minutes), "
                         "and the score noise's correlation across diffusion times")
    ap.add_argument("--prediction", action="store_true",
                    help="ensembles: Delta G predicted by the Gaussian (second-cumulant) approximation from refitted "
                         "draws, against Delta G measured (no store needed; ~40 s per cell on one core)")
    ap.add_argument("--analytic", action="store_true",
                    help="the analytic V-kernel's prediction of Delta G against the 256-draw ensembles with the rows "
                         "fixed (the variance-targets-* entries, run or resumed; the prediction resumable per cell)")
    ap.add_argument("--choose-penalty", action="store_true",
                    help="the pilot that fixes the readout's penalty of the variance-targets-* entries before they "
                         "run (analytic kernel only; prints the rule's table and the chosen value)")
    args = ap.parse_args(argv)
    figs = Path(args.figures)
    if args.choose_penalty:
        penalty, pilot = choose_penalty(experiment_for(ANALYTIC_BASE, args.catalog))
        print(f"\n{markdown_table(pilot)}\n\nchosen penalty: {penalty}")
        (figs.parent / "claims_tables" / "variance-targets-penalty.md").write_text(
            "<!-- generated by analyses/variance.py --choose-penalty (the analytic kernel only); do not edit -->\n\n"
            f"{markdown_table(pilot)}\n\nchosen penalty: **{penalty}**\n")
        return
    if args.analytic:
        analytic_main(args.data, figs, args.catalog,
                      entries=[e for e in args.entries if e in ANALYTIC_ENTRIES] or None)
        return
    if args.prediction:
        for name in args.entries:
            exp = experiment_for(name, args.catalog)
            if exp.training.draws > 1:
                prediction_main(name, exp, figs)
        return
    for name in args.entries:
        ds = store_for(name, args.data, args.catalog)
        if "draw" in ds.dims:  # ensembles over training-noise draws: the fair test
            ensemble_main(name, ds, figs)
            if args.step_refinement:
                table = markdown_table(step_refinement(ds))
                print(f"### {name}: step refinement of the most divergent cells\n\n{table}\n")
                corr = markdown_table(score_noise_correlation(ds), floatfmt=".2f")
                print(f"### {name}: correlation over draws of the score noise, t_min against t\n\n{corr}\n")
                head = f"<!-- generated by analyses/variance.py --step-refinement from the {name} store; do not edit"
                head += " -->"
                (figs.parent / "claims_tables" / f"{name}-steps.md").write_text(f"{head}\n\n{table}\n")
                (figs.parent / "claims_tables" / f"{name}-noise-correlation.md").write_text(f"{head}\n\n{corr}\n")
            continue
        df = effect_table(ds)
        print(f"## {name}: DSM vs ideal target (final step, {ds.sizes['sample']} paired samples)\n")
        print(markdown_table(df))
        print()
        save_png(effect_figure(df, name), figs / f"variance_{name.split('-', 1)[1].replace('-', '_')}.png")
        agg = df.groupby("n_noise")[["near_mode_diff", "spread_diff"]].agg(lambda v: float(np.mean(np.abs(v))))
        print(f"mean |difference| over cells, by n_noise:\n\n{markdown_table(agg.reset_index())}\n")



# ---------------------------------------------------------------------------------------------------------
# The fair test (issue 27): ensembles over training-noise draws, probability-flow ODE, a P/p sweep.

def ensemble_table(ds):
    """Per (schedule, width, n_noise): P, p/P, pooled gap mass of both targets and their paired difference
    (95 % bootstrap intervals over draws), the difference's null (the ideal fit's even minus odd draws), the
    diverged share (diverged samples count as outside the gap: :func:`ridgexr.analysis.gap_mass`), and
    V_gap = the V-kernel's trace averaged over the gap |x_1| < 2 at the smallest probe time."""
    import json

    cfg = json.loads(ds.attrs["config"])
    n_time = cfg["training"]["n_time"]
    n_points = ds.sizes["train"]
    g = analysis.gap_mass(ds, n_boot=2000).compute()
    div = ds.diverged.mean(["draw", "sample"]).compute()
    xg = ds.v_kernel_x.values[:, 0]
    gap = np.abs(xg) < 2
    vk = ds.v_kernel.isel(v_time=0).sum("dim").isel(v_point=np.flatnonzero(gap)).mean("v_point").compute()
    rows = []
    for s in ds.schedule.values:
        for w in ds.width.values:
            for n in ds.n_noise.values:
                sel = dict(schedule=s, width=w, n_noise=n)
                P = n_points * n_time * int(n)
                row = {"w": str(s), "p": int(w), "n_noise": int(n), "P": P, "p/P": int(w) / P}
                for k in ("dsm", "ideal"):
                    gg = g.sel(**sel, target=k)
                    row[f"gap {k} [95% CI]"] = (f"{float(gg.gap_mass):.3f} [{float(gg.gap_mass_low):.3f}, "
                                                f"{float(gg.gap_mass_high):.3f}]")
                gd = g.sel(**sel)
                row["diff"] = float(gd.gap_mass_diff)
                row["diff_low"] = float(gd.gap_mass_diff_low)
                row["diff_high"] = float(gd.gap_mass_diff_high)
                for key in ("", "_low", "_high"):
                    row[f"null{key}"] = float(gd[f"gap_mass_null{key}"])
                row["diverged dsm / ideal"] = (f"{float(div.sel(**sel, target='dsm')):.2f} / "
                                               f"{float(div.sel(**sel, target='ideal')):.2f}")
                n_all = 2 * ds.sizes["draw"] * ds.sizes["sample"]  # both targets' samples of the cell
                row["n diverged"] = int(gd.diverged_count.sum())  # counted outside the gap, not dropped
                row["n samples"] = n_all
                row["draws"] = ds.sizes["draw"]
                row["V_gap dsm"] = float(vk.sel(**sel, target="dsm"))
                row["V_gap ideal"] = float(vk.sel(**sel, target="ideal"))
                rows.append(row)
    import pandas as pd

    return pd.DataFrame(rows), float(ds.v_kernel_t.values[0])


# The criteria of docs/variance.md are the claims registry's kinds (ridgexr.claims): C1 gap-mass-grows, C2
# gap-mass-correlates, C3 gap-mass-vanishes, P1 gaussian-reproduces, P2 excess-fills-gap, each with its margin,
# null, minimum of draws and controls.  This script computes their numbers and the rules over cells.
#: what the null of a cell's Delta G is (:func:`ridgexr.analysis.gap_mass`'s ``gap_mass_null``)
NULL_HOW = ("the same pooled difference between two ensembles of one target (the ideal fit's even draws minus "
            "its odd draws, independent training noise)")


def _spearman_ci(x, y, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Spearman's rho of (x, y) with a percentile-bootstrap interval over the cells
    (:func:`ridgexr.claims.gap_mass_correlates.spearman_ci`)."""
    return spearman_ci(x, y, n_boot=n_boot, seed=seed)[:3]


def _aggregate(verdicts: list[str], rule: str) -> str:
    """C1: agrees when at least half of the cells agree, disagrees when more than half disagree;
    C3: agrees when every cell agrees, disagrees when any disagrees; else (or no cell) inconclusive."""
    if not verdicts:
        return "inconclusive"
    agree, disagree = verdicts.count("agrees"), verdicts.count("disagrees")
    if rule == "half":
        return "agrees" if agree >= len(verdicts) / 2 else "disagrees" if disagree > len(verdicts) / 2 else \
            "inconclusive"
    return "agrees" if agree == len(verdicts) else "disagrees" if disagree else "inconclusive"


def ensemble_claims(df, *, post_hoc: bool = False) -> tuple[list[Claim], list[str], str]:
    """The criteria of docs/variance.md evaluated as the claims registry's kinds (:mod:`ridgexr.claims`).

    Claims: one per cell with p/P >= 1/4 (C1, ``gap-mass-grows``), one per cell with P/p >= 16 (C3,
    ``gap-mass-vanishes``), and two rank correlations over the cells with a bootstrap interval over cells
    (C2, ``gap-mass-correlates``: Delta G with p/P, and with V_gap(dsm) - V_gap(ideal)).  A cell's
    claim rests on its training-noise draws (``n``, the bootstrap's unit) and carries its null (the table's
    ``null`` columns, :data:`NULL_HOW`); its diverged samples (both targets, counted outside the gap) are
    named in the row.  The overall verdict: "agrees" when C1
    (at least half of its cells agree), C2 (both correlations agree) and C3 (every cell agrees) all agree;
    "disagrees" when C1 (more than half of its cells disagree) or the correlation with p/P disagrees; else
    "inconclusive".

    ``post_hoc``: the entry's numbers were seen before the kinds' margins were written (its rows say so).

    Returns (claims, one summary line per criterion, the overall verdict).
    """
    claims = []
    for r in df.to_dict("records"):
        # the interval is a bootstrap over the training-noise draws: n counts draws (draws_to_resolve scales it);
        # the diverged samples are named beside it (counted outside the gap, none excluded)
        labels = {"w": r["w"], "p": int(r["p"]), "n_noise": int(r["n_noise"]), "p/P": f"{r['p/P']:.3g}",
                  "diverged samples": f"{int(r['n diverged'])} of {int(r['n samples'])}"}
        n = int(r["draws"])
        null = Null(r["null"], r["null_low"], r["null_high"], how=NULL_HOW) if "null" in r else None
        if r["p/P"] >= 0.25:
            claims.append(KINDS["gap-mass-grows"].claim(r["diff"], r["diff_low"], r["diff_high"], n, null=null,
                                                        labels=labels, post_hoc=post_hoc))
        if r["p/P"] <= 1 / 16:
            claims.append(KINDS["gap-mass-vanishes"].claim(r["diff"], r["diff_low"], r["diff_high"], n, null=null,
                                                           labels=labels, post_hoc=post_hoc))
    for what, x in (("p/P", df["p/P"]), ("V_gap dsm - ideal", df["V_gap dsm"] - df["V_gap ideal"])):
        rho, lo, hi, n_cells = spearman_ci(x, df["diff"])
        kind = KINDS["gap-mass-correlates"]
        claims.append(kind.claim(rho, lo, hi, n_cells, statement=kind.statement.format(what=what), post_hoc=post_hoc,
                                 labels={"w": "all cells", "p": "", "n_noise": "", "p/P": "", "diverged samples": ""}))
    c1 = _aggregate([c.verdict for c in claims if c.statement.startswith("C1")], "half")
    c2s = [c.verdict for c in claims if c.statement.startswith("C2")]
    c2 = "agrees" if all(v == "agrees" for v in c2s) else "disagrees" if c2s[0] == "disagrees" else "inconclusive"
    c3 = _aggregate([c.verdict for c in claims if c.statement.startswith("C3")], "all")
    lines = [f"C1 (Delta G > {GAP_MARGIN:g} in at least half of the cells with p/P >= 1/4): {c1}",
             f"C2 (Delta G grows with p/P and with V_gap dsm - ideal): {c2}",
             f"C3 (Delta G within +-{GAP_MARGIN:g} in every cell with P/p >= 16): {c3}"]
    overall = ("agrees" if (c1, c2, c3) == ("agrees",) * 3 else
               "disagrees" if c1 == "disagrees" or c2s[0] == "disagrees" else "inconclusive")
    return claims, lines, overall


def ensemble_figure(df, name: str) -> hv.Layout:
    """Delta G (DSM - ideal pooled gap mass) against p/P, one panel per schedule, one curve per n_noise, with
    the 95 % intervals of each cell (the nulls are in the tables, not drawn)."""
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
    panels = []
    for s, gs in df.groupby("w", sort=False):
        layers = []
        for (n, g), c in zip(gs.groupby("n_noise"), colors * 4):  # n_noise in numeric order, one colour each
            g = g.sort_values("p/P")
            dims = ("p / P", "gap mass, DSM - ideal")
            layers += [hv.Curve((g["p/P"], g["diff"]), *dims, label=f"n_noise = {n}").opts(color=c, logx=True,
                                                                                             backend="matplotlib"),
                       hv.Scatter((g["p/P"], g["diff"]), *dims).opts(color=c, s=20, backend="matplotlib"),
                       hv.ErrorBars((g["p/P"], g["diff"], g["diff"] - g["diff_low"], g["diff_high"] - g["diff"]),
                                    dims[0], [dims[1], "neg", "pos"]).opts(edgecolor=c, backend="matplotlib")]
        layers.append(hv.HLine(0).opts(color="black", linewidth=0.8, backend="matplotlib"))
        panels.append(hv.Overlay(layers).opts(xlabel="p / P", ylabel="gap mass, DSM - ideal", logx=True,
                                              title=f"{name}, w = {s}: pooled gap mass difference [95 %]",
                                              legend_position="right", aspect=2.5, backend="matplotlib"))
    return hv.Layout(panels).opts(sublabel_format="", shared_axes=False, fig_inches=8, backend="matplotlib").cols(1)


def _refitted(exp, train, sel: dict, draws: int):
    """The fitted models of one cell ``sel`` (schedule, width[, n_noise]) of ``exp``, both targets, its first
    ``draws`` training-noise draws (the run's seeds: draw m is fitted as in the run): [(task, model)]."""
    from ridgexr.models import model_kind
    from ridgexr.run.plan import plan_layout, plan_tasks

    one = exp.model_copy(update={
        "schedules": [str(sel["schedule"])],
        "model": exp.model.model_copy(update={"widths": [int(sel["width"])]}),
        "training": exp.training.model_copy(update={"draws": draws} | (
            {"n_noise": [int(sel["n_noise"])]} if "n_noise" in sel else {}))})
    tasks = plan_tasks(one, train, plan_layout(one, train))
    return [(task, model_kind(one.blocks[task.block].kind).builder()(one, one.blocks[task.block], task, train, "cpu"))
            for task in tasks]


def step_refinement(ds, *, n_cells: int = 4, draws: int = 8, factor: int = 10):
    """Is a diverged sample the integrator's or the field's?  The ``n_cells`` cells whose DSM fit diverged most
    are refitted (their first ``draws`` training-noise draws, the run's seeds) and sampled with the run's Heun
    sampler at its ``n_steps`` and at ``factor`` x ``n_steps``.  At ``n_steps`` the final states must equal the
    store's (checked); a diverged share or gap mass that does not move at the finer step is the field's.
    torch runs at the store's thread count (its ``provenance``): in a cell whose fitted field is as wild as
    these, rounding at another count grows to per-mille differences of the final states.

    Returns a DataFrame: per cell and target, the gap mass and diverged share at both step counts and the
    median distance between the two final states of the samples finite at both."""
    import json

    import torch

    threads = json.loads(ds.attrs.get("provenance", "{}")).get("threads")
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads or before))
    try:
        return _step_refinement(ds, n_cells=n_cells, draws=draws, factor=factor)
    finally:
        torch.set_num_threads(before)


def _step_refinement(ds, *, n_cells: int, draws: int, factor: int):
    import pandas as pd

    from ridgexr.catalog import Experiment
    from ridgexr.datasets.training_set import load_training_set
    from ridgexr.process import time_grid
    from ridgexr.sampling import divergence_bound, guard_divergence, sample

    exp = Experiment.model_validate_json(ds.attrs["config"])
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    bound = divergence_bound(train)
    frac = ds.diverged.sel(target="dsm").mean(["draw", "sample"]).compute()
    order = np.argsort(-frac.values, axis=None)[:n_cells]
    a = float(np.exp(-exp.process.t_min))  # alpha at the last step: the gap scales with the training points
    rows = []
    for flat in order:
        sel = {d: frac[d].values[i] for d, i in zip(frac.dims, np.unravel_index(flat, frac.shape))}
        fitted = _refitted(exp, train, sel, draws)
        for target in ("dsm", "ideal"):
            finals = {}
            for n_steps in (exp.process.n_steps, factor * exp.process.n_steps):
                grid = time_grid(n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
                out = []
                for model in (m for task, m in fitted if task.labels["target"] == target):
                    score = guard_divergence(lambda x, t, m=model: m.score(x, t), bound)
                    blocks = sample(exp.sampler.kind, score, exp.n_samples, train.shape[1], grid,
                                    seed=exp.seeds.sampler, block_steps=2, record_every=n_steps)
                    out.append([b.x[-1] for b in blocks][-1].numpy())
                finals[n_steps] = np.stack(out)  # (draw, sample, dim)
            coarse, fine = finals[exp.process.n_steps], finals[factor * exp.process.n_steps]
            stored = ds.trajectory.sel(**sel, target=target).isel(step=-1, draw=slice(0, draws)).values
            np.testing.assert_allclose(coarse, stored, rtol=1e-9, atol=1e-9, equal_nan=True)  # the run, reproduced
            row = {**{k: (str(v) if k == "schedule" else int(v)) for k, v in sel.items()}, "target": target,
                   "draws": draws}
            for label, x in (("", coarse), (f" x{factor}", fine)):
                ok = np.isfinite(x).all(-1)
                row[f"gap{label}"] = float((ok & (np.abs(np.nan_to_num(x[..., 0], nan=np.inf)) < 2 * a)).mean())
                row[f"diverged{label}"] = float((~ok).mean())
            both = np.isfinite(coarse).all(-1) & np.isfinite(fine).all(-1)
            dist = np.linalg.norm(coarse[both] - fine[both], axis=-1)
            row["median |x - x_fine|"] = float(np.median(dist)) if dist.size else np.nan
            row["median |x|"] = float(np.median(np.linalg.norm(coarse[both], axis=-1))) if dist.size else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


#: the cells, times and points of :func:`score_noise_correlation` (docs/variance.md)
CORRELATION_CELLS = ({"schedule": "h2", "width": 64, "n_noise": 4}, {"schedule": "h2", "width": 1024, "n_noise": 64},
                     {"schedule": "1", "width": 256, "n_noise": 16}, {"schedule": "h", "width": 16, "n_noise": 1})
CORRELATION_TIMES = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


def score_noise_correlation(ds, *, cells=CORRELATION_CELLS, times=CORRELATION_TIMES, point=(0.0, 0.0), draws=None):
    """How long in diffusion time the learned score's training noise stays correlated: per cell, the correlation
    over draws of the DSM fit's first score coordinate at ``point`` between the first of ``times`` and each of
    them (all the store's draws unless ``draws``).  A V-kernel acts as white noise in the sampler only where this
    correlation falls off faster than the sampler's dynamics; the effective SDE of Vastola's derivation assumes so.

    Returns a DataFrame: one row per cell, one column per time."""
    import pandas as pd

    from ridgexr.catalog import Experiment
    from ridgexr.datasets.training_set import load_training_set

    exp = Experiment.model_validate_json(ds.attrs["config"])
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    x = np.asarray([point], dtype=float)
    rows = []
    for sel in cells:
        fitted = _refitted(exp, train, sel, draws or ds.sizes["draw"])
        s = np.array([[np.asarray(m.score(x, float(t)))[0, 0] for t in times]
                      for task, m in fitted if task.labels["target"] == "dsm"])  # (draw, time)
        corr = np.corrcoef(s.T)[0]
        rows.append({**sel, "draws": len(s), **{f"t = {t:g}": float(c) for t, c in zip(times, corr)}})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------------
# The predicted Delta G (issue 40): the ensemble's second-cumulant (Gaussian) approximation, from the draws.

#: the five ensembles of a cell: name -> what its readouts are
PREDICTION_ENSEMBLES = {"dsm": "the DSM fits (measured)", "ideal": "the ideal fits (measured)",
                        "gauss dsm": "Gaussian, DSM fits' mean and V-kernel",
                        "gauss ideal": "Gaussian, ideal fits' mean and V-kernel",
                        "gauss excess": "Gaussian, ideal fits' mean, DSM fits' V-kernel"}


def prediction_cells(exp) -> list[dict]:
    """The cells of :func:`gaussian_prediction`: under each of the entry's loss weights, every (width, n_noise)
    with p/P >= 1/4 (C1's cells) or P/p >= 16 (C3's), P = N x n_time x n_noise training rows."""
    from ridgexr.datasets.training_set import load_training_set

    n_points = load_training_set(exp.dataset, base_dir=exp.base_dir).shape[0]
    cells = []
    for schedule in exp.schedules:
        for w in exp.model.widths:
            for n in exp.training.n_noise:
                ratio = int(w) / (n_points * exp.training.n_time * int(n))
                if ratio >= 0.25 or ratio <= 1 / 16:
                    cells.append({"schedule": str(schedule), "width": int(w), "n_noise": int(n)})
    return cells


def gaussian_prediction(exp, *, cells=None, draws: int | None = None, n_boot: int = 2000, seed: int = 0,
                        progress=None):
    """Delta G predicted by the ensemble's Gaussian (second-cumulant) approximation, against Delta G measured.

    Vastola's path integral averages the sampler over the learned score's training noise; keeping its first two
    cumulants (the mean score and the V-kernel V(x, t; x', t'), at all pairs of times) replaces the ensemble by a
    Gaussian field with the same mean and kernel.  A random-feature fit is linear in its readout A on features
    shared by every draw, so that field is the model with A = mean + sum_m z_m (A_m - Abar) / sqrt(M - 1),
    z ~ N(0, I) (:func:`ridgexr.analysis.arrays.gaussian_ensemble`): the kernel is carried whole, with its
    correlation across times (the effective SDE's white-noise form would need it uncorrelated; it is not:
    :func:`score_noise_correlation`).  Per cell the M draws of each target are refitted (the run's seeds), and
    the five ensembles of :data:`PREDICTION_ENSEMBLES` are sampled with the run's sampler (same initial states,
    steps and divergence guard); each has M members of ``n_samples`` samples.  The Gaussian ensembles share
    one z (common random numbers).

    Returns a DataFrame, one row per cell: the gap mass of each ensemble (diverged samples outside the gap, as
    :func:`ridgexr.analysis.gap_mass`), and with 95 % bootstrap intervals over the M draw positions (resampled
    jointly in all five ensembles, :func:`ridgexr.analysis.arrays.pooled_contrast_ci`): ``measured`` = dsm -
    ideal, ``predicted`` = gauss dsm - gauss ideal, ``error`` = measured - predicted, ``excess`` = gauss excess
    - gauss ideal (the DSM V-kernel's effect at the ideal mean).
    """
    import pandas as pd
    import torch
    import xarray as xr

    from ridgexr.analysis import arrays
    from ridgexr.datasets.training_set import load_training_set
    from ridgexr.process import time_grid
    from ridgexr.sampling import divergence_bound, guard_divergence, sample

    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    bound = divergence_bound(train)
    p = exp.process
    grid = time_grid(p.n_steps, p.T, p.t_min, p.grid)
    draws = draws or exp.training.draws
    z = np.random.default_rng(seed).standard_normal((draws, draws))  # common to the three Gaussian ensembles
    rows = []
    for i, sel in enumerate(cells if cells is not None else prediction_cells(exp)):
        fitted = _refitted(exp, train, sel, draws)
        models = {k: [m for task, m in fitted if task.labels["target"] == k] for k in ("dsm", "ideal")}
        base = models["ideal"][0]
        for m in models["dsm"] + models["ideal"]:  # one set of features: a draw differs only in its readout
            if not all(torch.equal(getattr(m, b), getattr(base, b)) for b in ("w_x", "w_t", "b")):
                raise ValueError(f"cell {sel}: the draws do not share their features; the Gaussian field of the "
                                 "readout would not be the ensemble's")
        A = {k: np.stack([m.A.detach().numpy() for m in v]) for k, v in models.items()}  # (M, d, p)
        readouts = {"dsm": A["dsm"], "ideal": A["ideal"],
                    "gauss dsm": arrays.gaussian_ensemble(A["dsm"], draws, z=z),
                    "gauss ideal": arrays.gaussian_ensemble(A["ideal"], draws, z=z),
                    "gauss excess": arrays.gaussian_ensemble(A["dsm"], draws, mean=A["ideal"].mean(0), z=z)}
        finals = []
        for name in PREDICTION_ENSEMBLES:
            out = []
            for a_m in readouts[name]:
                score = guard_divergence(base.with_A(a_m).score, bound)
                blocks = sample(exp.sampler.kind, score, exp.n_samples, train.shape[1], grid,
                                seed=exp.seeds.sampler, block_steps=2, record_every=p.n_steps)
                out.append([b.x[-1] for b in blocks][-1].numpy())
            finals.append(np.stack(out))
        x = np.stack(finals)[:, :, None]  # (ensemble, draw, step = 1, sample, dim)
        ds = xr.Dataset({"trajectory": (("ensemble", "draw", "step", "sample", "dim"), x),
                         "alpha": (("step",), [float(np.exp(-grid[-1]))])})
        g = analysis.gap_mass(ds, n_boot=10)  # the gap rule of the fair test (diverged samples outside)
        k = (g.gap_mass_draw * exp.n_samples).values  # (ensemble, draw) counts in the gap
        n = np.full_like(k, float(exp.n_samples))
        e = {name: j for j, name in enumerate(PREDICTION_ENSEMBLES)}
        row = {"w": sel["schedule"], "p": sel["width"], "n_noise": sel["n_noise"], "draws": draws,
               "P": int(train.shape[0] * exp.training.n_time * sel["n_noise"])}
        row["p/P"] = row["p"] / row["P"]
        for name in PREDICTION_ENSEMBLES:
            row[f"G {name}"] = float(k[e[name]].sum() / n[e[name]].sum())
        for key, weights in (("measured", {"dsm": 1, "ideal": -1}), ("predicted", {"gauss dsm": 1, "gauss ideal": -1}),
                             ("error", {"dsm": 1, "ideal": -1, "gauss dsm": -1, "gauss ideal": 1}),
                             ("excess", {"gauss excess": 1, "gauss ideal": -1})):
            idx = [e[name] for name in weights]
            v, lo, hi = arrays.pooled_contrast_ci(k[idx], n[idx], list(weights.values()), n_boot=n_boot, seed=seed)
            row.update({key: float(v), f"{key}_low": float(lo), f"{key}_high": float(hi)})
        row["diverged dsm / gauss dsm"] = (f"{int((~np.isfinite(x[e['dsm']]).all(-1)).sum())} / "
                                           f"{int((~np.isfinite(x[e['gauss dsm']]).all(-1)).sum())}")
        row["n samples"] = draws * exp.n_samples
        rows.append(row)
        if progress is not None:
            progress(i, row)
    return pd.DataFrame(rows)


def prediction_claims(df, *, post_hoc: bool = False) -> tuple[list[Claim], list[str], str]:
    """The criteria of docs/variance.md's "The predicted Delta G" evaluated by the claims engine.

    Claims: P1 per cell (measured - predicted Delta G within the margin, ``gaussian-reproduces``) and P2 per cell
    with p/P >= 1/4 (the DSM V-kernel's excess alone moves mass into the gap, ``excess-fills-gap``).  P1 agrees when
    every cell agrees and disagrees when any disagrees; P2 agrees when at least half of its cells agree and
    disagrees when more than half disagree (C1's rule); overall "agrees" when both agree, "disagrees" when either
    disagrees, else "inconclusive".  Returns (claims, one line per criterion, overall verdict)."""
    claims = []
    for r in df.to_dict("records"):
        labels = {"w": r["w"], "p": int(r["p"]), "n_noise": int(r["n_noise"]), "p/P": f"{r['p/P']:.3g}",
                  "diverged dsm / gauss dsm": r["diverged dsm / gauss dsm"]}
        claims.append(KINDS["gaussian-reproduces"].claim(r["error"], r["error_low"], r["error_high"], int(r["draws"]),
                                                         labels=labels, post_hoc=post_hoc))
        if r["p/P"] >= 0.25:
            claims.append(KINDS["excess-fills-gap"].claim(r["excess"], r["excess_low"], r["excess_high"],
                                                          int(r["draws"]), labels=labels, post_hoc=post_hoc))
    p1 = _aggregate([c.verdict for c in claims if c.statement.startswith("P1")], "all")
    p2 = _aggregate([c.verdict for c in claims if c.statement.startswith("P2")], "half")
    lines = [f"P1 (measured - predicted Delta G within +-{GAP_MARGIN:g} in every cell): {p1}",
             f"P2 (the DSM V-kernel's excess alone moves mass into the gap in at least half of the cells with "
             f"p/P >= 1/4): {p2}"]
    overall = "agrees" if (p1, p2) == ("agrees", "agrees") else "disagrees" if "disagrees" in (p1, p2) else \
        "inconclusive"
    return claims, lines, overall


def prediction_figure(df, name: str) -> hv.Overlay:
    """Measured against predicted Delta G per cell with both 95 % intervals, one colour per loss weight, the line
    measured = predicted and P1's margin about it (cells whose fits interpolate coincide under the three
    weights)."""
    colors = {"1": "#1f77b4", "h": "#ff7f0e", "h2": "#2ca02c"}
    dims = ("predicted Delta G (Gaussian approximation)", "measured Delta G")
    lo = float(min(df[["predicted_low", "measured_low"]].min()))
    hi = float(max(df[["predicted_high", "measured_high"]].max()))
    m = KINDS["gaussian-reproduces"].criterion().agrees[1]  # P1's margin about measured = predicted
    layers = [hv.Curve(([lo, hi], [lo, hi]), *dims, label="measured = predicted").opts(
                  color="black", linewidth=0.8, linestyle="--", backend="matplotlib"),
              hv.Curve(([lo, hi], [lo + m, hi + m]), *dims, label=f"P1 margin +-{m:g}").opts(
                  color="grey", linewidth=0.8, linestyle=":", backend="matplotlib"),
              hv.Curve(([lo, hi], [lo - m, hi - m]), *dims).opts(color="grey", linewidth=0.8, linestyle=":",
                                                                 backend="matplotlib")]
    for s, g in df.groupby("w", sort=False):
        c = colors.get(str(s), "#7f7f7f")
        layers += [hv.Scatter((g["predicted"], g["measured"]), *dims, label=f"w = {s}").opts(
                       color=c, s=30, backend="matplotlib"),
                   hv.ErrorBars((g["predicted"], g["measured"], g["measured"] - g["measured_low"],
                                 g["measured_high"] - g["measured"]), dims[0], [dims[1], "neg", "pos"]).opts(
                       edgecolor=c, backend="matplotlib"),
                   hv.ErrorBars((g["predicted"], g["measured"], g["predicted"] - g["predicted_low"],
                                 g["predicted_high"] - g["predicted"]), dims[0], [dims[1], "neg", "pos"],
                                horizontal=True).opts(edgecolor=c, backend="matplotlib")]
    return hv.Overlay(layers).opts(title=f"{name}: Delta G measured vs Gaussian prediction [95 %]",
                                   legend_position="right", aspect=1.3, fig_inches=7, backend="matplotlib")


def claims_text(claims, lines, overall) -> tuple[str, str]:
    """The claims as the docs show them: the markdown table (without the measure, null-source and gate columns),
    and the bullets under it (each line of the verdict's reasoning, then the verdict in bold)."""
    table = claims_markdown(claims, drop=("measure", "null from", "gate"))
    return table, "".join(f"\n- {line}" for line in lines) + f"\n- verdict by the claims rule: **{overall}**\n"


def print_verdict(lines, overall) -> None:
    """The verdict's reasoning and the verdict, as console bullets."""
    for line in lines:
        print(f"- {line}")
    print(f"- verdict by the claims rule: {overall}")


def prediction_main(name: str, exp, figures: Path | None = None) -> None:
    """Compute :func:`gaussian_prediction` over :func:`prediction_cells`, print its table and claims, and (with
    ``figures``) write docs/claims_tables/<name>-prediction.md and the figure."""
    import time

    import torch

    # the run's thread count (catalog runs of this entry: --threads 1): the refitted ensembles are then the
    # stored ones to rounding (analyses/variance.py step_refinement checks the same refits against the store)
    torch.set_num_threads(1)
    cells = prediction_cells(exp)
    start = time.perf_counter()

    def progress(i, row):
        print(f"[{i + 1}/{len(cells)}, {time.perf_counter() - start:.0f} s] w = {row['w']}, p = {row['p']}, "
              f"n_noise = {row['n_noise']}: measured {row['measured']:+.4f}, predicted {row['predicted']:+.4f}, "
              f"excess {row['excess']:+.4f}", flush=True)

    df = gaussian_prediction(exp, cells=cells, progress=progress)
    print(f"\n## {name}: Delta G measured against the Gaussian (second-cumulant) prediction "
          f"({time.perf_counter() - start:.0f} s)\n")
    cols = ["w", "p", "n_noise", "p/P"] + [f"G {k}" for k in PREDICTION_ENSEMBLES] + [
        "measured", "predicted", "error", "excess", "diverged dsm / gauss dsm"]
    print(markdown_table(df[cols]))
    claims, lines, overall = prediction_claims(df, post_hoc=name in ENTRIES_SEEN)
    table, bullets = claims_text(claims, lines, overall)
    print(f"\n### {name}: claims of the prediction\n\n{table}\n")
    print_verdict(lines, overall)
    if figures is not None:
        from ridgexr import plot

        plot.ensure_backends()
        save_png(prediction_figure(df, name), figures / f"variance_{name.split('-', 1)[1].replace('-', '_')}"
                 "_prediction.png")
        (figures.parent / "claims_tables" / f"{name}-prediction.md").write_text(
            f"<!-- generated by analyses/variance.py --prediction from the {name} entry's refitted draws; do not "
            f"edit -->\n\n{markdown_table(df[cols])}\n\n{table}\n" + bullets)


def ensemble_main(name: str, ds, figures: Path | None = None) -> None:
    df, t_probe = ensemble_table(ds)
    if figures is not None:
        from ridgexr import plot

        plot.ensure_backends()  # the figure's options need a loaded backend (when no other figure came first)
        save_png(ensemble_figure(df, name), figures / f"variance_{name.split('-', 1)[1].replace('-', '_')}.png")
    print(f"## {name}: pooled ensembles of {ds.sizes['draw']} draws x {ds.sizes['sample']} samples, "
          f"probability-flow ODE, final step; V_gap at t = {t_probe:g}\n")
    print(markdown_table(df))
    claims, lines, overall = ensemble_claims(df, post_hoc=name in ENTRIES_SEEN)
    print(f"\n### {name}: claims (the criteria of docs/variance.md: the claims registry's kinds)\n")
    table, bullets = claims_text(claims, lines, overall)
    print(table)
    if figures is not None:  # the docs include the generated table (docs/variance.md)
        (figures.parent / "claims_tables" / f"{name}.md").write_text(
            f"<!-- generated by analyses/variance.py from the {name} store; do not edit -->\n\n{table}\n"
            + f"\n- null of a cell: {NULL_HOW}\n" + bullets)
    print()
    print_verdict(lines, overall)
    print()



# ---------------------------------------------------------------------------------------------------------
# The analytic prediction: the V-kernel from the theory's own terms, rows fixed and targets redrawn.

#: the ensembles of the analytic prediction: entry -> its noise draws per (point, node); each entry holds the
#: widths near p / P = 1 for that n_noise (P = 2 points x 16 nodes x n_noise rows: p / P = 1/2 and 2)
ANALYTIC_ENTRIES = {"variance-targets-n1": 1, "variance-targets-n4": 4, "variance-targets-n16": 16,
                    "variance-targets-n64": 64}
#: the base entry whose rows, features, sampler and time grid every analytic entry shares
ANALYTIC_BASE = "variance-ensemble"
#: (width, n_noise) of the cells near p / P = 1 of the base entry's sweep (p / P = 1/2 or 2)
NEAR_CELLS = ((16, 1), (64, 1), (64, 4), (256, 4), (256, 16), (1024, 16), (1024, 64))
#: Gaussian readouts per cell of the prediction, and their seed (disjoint from any training or sampler seed)
ANALYTIC_MEMBERS = 256
ANALYTIC_SEED = 0x70726564  # "pred"
#: the penalty's pilot: Gaussian readouts per cell and their seed (another stream than the prediction's)
PILOT_MEMBERS = 4
PILOT_SEED = 0x70696C74  # "pilt"
#: candidate relative penalties of the pilot, in the order they are tried (none first: tau = inf as the claim's
#: conditions say), and the rule's largest diverged share
PENALTY_CANDIDATES = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
PILOT_MAX_DIVERGED = 0.01

#: the analytic criteria, written and committed before the pilot, the run of the analytic entries and the
#: prediction (docs/variance.md, "The V-kernel from the theory's own terms"), are claim kinds of the registry
#: (ridgexr.claims: vkernel_predicts, vkernel_fills_gap, targets_gap_grows): their names here, and the rule that
#: aggregates each over the cells ("all": agrees when every cell agrees, disagrees when any disagrees; "half":
#: agrees when at least half agree, disagrees when more than half disagree)
ANALYTIC_KINDS = {"P1": ("vkernel-predicts", "all"), "P2": ("vkernel-fills-gap", "half"),
                  "C1": ("targets-gap-grows", "half")}
ANALYTIC_CRITERIA = {k: KINDS[name].criterion() for k, (name, _) in ANALYTIC_KINDS.items()}
ANALYTIC_STATEMENTS = {k: (KINDS[name].statement, rule) for k, (name, rule) in ANALYTIC_KINDS.items()}


def analytic_entry(base, n_noise: int, widths, penalty: float, draws: int = 256):
    """The entry of :data:`ANALYTIC_ENTRIES` as a copy of ``base``: ``redraw: targets`` (the rows of
    seeds.training fixed, each row's x0 redrawn from its posterior), the DSM target only, ``draws`` draws,
    ``penalty`` on the readout, and the given widths at one ``n_noise``."""
    return base.model_copy(update={
        "model": base.model.model_copy(update={"widths": sorted(int(w) for w in widths), "penalty": float(penalty)}),
        "training": base.training.model_copy(update={"n_noise": int(n_noise), "target": "dsm", "draws": int(draws),
                                                     "redraw": "targets"})})


def _ideal_fits(exp, train, widths=None):
    """The ideal-target fits on the entry's fixed rows (seeds.training), every schedule and ``widths`` (default:
    the entry's) in one sweep, nested as the run nests them: {(schedule, width): RandomFeatureFit}."""
    from ridgexr.models.random_features.denoiser import model_kwargs
    from ridgexr.training import fit_sweep

    block = exp.blocks[0]
    return fit_sweep(train, widths=list(widths or block.widths), schedules=exp.schedules, taus=block.taus,
                     model_kwargs=model_kwargs(exp, block), method=exp.training.method, t_min=exp.loss_t_min,
                     T=exp.process.T, quadrature=exp.training.quadrature, n_time=exp.training.n_time,
                     n_noise=exp.training.n_noises[0], seed=exp.seeds.training, lr=exp.training.lr,
                     init=block.init, init_seed=exp.seeds.init, target="ideal",
                     null_cutoff=exp.training.null_cutoff, penalty=block.penalty)


def _final_states(exp, train, model, readouts) -> np.ndarray:
    """Final states (len(readouts), n_samples, d) of the run's sampler (its initial states, steps and divergence
    guard) for ``model`` carrying each readout."""
    from ridgexr.process import time_grid
    from ridgexr.sampling import divergence_bound, guard_divergence, sample

    p = exp.process
    grid = time_grid(p.n_steps, p.T, p.t_min, p.grid)
    bound = divergence_bound(train)
    out = []
    for a in readouts:
        score = guard_divergence(model.with_A(a).score, bound)
        blocks = sample(exp.sampler.kind, score, exp.n_samples, train.shape[1], grid, seed=exp.seeds.sampler,
                        block_steps=2, record_every=p.n_steps)
        out.append([b.x[-1] for b in blocks][-1].numpy())
    return np.stack(out)


def _gap_counts(x: np.ndarray, alpha: float) -> np.ndarray:
    """Samples in the gap |x_1| < 2 alpha per member of final states x (..., sample, d); a diverged (non-finite)
    sample counts outside (the rule of :func:`ridgexr.analysis.gap_mass`)."""
    x1 = x[..., 0]
    return (np.isfinite(x1) & (np.abs(np.nan_to_num(x1, nan=np.inf)) < 2 * alpha)).sum(-1).astype(float)


def analytic_cell(exp, train, fit, *, members: int, seed: int) -> dict:
    """One cell of the analytic prediction: the closed-form readout kernel of ``fit`` (the ideal fit on the fixed
    rows, :func:`ridgexr.training.vkernel.readout_kernel`), ``members`` Gaussian readouts with the ideal fit's
    readout as mean and that kernel as covariance, and the ideal fit itself, each sampled with the run's sampler.

    Returns a dict: ``k_gauss`` (members,) and ``k_ideal`` (1,) samples in the gap, ``div_gauss`` and
    ``div_ideal`` diverged samples, ``v_gap`` the analytic V-kernel's trace averaged over the gap |x_1| < 2 on the
    run's V-kernel grid at its smallest probe time, ``v_grid`` (v_time, v_point, dim) the analytic variance of
    the score on that grid (the stored ``v_kernel``'s layout).  Nothing of a measured draw enters it."""
    from ridgexr.run.ensemble import V_KERNEL_TIMES, v_kernel_grid
    from ridgexr.training.vkernel import readout_kernel

    kern = readout_kernel(fit)
    readouts = kern.sample_readouts(members, seed=seed)
    alpha = float(np.exp(-exp.process.t_min))
    x_gauss = _final_states(exp, train, kern.model, readouts)
    x_ideal = _final_states(exp, train, kern.model, kern.mean[None])
    grid = v_kernel_grid(train)
    times = np.unique(np.clip(np.asarray(V_KERNEL_TIMES, dtype=np.float64), exp.process.t_min, exp.process.T))
    v_grid = np.stack([np.einsum("nnaa->na", kern.score_covariance(grid, float(t))) for t in times])
    gap = np.abs(grid[:, 0]) < 2
    return {"k_gauss": _gap_counts(x_gauss, alpha), "k_ideal": _gap_counts(x_ideal, alpha),
            "div_gauss": float((~np.isfinite(x_gauss).all(-1)).sum()),
            "div_ideal": float((~np.isfinite(x_ideal).all(-1)).sum()),
            "v_gap": float(v_grid[0, gap].sum(-1).mean()), "v_grid": v_grid, "n_samples": exp.n_samples}


def choose_penalty(base, *, cells=NEAR_CELLS, candidates=PENALTY_CANDIDATES, members: int = PILOT_MEMBERS,
                   seed: int = PILOT_SEED, progress=print):
    """The readout's penalty, chosen before the run by a stated rule on the analytic model alone: the smallest
    candidate at which, in every cell near p / P = 1 under every loss weight, the ideal fit and ``members``
    Gaussian readouts of the analytic kernel (seed ``seed``, another stream than the prediction's) diverge in at
    most :data:`PILOT_MAX_DIVERGED` of their samples.  No measured draw is fitted or sampled.

    Returns (the chosen penalty or None, a DataFrame of the pilot: one row per candidate and cell)."""
    import pandas as pd
    from ridgexr.datasets.training_set import load_training_set

    train = load_training_set(base.dataset, base_dir=base.base_dir)
    rows = []
    for penalty in candidates:
        failed = False
        # a candidate is dropped at its first failing cell; the cells at p / P = 1/2 and the largest widths,
        # where the fits diverged most at tau = inf, come first
        for n_noise in sorted({n for _, n in cells}, reverse=True):
            widths = [w for w, n in cells if n == n_noise]
            exp = analytic_entry(base, n_noise, widths, penalty, draws=2)
            fits = _ideal_fits(exp, train)
            for (s, w), fit in sorted(fits.items(), key=lambda kv: (kv[0][1] / (len(train) * exp.training.n_time * n_noise), kv[0][0])):
                out = analytic_cell(exp, train, fit, members=members, seed=seed)
                share = (out["div_gauss"] + out["div_ideal"]) / ((members + 1) * exp.n_samples)
                rows.append({"penalty": penalty, "w": s, "p": w, "n_noise": n_noise, "diverged share": share,
                             "V_gap analytic": out["v_gap"]})
                if progress is not None:
                    progress(f"penalty {penalty:g}, w = {s}, p = {w}, n_noise = {n_noise}: diverged {share:.4f}, "
                             f"V_gap {out['v_gap']:.3g}")
                if share > PILOT_MAX_DIVERGED:
                    failed = True
                    break
            if failed:
                break
        if not failed:
            return penalty, pd.DataFrame(rows)
    return None, pd.DataFrame(rows)


def analytic_prediction(exp, *, members: int = ANALYTIC_MEMBERS, seed: int = ANALYTIC_SEED, cache: Path | None = None,
                        progress=None) -> dict:
    """The analytic prediction of every cell (schedule, width) of an entry of :data:`ANALYTIC_ENTRIES`:
    {(schedule, width): :func:`analytic_cell`'s dict}.  With ``cache`` each cell is kept in
    ``cache / <entry>-<config hash>-<schedule>-<width>-<members>-<seed>.npz`` and read back when there (resumable).
    """
    from ridgexr.datasets.training_set import load_training_set

    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    key = exp.config_hash(train)[:12]
    out, fits = {}, None
    for s in exp.schedules:
        for w in exp.blocks[0].widths:
            path = None if cache is None else Path(cache) / f"{exp.name}-{key}-{s}-{w}-{members}-{seed}.npz"
            if path is not None and path.exists():
                with np.load(path) as z:
                    out[(s, w)] = {k: (z[k] if z[k].ndim else float(z[k])) for k in z.files}
                continue
            fits = fits or _ideal_fits(exp, train)
            out[(s, w)] = analytic_cell(exp, train, fits[(s, w)], members=members, seed=seed)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.savez(path, **out[(s, w)])
            if progress is not None:
                progress(s, w, out[(s, w)])
    return out


def analytic_table(exp, ds, pred: dict, *, n_boot: int = 2000, seed: int = 0):
    """Measured against analytically predicted Delta G per cell of an entry of :data:`ANALYTIC_ENTRIES`.

    ``ds`` is the entry's store (the measured DSM ensembles, ``draw`` dimension), ``pred`` its
    :func:`analytic_prediction`.  Per (schedule, width): the pooled gap mass of the measured draws, of the
    Gaussian readouts and of the ideal fit (the mean readout, the same sampler states); ``measured`` =
    G(dsm) - G(ideal) with a 95 % bootstrap over draws, ``predicted`` = G(gauss) - G(ideal) with a bootstrap over
    members, ``error`` = measured - predicted = G(dsm) - G(gauss) (draw and member positions resampled; the two
    ensembles are independent), the null of ``measured`` (the DSM draws' even minus odd halves), the diverged
    samples, and the V-kernel in the gap: analytic and measured (the store's ``v_kernel``, an estimate over the
    draws), with their ratio."""
    import pandas as pd

    from ridgexr.analysis import arrays

    g = analysis.gap_mass(ds, n_boot=10).compute()
    n_points = ds.sizes["train"]
    xg = ds.v_kernel_x.values[:, 0]
    gap = np.abs(xg) < 2
    vk = ds.v_kernel.isel(v_time=0).sum("dim").isel(v_point=np.flatnonzero(gap)).mean("v_point").compute()
    rows = []
    n_noise = exp.training.n_noises[0]
    for s in exp.schedules:
        for w in exp.blocks[0].widths:
            sel = dict(schedule=s, width=w)
            k_dsm = (g.gap_mass_draw.sel(**sel) * ds.sizes["sample"]).values
            n_dsm = np.full_like(k_dsm, float(ds.sizes["sample"]))
            c = pred[(s, w)]
            k_g = np.asarray(c["k_gauss"], dtype=float)
            n_g = np.full_like(k_g, float(c["n_samples"]))
            g_ideal = float(np.asarray(c["k_ideal"]).sum() / c["n_samples"])
            M = min(k_dsm.size, k_g.size)
            P = n_points * exp.training.n_time * n_noise
            row = {"w": str(s), "p": int(w), "n_noise": n_noise, "P": P, "p/P": int(w) / P, "draws": int(k_dsm.size),
                   "members": int(k_g.size), "G dsm": float(k_dsm.sum() / n_dsm.sum()),
                   "G gauss": float(k_g.sum() / n_g.sum()), "G ideal": g_ideal}
            for key, (kk, nn) in (("measured", (k_dsm, n_dsm)), ("predicted", (k_g, n_g))):
                v, lo, hi = arrays.pooled_contrast_ci(kk[None], nn[None], [1.0], n_boot=n_boot, seed=seed)
                row.update({key: float(v) - g_ideal, f"{key}_low": float(lo) - g_ideal,
                            f"{key}_high": float(hi) - g_ideal})
            v, lo, hi = arrays.pooled_contrast_ci(np.stack([k_dsm[:M], k_g[:M]]), np.stack([n_dsm[:M], n_g[:M]]),
                                                  [1.0, -1.0], n_boot=n_boot, seed=seed)
            row.update({"error": float(v), "error_low": float(lo), "error_high": float(hi)})
            half = 2 * (k_dsm.size // 2)
            v, lo, hi = arrays.pooled_contrast_ci(np.stack([k_dsm[0:half:2], k_dsm[1:half:2]]),
                                                  np.stack([n_dsm[0:half:2], n_dsm[1:half:2]]), [1.0, -1.0],
                                                  n_boot=n_boot, seed=seed)
            row.update({"null": float(v), "null_low": float(lo), "null_high": float(hi)})
            row["diverged dsm / gauss / ideal"] = (f"{int(g.diverged_count.sel(**sel).sum())} / "
                                                   f"{int(c['div_gauss'])} / {int(c['div_ideal'])}")
            row["n samples"] = int(k_dsm.size * ds.sizes["sample"])
            row["V_gap analytic"] = float(c["v_gap"])
            row["V_gap measured"] = float(vk.sel(**sel))
            row["V_gap measured / analytic"] = row["V_gap measured"] / row["V_gap analytic"]
            rows.append(row)
    return pd.DataFrame(rows)


def analytic_claims(df) -> tuple[list[Claim], list[str], str]:
    """:data:`ANALYTIC_CRITERIA` evaluated by the claims engine, per cell and aggregated
    (:data:`ANALYTIC_STATEMENTS`): P1 (measured - predicted Delta G, every cell), P2 (predicted Delta G, cells
    with p / P >= 1/4) and C1 (measured Delta G with its null, cells with p / P >= 1/4).  Overall: "agrees" when
    P1 and P2 agree, "disagrees" when either disagrees, else "inconclusive" (the rule of the remixed prediction).
    Returns (claims, one line per criterion, overall verdict)."""
    claims = []
    p1, p2, c1 = (KINDS[ANALYTIC_KINDS[k][0]] for k in ("P1", "P2", "C1"))
    for r in df.to_dict("records"):
        labels = {"w": r["w"], "p": int(r["p"]), "n_noise": int(r["n_noise"]), "p/P": f"{r['p/P']:.3g}",
                  "diverged dsm / gauss / ideal": r["diverged dsm / gauss / ideal"]}
        null = Null(r["null"], r["null_low"], r["null_high"], how="the DSM draws' even minus odd halves (one target, "
                    "independent target noise)")
        claims.append(p1.claim(r["error"], r["error_low"], r["error_high"], int(r["draws"]), labels=labels))
        if r["p/P"] >= 0.25:
            claims.append(p2.claim(r["predicted"], r["predicted_low"], r["predicted_high"], int(r["members"]),
                                   labels=labels))
            claims.append(c1.claim(r["measured"], r["measured_low"], r["measured_high"], int(r["draws"]), null=null,
                                   labels=labels))
    verdicts = {k: _aggregate([c.verdict for c in claims if c.statement == st], rule)
                for k, (st, rule) in ANALYTIC_STATEMENTS.items()}
    lines = [f"P1 (measured - analytic predicted Delta G within +-0.02 in every cell): {verdicts['P1']}",
             f"P2 (the analytic DSM V-kernel alone moves mass into the gap in at least half of the cells with "
             f"p/P >= 1/4): {verdicts['P2']}",
             f"C1 (measured Delta G > 0 in at least half of the cells with p/P >= 1/4, rows fixed): {verdicts['C1']}"]
    p1, p2 = verdicts["P1"], verdicts["P2"]
    overall = "agrees" if (p1, p2) == ("agrees", "agrees") else "disagrees" if "disagrees" in (p1, p2) else \
        "inconclusive"
    return claims, lines, overall


def analytic_figure(df, name: str) -> hv.Overlay:
    """Measured against analytically predicted Delta G per cell, both 95 % intervals, one colour per loss weight,
    one marker per p / P; the line measured = predicted and P1's margin."""
    colors = {"1": "#1f77b4", "h": "#ff7f0e", "h2": "#2ca02c"}
    markers = {0.5: "o", 2.0: "s"}
    dims = ("predicted Delta G (analytic V-kernel)", "measured Delta G")
    lo = float(min(df[["predicted_low", "measured_low"]].min()))
    hi = float(max(df[["predicted_high", "measured_high"]].max()))
    pad = 0.05 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    m = ANALYTIC_CRITERIA["P1"].agrees[1]
    layers = [hv.Curve(([lo, hi], [lo, hi]), *dims, label="measured = predicted").opts(
                  color="black", linewidth=0.8, linestyle="--", backend="matplotlib"),
              hv.Curve(([lo, hi], [lo + m, hi + m]), *dims, label=f"P1 margin +-{m:g}").opts(
                  color="grey", linewidth=0.8, linestyle=":", backend="matplotlib"),
              hv.Curve(([lo, hi], [lo - m, hi - m]), *dims).opts(color="grey", linewidth=0.8, linestyle=":",
                                                                 backend="matplotlib")]
    for (s, ratio), g in df.groupby(["w", "p/P"], sort=False):
        c = colors.get(str(s), "#7f7f7f")
        layers += [hv.Scatter((g["predicted"], g["measured"]), *dims, label=f"w = {s}, p/P = {ratio:g}").opts(
                       color=c, marker=markers.get(float(ratio), "^"), s=40, backend="matplotlib"),
                   hv.ErrorBars((g["predicted"], g["measured"], g["measured"] - g["measured_low"],
                                 g["measured_high"] - g["measured"]), dims[0], [dims[1], "neg", "pos"]).opts(
                       edgecolor=c, backend="matplotlib"),
                   hv.ErrorBars((g["predicted"], g["measured"], g["predicted"] - g["predicted_low"],
                                 g["predicted_high"] - g["predicted"]), dims[0], [dims[1], "neg", "pos"],
                                horizontal=True).opts(edgecolor=c, backend="matplotlib")]
    return hv.Overlay(layers).opts(title=f"{name}: Delta G measured vs analytic prediction [95 %]",
                                   legend_position="right", aspect=1.3, fig_inches=8, xlim=(lo, hi), ylim=(lo, hi),
                                   backend="matplotlib")


ANALYTIC_COLUMNS = ["w", "p", "n_noise", "p/P", "draws", "members", "G dsm", "G gauss", "G ideal", "measured",
                    "measured_low", "measured_high", "predicted", "predicted_low", "predicted_high", "error",
                    "error_low", "error_high", "diverged dsm / gauss / ideal", "V_gap analytic", "V_gap measured",
                    "V_gap measured / analytic"]


def analytic_main(data, figures: Path | None = None, catalog: str | None = None, entries=None) -> None:
    """Run (or resume) the entries of :data:`ANALYTIC_ENTRIES`, compute (or read back) their analytic prediction,
    print the table and claims, and (with ``figures``) write docs/claims_tables/variance-targets.md and the
    figure."""
    import time

    import pandas as pd
    import torch

    torch.set_num_threads(1)  # the run's thread count: the refitted ideal fits are the run's to rounding
    frames = []
    from ridgexr.paths import data_folder

    cache = data_folder(data) / "variance-prediction"
    for name in entries or ANALYTIC_ENTRIES:
        exp = experiment_for(name, catalog)
        ds = store_for(name, data, catalog)
        start = time.perf_counter()

        def progress(s, w, c, name=name, start=start):
            print(f"[{name}, {time.perf_counter() - start:.0f} s] w = {s}, p = {w}: predicted gap mass "
                  f"{c['k_gauss'].sum() / (c['k_gauss'].size * c['n_samples']):.4f}, ideal "
                  f"{c['k_ideal'].sum() / c['n_samples']:.4f}, V_gap {c['v_gap']:.3g}", flush=True)

        pred = analytic_prediction(exp, cache=cache, progress=progress)
        frames.append(analytic_table(exp, ds, pred))
    df = pd.concat(frames, ignore_index=True).sort_values(["w", "p/P", "p"], kind="stable").reset_index(drop=True)
    table = markdown_table(df[ANALYTIC_COLUMNS])
    print(f"## Delta G measured against the analytic V-kernel's prediction\n\n{table}\n")
    claims, lines, overall = analytic_claims(df)
    ctable, bullets = claims_text(claims, lines, overall)
    print(f"### claims\n\n{ctable}\n")
    print_verdict(lines, overall)
    if figures is not None:
        from ridgexr import plot

        plot.ensure_backends()
        save_png(analytic_figure(df, "variance-targets"), figures / "variance_targets_prediction.png")
        (figures.parent / "claims_tables").mkdir(parents=True, exist_ok=True)
        (figures.parent / "claims_tables" / "variance-targets.md").write_text(
            f"<!-- generated by analyses/variance.py --analytic --entries {' '.join(entries or ANALYTIC_ENTRIES)} from "
            f"their stores and the analytic V-kernel; do not edit -->\n\n{table}\n\n{ctable}\n" + bullets)


if __name__ == "__main__":
    main()
