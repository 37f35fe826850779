"""Benchmark: SCMS iterations per point for the shipped entries, where the projection crawls.

Run:  python benchmarks/bench_scms_iterations.py [--quick] [--mnist]

For the training sets of the shipped 2-D entries (and, with ``--mnist``, the cached MNIST
latents of ``mnist48`` at d* = 25 and at the automatic d*), states are drawn the way the
sampler sees them near the data, x = alpha_t x_i + sqrt(h_t) z, at several times t, and
projected with each entry's ridge settings (``max_iter`` raised to 1000 so the count is not
capped).  Prints, per (entry, t): the median and 90th-percentile iterations, the share that
converged, the share with a degenerate final frame, the time per point-iteration and in all;
where SCMS crawls, the same rows again with ``stop_degenerate=5``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr.datasets import load_training_set  # noqa: E402

ENTRIES = ("two-points", "three-points", "square-center-ours", "grid-3x3-ours")
TIMES = (0.05, 0.2, 0.5)


def states(train: np.ndarray, t: float, q: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ou = ridgexr.OU()
    idx = rng.integers(0, len(train), q)
    return ou.alpha(t) * train[idx] + math.sqrt(ou.h(t)) * rng.standard_normal((q, train.shape[1]))


def row(name: str, train: np.ndarray, t: float, d_star: int, q: int, exp, stop: int | None = None) -> str:
    x = states(train, t, q)
    dens = ridgexr.SmoothedEmpirical(train, t)
    t0 = time.perf_counter()
    res = ridgexr.project_to_ridge(dens, x, d_star, tol=exp.ridge.tol, max_iter=1000, top_k=exp.ridge.top_k,
                                   stop_degenerate=stop)
    sec = time.perf_counter() - t0
    it = np.asarray(res.iterations)
    work = max(int(it.sum()) + q, 1)  # every point is evaluated once more at its final position
    label = name if stop is None else f"{name}, stop_degenerate={stop}"
    return (f"| {label} | {d_star} | {t:g} | {np.median(it):.0f} | {np.quantile(it, 0.9):.0f} | "
            f"{np.mean(res.converged):.1%} | {np.mean(res.degenerate):.1%} | {sec / work * 1e6:.1f} | {sec:.2f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mnist", action="store_true", help="also the cached MNIST latents (needs the mnist extra)")
    args = ap.parse_args(argv)
    q = 200 if args.quick else 1000
    cat = ridgexr.open_catalog()
    print(f"# SCMS iterations per point ({machine()}), {q} states per row near the data")
    print("| entry | d* | t | median iterations | 90 % | converged | degenerate | us per point-iteration | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ENTRIES:
        exp = cat[name]
        train = load_training_set(exp.dataset, base_dir=exp.base_dir)
        for t in TIMES:
            print(row(name, train, t, int(exp.d_star), q, exp))
        if name == "grid-3x3-ours":  # where SCMS crawls toward points whose frame is degenerate
            print(row(name, train, 0.2, int(exp.d_star), q, exp, stop=5))
    if args.mnist:
        exp = cat["mnist48"]
        train = load_training_set(exp.dataset, base_dir=exp.base_dir)
        auto, _ = ridgexr.ridge.suggest_d_star(train, exp.ridge.auto_t, seed=exp.seeds.training)
        for d_star in (int(exp.d_star), auto):
            for t in (0.05, 0.2, 0.5):
                print(row("mnist48", train, t, d_star, max(q // 5, 50), exp))
        print(row("mnist48", train, 0.05, int(exp.d_star), max(q // 5, 50), exp, stop=5))


if __name__ == "__main__":
    main()
