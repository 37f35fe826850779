"""timescales-rf: random features trained at one diffusion time, train and test loss along training time per n.

Bonnaire et al.'s random-features model (their section 4 and ``Theory/src/Training_random_features``: s_A(z) =
A tanh(W z / sqrt(d)), Gaussian data, A(0) = 0, ridge 1e-3, gradient descent with fresh noise at learning rate
1e-4 d / Delta, training time tau = steps x learning rate), its noise-averaged gradient flow in closed form
(:func:`ridgexr.training.single_time_losses`, one eigendecomposition per n and seed), and the two times read off
the curves (:func:`ridgexr.analysis.loss_timescales`): tau_gen where the error to the true score has closed 90 %
of its fall, tau_mem where the test loss turns up; the slopes of log tau on log n, pooled over seeds, with the
criteria of docs/timescales.md (written before the run).

This is a script, not a ``ridgexr run`` entry: a score trained at one diffusion time cannot drive a sampler, so
there are no trajectories, ridge projections or stores of the run schema.  The curves are written as a Zarr v3
store of their own (``timescales-rf.zarr`` in the data folder, or ``--out``) and a figure
(``docs/figures/timescales_rf.png`` with ``--figure``).

Run:  python analyses/timescales_rf.py [--n 32 64 ... 1024] [--d 16] [--p 4096] [--t 0.1] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from _common import markdown_table

from ridgexr.analysis import loss_timescales
from ridgexr.claims.timescale_slope import slope_claims
from ridgexr.paths import data_folder
from ridgexr.training.single_time import single_time_losses

DEFAULTS = dict(n=[32, 64, 128, 256, 512, 1024], d=16, p=4096, t=0.1, seeds=[0, 1, 2], n_noise=16, n_test=16384)


def run(n, d, p, t, seeds, n_noise, n_test, progress=print) -> xr.Dataset:
    """The curves of every seed, concatenated along ``seed``."""
    parts = []
    for s in seeds:
        t0 = time.perf_counter()
        parts.append(single_time_losses(n, d=d, p=p, t=t, n_noise=n_noise, n_test=n_test, seed=s,
                                        progress=lambda m, s=s: progress(f"seed {s}: {m}")))
        progress(f"seed {s}: {time.perf_counter() - t0:.0f} s")
    out = xr.concat(parts, dim=pd.Index(list(seeds), name="seed"), combine_attrs="drop_conflicts")
    return out.assign_attrs(seeds=list(seeds))


def tables(ds: xr.Dataset, n_boot: int = 2000) -> tuple[str, str]:
    ts = loss_timescales(ds, n_boot=n_boot)

    def fmt(name, s, n):
        v = ts[name].sel(seed=s, n_train=n)
        lo, hi, cen = (float(ts[f"{name}_{k}"].sel(seed=s, n_train=n)) for k in ("low", "high", "censored"))
        close = ")" if name == "tau_mem" else "]"  # tau_mem: the minimum lies between its neighbours
        return f">= {float(v):.3g} (censored)" if cen else f"{float(v):.3g} ({lo:.3g}, {hi:.3g}{close}"

    rows = []
    for n in ds.n_train.values:
        row = {"n": int(n)}
        for s in ds.seed.values:
            row[f"tau_gen (seed {s})"] = fmt("tau_gen", s, n)
        for s in ds.seed.values:
            row[f"tau_mem (seed {s})"] = fmt("tau_mem", s, n)
        mins = ds["test_loss"].sel(n_train=n).min("tau")
        row["min test loss (seeds)"] = ", ".join(f"{float(v):.3f}" for v in mins.values)
        end = ds.isel(tau=-1).sel(n_train=n)
        row["train / test at the last tau (seed 0)"] = (f"{float(end.train_loss.isel(seed=0)):.3f} / "
                                                        f"{float(end.test_loss.isel(seed=0)):.3f}")
        rows.append(row)
    law = []
    verdicts = {c.labels["time scale"]: c.verdict for c in slope_claims(ts)}  # the registry's timescale-slope
    for name, expected in (("tau_mem", 1), ("tau_gen", 0)):
        law.append({"law": f"log {name} = a + b log n", "expected b": expected,
                    "b [95 %]": f"{float(ts[f'{name}_slope']):.3f} [{float(ts[f'{name}_slope_low']):.3f}, "
                                f"{float(ts[f'{name}_slope_high']):.3f}]",
                    "points (n x seeds)": int(ts[name].size), "verdict": verdicts[name]})
    return markdown_table(pd.DataFrame(rows)), markdown_table(pd.DataFrame(law))


def post_hoc_rise(ds: xr.Dataset, n_boot: int = 2000) -> str:
    """**Post hoc** (chosen after the 2026-12-03 run's figure): the tau at which the test loss has climbed half of
    its rise from its minimum to its last value (log-tau interpolation, :func:`ridgexr.analysis.arrays.crossing`),
    and the slope of its law in n.  Not the registered tau_mem: reported beside it, never as its verdict."""
    from ridgexr.analysis import arrays

    tau = ds.tau.values
    rows, ns, taus = [], [], []
    for n in ds.n_train.values:
        row = {"n": int(n)}
        for s in ds.seed.values:
            y = ds["test_loss"].sel(n_train=n, seed=s).values
            k = int(np.argmin(y))
            half = y[k] + 0.5 * (y[-1] - y[k])
            t_half = arrays.crossing(tau[k:], y[k:], half) if y[-1] > y[k] else np.nan
            row[f"half-rise tau (seed {s})"] = f"{t_half:.3g}"
            ns.append(float(n))
            taus.append(t_half)
        rows.append(row)
    a, b, lo, hi, used, dropped = arrays.censored_slope_ci(np.array(ns), np.array(taus), np.zeros(len(ns), bool),
                                                           method="drop", n_boot=n_boot)
    law = f"post hoc: log tau_half = a + b log n, b = {b:.3f} [{lo:.3f}, {hi:.3f}] ({int(used)} points; not a verdict)"
    return markdown_table(pd.DataFrame(rows)) + "\n\n" + law


def figure(ds: xr.Dataset, path: Path) -> Path:
    import holoviews as hv

    from _common import save_png

    from ridgexr import plot

    plot.ensure_backends()
    hv.Store.set_current_backend("matplotlib")
    ts = loss_timescales(ds, n_boot=200)
    s0 = ds.isel(seed=0)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    curves = []
    for i, n in enumerate(ds.n_train.values):
        c, color = s0.sel(n_train=n), colors[i % len(colors)]
        curves.append(hv.Curve((c.tau.values, c.test_loss.values), "tau", "loss", label=f"n = {int(n)}")
                      .opts(color=color))
        curves.append(hv.Curve((c.tau.values, c.train_loss.values), "tau", "loss").opts(color=color, linestyle="--"))
    marks = hv.VLines(ts["tau_mem"].isel(seed=0).values, kdims=["tau"]).opts(color="grey", linestyle=":")
    left = hv.Overlay(curves + [marks]).opts(
        logx=True, xlabel="training time tau (steps x learning rate)", ylabel="loss per coordinate",
        title="test (solid) and train (dashed) loss, seed 0; dotted: tau_mem", legend_position="right",
        aspect=2.2)
    pts = ts["tau_mem"].to_dataframe().reset_index()
    right = hv.Scatter(pts, "n_train", "tau_mem").opts(
        logx=True, logy=True, s=40, xlabel="training-set size n", ylabel="tau_mem", title="tau_mem against n (every seed)",
        aspect=2.2)
    layout = (left + right).cols(1).opts(sublabel_format="", vspace=0.35, fig_size=220)
    return save_png(layout, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=DEFAULTS["n"])
    for k in ("d", "p", "n_noise", "n_test"):
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=DEFAULTS[k])
    ap.add_argument("--t", type=float, default=DEFAULTS["t"])
    ap.add_argument("--seeds", type=int, nargs="+", default=DEFAULTS["seeds"])
    ap.add_argument("--out", default=None, help="the Zarr store of the curves (default: <data folder>/timescales-rf.zarr)")
    ap.add_argument("--figure", default=None, help="write the figure to this PNG")
    ap.add_argument("--from-store", action="store_true", help="read the curves from --out instead of computing them")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else data_folder() / "timescales-rf.zarr"
    if args.from_store:
        ds = xr.open_zarr(out, consolidated=False).load()
    else:
        t0 = time.perf_counter()
        ds = run(args.n, args.d, args.p, args.t, args.seeds, args.n_noise, args.n_test)
        ds.attrs["wall_seconds"] = round(time.perf_counter() - t0, 1)
        ds.to_zarr(out, mode="w", zarr_format=3, consolidated=False)
        print(f"wrote {out} ({ds.attrs['wall_seconds']} s)")
    per_n, law = tables(ds)
    print(per_n, "\n", law, sep="\n")
    print("\n" + post_hoc_rise(ds))
    if args.figure:
        print("figure:", figure(ds, Path(args.figure)))


if __name__ == "__main__":
    main()
