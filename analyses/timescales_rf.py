"""timescales-rf: Bonnaire et al.'s random features at one diffusion time, in their regime, per n and seed.

Their section-4 model as their ``Theory/src`` code has it (commit ``THEIR_COMMIT`` of
tbonnair/Why-Diffusion-Models-Don-t-Memorize): s_A(z) = A tanh(W z / sqrt(d)), Gaussian data, A(0) = 0, no ridge,
gradient descent with fresh noise at every step, training time tau = steps x learning rate.  Its noise-averaged
dynamics (:func:`ridgexr.training.single_time.single_time_losses`: the mean of their fresh-noise descent; U by Monte Carlo over
the noise, one eigendecomposition per n and seed) gives the train loss, the test loss and the error to the true score
along tau, and the spectrum of U with its two bulks.  :func:`ridgexr.analysis.separation_timescales` reads tau_mem
where the train and test losses separate by 0.1, tau_gen where the score error has closed 90 % of its fall, and puts
the spectral times beside them; the laws in n are interval-censored fits with seeds as replicates, judged by the
criteria of docs/timescales.md (written before the run).

Not a ``ridgexr run`` entry: a score trained at one diffusion time drives no sampler, so there are no trajectories,
ridge quantities or stores of the run schema.  The curves go to a Zarr v3 store of their own (``timescales-rf.zarr``
in the data folder, or ``--out``), one seed appended at a time so an interrupted run resumes at the next seed;
``--rows-check`` writes the convergence check in the number of noise rows beside it; ``--figure`` draws the figure.

Run:  python analyses/timescales_rf.py [--n 128 ... 2048] [--seeds 0 1 2] [--rows-check] [--figure PNG]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from _common import markdown_table

from ridgexr.analysis.timescales import LOSS_SEPARATION, separation_timescales
from ridgexr.claims.timescale_slope import law_claims
from ridgexr.paths import data_folder
from ridgexr.training.single_time import THEIR_COMMIT, single_time_losses

DEFAULTS = dict(n=[128, 256, 512, 1024, 2048], d=32, p=4096, t=0.01, seeds=list(range(12)), rows=65536,
                n_test=65536)
#: the training-time grid: 20 points per decade from 1e-1 to 1e7
TAUS = np.logspace(-1, 7, 161)
#: the settings a resumed store must share
SETTINGS = ("d", "p", "t", "rows", "n_test", "antithetic", "lam")


def run(n, d, p, t, seeds, rows, n_test, out: Path, progress=print) -> xr.Dataset:
    """The curves of every seed, appended to ``out`` one seed at a time (seeds already there are kept)."""
    done = []
    if out.exists():
        old = xr.open_zarr(out, consolidated=False)
        want = dict(d=d, p=p, t=t, rows=rows, n_test=n_test)
        clash = {k: (old.attrs.get(k), v) for k, v in want.items() if old.attrs.get(k) != v}
        if clash or old["n_train"].values.tolist() != sorted(n):
            raise SystemExit(f"{out} holds another run ({clash or 'other n'}); remove it or pass --out")
        done = old["seed"].values.tolist()
    for s in seeds:
        if s in done:
            progress(f"seed {s}: in the store")
            continue
        t0 = time.perf_counter()
        part = single_time_losses(n, d=d, p=p, t=t, taus=TAUS, rows=rows, n_test=n_test, seed=s,
                                  progress=lambda m, s=s: progress(f"seed {s}: {m}"))
        part.attrs.pop("seed")
        part = part.expand_dims(seed=[s])
        part["seconds"] = ("seed", [round(time.perf_counter() - t0, 1)], {"long_name": "wall time of the seed",
                                                                          "units": "s"})
        if out.exists():
            part.to_zarr(out, append_dim="seed", consolidated=False)
        else:
            part.to_zarr(out, mode="w", zarr_format=3, consolidated=False)
        progress(f"seed {s}: {time.perf_counter() - t0:.0f} s")
    return xr.open_zarr(out, consolidated=False).load()


def rows_check(ds: xr.Dataset, out: Path, progress=print) -> xr.Dataset:
    """The store's first seed at the smallest and largest n again with a quarter of the noise rows (the Monte
    Carlo's convergence)."""
    if out.exists():
        return xr.open_zarr(out, consolidated=False).load()
    a = ds.attrs
    ns = [int(ds.n_train.values[0]), int(ds.n_train.values[-1])]
    seed = int(ds.seed.values[0])
    part = single_time_losses(ns, d=int(a["d"]), p=int(a["p"]), t=float(a["t"]), taus=ds.tau.values,
                              rows=int(a["rows"]) // 4, n_test=int(a["n_test"]), seed=seed, equivalent=False,
                              progress=lambda m: progress(f"rows / 4: {m}"))
    part.to_zarr(out, mode="w", zarr_format=3, consolidated=False)
    return part


def _interval(v, lo, hi, cen) -> str:
    return f">= {v:.3g} (censored)" if cen else f"{v:.3g} ({lo:.3g}, {hi:.3g}]"


def tables(ds: xr.Dataset, ts: xr.Dataset) -> dict[str, str]:
    """The generated tables: per (n, seed) times, per n spectrum, the laws."""
    rows = []
    for n in ds.n_train.values:
        for s in ds.seed.values:
            c = ts.sel(n_train=n, seed=s)
            rows.append({
                "n": int(n), "seed": int(s),
                "tau_gen": _interval(*(float(c[f"tau_gen{k}"]) for k in ("", "_low", "_high", "_censored"))),
                "tau_gen spectral": f"{float(c['tau_gen_spectral']):.3g}",
                "tau_mem (test - train >= 0.1)": _interval(*(float(c[f"tau_mem{k}"])
                                                             for k in ("", "_low", "_high", "_censored"))),
                "tau_mem spectral": f"{float(c['tau_mem_spectral']):.3g}",
                "tau_mem spectral (Gaussian equiv.)": f"{float(c['tau_mem_spectral_equivalent']):.3g}",
                "tau_mem / spectral": f"{float(c['tau_mem_ratio']):.2f}",
            })
    spec = []
    for n in ds.n_train.values:
        c = ds.sel(n_train=n)
        spec.append({
            "n": int(n), "psi_n = n/d": f"{n / ds.attrs['d']:.0f}", "p/n": f"{ds.attrs['p'] / n:.0f}",
            "population bulk": f"[{float(c.population_low.min()):.3g}, {float(c.population_high.max()):.3g}]",
            "sample bulk": f"[{float(c.sample_low.min()):.3g}, {float(c.sample_high.max()):.3g}]",
            "largest below": f"{float(c.rest_high.max()):.3g}",
            "gaps (pop., sample), least over seeds": f"{float(c.population_gap.min()):.3g}, "
                                                     f"{float(c.sample_gap.min()):.3g}",
            "sample gap, Gaussian equiv.": f"{float(c.sample_gap_equivalent.min()):.3g}",
            "min test loss / at tau (first seed)": f"{float(c.test_loss.isel(seed=0).min()):.4f} / "
                                               f"{float(c.tau[int(np.argmin(c.test_loss.isel(seed=0).values))]):.3g}",
        })
    law = []
    what = {"tau_mem": f"tau_mem: test - train >= {LOSS_SEPARATION:g}",
            "tau_mem_spectral": "tau_mem: 1 / (c median sample eigenvalue) of U",
            "tau_mem_spectral_equivalent": "the same of their Gaussian-equivalent U",
            "tau_gen": "tau_gen: 90 % of the score error's fall",
            "tau_gen_spectral": "tau_gen: 1 / (c median population eigenvalue)"}
    claims = law_claims(ts, what)  # the registry's timescale-law kind: criterion and minimum of runs
    for name, claim in zip(what, claims):
        law.append({"law": f"log {name} = a + b log n", "measure": what[name], "expected b": 1 if "mem" in name else 0,
                    "b [95 %]": f"{float(ts[f'{name}_slope']):.3f} [{float(ts[f'{name}_slope_low']):.3f}, "
                                f"{float(ts[f'{name}_slope_high']):.3f}]",
                    "scatter sigma": f"{float(ts[f'{name}_sigma']):.3f}",
                    "runs (n x seeds)": int(ts[f"{name}_points"]), "verdict": claim.verdict})
    return {"times": markdown_table(pd.DataFrame(rows)), "spectrum": markdown_table(pd.DataFrame(spec)),
            "laws": markdown_table(pd.DataFrame(law))}


def by_n(ts: xr.Dataset) -> str:
    """Per n, each time's median over the seeds with its range [least, largest] (censored ones counted)."""
    names = {"tau_gen": "tau_gen", "tau_gen_spectral": "tau_gen spectral",
             "tau_mem": f"tau_mem (test - train >= {LOSS_SEPARATION:g})", "tau_mem_spectral": "tau_mem spectral",
             "tau_mem_spectral_equivalent": "tau_mem spectral (Gaussian equiv.)", "tau_mem_ratio": "tau_mem / spectral"}
    out = []
    for n in ts.n_train.values:
        c = ts.sel(n_train=n)
        row = {"n": int(n), "seeds": int(c.sizes["seed"])}
        for name, label in names.items():
            v = c[name].values
            row[label] = f"{np.median(v):.3g} [{v.min():.3g}, {v.max():.3g}]"
        row["censored tau_mem"] = int(c["tau_mem_censored"].sum())
        out.append(row)
    return markdown_table(pd.DataFrame(out))


def write_docs(name: str, command: str, ts: xr.Dataset, parts: dict[str, str]) -> list[Path]:
    """The generated docs tables: ``docs/tables/<name>.md`` (``parts``: per-n times, spectrum, checks) and
    ``docs/claims_tables/<name>.md`` (the laws' claims, the registry's timescale-law kind)."""
    from ridgexr.verdicts import claims_markdown

    docs = Path(__file__).resolve().parent.parent / "docs"
    what = {"tau_mem": f"separation: first tau with test - train >= {LOSS_SEPARATION:g} (interval-censored "
                       "likelihood, profile 95 % interval)",
            "tau_mem_spectral": "1 / (c median sample-bulk eigenvalue) of the Monte-Carlo U",
            "tau_mem_spectral_equivalent": "1 / (c median sample-bulk eigenvalue) of their Gaussian-equivalent U",
            "tau_gen": "score error: 90 % of its fall (interval-censored likelihood, profile 95 % interval)",
            "tau_gen_spectral": "1 / (c median population-bulk eigenvalue) of the Monte-Carlo U"}
    head = f"<!-- generated by analyses/timescales_rf.py ({command}); do not edit -->\n\n"
    tables_path, claims_path = docs / "tables" / f"{name}.md", docs / "claims_tables" / f"{name}.md"
    tables_path.write_text(head + "\n\n".join(f"**{k}**\n\n{v}" for k, v in parts.items()) + "\n")
    claims_path.write_text(head + claims_markdown(law_claims(ts, what)) + "\n")
    return [tables_path, claims_path]


def rows_table(ds: xr.Dataset, check: xr.Dataset) -> str:
    """The convergence in the noise rows: the store's first seed at rows and rows / 4."""
    full = ds.isel(seed=0).sel(n_train=check.n_train.values)
    ts_full = separation_timescales(ds.isel(seed=0).sel(n_train=check.n_train.values))
    ts_q = separation_timescales(check)
    out = []
    for n in check.n_train.values:
        a, b = full.sel(n_train=n), check.sel(n_train=n)
        until = a.tau <= 10 * float(ts_full.tau_mem.sel(n_train=n))
        out.append({"n": int(n), "rows": f"{int(ds.attrs['rows'])} / {int(check.attrs['rows'])}",
                    "tau_mem": f"{float(ts_full.tau_mem.sel(n_train=n)):.3g} / {float(ts_q.tau_mem.sel(n_train=n)):.3g}",
                    "tau_mem spectral": f"{float(a.tau_mem_spectral):.4g} / {float(b.tau_mem_spectral):.4g}",
                    "largest test-loss difference up to 10 tau_mem":
                        f"{float(np.abs(a.test_loss - b.test_loss).where(until).max()):.2g}",
                    "largest train-loss difference up to 10 tau_mem":
                        f"{float(np.abs(a.train_loss - b.train_loss).where(until).max()):.2g}"})
    return markdown_table(pd.DataFrame(out))


def gd_check(seeds=(0, 1, 2, 3)) -> str:
    """Their fresh-noise descent against the noise-averaged steps on d = 4, p = 64, n = 8, t = 0.1 (seed 0 is the
    test's instance; each seed a new W, data and noise), with each form's distance from the runs in standard errors
    of the runs (the error of the averaged forms' own Monte Carlo is not in it)."""
    import torch

    from ridgexr.training.single_time import (THEIR_LR_FACTOR, feature_forms, fresh_noise_descent, readout_flow)

    d, p, n, t = 4, 64, 8, 0.1
    lr = THEIR_LR_FACTOR * d / (1 - math.exp(-2 * t))
    taus = np.array([10.0, 100.0, 1000.0])
    out = []
    for seed in seeds:
        g = torch.Generator().manual_seed(int(seed))
        W = torch.randn(p, d, generator=g, dtype=torch.float64)
        x = torch.randn(n, d, generator=g, dtype=torch.float64)
        x_test = torch.randn(65536, d, generator=g, dtype=torch.float64)
        test = (*feature_forms(x_test, W, t, 1, torch.Generator().manual_seed(5))[:2], float(d), "noise")
        gd = fresh_noise_descent(x, W, t, taus, lr=lr, evaluate={"test": test}, n_runs=64,
                                 generator=torch.Generator().manual_seed(7))
        forms = {m: feature_forms(x, W, t, m, torch.Generator().manual_seed(8), antithetic=m > 16)
                 for m in (16, 16384)}
        steps = {m: readout_flow(U, V, t).losses(taus, {"test": test}, lr=lr)["test"]
                 for m, (U, V, _) in forms.items()}
        for j, tau in enumerate(taus):
            mean, se = gd["mean"]["test"][j], gd["mean_se"]["test"][j]
            out.append({"seed": int(seed), "tau": f"{tau:g}",
                        "their descent: loss of E[A] (64 runs)": f"{mean:.4f} +- {se:.4f}",
                        "their descent: mean loss of a run": f"{gd['runs']['test'][:, j].mean():.4f}",
                        "noise-averaged, 16 384 draws per point": f"{steps[16384][j]:.4f}",
                        "(averaged - E[A]) / SE": f"{(steps[16384][j] - mean) / se:+.1f}",
                        "16 fixed draws per point": f"{steps[16][j]:.4f}",
                        "(16 draws - E[A]) / SE": f"{(steps[16][j] - mean) / se:+.1f}"})
    return markdown_table(pd.DataFrame(out))


def figure(ds: xr.Dataset, path: Path) -> Path:
    """The figure of analyses/figures.py (``rf_summary``, ``rf_draw``: the first seed's losses per n with tau_mem
    marked, U's spectrum per n, the times against n with their laws) drawn from ``ds`` to ``path``."""
    from figures import DPI, rf_draw, rf_summary

    path.parent.mkdir(parents=True, exist_ok=True)
    rf_draw(rf_summary(ds)).savefig(path, dpi=DPI, metadata={"Software": None})
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=DEFAULTS["n"])
    for k in ("d", "p", "rows", "n_test"):
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=DEFAULTS[k])
    ap.add_argument("--t", type=float, default=DEFAULTS["t"])
    ap.add_argument("--seeds", type=int, nargs="+", default=DEFAULTS["seeds"])
    ap.add_argument("--out", default=None, help="the Zarr store of the curves (default: <data folder>/timescales-rf.zarr)")
    ap.add_argument("--rows-check", action="store_true", help="also the first seed at the extreme n with a quarter of the rows")
    ap.add_argument("--gd-check", action="store_true", help="print their fresh-noise descent against the averaged steps (four instances)")
    ap.add_argument("--figure", default=None, help="draw the figure to this PNG (the committed ones: analyses/figures.py "
                                                   "--summarize --only timescales_rf...)")
    ap.add_argument("--docs", default=None, help="write the generated docs tables under this name "
                    "(docs/tables/NAME.md, docs/claims_tables/NAME.md)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else data_folder() / "timescales-rf.zarr"
    t0 = time.perf_counter()
    ds = run(args.n, args.d, args.p, args.t, args.seeds, args.rows, args.n_test, out)
    print(f"{out}: {ds.sizes['seed']} seeds ({time.perf_counter() - t0:.0f} s this call); their code at "
          f"{THEIR_COMMIT[:7]}; tau_mem at test - train >= {LOSS_SEPARATION}")
    ts = separation_timescales(ds)
    parts = tables(ds, ts)
    for name, text in parts.items():
        print(f"\n{name}\n\n{text}")
    docs = {"times per n (median [range] over the seeds)": by_n(ts), "spectrum": parts["spectrum"]}
    if args.rows_check:
        check = rows_check(ds, out.with_name(out.stem + "-rows.zarr"))
        docs["rows"] = rows_table(ds, check)
        print("\nrows\n\n" + docs["rows"])
    if args.gd_check:
        docs["fresh-noise descent"] = gd_check()
        print("\nfresh-noise descent\n\n" + docs["fresh-noise descent"])
    if args.figure:
        print("figure:", figure(ds, Path(args.figure)))
    if args.docs:
        command = " ".join(["python analyses/timescales_rf.py", *(argv if argv is not None else sys.argv[1:])])
        print("docs:", *write_docs(args.docs, command.replace(str(out.parent), "<data>"), ts, docs))


if __name__ == "__main__":
    main()
