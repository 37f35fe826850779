"""Generalization through variance: does fitting the noisy DSM target instead of its mean
move samples off the training points, and does the effect vanish as the noise draws grow?

Run:  python analyses/variance.py [--data DIR] [--figures DIR]
Runs (or resumes) the entries variance-two-points and variance-three-points, prints per
(schedule, width, n_noise) the near-mode share (within 0.5 of a training point) and the
tangential spread for both targets with the paired DSM - ideal difference and its bootstrap
interval, and writes docs/figures/variance_<entry>.png (the differences against n_noise).
"""

from __future__ import annotations

from pathlib import Path

import holoviews as hv
import numpy as np

from _common import markdown_table, parser, save_png, store_for

from ridgexr import analysis


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
    args = parser(__doc__).parse_args(argv)
    figs = Path(args.figures)
    for name in ("variance-two-points", "variance-three-points"):
        ds = store_for(name, args.data)
        df = effect_table(ds)
        print(f"## {name}: DSM vs ideal target (final step, {ds.sizes['sample']} paired samples)\n")
        print(markdown_table(df))
        print()
        save_png(effect_figure(df, name), figs / f"variance_{name.split('-', 1)[1].replace('-', '_')}.png")
        agg = df.groupby("n_noise")[["near_mode_diff", "spread_diff"]].agg(lambda v: float(np.mean(np.abs(v))))
        print(f"mean |difference| over cells, by n_noise:\n\n{markdown_table(agg.reset_index())}\n")


if __name__ == "__main__":
    main()
