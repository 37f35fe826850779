"""Crash, race and corruption trials of the store, and the cost of checksums on writes.

Run:  python benchmarks/bench_robustness.py [--creation 16] [--random 20] [--rounds 50]

Prints a table check | trials | held, and the write throughput of the same blocks with
zstd + CRC32C (the store's codecs) and with zstd alone, measured in one run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_time, machine  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr import store as store_mod  # noqa: E402
from ridgexr.catalog import experiment_from_file  # noqa: E402
from ridgexr.run import run_experiment  # noqa: E402
from ridgexr.store import StoreLock, StoreLockedError, StoreLayout, clear_completion, verify_store  # noqa: E402

CATALOG = """
experiments:
  tiny:
    dataset: {points: three-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 60}
    model: {widths: [8, 16], n_frequencies: 3, include_exact: true}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1", "h2"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: 32
    d_star: 1
    store: tiny.zarr
"""
RUN = "import sys\nfrom ridgexr.catalog import experiment_from_file\nfrom ridgexr.run import run_experiment\n" \
      "run_experiment(experiment_from_file(sys.argv[1]), store=sys.argv[2])\n"


def same(a, b) -> bool:
    x, y = ridgexr.open_dataset(a), ridgexr.open_dataset(b)
    return set(x.variables) == set(y.variables) and all(
        np.array_equal(x[n].values, y[n].values, equal_nan=x[n].dtype.kind == "f") for n in x.variables)


def kill_and_resume(cat, exp, ref, store, delay, wait_for=None) -> tuple[bool, bool]:
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(cat), str(store)])
    if wait_for is not None:
        end = time.time() + 60
        while time.time() < end and not wait_for() and proc.poll() is None:
            time.sleep(0.002)
    time.sleep(delay)
    finished = proc.poll() is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    try:
        run_experiment(exp, store=store)
    except Exception as exc:  # a trial that does not resume is a failed trial, reported
        print(f"  resume failed: {type(exc).__name__}: {exc}")
        return False, finished
    return same(ref, store), finished


def race(path, rounds, barrier, queue):
    for r in range(rounds):
        barrier.wait()
        lock = StoreLock(path)
        try:
            lock.acquire()
            won = True
        except StoreLockedError:
            won = False
        barrier.wait()
        if won:
            lock.release()
        queue.put((r, won))
        barrier.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--creation", type=int, default=16)
    ap.add_argument("--random", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    print(f"# store robustness ({machine()})")
    tmp = Path(tempfile.mkdtemp())
    cat = tmp / "c.yaml"
    cat.write_text(CATALOG)
    exp = experiment_from_file(cat)
    t0 = time.perf_counter()
    ref = run_experiment(exp, store=tmp / "ref.zarr").store
    seconds = time.perf_counter() - t0
    rng = random.Random(0)
    rows = []
    ok = 0
    for k in range(args.creation):
        store = tmp / f"c{k}.zarr"
        ok += kill_and_resume(cat, exp, ref, store, rng.uniform(0, 0.15),
                              lambda s=store: s.exists() or any(s.parent.glob(f".{s.name}.creating-*")))[0]
    rows.append(("kill -9 0-150 ms after store creation starts, rerun without --overwrite", args.creation, ok))
    ok = early = 0
    for k in range(args.random):
        res, finished = kill_and_resume(cat, exp, ref, tmp / f"r{k}.zarr", rng.uniform(0.3, 3.0 + 1.5 * seconds))
        ok += res
        early += not finished
    rows.append((f"kill -9 at a random instant ({early} before the run ended), rerun", args.random, ok))
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=race, args=(tmp / "race.zarr", args.rounds, barrier, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    wins = np.zeros(args.rounds, dtype=int)
    for _ in range(4 * args.rounds):
        r, won = queue.get(timeout=60)
        wins[r] += won
    for p in procs:
        p.join()
    rows.append(("lock race, 4 processes: exactly one winner per round", args.rounds, int((wins == 1).sum())))
    # corruption: flip, truncate, delete; detect, repair, recompute
    detected = repaired = 0
    cases = ("flip a byte", "truncate", "delete")
    for k, case in enumerate(cases):
        s = run_experiment(exp, store=tmp / f"x{k}.zarr").store
        chunk = sorted(p for p in (s / "trajectory" / "c").rglob("*") if p.is_file())[k]
        data = chunk.read_bytes()
        if case == "flip a byte":
            chunk.write_bytes(data[:20] + bytes([data[20] ^ 0x10]) + data[21:])
        elif case == "truncate":
            chunk.write_bytes(data[: len(data) // 3])
        else:
            chunk.unlink()
        damage, _ = verify_store(s)
        detected += any(d.variable == "trajectory" for d in damage)
        clear_completion(s, [d.cell for d in damage])
        run_experiment(exp, store=s)
        repaired += same(ref, s) and not verify_store(s)[0]
    rows.append(("corruption detected by verify (" + ", ".join(cases) + ")", len(cases), detected))
    rows.append(("repaired store bit-identical to an uninterrupted run", len(cases), repaired))
    print("| check | trials | held |\n|---|---|---|")
    for name, n, held in rows:
        print(f"| {name} | {n} | {held} |")
    # checksum overhead on writes: the same block written with the store's codecs and with zstd alone
    layout = StoreLayout(coords=(("schedule", ("1",)), ("width", (8,))), n_samples=256, t=np.linspace(1, 0.01, 256),
                         sampler_step=np.arange(256), d=2, block_steps=256, sample_chunk=256)
    g = np.random.default_rng(0)
    vals = {n: g.normal(size=(256, 256, 2)) for n in store_mod.STEP_VECTOR}
    vals |= {n: g.random((256, 256)) for n in store_mod.STEP_SCALAR} | {n: g.random((256, 256)) > .5 for n in store_mod.STEP_BOOL}
    vals |= {n: g.integers(0, 3, (256, 256)).astype(np.int16) for n in store_mod.STEP_INT}
    mb = sum(v.nbytes for v in vals.values()) / 2**20
    rates = {}
    from ridgexr.store import layout as store_layout  # write_template reads the codecs there

    for label, codecs in (("zstd + crc32c", store_mod.CODECS), ("zstd only", store_mod.CODECS[:1])):
        store_layout.CODECS = codecs
        path = tmp / f"w-{label.replace(' ', '')}.zarr"
        store_mod.create_store(path, layout, np.zeros((2, 2)), {})
        rates[label] = mb / best_time(lambda: store_mod.write_block(path, layout, (0, 0), 0, vals), 5)
    store_layout.CODECS = store_mod.CODECS
    print(f"\nwrite_block of one 256 x 256 block ({mb:.1f} MB): " +
          ", ".join(f"{k} {v:.0f} MB/s" for k, v in rates.items()) +
          f"; checksum overhead {rates['zstd only'] / rates['zstd + crc32c'] - 1:+.1%}")


if __name__ == "__main__":
    main()
