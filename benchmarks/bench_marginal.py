"""Benchmark: what the large coverage entries rest on, each against what it replaces, in one run.

Run:  python benchmarks/bench_marginal.py [--n 2000] [--samples 4000] [--steps 100]

1. A stopped exact score's output for ``--samples`` samples on a circle of ``--n`` training points: the reverse
   SDE over ``--steps`` steps and Tweedie's denoiser at t_stop, against the marginal sampler (draws of
   p_t_stop) and the same denoiser.  Also the gap between the two output laws (sliced W2 of the denoised
   outputs; the SDE's includes its discretization error).
2. The nearest and second-nearest training point of 2 x 10^4 queries among 10^5 points in 2-D: the k-d tree
   against the matrix-product path (the same distances).
3. The bootstrap interval of a median of 2 x 10^4 values: order statistics against resampling.

Prints seconds and ratios, all measured in this run (the machine's speed cancels in a ratio).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, machine  # noqa: E402

from ridgexr import time_grid  # noqa: E402
from ridgexr.analysis import arrays  # noqa: E402
from ridgexr.datasets import Manifold  # noqa: E402
from ridgexr.models.exact.denoiser import ExactDenoiser  # noqa: E402
from ridgexr.sampling import marginal, reverse_sde  # noqa: E402


def outputs(kind: str, ex: ExactDenoiser, train: np.ndarray, n: int, grid, t_stop: float, seed: int = 0) -> np.ndarray:
    """Tweedie's output at t_stop of ``n`` states of the reverse SDE (``kind`` "sde") or of the marginal sampler."""
    if kind == "sde":
        blocks = reverse_sde(ex.score, n, train.shape[1], grid, seed=seed, block_steps=grid.size,
                             record_every=grid.size, t_stop=t_stop)
    else:
        blocks = marginal(train, n, grid, seed=seed, block_steps=grid.size, record_every=grid.size, t_stop=t_stop)
    last = list(blocks)[-1].x[-1]
    return np.asarray(ex.denoise(last, t_stop))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="training points of the sampler comparison")
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(machine())
    m = Manifold("circle", ambient_dim=2, radius=2.0)
    train = m.sample(args.n, density="piecewise", seed=0)[0]
    ex = ExactDenoiser(train)
    grid = time_grid(args.steps, 3.0, 1e-5)
    t_stop = 0.6**2 * args.n**-0.5 / 2  # gamma-0.25 of manifold-coverage-circle-marginal: sigma = 0.6 N^-0.25
    res = {}
    for kind in ("sde", "marginal"):
        t0 = time.perf_counter()
        res[kind] = outputs(kind, ex, train, args.samples, grid, t_stop)
        res[kind + " s"] = time.perf_counter() - t0
    gap = arrays.sliced_wasserstein(res["sde"], res["marginal"], n_projections=64, seed=0)
    again = outputs("marginal", ex, train, args.samples, grid, t_stop, seed=1)  # the two-sample noise floor
    same = arrays.sliced_wasserstein(res["marginal"], again, n_projections=64, seed=0)
    print(f"1. N = {args.n}, {args.samples} samples, {args.steps} steps, t_stop = {t_stop:.3g}: "
          f"sde {res['sde s']:.2f} s, marginal {res['marginal s']:.2f} s, ratio {res['sde s'] / res['marginal s']:.1f}; "
          f"sliced W2 between their outputs {gap:.4f} (two marginal draws: {same:.4f})")
    rng = np.random.default_rng(0)
    pts, q = rng.normal(size=(100_000, 2)), rng.normal(size=(20_000, 2))
    tree = best_time(lambda: arrays.nearest_two(q, pts), 2)
    limit = arrays.distances.KD_TREE_MAX_DIM
    arrays.distances.KD_TREE_MAX_DIM = 0  # the matrix-product path
    try:
        dense = best_time(lambda: arrays.nearest_two(q, pts), 1)
        d_dense = arrays.nearest_two(q[:2000], pts)[0]
    finally:
        arrays.distances.KD_TREE_MAX_DIM = limit
    same_d = np.allclose(arrays.nearest_two(q[:2000], pts)[0], d_dense, rtol=1e-12, atol=1e-12)
    print(f"2. nearest two, 2e4 queries x 1e5 points, d = 2: matrix {dense:.2f} s, k-d tree {tree:.3f} s, "
          f"ratio {dense / tree:.0f}; same distances: {same_d}")
    v = rng.exponential(size=arrays.RESAMPLE_LIMIT)
    slow = best_time(lambda: arrays.bootstrap_medians(v, 2000, np.random.default_rng(0)), 1)  # resampling
    arrays.intervals.RESAMPLE_LIMIT = v.size - 1  # the order-statistic path
    fast = best_time(lambda: arrays.bootstrap_medians(v, 2000, np.random.default_rng(0)), 3)
    print(f"3. bootstrap medians, 2000 of {v.size} values: resampling {slow:.2f} s, order statistics {fast * 1e3:.2f} ms, "
          f"ratio {slow / fast:.0f}")


if __name__ == "__main__":
    main()
