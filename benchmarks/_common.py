"""Shared helpers for the benchmark scripts (timing, a child's peak memory and the same-run matmul reference)."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
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


def run_with_peak(cmd: list[str], env: dict | None = None) -> tuple[int, str, str, int]:
    """Run ``cmd`` to its end; return (exit code, stdout, stderr, peak RSS in bytes of that child alone).

    The peak comes from ``os.wait4`` on the child's pid, not from ``getrusage(RUSAGE_CHILDREN)``, whose
    ``ru_maxrss`` is the largest of *all* children this process ever waited for (under pytest-xdist a worker
    has run other subprocesses before, and their peak hid this one's)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss * 1024  # kB on Linux


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
