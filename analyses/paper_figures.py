"""The paper's 2-D figures, drawn from a store: samples over the training points with
near-mode counts, the density along the ridge, ridge-residual histograms, and the
normal/tangent split of the model error against training time tau.

Run:  python analyses/paper_figures.py [--entry two-points-paper] [--data DIR] [--figures DIR]
Runs (or resumes) the entry, writes docs/figures/paper_<entry>_*.png and prints the
per-cell table used by docs/findings.md (near-mode share and d1/d2 memorized share with
Wilson intervals, the median |x1| of the final samples, normal / tangent residuals, excess
loss and its split).
"""

from __future__ import annotations

from pathlib import Path

import holoviews as hv
import numpy as np
import xarray as xr

from _common import markdown_table, parser, save_png, store_for

from ridgexr import analysis
from ridgexr.store import CELL_DIMS, cells


def label(cell: dict) -> str:
    parts = [f"w={cell['schedule']}"] + [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in cell.items() if k != "schedule"]
    return ", ".join(parts)


def cell_table(ds: xr.Dataset) -> "pandas.DataFrame":  # noqa: F821
    last = ds.isel(step=-1)
    near = analysis.near_mode_fraction(ds, r=0.5)
    memo = analysis.memorization_fraction(ds)
    rms = lambda v: np.sqrt((v**2).sum("dim").mean("sample"))  # noqa: E731
    phases = analysis.phase_summary(analysis.phase_times(ds, r=0.5))
    out = xr.Dataset({
        "reach_t": phases.reach_time_median, "align_t": phases.align_time_median,
        "near_mode": near.near_mode, "near_low": near.near_mode_low, "near_high": near.near_mode_high,
        "memorized": memo.memorized, "memo_low": memo.memorized_low, "memo_high": memo.memorized_high,
        "median_abs_x1": np.abs(last.trajectory.isel(dim=0)).median("sample"),
        "rms_normal": rms(last.residual_normal), "rms_tangent": rms(last.residual_tangent),
        "excess_loss": ds.excess_loss, "excess_normal": ds.excess_normal, "excess_tangent": ds.excess_tangent,
    }).compute()
    out = out.drop_vars([c for c in out.coords if c not in CELL_DIMS])
    return out.to_dataframe().reset_index()


def samples_figure(ds: xr.Dataset, table) -> hv.Layout:
    last = ds.isel(step=-1)
    pts = ds.train_data.values * float(last.alpha)
    lim = 1.5 * float(np.abs(pts).max()) + 1.0  # samples beyond are diverged or far off: counted, not drawn
    panels = []
    for cell in cells(ds):
        x = last.trajectory.sel(cell).values
        row = table.loc[np.logical_and.reduce([table[k] == v for k, v in cell.items()])].iloc[0]
        finite = int(np.isfinite(x).all(1).sum())
        if finite:
            title = f"{label(cell)}: {int(round(row.near_mode * finite))}/{finite} near a mode"
        else:
            title = f"{label(cell)}: all {len(x)} samples diverged"
        panels.append((hv.Scatter((x[:, 0], x[:, 1]), "x1", "x2").opts(s=2, alpha=0.4, color="tab:blue", backend="matplotlib")
                       * hv.Scatter((pts[:, 0], pts[:, 1]), "x1", "x2").opts(s=60, color="black", marker="x", backend="matplotlib"))
                      .opts(title=title, fontsize={"title": 8}, xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal",
                            backend="matplotlib"))
    n_tau = ds.sizes.get("tau", 1)
    return hv.Layout(panels).opts(sublabel_format="", backend="matplotlib").cols(n_tau if n_tau > 1
                                                                                  else min(4, len(panels)))


def density_figure(ds: xr.Dataset) -> hv.Layout:
    dens = analysis.position_density(ds, n_points=401).density.compute()
    panels = []
    for s in ds.schedule.values:
        sub = dens.sel(schedule=s)
        curves = {label(c): hv.Curve((sub.position.values, sub.sel({k: v for k, v in c.items() if k != "schedule"})
                                      .values.squeeze()), "position along the ridge", "density")
                  for c in cells(ds) if c["schedule"] == s}
        panels.append(hv.NdOverlay(curves, kdims=["cell"]).opts(title=f"w = {s}: density along the ridge",
                                                              legend_position="right", fontsize={"legend": 6},
                                                              fig_inches=(7, 2.5), backend="matplotlib"))
    return hv.Layout(panels).opts(sublabel_format="", backend="matplotlib").cols(1)


def residual_figure(ds: xr.Dataset) -> hv.Layout:
    res = np.log10(ds.isel(step=-1).ridge_residual.compute() + 1e-300)
    panels = []
    for s in ds.schedule.values:
        hists = {}
        for c in cells(ds):
            if c["schedule"] != s:
                continue
            v = res.sel(c).values
            v = v[np.isfinite(v)]
            edges = np.linspace(-16, 2, 73)
            hists[label(c)] = hv.Histogram(np.histogram(v, bins=edges), kdims=["log10 ridge residual"]).opts(alpha=0.5)
        panels.append(hv.NdOverlay(hists, kdims=["cell"]).opts(title=f"w = {s}: ridge residual at t_min",
                                                             legend_position="right", fontsize={"legend": 6},
                                                             fig_inches=(7, 2.5), backend="matplotlib"))
    return hv.Layout(panels).opts(sublabel_format="", backend="matplotlib").cols(1)


def split_figure(ds: xr.Dataset) -> hv.Layout | None:
    if "tau" not in ds.dims or ds.sizes["tau"] < 2:
        return None
    taus = ds.tau.values
    finite = taus[np.isfinite(taus)]
    pos = np.where(np.isfinite(taus), taus, finite.max() * 2 if finite.size else 1.0)  # tau = inf drawn at 2 x max
    panels = []
    for s in ds.schedule.values:
        vals = {name: ds[name].sel(schedule=s).isel(width=0).values for name in ("excess_loss", "excess_tangent",
                                                                                     "excess_normal")}
        # a log axis cannot show 0 (the normal part at tau = inf for collinear data): left out, said in the text
        curves = {name: hv.Curve((pos, np.where(v > 0, v, np.nan)), "tau (paper units; inf drawn at 2 x max)",
                                 "held-out loss") for name, v in vals.items()}
        panels.append(hv.NdOverlay(curves, kdims=["part"]).opts(title=f"w = {s}: excess loss and its split",
                                                             logx=True, logy=True, backend="matplotlib"))
    return hv.Layout(panels).opts(sublabel_format="", backend="matplotlib").cols(3)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entry", default="two-points-paper", help="catalog entry (a 2-D point set)")
    args = ap.parse_args(argv)
    figs = Path(args.figures)
    ds = store_for(args.entry, args.data)
    table = cell_table(ds)
    print(f"## {args.entry}: final step (t = {float(ds.t[-1]):g}), {ds.sizes['sample']} samples per cell\n")
    print(markdown_table(table))
    stem = args.entry.replace("-", "_")
    save_png(samples_figure(ds, table), figs / f"paper_{stem}_samples.png")
    save_png(density_figure(ds), figs / f"paper_{stem}_density.png")
    save_png(residual_figure(ds), figs / f"paper_{stem}_residual.png")
    split = split_figure(ds)
    if split is not None:
        save_png(split, figs / f"paper_{stem}_split.png")


if __name__ == "__main__":
    main()
