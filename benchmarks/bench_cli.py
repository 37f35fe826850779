"""Start-up cost of the command line: ``ridgexr --help`` and ``--version`` against ``import torch``.

Run:  python benchmarks/bench_cli.py [--repeat 7]

Each command runs in a fresh interpreter; the best of ``--repeat`` wall times is reported,
all measured in this one run, with the ratio.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def best(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    py = sys.executable
    torch = best([py, "-c", "import torch"], args.repeat)
    rows = {
        "python -c 'import torch'": torch,
        "ridgexr --help": best([py, "-m", "ridgexr.cli", "--help"], args.repeat),
        "ridgexr --version": best([py, "-m", "ridgexr.cli", "--version"], args.repeat),
        "ridgexr run --help": best([py, "-m", "ridgexr.cli", "run", "--help"], args.repeat),
        "python -c 'import ridgexr'": best([py, "-c", "import ridgexr"], args.repeat),
    }
    print("| command | best of %d (s) | import torch / this |" % args.repeat)
    print("|---|---|---|")
    for name, sec in rows.items():
        print(f"| {name} | {sec:.3f} | {torch / sec:.2f}x |")


if __name__ == "__main__":
    main()
