"""Benchmark: the end-of-run summary of a store read in slabs of cells against one chunk per cell.

Run:  python benchmarks/bench_summary.py NAME|STORE [--repeat 1]

Times ``ridgexr.reader.summarize`` on an existing store twice in one run: as it reads now (the store opened
without dask and chunked in slabs of cells, ``reader._slab_view``) and as the store opens (one dask chunk
per cell and variable), and checks that the rows agree (rtol 1e-12).  A store with many cells shows the
difference (``variance-ensemble``: 3 072 cells; docs/performance.md).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

import ridgexr.reader as reader  # noqa: E402
from ridgexr.store import open_store  # noqa: E402


def timed(path, ds, slabs: bool) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    rows = reader.summarize(path, ds, slab_bytes=None if slabs else 0)
    return time.perf_counter() - t0, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a store path or entry name")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    path = reader.store_path(args.store)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    ds = reader.check_complete_cells(open_store(path), path)
    print(machine())
    print(f"store {path}: {int(ds.cell_complete.size)} cells; open and check {time.perf_counter() - t0:.1f} s")
    for _ in range(args.repeat):
        t_slab, rows = timed(path, ds, True)
        t_cell, ref = timed(path, ds, False)
        for a, b in zip(rows, ref):
            for k, v in a.items():
                if isinstance(v, float):
                    np.testing.assert_allclose(v, b[k], rtol=1e-12, equal_nan=True)
        print(f"summarize: slabs {t_slab:.1f} s, one chunk per cell {t_cell:.1f} s, ratio {t_cell / t_slab:.1f}x "
              f"({len(rows)} rows agree)")


if __name__ == "__main__":
    main()
