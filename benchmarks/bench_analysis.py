"""Benchmark: one lazy analysis over a store of >= 1 GB, on 1 vs 2 dask worker processes.

Run:  python benchmarks/bench_analysis.py [--gb 1.1] [--keep DIR]

Builds a synthetic store with the schema of ``ridgexr run`` (random walks standing in for
trajectories; the analysis cost does not depend on the values), then times
``phase_times`` + ``distance_curves`` (reading every per-step variable they need) on a
LocalCluster with 1 worker and with 2 workers (1 thread each), in the same run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr import analysis  # noqa: E402


def build_store(path: Path, gb: float) -> float:
    n_sched, n_width, n_step, d = 4, 4, 512, 2
    bytes_per_sample = n_sched * n_width * n_step * (2 * d + 1) * 8  # trajectory, projection, distance
    n_sample = int(np.ceil(gb * 1e9 / bytes_per_sample / 256) * 256)
    cells = (n_sched, n_width)
    ch = (1, 1, 256, 256)
    rs = da.random.RandomState(0)
    walk = rs.standard_normal(cells + (n_sample, n_step, d), chunks=ch + (d,)).cumsum(axis=3) * 0.05
    dist = da.sqrt((walk**2).sum(-1))
    t = np.geomspace(3.0, 1e-3, n_step)
    ds = xr.Dataset(
        {"trajectory": (("schedule", "width", "sample", "step", "dim"), walk),
         "ridge_projection": (("schedule", "width", "sample", "step", "dim"), walk * 0.5),
         "ridge_distance": (("schedule", "width", "sample", "step"), dist),
         "train_data": (("train", "dim"), np.array([[-3.0, 0.0], [3.0, 0.0]]))},
        coords={"schedule": np.array(["1", "h", "h2", "exact"], dtype=object), "width": [64, 128, 256, 1024], "t": ("step", t),
                "alpha": ("step", np.exp(-t))})
    ds.to_zarr(path, mode="w", zarr_format=3, consolidated=False)
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e9


def timed(ds, n_workers: int) -> float:
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c):
        t0 = time.perf_counter()
        res = xr.merge([analysis.phase_summary(analysis.phase_times(ds, r=0.5)),
                        analysis.distance_curves(ds)["distance_mean"]]).compute()
        el = time.perf_counter() - t0
    assert np.isfinite(res.distance_mean.values).all()
    return el


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.1, help="store size to build (GB)")
    ap.add_argument("--keep", default=None, help="build/keep the store here instead of a temp dir")
    args = ap.parse_args(argv)
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp())
    path = base / "bench-analysis.zarr"
    print(f"# analysis scaling benchmark ({machine()})")
    t0 = time.perf_counter()
    size = build_store(path, args.gb)
    print(f"built a {size:.2f} GB store in {time.perf_counter() - t0:.0f} s")
    ds = ridgexr.open_dataset(path)
    t1 = timed(ds, 1)
    t2 = timed(ds, 2)
    print(f"phase_times + distance_curves over {size:.2f} GB: 1 worker {t1:.1f} s, 2 workers {t2:.1f} s, "
          f"speed-up {t1 / t2:.2f}x ({size / t1:.2f} vs {size / t2:.2f} GB/s)")
    if not args.keep:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
