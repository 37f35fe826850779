"""Benchmark: ridge projection and observation at image scale (Fashion-MNIST, N = 60 000, d = 784).

Run:  python benchmarks/bench_images.py [--quick] [--queries Q] [--n-train N] [--steps S] [--logits float32]
      [--compare-logits] [--times 0.01 ...] [--d-stars 1 ...] [--step-times 0.01 0.5 ...] [--skip-projection]

Projects Q noisy training images (x = alpha_t x_i + sqrt(h_t) z, pixels in [0, 1], or [-1, 1] with
``--scale symmetric``) onto the
d* = 1 and d* = 10 ridges at t = 0.01, 0.1 and 0.5 with ``project_to_ridge`` (float64, top_k = 64,
stop_degenerate = 3, the automatic frame: low rank at d = 784) and prints, per regime of the
starting frame -- concentrated (the certified top-k support: the Gram path), spread (the support
path: each query's covariance over its certified support) and degenerate (the frame's gap below its floor) -- the point-iterations per second, the time
per point-iteration against the floor 2 N d flops of the logits at this run's matmul rate, and the
process's peak RSS.  Then it times the observation of 64 samples over the observed steps of a
50-step grid (``observe.step_quantities`` with the exact denoiser, d* = 1; the samples are noisy
training images at each t) and extrapolates the measured steps to 50; ``--step-times`` times one
observed step at each given t instead, with the regime of its samples' starting frames.

``--logits float32`` runs everything with certified float32 logits in the top-k pass
(``SmoothedEmpirical(logits="float32")``); ``--compare-logits`` first prints, per t, the time of the
top-k moments of the Q queries (the pass over all N logits, no covariance) with float64 and float32
logits, interleaved (best of 3 each), per point-iteration and as a ratio.

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


def load_images(n: int, scale: str = "unit"):
    """The first n Fashion-MNIST training images, pixels in [0, 1] (``unit``) or [-1, 1] (``symmetric``, the
    scale of the fashion-exact entries), or uniform random data of that size without the Debian package."""
    if (FASHION / "train-images-idx3-ubyte.gz").is_file():
        from ridgexr.datasets.mnist import load_idx_dir
        x, what = load_idx_dir(FASHION)[0][:n], "Fashion-MNIST training images"
    else:
        x, what = np.random.default_rng(0).uniform(size=(n, 784)), "uniform random data (Fashion-MNIST not installed)"
    return (2 * x - 1, what + " in [-1, 1]") if scale == "symmetric" else (x, what + " in [0, 1]")


def logits_rows(train, q: int, floor_us: float, times, seed: int = 0):
    """Per t: the top-k moments of q queries (cov=False: the streamed pass over all N logits and the k kept
    points) with float64 and float32 logits, interleaved, best of 3; the ratio is the speedup per
    point-iteration of that pass."""
    rng = np.random.default_rng(seed)
    print("| t | queries | float64 us per point | float32 us per point | float64 / float32 | x logits floor (f32) |")
    print("|---|---|---|---|---|---|")
    for t in times:
        dens = {k: ridgexr.SmoothedEmpirical(train, t, logits=k) for k in ("float64", "float32")}
        a, h = math.exp(-t), -math.expm1(-2 * t)
        x = torch.from_numpy(a * train[rng.choice(len(train), q, replace=False)]
                             + math.sqrt(h) * rng.standard_normal((q, train.shape[1])))
        best = {k: math.inf for k in dens}
        for k, p in dens.items():  # warm-up: prepares the training set of each precision
            p.moments(x[:1], cov=False, top_k=TOP_K)
        for _ in range(3):
            for k, p in dens.items():
                t0 = time.perf_counter()
                p.moments(x, cov=False, top_k=TOP_K)
                best[k] = min(best[k], time.perf_counter() - t0)
        us = {k: v / q * 1e6 for k, v in best.items()}
        print(f"| {t} | {q} | {us['float64']:,.0f} | {us['float32']:,.0f} | {us['float64'] / us['float32']:.2f} | "
              f"{us['float32'] / floor_us:.1f}x |", flush=True)


def regimes(p, x: torch.Tensor, t: float, d_star: int) -> dict:
    """Each query's regime from its starting frame: 'degenerate', 'concentrated' (top-k support) or 'spread'."""
    tf = torch.full((x.shape[0],), t, dtype=x.dtype)
    fr = frame_flat(p, x, tf, d_star, "log", TOP_K)
    spec = p.spectrum_flat(x, tf, n_eig=fr.eigenvalues.shape[-1], need=d_star + 1, top_k=TOP_K)
    deg = fr.degenerate
    conc = ~deg & (spec.path == 0)
    return {"concentrated": conc, "spread": ~deg & ~conc, "degenerate": deg}


def projection_rows(train, q: int, max_iter: int, floor_us: float, times=TIMES, d_stars=D_STARS,
                    logits: str = "float64", seed: int = 0):
    rng = np.random.default_rng(seed)
    print(f"\nprojections ({logits} logits)")
    print("| t | d* | regime | queries | point-iterations | s | point-it/s | us per point-it | x logits floor | "
          "peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in times:
        p = ridgexr.SmoothedEmpirical(train, t, logits=logits)
        a, h = p.process.alpha(t), p.process.h(t)
        x = torch.from_numpy(a * train[rng.choice(len(train), q, replace=False)]
                             + math.sqrt(h) * rng.standard_normal((q, train.shape[1])))
        for d_star in d_stars:
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


def observation_row(train, n_samples: int, steps: int, max_iter: int, logits: str = "float64", step_times=None,
                    d_star: int = 1, seed: int = 1):
    """Time step_quantities over ``steps`` of the 50 observed steps (evenly spread over the grid), or one step at
    each of ``step_times`` (then with the regimes of the samples' starting frames)."""
    rng = np.random.default_rng(seed)
    grid = ridgexr.time_grid(49, defaults.T, defaults.T_MIN, defaults.GRID)  # 50 observed times
    if step_times:
        times = [float(v) for v in step_times]
    else:
        pick = np.unique(np.linspace(0, len(grid) - 1, steps).round().astype(int))
        times = [float(grid[i]) for i in pick]
    p = ridgexr.SmoothedEmpirical(train, 1.0, logits=logits)
    total = 0.0
    idx = rng.choice(len(train), n_samples, replace=False)
    per_step = []
    for t in times:
        a, h = math.exp(-t), -math.expm1(-2 * t)
        x = torch.from_numpy(a * train[idx] + math.sqrt(h) * rng.standard_normal((n_samples, train.shape[1])))[None]
        shares = ""
        if step_times:
            groups = regimes(p.with_time(t), x[0], t, d_star)
            shares = " ".join(f"{k} {int(v.sum())}" for k, v in groups.items())
        t0 = time.perf_counter()
        out = step_quantities(p, x, np.array([t]), d_star, None, max_iter=max_iter, top_k=TOP_K,
                              stop_degenerate=STOP_DEGENERATE)
        el = time.perf_counter() - t0
        per_step.append((t, el, shares, float(out["frame_degenerate"].mean())))
        total += el
        if step_times:  # one step per regime: print each as it ends (a spread step takes minutes)
            print(f"  step t = {t:.3g}: {el:.1f} s; start: {shares}; peak RSS {peak_rss_gb():.2f} GB", flush=True)
    est = total / len(times) * 50
    print(f"\nobservation ({logits} logits, d* = {d_star}): {n_samples} samples x {len(times)} observed steps, "
          f"N = {len(train):,}, d = {train.shape[1]}: {total:.1f} s measured; 50 such steps ~ {est / 60:.1f} min; "
          f"peak RSS {peak_rss_gb():.2f} GB (target 15 min, 4 GB)")
    for t, el, shares, deg in per_step:
        start = f"; start: {shares}" if shares else ""
        print(f"  t = {t:.3g}: {el:.1f} s; degenerate share at the end {deg:.2f}{start}")
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
    ap.add_argument("--scale", choices=("unit", "symmetric"), default="unit",
                    help="pixels in [0, 1] or [-1, 1] (the fashion-exact entries' scale)")
    ap.add_argument("--logits", choices=("float64", "float32"), default="float64",
                    help="precision of the top-k pass (float32: certified float32 logits)")
    ap.add_argument("--compare-logits", action="store_true",
                    help="first time the top-k moments with float64 and float32 logits (per t)")
    ap.add_argument("--times", type=float, nargs="+", default=list(TIMES), help="t of the projection rows")
    ap.add_argument("--d-stars", type=int, nargs="+", default=list(D_STARS), help="d* of the projection rows")
    ap.add_argument("--skip-projection", action="store_true", help="no projection rows")
    ap.add_argument("--step-times", type=float, nargs="+", default=None,
                    help="observe one step at each of these t (instead of --steps of the grid)")
    ap.add_argument("--observe-d-star", type=int, default=1, help="d* of the observation")
    ap.add_argument("--skip-observation", action="store_true", help="no observation row")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default torch's; 1 on a loaded machine, where a 2-thread pool waits on the "
                         "scheduler: 27x slower at load 18 on 2 cores)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.queries, args.n_train, args.samples, args.steps, args.max_iter = 2, 2000, 2, 1, 5
    train, what = load_images(args.n_train, args.scale)
    n, d = train.shape
    print(f"# image-scale ridge benchmark  ({machine()})", flush=True)
    print(f"data: {what}, N = {n:,}, d = {d}; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    mm = matmul_gflops()
    floor_us = 2 * n * d / (mm * 1e9) * 1e6
    print(f"same-run float64 matmul (2000^3): {mm:.1f} GFLOP/s; logits floor 2 N d = {2 * n * d:.2e} flops "
          f"= {floor_us:.1f} us per point-iteration", flush=True)
    if args.compare_logits:
        logits_rows(train, args.queries, floor_us, args.times)
    if not args.skip_projection:
        projection_rows(train, args.queries, args.max_iter, floor_us, args.times, args.d_stars, args.logits)
    if not args.skip_observation:
        observation_row(train, args.samples, args.steps, args.max_iter, args.logits, args.step_times,
                        args.observe_d_star)
    print(f"load average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
