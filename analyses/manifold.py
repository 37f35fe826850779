"""Manifold generalization precedes memorization: distance to the data manifold, novelty and
distribution match of generated samples against the training-set size N.

Run:  python analyses/manifold.py [--data DIR] [--figures DIR] [--entries manifold-circle ...]
Runs (or resumes) the manifold entries, prints per cell (schedule, tau, N) the mean distance
of the final samples to the manifold, their novelty (nearest-training distance over the
training set's nearest-neighbour spacing), the d1/d2 memorized share, the density ratio on
the manifold (8 bins, inside a tube of 0.1 radius), the sliced Wasserstein distance and MMD to a fresh
population sample with bootstrap intervals, and the Hausdorff distance between the ridge
projections and the manifold; then the log-log rates against N with bootstrap intervals.
Writes docs/figures/manifold_<entry>.png.
"""

from __future__ import annotations

from pathlib import Path

import holoviews as hv
import numpy as np
import xarray as xr

from _common import markdown_table, parser, save_png, store_for

from ridgexr import analysis

ENTRIES = ["manifold-circle", "manifold-circle-8d", "manifold-sphere", "manifold-sphere-16d"]


def cell_metrics(ds: xr.Dataset) -> xr.Dataset:
    last = ds.isel(step=-1)
    dist = analysis.manifold_distance(ds).isel(step=-1)
    dens = analysis.manifold_density(ds, bins=8)  # ~16 samples per bin at 128 samples
    dd = analysis.distribution_distance(ds, n_boot=100)
    memo = analysis.memorization_fraction(ds)
    out = xr.Dataset({
        "manifold_dist": dist.mean("sample"),
        "novelty_median": analysis.novelty(ds).median("sample"),
        "memorized": memo.memorized,
        "in_tube": dens.in_tube, "ratio_max": dens.ratio_max, "ratio_min": dens.ratio_min,
        "sliced_w2": dd.sliced_w2, "w2_low": dd.sliced_w2_low, "w2_high": dd.sliced_w2_high,
        "mmd2": dd.mmd2, "mmd2_low": dd.mmd2_low, "mmd2_high": dd.mmd2_high,
        "ridge_hausdorff": analysis.ridge_vs_manifold(ds).hausdorff,
    }).compute()
    out.attrs["t_min"] = float(last.t)
    return out


def rates(m: xr.Dataset) -> "pandas.DataFrame":  # noqa: F821
    rows = []
    for name in ("manifold_dist", "sliced_w2", "ridge_hausdorff"):
        fit = analysis.rate_fit(m[name], dim="n_train").compute()
        fit = fit.drop_vars([c for c in fit.coords if c not in fit.dims])
        df = fit.to_dataframe().reset_index()
        df.insert(0, "metric", name)
        rows.append(df)
    import pandas as pd

    return pd.concat(rows, ignore_index=True)


def figure(m: xr.Dataset, name: str) -> hv.Layout:
    panels = []
    for var, label in (("manifold_dist", "mean distance to the manifold"), ("sliced_w2", "sliced W2 to the population"),
                       ("novelty_median", "median novelty")):
        curves = {}
        for cell in m[var].drop_vars([c for c in m[var].coords if c not in m[var].dims]).to_dataframe()\
                .reset_index().groupby([d for d in m[var].dims if d != "n_train"]):
            key, g = cell
            curves[", ".join(map(str, key if isinstance(key, tuple) else (key,)))] = hv.Curve(
                (g.n_train, g[var]), "training-set size N", label)
        panels.append(hv.NdOverlay(curves, kdims=["cell"]).opts(logx=True, logy=True, title=f"{name}: {label}",
                                                              legend_position="right", fontsize={"legend": 7},
                                                              backend="matplotlib"))
    return hv.Layout(panels).opts(sublabel_format="", backend="matplotlib").cols(1)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entries", nargs="+", default=ENTRIES)
    args = ap.parse_args(argv)
    figs = Path(args.figures)
    for name in args.entries:
        ds = store_for(name, args.data)
        m = cell_metrics(ds)
        df = m.drop_vars([c for c in m.coords if c not in m.dims]).to_dataframe().reset_index()
        print(f"## {name}: final step (t = {m.attrs['t_min']:g}), {ds.sizes['sample']} samples per cell\n")
        print(markdown_table(df))
        print(f"\n### {name}: log-log rate against N (slope, 95% bootstrap interval)\n")
        print(markdown_table(rates(m)))
        print()
        save_png(figure(m, name), figs / f"manifold_{name.replace('-', '_')}.png")
        np.seterr(all="ignore")


if __name__ == "__main__":
    main()
