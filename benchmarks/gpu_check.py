"""CUDA check: CUDA results against CPU float64, and the project_to_ridge timing table on GPU.

Run on a machine with a CUDA GPU:  python benchmarks/gpu_check.py
Exits 0 after printing "GPU CHECK PASSED", 1 on a mismatch, 2 when no GPU is present.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import matmul_gflops  # noqa: E402
from bench_ridge import CONFIGS, T_QUERY, make_problem  # noqa: E402

import ridgexr  # noqa: E402


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    dev = "cuda"
    print(f"# GPU check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    ok = True
    # 1. correctness: moments and projections, CUDA float64 vs CPU float64
    train, x = make_problem(2000, 4000, 8)
    p = ridgexr.SmoothedEmpirical(train, T_QUERY)
    cpu = p.moments(x)
    gpu = p.moments(torch.tensor(x, device=dev))
    for key in ("log_prob", "mean", "cov"):
        err = float((getattr(gpu, key).cpu() - getattr(cpu, key)).abs().max())
        print(f"moments {key:9s} max |cuda - cpu| = {err:.2e}")
        ok &= err < 1e-9
    rc = ridgexr.project_to_ridge(p, x, 1)
    rg = ridgexr.project_to_ridge(p, torch.tensor(x, device=dev), 1)
    both = rc.on_ridge & rg.on_ridge.cpu().numpy() & ~rc.degenerate
    err = float(np.abs(rg.point.cpu().numpy()[both] - rc.point[both]).max())
    agree = float((rc.on_ridge == rg.on_ridge.cpu().numpy()).mean())
    print(f"project_to_ridge max |cuda - cpu| on ridge = {err:.2e}; on_ridge flags agree {agree:.4f}")
    ok &= err < 1e-6 and agree > 0.99
    # 2. timing table (float64, d* = 1), same definitions as bench_ridge.py
    mm = matmul_gflops(4096, torch.float64, dev)
    print(f"same-run float64 matmul on GPU: {mm:.0f} GFLOP/s")
    print("| N | queries | d | point-it/s | GFLOP/s (2Nd^2) | % of matmul |")
    print("|---|---|---|---|---|---|")
    for n, q, d in CONFIGS:
        train, x = make_problem(n, q, d)
        p = ridgexr.SmoothedEmpirical(train, T_QUERY)
        xg = torch.tensor(x, device=dev)
        ridgexr.project_to_ridge(p, xg[:64], 1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = ridgexr.project_to_ridge(p, xg, 1, max_iter=200)
        torch.cuda.synchronize()
        el = time.perf_counter() - t0
        evals = int((res.iterations + 1).sum())
        gf = 2 * n * d * d * evals / el / 1e9
        print(f"| {n} | {q} | {d} | {evals / el:,.0f} | {gf:.1f} | {100 * gf / mm:.1f}% |")
    print("GPU CHECK PASSED" if ok else "GPU CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
