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
    args = ap.parse_args(argv)
    figs = Path(args.figures)
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
    table = claims_markdown(claims, drop=("measure", "null from", "gate"))
    print(f"\n### {name}: claims of the prediction\n\n{table}\n")
    for line in lines:
        print(f"- {line}")
    print(f"- verdict by the claims rule: {overall}")
    if figures is not None:
        from ridgexr import plot

        plot.ensure_backends()
        save_png(prediction_figure(df, name), figures / f"variance_{name.split('-', 1)[1].replace('-', '_')}"
                 "_prediction.png")
        (figures.parent / "claims_tables" / f"{name}-prediction.md").write_text(
            f"<!-- generated by analyses/variance.py --prediction from the {name} entry's refitted draws; do not "
            f"edit -->\n\n{markdown_table(df[cols])}\n\n{table}\n" + "".join(f"\n- {line}" for line in lines)
            + f"\n- verdict by the claims rule: **{overall}**\n")


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
    table = claims_markdown(claims, drop=("measure", "null from", "gate"))
    print(table)
    if figures is not None:  # the docs include the generated table (docs/variance.md)
        (figures.parent / "claims_tables" / f"{name}.md").write_text(
            f"<!-- generated by analyses/variance.py from the {name} store; do not edit -->\n\n{table}\n"
            + f"\n- null of a cell: {NULL_HOW}\n" + "".join(f"\n- {line}" for line in lines)
            + f"\n- verdict by the claims rule: **{overall}**\n")
    print()
    for line in lines:
        print(f"- {line}")
    print(f"- verdict by the claims rule: {overall}")
    print()


if __name__ == "__main__":
    main()
