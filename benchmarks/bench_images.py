"""Benchmark: ridge projection and observation at image scale (Fashion-MNIST, N = 60 000, d = 784).

Run:  python benchmarks/bench_images.py [--quick] [--queries Q] [--n-train N] [--steps S]

Projects Q noisy training images (x = alpha_t x_i + sqrt(h_t) z, pixels in [0, 1]) onto the
d* = 1 and d* = 10 ridges at t = 0.01, 0.1 and 0.5 with ``project_to_ridge`` (float64, top_k = 64,
stop_degenerate = 3, the automatic frame: low rank at d = 784) and prints, per regime of the
starting frame -- concentrated (the certified top-k support: the Gram path), spread (the randomized
path) and degenerate (the frame's gap below its floor) -- the point-iterations per second, the time
per point-iteration against the floor 2 N d flops of the logits at this run's matmul rate, and the
process's peak RSS.  Then it times the observation of 64 samples over the observed steps of a
50-step grid (``observe.step_quantities`` with the exact denoiser, d* = 1; the samples are noisy
training images at each t) and extrapolates the measured steps to 50.

The images are the Debian package's (``/usr/share/datasets/fashion-mnist``); without it the script
uses uniform random data of the same size and says so.  All numbers come from one run: compare the
ratios; absolute times depend on the machine's load (printed).
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, matmul_gflops  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr import defaults  # noqa: E402
from ridgexr.observe import step_quantities  # noqa: E402
from ridgexr.scms import frame_flat  # noqa: E402

FASHION = Path("/usr/share/datasets/fashion-mnist")
TIMES = (0.01, 0.1, 0.5)
D_STARS = (1, 10)
TOP_K = 64
STOP_DEGENERATE = 3


def peak_rss_gb() -> float:
    """Peak resident set size of this process so far, GB (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def load_images(n: int):
    if (FASHION / "train-images-idx3-ubyte.gz").is_file():
        from ridgexr.datasets.mnist import load_idx_dir
        return load_idx_dir(FASHION)[0][:n], "Fashion-MNIST training images"
    return np.random.default_rng(0).uniform(size=(n, 784)), "uniform random data (Fashion-MNIST not installed)"


def regimes(p, x: torch.Tensor, t: float, d_star: int) -> dict:
    """Each query's regime from its starting frame: 'degenerate', 'concentrated' (top-k support) or 'spread'."""
    tf = torch.full((x.shape[0],), t, dtype=x.dtype)
    fr = frame_flat(p, x, tf, d_star, "log", TOP_K)
    spec = p.spectrum_flat(x, tf, n_eig=fr.eigenvalues.shape[-1], need=d_star + 1, top_k=TOP_K)
    deg = fr.degenerate
    conc = ~deg & (spec.path == 0)
    return {"concentrated": conc, "spread": ~deg & ~conc, "degenerate": deg}


def projection_rows(train, q: int, max_iter: int, floor_us: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    print("| t | d* | regime | queries | point-iterations | s | point-it/s | us per point-it | x logits floor | "
          "peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in TIMES:
        p = ridgexr.SmoothedEmpirical(train, t)
        a, h = p.process.alpha(t), p.process.h(t)
        x = torch.from_numpy(a * train[rng.choice(len(train), q, replace=False)]
                             + math.sqrt(h) * rng.standard_normal((q, train.shape[1])))
        for d_star in D_STARS:
            groups = regimes(p, x, t, d_star)
            for name, sel in groups.items():
                n_sel = int(sel.sum())
                if n_sel == 0:
                    print(f"| {t} | {d_star} | {name} | 0 | - | - | - | - | - | - |")
                    continue
                t0 = time.perf_counter()
                res = ridgexr.project_to_ridge(p, x[sel], d_star, top_k=TOP_K, max_iter=max_iter,
                                               stop_degenerate=STOP_DEGENERATE)
                el = time.perf_counter() - t0
                pit = int((res.iterations + 1).sum())
                us = el / pit * 1e6
                print(f"| {t} | {d_star} | {name} | {n_sel} | {pit} | {el:.1f} | {pit / el:,.1f} | {us:,.0f} | "
                      f"{us / floor_us:,.0f}x | {peak_rss_gb():.2f} |", flush=True)


def observation_row(train, n_samples: int, steps: int, max_iter: int, seed: int = 1):
    """Time step_quantities over ``steps`` of the 50 observed steps (evenly spread over the grid)."""
    rng = np.random.default_rng(seed)
    grid = ridgexr.time_grid(49, defaults.T, defaults.T_MIN, defaults.GRID)  # 50 observed times
    pick = np.unique(np.linspace(0, len(grid) - 1, steps).round().astype(int))
    p = ridgexr.SmoothedEmpirical(train, 1.0)
    total = 0.0
    idx = rng.choice(len(train), n_samples, replace=False)
    per_step = []
    for i in pick:
        t = float(grid[i])
        a, h = math.exp(-t), -math.expm1(-2 * t)
        x = torch.from_numpy(a * train[idx] + math.sqrt(h) * rng.standard_normal((n_samples, train.shape[1])))[None]
        t0 = time.perf_counter()
        step_quantities(p, x, np.array([t]), 1, None, max_iter=max_iter, top_k=TOP_K, stop_degenerate=STOP_DEGENERATE)
        el = time.perf_counter() - t0
        per_step.append((t, el))
        total += el
    est = total / len(pick) * 50
    print(f"\nobservation: {n_samples} samples x {len(pick)} of 50 observed steps, N = {len(train):,}, d = "
          f"{train.shape[1]}: {total:.1f} s measured; 50 steps ~ {est / 60:.1f} min; peak RSS {peak_rss_gb():.2f} GB "
          f"(target 15 min, 4 GB)")
    print("per step (t, s): " + ", ".join(f"({t:.3g}, {s:.1f})" for t, s in per_step))
    return est


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 000 images, 2 queries, 5 iterations, "
                                                         "2 samples x 1 observed step")
    ap.add_argument("--queries", type=int, default=256, help="queries projected per (t, d*)")
    ap.add_argument("--n-train", type=int, default=60_000, help="training images used")
    ap.add_argument("--samples", type=int, default=64, help="samples observed per step")
    ap.add_argument("--steps", type=int, default=50, help="observed steps timed (of 50; the rest extrapolated)")
    ap.add_argument("--max-iter", type=int, default=200, help="SCMS iteration cap")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default torch's; 1 on a loaded machine, where a 2-thread pool waits on the "
                         "scheduler: 27x slower at load 18 on 2 cores)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.queries, args.n_train, args.samples, args.steps, args.max_iter = 2, 2000, 2, 1, 5
    train, what = load_images(args.n_train)
    n, d = train.shape
    print(f"# image-scale ridge benchmark  ({machine()})", flush=True)
    print(f"data: {what}, N = {n:,}, d = {d}; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    mm = matmul_gflops()
    floor_us = 2 * n * d / (mm * 1e9) * 1e6
    print(f"same-run float64 matmul (2000^3): {mm:.1f} GFLOP/s; logits floor 2 N d = {2 * n * d:.2e} flops "
          f"= {floor_us:.1f} us per point-iteration", flush=True)
    projection_rows(train, args.queries, args.max_iter, floor_us)
    observation_row(train, args.samples, args.steps, args.max_iter)
    print(f"load average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
