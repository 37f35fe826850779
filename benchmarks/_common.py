"""Shared helpers for the benchmark scripts (timing and the same-run matmul reference)."""

from __future__ import annotations

import platform
import time

import numpy as np
import torch


def best_time(fn, repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_gflops(n: int = 2000, dtype=torch.float64, device: str = "cpu") -> float:
    """GFLOP/s of one large square matmul measured now (the same-run reference rate)."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)

    def run():
        a @ b
        if device != "cpu":
            torch.cuda.synchronize()

    run()
    return 2 * n**3 / best_time(run, 3) / 1e9


def machine() -> str:
    return (f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, numpy {np.__version__}")
