"""Benchmark: trajectory steps per second of the main job, and Zarr write throughput.

Run:  python benchmarks/bench_run.py [--quick]

1. Runs one random-feature cell of the default ``two-points`` entry (reverse SDE, ridge
   projection and directional residuals of every step, region writes into Zarr v3) and
   prints sample-steps per second, with the share of time spent in sampling, observation
   (projection + residuals) and writing.
2. Writes the same bytes as one full cell (all per-step variables) with region writes into a
   Zarr v3 store and with ``np.save``, in the same run, and prints the throughput ratio.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr.empirical import SmoothedEmpirical  # noqa: E402
from ridgexr.observe import step_quantities  # noqa: E402
from ridgexr.datasets import load_training_set  # noqa: E402
from ridgexr.run import model_kwargs, plan_layout, plan_tasks  # noqa: E402
from ridgexr.sampling import sample  # noqa: E402
from ridgexr.store import STEP_BOOL, STEP_INT, STEP_SCALAR, STEP_VECTOR, create_store, write_block  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    exp = ridgexr.open_catalog()["two-points"]
    if args.quick:
        exp = exp.model_copy(update={"n_samples": 64})
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    layout = plan_layout(exp, train)
    task = [t for t in plan_tasks(exp, train, layout) if t.labels["schedule"] == "h" and t.labels["width"] == 256][0]
    model = ridgexr.RandomFeatureDenoiser(2, 256, **model_kwargs(exp)).with_A(task.A)
    density = SmoothedEmpirical(train, 1.0)
    grid = ridgexr.time_grid(exp.process.n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    tmp = Path(tempfile.mkdtemp())
    store = tmp / "bench.zarr"
    create_store(store, layout, train, {})
    t_sample = t_obs = t_write = 0.0
    blocks = []
    with torch.no_grad():
        gen = sample("sde", lambda x, t: model.score(x, t), exp.n_samples, 2, grid, seed=0,
                     block_steps=exp.sampler.block_steps)
        t0 = time.perf_counter()
        for block in gen:
            t1 = time.perf_counter()
            t_sample += t1 - t0
            q = step_quantities(density, block.x, block.t, 1, lambda x, t: model.denoise(x, t))
            t2 = time.perf_counter()
            t_obs += t2 - t1
            write_block(store, layout, task.index, int(block.index[0]), q)
            blocks.append(q)
            t0 = time.perf_counter()
            t_write += t0 - t2
    total = t_sample + t_obs + t_write
    n = exp.n_samples * layout.n_steps
    print(f"# main-job benchmark ({machine()})")
    print(f"one cell of two-points: {exp.n_samples} samples x {layout.n_steps} steps in {total:.2f} s "
          f"= {n / total:,.0f} sample-steps/s (sampling {t_sample / total:.0%}, observation {t_obs / total:.0%}, "
          f"zarr writes {t_write / total:.0%})")
    # write throughput, same bytes: zarr region writes vs np.save
    names = STEP_VECTOR + STEP_SCALAR + STEP_BOOL + STEP_INT
    nbytes = sum(q[k].nbytes for q in blocks for k in names)
    reps = 3
    tz, tn = [], []
    for r in range(reps):
        t0 = time.perf_counter()
        for i, q in enumerate(blocks):
            write_block(store, layout, task.index, i * layout.block_steps, q)
        tz.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i, q in enumerate(blocks):
            for k in names:
                np.save(tmp / f"{k}_{i}_{r}.npy", q[k])
        tn.append(time.perf_counter() - t0)
    z, npy = nbytes / min(tz) / 1e6, nbytes / min(tn) / 1e6
    print(f"write throughput for {nbytes / 1e6:.1f} MB (one cell, {len(blocks)} blocks): zarr v3 region writes "
          f"{z:.0f} MB/s, np.save {npy:.0f} MB/s, ratio {z / npy:.0%}")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
