"""Benchmark: trajectory steps per second of the main job, and Zarr write throughput.

Run:  python benchmarks/bench_run.py [--quick]

1. Runs one random-feature cell of the ``two-points`` entry (reverse SDE, ridge
   projection and directional residuals of every step, region writes into Zarr v3) and
   prints sample-steps per second, with the share of time spent in sampling, observation
   (projection + residuals) and writing.
2. Writes the same bytes as one full cell (all per-step variables) in the same run with: the
   0.3 xarray region writes, ``write_block`` (straight into the zarr arrays), ``CellWriter``
   (the same on a background thread), the store's codecs into an in-memory zarr store (the
   codec's own rate: no disk), and ``np.save``; prints MB/s and the share of the in-memory rate.
3. ``ridgexr run two-points`` end to end in a fresh process (imports, fits, every cell, the
   summary): wall time, sample-steps per second, and the process's peak RSS; ``--quick`` runs the
   entry from a one-entry catalog file with 32 samples and 60 steps (the same fits).
4. One cell of ``two-points-paper`` (p = 2000, 2000 trajectories x 2000 steps, every 20th
   observed) through ``run_cell`` (sampling, observation, CellWriter writes, completion mark)
   with the readout A(0) ~ N(0, 1) (its fit, ~18 minutes on 2 cores, is not timed; the cell's
   cost does not depend on A's values); ``--quick`` runs 1/100 of the trajectories.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import machine, run_with_peak  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr.empirical import SmoothedEmpirical  # noqa: E402
from ridgexr.nearest import step_nearest  # noqa: E402
from ridgexr.observe import step_quantities  # noqa: E402
from ridgexr.datasets import load_training_set  # noqa: E402
from ridgexr.models.random_features.denoiser import model_kwargs  # noqa: E402
from ridgexr.run import plan_layout, plan_tasks  # noqa: E402
from ridgexr.sampling import sample  # noqa: E402
import xarray as xr  # noqa: E402
import zarr  # noqa: E402

from ridgexr.schema import STEP_BOOL, STEP_INT, STEP_SCALAR, STEP_VARIABLES, STEP_VECTOR  # noqa: E402
from ridgexr.store.layout import CODECS  # noqa: E402
from ridgexr.store.lifecycle import create_store  # noqa: E402
from ridgexr.store.write import CellWriter, write_block  # noqa: E402


def xarray_region_write(path, layout, cell, start, values):
    """The write path of ridgexr 0.3.0.dev0 before CellWriter: one xarray region write per block (for comparison)."""
    B = values["trajectory"].shape[0]
    cd = layout.cell_dims
    lead = (1,) * len(cd)
    data = {name: (cd + ("sample", "step", "dim"), np.swapaxes(values[name], 0, 1).reshape(lead + (
        layout.n_samples, B, layout.d))) for name in STEP_VECTOR}
    for name in STEP_SCALAR + STEP_BOOL + STEP_INT:
        data[name] = (cd + ("sample", "step"), values[name].T.reshape(lead + (layout.n_samples, B)))
    region = {**layout.cell_region(cell), "step": slice(start, start + B)}
    xr.Dataset(data).to_zarr(str(path), region=region, zarr_format=3, consolidated=False, write_empty_chunks=True)


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
    model = ridgexr.RandomFeatureDenoiser(2, 256, **model_kwargs(exp, exp.model)).with_A(task.state)
    density = SmoothedEmpirical(train, 1.0)
    train_t = torch.as_tensor(train, dtype=torch.float64)
    grid = ridgexr.time_grid(exp.process.n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    tmp = Path(tempfile.mkdtemp())
    store = tmp / "bench.zarr"
    create_store(store, layout, train, {})
    t_sample = t_obs = t_write = t_obs_again = 0.0
    blocks = []
    with torch.no_grad():
        gen = sample("sde", lambda x, t: model.score(x, t), exp.n_samples, 2, grid, seed=0,
                     block_steps=exp.sampler.block_steps)
        t0 = time.perf_counter()
        for block in gen:
            t1 = time.perf_counter()
            t_sample += t1 - t0
            q = step_quantities(density, block.x, block.t, 1, lambda x, t: model.denoise(x, t), score=block.score)
            q |= step_nearest(block.x.to(torch.float64), block.t, train_t, q["finite"])  # as run_cell does
            t2 = time.perf_counter()
            t_obs += t2 - t1
            # for comparison (not in the total): the same observation evaluating the model again, as before 0.3.0
            step_quantities(density, block.x, block.t, 1, lambda x, t: model.denoise(x, t))
            t_obs_again += time.perf_counter() - t2
            t2 = time.perf_counter()
            write_block(store, layout, task.index, int(block.index[0]), q)  # synchronous here, to time it
            blocks.append(q)
            t0 = time.perf_counter()
            t_write += t0 - t2
    total = t_sample + t_obs + t_write
    n = exp.n_samples * layout.n_steps
    print(f"# main-job benchmark ({machine()})")
    print(f"one cell of two-points: {exp.n_samples} samples x {layout.n_steps} steps in {total:.2f} s "
          f"= {n / total:,.0f} sample-steps/s (sampling {t_sample / total:.0%}, observation {t_obs / total:.0%}, "
          f"zarr writes {t_write / total:.0%})")
    print(f"observation {t_obs:.2f} s reusing the sampler's score evaluations; {t_obs_again:.2f} s evaluating the "
          f"model again (ratio {t_obs_again / t_obs:.2f})")
    # write throughput, same bytes: zarr region writes vs np.save
    names = [k for k in STEP_VARIABLES if k in blocks[0]]  # the SDE sampler has no clip_shift (written NaN)
    nbytes = sum(q[k].nbytes for q in blocks for k in names)
    reps = 3
    timings = {"xarray region writes (0.3)": [], "write_block (direct)": [], "CellWriter (thread)": [],
               "in-memory codec": [], "np.save": []}
    mem = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=3)
    for name in names:  # the same arrays, codecs and chunks as the store's, in memory
        src = zarr.open_group(str(store), mode="r")[name]
        mem.create_array(name, shape=src.shape, chunks=src.chunks, dtype=src.dtype, compressors=CODECS,
                         fill_value=src.fill_value, config={"write_empty_chunks": True})
    for r in range(reps):
        t0 = time.perf_counter()
        for i, q in enumerate(blocks):
            xarray_region_write(store, layout, task.index, i * layout.block_steps, q)
        timings["xarray region writes (0.3)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i, q in enumerate(blocks):
            write_block(store, layout, task.index, i * layout.block_steps, q)
        timings["write_block (direct)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with CellWriter(store, layout, task.index) as w:
            for i, q in enumerate(blocks):
                w.write(i * layout.block_steps, q)
        timings["CellWriter (thread)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i, q in enumerate(blocks):
            where = tuple(task.index) + (slice(None), slice(i * layout.block_steps, i * layout.block_steps + len(q["trajectory"])))
            for k in names:
                mem[k][where] = np.ascontiguousarray(np.swapaxes(q[k], 0, 1))
        timings["in-memory codec"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i, q in enumerate(blocks):
            for k in names:
                np.save(tmp / f"{k}_{i}_{r}.npy", q[k])
        timings["np.save"].append(time.perf_counter() - t0)
    rate = {k: nbytes / min(v) / 1e6 for k, v in timings.items()}
    print(f"write throughput for {nbytes / 1e6:.1f} MB (one cell, {len(blocks)} blocks), best of {reps}:")
    for k, v in rate.items():
        print(f"  {k:28s} {v:7.0f} MB/s  ({v / rate['in-memory codec']:.0%} of the in-memory codec rate)")
    print(f"the run's writes took {t_write / total:.0%} of the cell's time (CellWriter overlaps them with compute)")
    shutil.rmtree(tmp)
    end_to_end("two-points", quick=args.quick)
    paper_cell(100 if args.quick else 1)


def end_to_end(entry: str, quick: bool = False) -> None:
    """``ridgexr run <entry>`` in a fresh process: wall seconds, sample-steps/s and peak RSS (part 3).

    ``quick``: the entry (from ``catalogs/points2d.yaml``) with 32 samples and 60 steps, written to a one-entry
    catalog file that ``ridgexr run FILE`` takes."""
    import yaml

    tmp = Path(tempfile.mkdtemp())
    target, label = entry, entry
    if quick:
        spec = yaml.safe_load((ROOT / "catalogs" / "points2d.yaml").read_text())["experiments"][entry]
        spec["n_samples"], spec["process"]["n_steps"] = 32, 60
        target = tmp / f"{entry}.yaml"
        target.write_text(yaml.safe_dump({"experiments": {entry: spec}}))
        label = f"{entry} (quick: 32 samples x 60 steps)"
    t0 = time.perf_counter()
    rc, out, err, peak = run_with_peak([sys.executable, "-m", "ridgexr.cli", "run", str(target), "--data-dir", str(tmp)])
    wall = time.perf_counter() - t0
    if rc:
        raise SystemExit(f"ridgexr run {label} failed ({rc}):\n{out}{err}")
    ds = ridgexr.open_dataset(tmp / f"{entry}.zarr")
    steps = int(ds.cell_complete.sum()) * ds.sizes["sample"] * ds.sizes["step"]
    print(f"ridgexr run {label} end to end (imports, fits, {int(ds.cell_complete.sum())} cells, summary): "
          f"{wall:.1f} s = {steps / wall:,.0f} sample-steps/s, peak RSS {peak / 1e9:.2f} GB")
    shutil.rmtree(tmp)


def paper_cell(fraction: int) -> None:
    """One ``two-points-paper`` cell through ``run_cell`` with 1/``fraction`` of its trajectories (part 4)."""
    from ridgexr.run import CellTask, run_cell
    from ridgexr.training import initial_readout

    exp = ridgexr.open_catalog()["two-points-paper"]
    exp = exp.model_copy(update={"n_samples": exp.n_samples // fraction})
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    layout = plan_layout(exp, train)
    p = max(exp.model.widths)
    idx = next(i for i in layout.cells() if layout.cell_labels(i)["width"] == p)
    A = initial_readout(2, p, exp.model.init, exp.seeds.init).numpy()
    task = CellTask(idx, layout.cell_labels(idx), {}, state=A)
    tmp = Path(tempfile.mkdtemp())
    store = tmp / "paper.zarr"
    create_store(store, layout, train, {})
    t0 = time.perf_counter()
    run_cell(exp.model_dump_json(), str(store), layout, task)
    wall = time.perf_counter() - t0
    steps = exp.n_samples * exp.process.n_steps
    print(f"one cell of two-points-paper (p = {p}, {exp.n_samples} trajectories x {exp.process.n_steps} steps, "
          f"{layout.n_steps} recorded): {wall:.1f} s = {steps / wall:,.0f} sample-steps/s "
          f"(sampling, observation, writes)")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
