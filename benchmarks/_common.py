"""Shared helpers for the benchmark scripts (timing, a child's peak memory and the same-run matmul reference)."""

from __future__ import annotations

import platform
import subprocess
import sys
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


#: run by :func:`run_with_peak` as a fresh, small interpreter: it starts the command, waits for it with
#: ``os.wait4`` and writes the command's own peak RSS (KiB) to the file named by its first argument
_PEAK_LAUNCHER = (
    "import os, subprocess, sys\n"
    "proc = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "proc.returncode = os.waitstatus_to_exitcode(status)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(proc.returncode)\n"
)


def run_with_peak(cmd: list[str], env: dict | None = None) -> tuple[int, str, str, int]:
    """Run ``cmd`` to its end; return (exit code, stdout, stderr, peak RSS in bytes of that command alone).

    Linux keeps a process's peak RSS across ``exec``, and a forked child starts with its parent's resident
    pages, so the peak of a child forked from a large process (a pytest-xdist worker that has run hundreds of
    tests) is at least its parent's RSS, whatever it then does; ``getrusage(RUSAGE_CHILDREN)`` is worse, the
    largest child ever waited for (both failed CI).  So the command is started by a fresh, small launcher
    interpreter (``_PEAK_LAUNCHER``), whose own ``os.wait4`` on the command gives the command's peak, inflated
    by at most the launcher's few MiB."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        proc = subprocess.run([sys.executable, "-c", _PEAK_LAUNCHER, peak.name, *cmd], stdout=out, stderr=err,
                              env=env)
        out.seek(0)
        err.seek(0)
        text = peak.read().strip()
        return (proc.returncode, out.read().decode(), err.read().decode(),
                int(text) * 1024 if text else -1)  # ru_maxrss: KiB on Linux; -1: the launcher did not report


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
