"""Which of the paper's settings the two-point results depend on: a one-at-a-time sensitivity table.

Starting from the authors' settings (time-feature period T = 10, Simpson's rule on 2001
nodes, A(0) ~ N(0, 1), K = 128), each row changes one choice -- the period (2T, ridgexr
0.2's), the time quadrature (trapezoid in log t; 64 Gauss-Legendre nodes in log t, 0.2's),
the initialisation (zeros, 0.2's), the number of time frequencies (K = 16) -- plus one row
with all of ridgexr 0.2's demo settings together.  Reduced size (the full size is a
45-minute entry): width p = 1000, 500 noise draws per (point, node) instead of 2000, 500
samples per cell; the sampler is the paper's (2000 exponential reverse-SDE steps from T to
1e-3).  Reported per schedule and tau: the near-mode share (within 0.5 of a training point,
the paper's count) with its Wilson interval over samples (feature-seed variability is not
in the interval: ``--seeds`` repeats over feature seeds), the d1/d2 memorized share, and the
median |x1| of the final samples (small: bunched at the midpoint of the segment).

The minimum-norm fit's null cutoff (ours p eps mu_max, the authors' absolute 1 / (p 1e4):
``training.null_cutoff``) is one more row.  It changes only the solve, not the loss form: when the
paper row was fitted in the same run, its U and V are re-solved with the other cutoff
(:class:`ridgexr.training.GradientFlow`, the same A(0)) instead of fitting again, and the number of
eigenvalues of U between the two cutoffs is printed per schedule.

Run:  python analyses/sensitivity.py [--width 1000] [--n-noise 500] [--samples 500] [--seeds 0] [--rows paper cutoff]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import numpy as np
import torch

from _common import markdown_table

import pandas as pd

from ridgexr import time_grid
from ridgexr.analysis.arrays import memorized, near_mode, proportion_ci
from ridgexr.datasets import POINT_SETS
from ridgexr.sampling import divergence_bound, guard_divergence, reverse_sde
from ridgexr.training import GradientFlow, fit_sweep

PAPER = dict(feature_period=10.0, quadrature="simpson-t", n_time=2001, init="normal", n_frequencies=128, T=10.0,
             null_cutoff="relative")
VARIANTS = {
    "paper (period T, Simpson 2001, A(0) ~ N(0,1), K = 128)": {},
    "period 2T": dict(feature_period=20.0),
    "trapezoid in log t (2001 nodes)": dict(quadrature="trapezoid-log-t"),
    "Gauss-Legendre in log t (64 nodes)": dict(quadrature="gauss-legendre-log-t", n_time=64),
    "A(0) = 0": dict(init="zeros"),
    "K = 16": dict(n_frequencies=16),
    "null cutoff 1 / (p 1e4) (the authors', Ridge_2mode.py)": dict(null_cutoff="absolute"),
    "ridgexr 0.2 demo (K 16, T 3, period 6, GL 64, A(0) = 0)": dict(n_frequencies=16, T=3.0, feature_period=6.0,
                                                                  quadrature="gauss-legendre-log-t", n_time=64,
                                                                  init="zeros"),
}
TAUS = [5000.0, math.inf]
SCHEDULES = ["1", "h", "h2"]


def final_states(model, n_samples: int, T: float, seed: int, bound: float) -> np.ndarray:
    """Final states (n_samples, 2) of the paper's sampler: 2000 exponential reverse-SDE steps to 1e-3."""
    score = guard_divergence(lambda x, t: model.score(x, t), bound)
    grid = time_grid(2000, T, 1e-3, "exponential")
    last = None
    with torch.no_grad():
        for block in reverse_sde(score, n_samples, 2, grid, seed=seed, block_steps=2001, record_every=2000):
            last = block.x[-1]
    return last.numpy()


def resolve(fit, null_cutoff: str):
    """``fit`` with its readouts re-solved under ``null_cutoff`` (same U, V and A(0) = the readout at tau 0)."""
    path = GradientFlow(fit.U, fit.V, fit.readout(0.0), null_cutoff=null_cutoff).path(fit.taus.tolist())
    return dataclasses.replace(fit, A=path.A, _stats={})


def between_cutoffs(fit) -> int:
    """Eigenvalues mu of U that one cutoff keeps and the other treats as null."""
    mu = torch.linalg.eigvalsh(fit.U)
    p = mu.numel()
    rel, absolute = p * torch.finfo(mu.dtype).eps * float(mu.max()), 1.0 / (p * 1e4)
    lo, hi = min(rel, absolute), max(rel, absolute)
    return int(((mu > lo) & (mu <= hi)).sum())


def run(width: int, n_noise: int, n_samples: int, seeds: list[int], rows_like: list[str] | None = None) -> pd.DataFrame:
    train = POINT_SETS["two-points"]
    bound = divergence_bound(train)
    rows = []
    paper_fits: dict = {}
    for name, change in VARIANTS.items():  # a handful of configurations
        if rows_like and not any(k in name for k in rows_like):
            continue
        cfg = {**PAPER, **change}
        for seed in seeds:
            t0 = time.perf_counter()
            base = paper_fits.get(seed)
            if base is not None and set(change) == {"null_cutoff"}:  # the same U, V and A(0), another solve
                fits = {key: resolve(fit, cfg["null_cutoff"]) for key, fit in base.items()}
            else:
                fits = fit_sweep(train, widths=[width], schedules=SCHEDULES, taus=[0.0, *TAUS], t_min=1e-3,
                                 T=cfg["T"], quadrature=cfg["quadrature"], n_time=cfg["n_time"], n_noise=n_noise,
                                 init=cfg["init"], seed=0, null_cutoff=cfg["null_cutoff"],
                                 model_kwargs=dict(n_frequencies=cfg["n_frequencies"],
                                                   feature_period=cfg["feature_period"], seed=seed))
                if not change:
                    paper_fits[seed] = fits
            for (s, _), fit in fits.items():
                print(f"  {s}: {between_cutoffs(fit)} eigenvalues of U between p eps mu_max and 1 / (p 1e4)",
                      flush=True)
            for (s, _), fit in fits.items():
                for tau in TAUS:
                    x = final_states(fit.denoiser(tau), n_samples, cfg["T"], 0, bound)
                    a = math.exp(-1e-3)
                    near = near_mode(x, train * a, 0.5)
                    ok = np.isfinite(near)
                    k, n = int(near[ok].sum()), int(ok.sum())
                    lo, hi = proportion_ci(np.array([k]), np.array([n]), 0.95, "wilson")
                    rows.append({"setting": name, "feature seed": seed, "schedule": s, "tau": tau,
                                 "near mode": k / n if n else np.nan, "near low": float(lo[0]),
                                 "near high": float(hi[0]),
                                 "memorized (d1/d2)": float(np.nanmean(memorized(x / a, train))) if n else np.nan,
                                 "median |x1|": float(np.median(np.abs(x[ok, 0]))) if n else np.nan,
                                 "diverged": len(x) - n})
            print(f"{name} (seed {seed}): {time.perf_counter() - t0:.0f} s", flush=True)
            print(markdown_table(pd.DataFrame(rows[-len(SCHEDULES) * len(TAUS):])), flush=True)
    return pd.DataFrame(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--n-noise", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--rows", nargs="+", default=None, help="run only the rows whose name contains one of these")
    args = ap.parse_args(argv)
    df = run(args.width, args.n_noise, args.samples, args.seeds, args.rows)
    print(f"\n## Sensitivity (p = {args.width}, {args.n_noise} draws per node, {args.samples} samples)\n")
    print(markdown_table(df))


if __name__ == "__main__":
    main()
