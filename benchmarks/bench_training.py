"""Benchmark: U/V accumulation rate and the cost of A(tau) for 20 taus.

Run:  python benchmarks/bench_training.py [--quick]

Prints, from one run: the achieved GFLOP/s of the U/V accumulation (counted flops:
2 S p^2 for U, 2 S d p for V, 2 S p (d + 2K + 1) for the features) against a plain float64
matmul measured in the same run, and the time to produce A(tau) for 20 tau values from the
closed-form flow against the time of the one eigendecomposition it needs.  Then the streamed
accumulation of the fits (``training.accumulate``: one Gram matrix per time node, shared by three
schedules) at the default entry's size: two points, width 1024, 64 nodes x 256 noise draws.  Last,
``two-points-paper``'s stages per unit on a reduced problem (5 of its 2001 Simpson nodes, full
4 000-row nodes, p = 2000, K = 128, three schedules x five taus): the accumulation per node, the
held-out evaluation per node and the network's forward per sampler step (2 000 trajectories), with
the stage times they extrapolate to on one thread.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, machine, matmul_gflops  # noqa: E402

from ridgexr import OU, RandomFeatureDenoiser  # noqa: E402
from ridgexr.training import GradientFlow, accumulate, accumulate_moments, targets, draw_training_sample  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    widths = [256, 512] if args.quick else [1024, 2048, 4096]
    rng = np.random.default_rng(0)
    train = rng.normal(size=(8, 2)) * 3
    K = 16
    print(f"# training benchmark ({machine()})")
    mm = matmul_gflops()
    print(f"same-run float64 matmul (2000^3): {mm:.1f} GFLOP/s")
    print("| width p | samples S | U/V GFLOP/s | % of matmul | eigh(U) s | A(tau) x20 s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for p in widths:
        model = RandomFeatureDenoiser(2, p, n_frequencies=K, feature_period=4.0, seed=0)
        s = draw_training_sample(train, t_min=0.01, T=2.0, n_time=32, n_noise=32, seed=0,
                                 quadrature="gauss-legendre-log-t")
        lam, y = targets(s, "posterior_mean", "h", OU())
        S, d = s.size, 2
        flops = 2 * S * p * p + 2 * S * d * p + 2 * S * p * (d + 2 * K + 1)
        el = best_time(lambda: accumulate_moments(model, s, lam, y, batch_size=4096), 2)
        U, V, _ = accumulate_moments(model, s, lam, y)
        t_eigh = best_time(lambda: torch.linalg.eigh(U), 2)
        fl = GradientFlow(U, V, torch.zeros(2, p, dtype=torch.float64))
        taus = list(np.logspace(-2, 4, 19)) + [math.inf]
        t_a = best_time(lambda: fl.path(taus), 2)
        t_total = t_eigh + t_a  # one eigendecomposition, then every tau from it
        gf = flops / el / 1e9
        print(f"| {p} | {S} | {gf:.1f} | {100 * gf / mm:.0f}% | {t_eigh:.3f} | {t_a:.3f} | "
              f"{t_total / t_eigh:.2f}x (eigh + 20 taus vs eigh) |")
    streamed_fit_row(mm, args.quick)
    paper_stages(args.quick)


def streamed_fit_row(mm: float, quick: bool) -> None:
    """``accumulate`` for the schedules 1, h, h^2 on the two-points sample (nested raw features)."""
    p = 256 if quick else 1024
    train = np.array([[-3.0, 0.0], [3.0, 0.0]])
    model = RandomFeatureDenoiser(2, p, n_frequencies=16, feature_period=3.0, seed=0)
    s = draw_training_sample(train, t_min=1e-3, T=3.0, n_time=64, n_noise=256, seed=0,
                             quadrature="gauss-legendre-log-t")
    el = best_time(lambda: accumulate(model, s, ["1", "h", "h2"], normalized=False), 2)
    gf = 2 * s.size * p * p / el / 1e9  # the Gram matrices' GEMM flops (shared by the three schedules)
    print(f"\nstreamed fit accumulation (two points, width {p}, {s.n_time} nodes x {s.size // s.n_time} rows, "
          f"3 schedules): {el:.2f} s, Gram GEMMs at {gf:.1f} GFLOP/s = {100 * gf / mm:.0f}% of matmul")


def paper_stages(quick: bool) -> None:
    """two-points-paper per node (fit, held-out) and per sampler step (forward), CPU seconds of this process."""
    import time

    from ridgexr.training import draw_training_sample, fit_sweep
    from ridgexr.training.fit import evaluate_fits

    p, n_noise, n_time = (256, 200, 3) if quick else (2000, 2000, 5)
    train = np.array([[-3.0, 0.0], [3.0, 0.0]])
    kw = dict(n_frequencies=128, feature_period=10.0, seed=0)
    cpu = time.process_time
    model = RandomFeatureDenoiser(2, p, **kw)
    s = draw_training_sample(train, t_min=1e-3, T=10.0, n_time=n_time, n_noise=n_noise, seed=0, quadrature="simpson-t")
    t0 = cpu()
    accumulate(model, s, ["1", "h", "h2"], normalized=False)
    acc = (cpu() - t0) / n_time
    fits = fit_sweep(train, widths=[p], schedules=["1", "h", "h2"], taus=[1000.0, 1500.0, 2000.0, 5000.0, math.inf],
                     model_kwargs=kw, t_min=1e-3, T=10.0, n_time=n_time, n_noise=n_noise, quadrature="simpson-t",
                     null_cutoff="absolute")
    hold = next(iter(fits.values())).heldout_sample()
    t0 = cpu()
    evaluate_fits(fits, hold, 1)
    held = (cpu() - t0) / n_time
    net = next(iter(fits.values())).denoiser(math.inf)
    x = torch.as_tensor(np.random.default_rng(0).normal(size=(2000, 2)))
    t = torch.tensor(0.5, dtype=torch.float64)
    with torch.no_grad():
        net(x, t)
        t0 = cpu()
        for _ in range(20):
            net(x, t)
    step = (cpu() - t0) / 20
    print(f"\ntwo-points-paper stages (p = {p}, {2 * n_noise} rows per node, CPU s of one process): accumulate "
          f"{acc:.3f} s per node, held-out evaluation {held:.3f} s per node, forward {1e3 * step:.2f} ms per sampler "
          f"step of 2000 trajectories; x 2001 nodes / 15 cells x 2000 steps: {acc * 2001 / 60:.1f} + "
          f"{held * 2001 / 60:.1f} + {step * 30000 / 60:.1f} min")


if __name__ == "__main__":
    main()
