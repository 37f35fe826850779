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
manifold-coverage (the fair test of issue 27): per (model, N) the coverage delta_N of the denoised
outputs, distance to M, novelty and the distance to the smoothed-and-projected target, their
slopes against N next to -1/k, and the criteria of docs/manifold.md evaluated.
"""

from __future__ import annotations

import itertools
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
    ap.add_argument("--entries", nargs="+", default=ENTRIES + ["manifold-coverage"])
    ap.add_argument("--catalog", default=None, help="a catalog file holding the entries (default: the built-in ones)")
    args = ap.parse_args(argv)
    figs = Path(args.figures)
    for name in args.entries:
        ds = store_for(name, args.data, args.catalog)
        if "denoised" in ds:  # a store with stopped scores: the coverage test
            coverage_main(name, ds, figs)
            continue
        m = cell_metrics(ds)
        df = m.drop_vars([c for c in m.coords if c not in m.dims]).to_dataframe().reset_index()
        print(f"## {name}: final step (t = {m.attrs['t_min']:g}), {ds.sizes['sample']} samples per cell\n")
        print(markdown_table(df))
        print(f"\n### {name}: log-log rate against N (slope, 95% bootstrap interval)\n")
        print(markdown_table(rates(m)))
        print()
        save_png(figure(m, name), figs / f"manifold_{name.replace('-', '_')}.png")
        np.seterr(all="ignore")



# ---------------------------------------------------------------------------------------------------------
# The fair test (issue 27): coarse (stopped) exact scores, Tweedie outputs, delta-coverage against N.

def coverage_table(ds, c: float = 0.5):
    """Per (model, data_draw, N) (draw 0 only without independent training sets): t_stop, coverage delta_N
    (c x population mass) with the mass ratios at delta, mean distance of the denoised outputs to M, their
    median novelty and memorized share (novelty < 1/3), and the
    sliced W2 to the smoothed-and-projected population."""
    import pandas as pd

    from ridgexr.analysis import arrays
    from ridgexr.analysis.manifold import store_manifold

    m = store_manifold(ds)
    cov = analysis.coverage(ds, c=c)
    target = analysis.smoothed_target_distance(ds)
    train = ds.train_data.values
    draws = ds.sizes.get("data_draw", 1)
    per_draw = train.shape[0] // draws  # draw j: rows j n .. (j + 1) n (DatasetSpec.rows)
    rows = []
    for model, j, n in itertools.product(ds.model.values, range(draws), ds.n_train.values):
        at = dict(model=model, n_train=n) | ({"data_draw": j} if "data_draw" in ds.dims else {})
        x = ds.denoised.sel(at).values
        x = x[np.isfinite(x).all(-1)]
        nov = arrays.novelty(x, train[j * per_draw:j * per_draw + int(n)])
        cv = cov.sel(at)
        rows.append({"model": str(model), "draw": j, "N": int(n), "t_stop": float(ds.denoise_t.sel(at)),
                     "delta_N": float(cv.coverage_delta), "ratio min": float(cv.mass_ratio_min),
                     "ratio max": float(cv.mass_ratio_max), "dist to M": float(np.mean(m.distance(x))),
                     "novelty (median)": float(np.median(nov)), "memorized share": float(np.mean(nov < 1 / 3)),
                     "W2 to smoothed target": float(target.sel(at))})
    return pd.DataFrame(rows), m.k


def coverage_floor(ds, c: float = 0.5, n_reps: int = 5) -> tuple[float, float]:
    """delta_N of an ideal sampler: fresh samples of the data law itself, as many as a cell has (seeds 100..):
    the smallest coverage radius the generated sample's size can resolve.  Returns (median, max) over reps."""
    import json

    from ridgexr.analysis.manifold import store_manifold

    m = store_manifold(ds)
    cfg = json.loads(ds.attrs["config"])["dataset"]["manifold"]
    reps = np.stack([m.sample(ds.sizes["sample"], density=cfg["density"], kappa=cfg.get("kappa", 1.0),
                              seed=100 + i)[0] for i in range(n_reps)])
    fake = xr.Dataset({"ideal": (("rep", "sample", "dim"), reps)}, attrs=ds.attrs)
    d = analysis.coverage(fake, c=c, variable="ideal").coverage_delta.values
    return float(np.median(d)), float(np.max(d))


def coverage_rates(df, k: int):
    """Log-log slopes against N next to -1/k.  One training draw: 95 % pairs-bootstrap intervals (low, high).
    Several independent draws: the mean of the per-draw slopes with a 95 % Student-t interval over the draws
    (low, high; ``analysis.rate_fit(draw_dim="data_draw")``), and beside it the pairs bootstrap over every
    (draw, N) point pooled (boot low, boot high)."""
    import pandas as pd

    rows = []
    n_draws = df["draw"].nunique() if "draw" in df else 1
    for model, g in df.groupby("model", sort=False):
        for metric in ("delta_N", "dist to M", "W2 to smoothed target"):
            v = g[metric].to_numpy(float)
            row = {"model": model, "metric": metric, "slope": np.nan, "low": np.nan, "high": np.nan}
            if np.isfinite(np.log(np.where(v > 0, v, np.nan))).sum() < 3:
                rows.append(row)
                continue
            boot = analysis.rate_fit(xr.DataArray(v, dims=("n_train",), coords={"n_train": g["N"].to_numpy()}))
            if n_draws > 1:
                grid = g.pivot(index="draw", columns="N", values=metric)
                fit = analysis.rate_fit(xr.DataArray(grid.to_numpy(float), dims=("data_draw", "n_train"),
                                                     coords={"n_train": grid.columns.to_numpy()}),
                                        draw_dim="data_draw")
                row |= {"slope": float(fit.slope), "low": float(fit.slope_low), "high": float(fit.slope_high),
                        "boot low": float(boot.slope_low), "boot high": float(boot.slope_high),
                        "draws": int(fit.n_draws)}
            else:
                row |= {"slope": float(boot.slope), "low": float(boot.slope_low), "high": float(boot.slope_high)}
            rows.append(row)
    out = pd.DataFrame(rows)
    out["-1/k"] = -1.0 / k
    return out


def draw_means(df):
    """The per-(model, N) means over the training draws of the coverage table (the table itself with one draw)."""
    if "draw" not in df or df["draw"].nunique() == 1:
        return df
    return df.drop(columns="draw").groupby(["model", "N"], sort=False).mean().reset_index()


def coverage_verdict(df, rates, k: int, floor: tuple[float, float] | None = None) -> list[str]:
    """The criteria of docs/manifold.md (written before the runs), evaluated.  ``floor``: the ideal sampler's
    delta_N (median, max); when every stopped model's delta_N at the two largest N is within 1.5 x its max,
    delta_N is at the resolution floor and the criteria's "otherwise" clause applies (inconclusive)."""
    lines, confirmed = [], []
    ref = -1.0 / k
    df = draw_means(df)
    largest = df.N.max()
    for model in [m for m in df.model.unique() if m != "memorize"]:
        r = rates[rates.model == model].set_index("metric")
        m1 = r.loc["delta_N", "high"] < ref
        last = df[(df.model == model) & (df.N == largest)]
        m2 = float(last["novelty (median)"].iloc[0]) >= 1 and r.loc["dist to M", "high"] < 0
        m3 = r.loc["W2 to smoothed target", "high"] < -0.25
        lines.append(f"{model}: M1 delta_N slope {r.loc['delta_N', 'slope']:.2f} [{r.loc['delta_N', 'low']:.2f}, "
                     f"{r.loc['delta_N', 'high']:.2f}] below {ref:g}: {m1}; M2 median novelty at N = {largest} "
                     f"{float(last['novelty (median)'].iloc[0]):.2f} and dist-to-M slope "
                     f"{r.loc['dist to M', 'slope']:.2f} [{r.loc['dist to M', 'low']:.2f}, "
                     f"{r.loc['dist to M', 'high']:.2f}]: {m2}; M3 W2-to-target slope "
                     f"{r.loc['W2 to smoothed target', 'slope']:.2f} [{r.loc['W2 to smoothed target', 'low']:.2f}, "
                     f"{r.loc['W2 to smoothed target', 'high']:.2f}] below -0.25: {m3}")
        confirmed.append((model, m1 and m2 and m3, r.loc["delta_N", "low"] >= ref,
                          float(last["novelty (median)"].iloc[0]) < 1))
    mem = rates[(rates.model == "memorize") & (rates.metric == "delta_N")]
    if len(mem):
        lines.append(f"memorize (reference): delta_N slope {float(mem.slope.iloc[0]):.2f} "
                     f"[{float(mem.low.iloc[0]):.2f}, {float(mem.high.iloc[0]):.2f}] (-1/k = {ref:g})")
    at_floor = False
    if floor is not None:
        top = sorted(df.N.unique())[-2:]
        stopped = df[(df.model != "memorize") & df.N.isin(top)]
        at_floor = bool(len(stopped)) and bool((stopped.delta_N <= 1.5 * floor[1]).all())
        lines.append(f"resolution floor: an ideal sampler (the data law itself, same sample count) has delta_N "
                     f"{floor[0]:.3g} (median of 5; max {floor[1]:.3g}); stopped models at the two largest N "
                     f"within 1.5 x that: {at_floor}")
    if any(ok for _, ok, _, _ in confirmed):
        verdict = "confirmed for " + ", ".join(m for m, ok, _, _ in confirmed if ok)
    elif at_floor:
        verdict = "inconclusive at these sizes (delta_N at the resolution floor of the generated sample)"
    elif confirmed and all(at_or_above or not_novel for _, _, at_or_above, not_novel in confirmed):
        verdict = "refuted"
    else:
        verdict = "inconclusive at these sizes"
    lines.append(f"verdict by the stated criteria: {verdict}")
    return lines


def coverage_figure(df, k: int, name: str) -> hv.Overlay:
    """delta_N against N per model (log-log), with the slope -1/k through the memorizer's first point."""
    curves = {m: hv.Curve((g.N, g.delta_N), "N", "coverage radius delta_N").opts(logx=True, logy=True,
                                                                                 backend="matplotlib")
              for m, g in df.groupby("model", sort=False)}
    first = df[df.model == df.model.iloc[0]].sort_values("N")
    n = np.array([first.N.iloc[0], first.N.iloc[-1]], dtype=float)
    ref = hv.Curve((n, first.delta_N.iloc[0] * (n / n[0]) ** (-1.0 / k)), "N", "coverage radius delta_N",
                   label=f"slope -1/k = {-1 / k:g}").opts(linestyle="--", color="gray", backend="matplotlib")
    return (hv.NdOverlay(curves, kdims=["model"]) * ref).opts(title=f"{name}: delta-coverage against N",
                                                               legend_position="right", aspect=1.6,
                                                               backend="matplotlib")


def coverage_main(name: str, ds, figures: Path | None = None) -> None:
    df, k = coverage_table(ds)
    if figures is not None:
        from ridgexr import plot

        plot.ensure_backends()  # the figure's options need a loaded backend (when no other figure came first)
        save_png(coverage_figure(draw_means(df), k, name), figures / f"manifold_{name.replace('-', '_')}.png")
    draws = ds.sizes.get("data_draw", 1)
    print(f"## {name}: denoised outputs, {ds.sizes['sample']} samples per cell, c = 0.5, {draws} training draw(s)\n")
    print(markdown_table(df))
    if draws > 1:
        print(f"\n### {name}: means over the {draws} training draws\n")
        print(markdown_table(draw_means(df)))
    rates = coverage_rates(df, k)
    how = (f"mean of the per-draw slopes, 95% Student-t interval over the {draws} independent training draws; "
           "boot: 95% pairs bootstrap over every (draw, N)" if draws > 1 else "95% pairs-bootstrap interval")
    print(f"\n### {name}: log-log slopes against N ({how})\n")
    print(markdown_table(rates))
    print()
    for line in coverage_verdict(df, rates, k, coverage_floor(ds)):
        print(f"- {line}")
    print()


if __name__ == "__main__":
    main()
