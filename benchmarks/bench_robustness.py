"""Crash, race and corruption trials of the store, the trials of what a store trusts (its metadata, its
configuration, its path), and the cost of the checks.

Run:  python benchmarks/bench_robustness.py [--part all|crashes|stores] [--creation 16] [--random 20] [--rounds 50]
      [--trials 8] [--quick]

Prints tables check | trials | held: kills, races and chunk corruption (``crashes``); then (``stores``) damage of
what a store's readers and repair once trusted -- the configuration against its hash, the training data, the
metadata, the consolidated copy, a store nested in another, a reader open across an ``--overwrite``, the commands'
inputs -- each trial on a copy of a real 6-cell store, damaged at random where the case allows, held when the
store reads as written or the damage is refused by name, and every repair gives the uninterrupted store back bit
for bit.  Then, measured in one run: the write throughput of the same blocks with zstd + CRC32C (the store's
codecs) and with zstd alone, and the time the checks add to opening a store, reading it, ``verify`` and a resume
with nothing to do (ratios against the same path without them).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
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

# the robustness tests' helpers: these trials are theirs at a larger size, compared by the same rules
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference_runs import RUN_SCRIPT, edit_json, file_bytes, same_store, without_verified  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr import schema  # noqa: E402
from ridgexr.catalog import experiment_from_file  # noqa: E402
from ridgexr.run import run_experiment  # noqa: E402
from ridgexr.store import StoreLock, StoreLockedError, verify_store  # noqa: E402
from ridgexr.store.layout import StoreLayout  # noqa: E402
from ridgexr.store.update import clear_completion  # noqa: E402
from ridgexr.store.lifecycle import create_store  # noqa: E402
from ridgexr.store.write import write_block  # noqa: E402

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

def kill_and_resume(cat, exp, ref, store, delay, wait_for=None) -> tuple[bool, bool]:
    proc = subprocess.Popen([sys.executable, "-c", RUN_SCRIPT, str(cat), str(store)])
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
    return same_store(ref, store), finished


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
    ap.add_argument("--part", choices=("all", "crashes", "stores"), default="all")
    ap.add_argument("--creation", type=int, default=16)
    ap.add_argument("--random", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--trials", type=int, default=8, help="trials of each randomised store case")
    ap.add_argument("--quick", action="store_true", help="few trials of each case (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.creation, args.random, args.rounds, args.trials = 2, 2, 5, 2
    print(f"# store robustness ({machine()})")
    tmp = Path(tempfile.mkdtemp())
    cat = tmp / "c.yaml"
    cat.write_text(CATALOG)
    exp = experiment_from_file(cat)
    if args.part in ("all", "crashes"):
        crashes(args, tmp, cat, exp)
    if args.part in ("all", "stores"):
        rows = store_trials(tmp, cat, exp, args.trials, random.Random(59))
        print("\n| what a store trusts | trials | held |\n|---|---|---|")
        for name, n, held in rows:
            print(f"| {name} | {n} | {held} |")
        print()
        for line in check_costs(tmp, quick=args.quick):
            print(line)


def crashes(args, tmp, cat, exp):
    """Kills, lock races and chunk corruption; the checksum's cost on writes."""
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
        repaired += same_store(ref, s) and not verify_store(s)[0]
    rows.append(("corruption detected by verify (" + ", ".join(cases) + ")", len(cases), detected))
    rows.append(("repaired store bit-identical to an uninterrupted run", len(cases), repaired))
    print("| check | trials | held |\n|---|---|---|")
    for name, n, held in rows:
        print(f"| {name} | {n} | {held} |")
    # checksum overhead on writes: the same block written with the store's codecs and with zstd alone
    layout = StoreLayout(coords=(("schedule", ("1",)), ("width", (8,))), n_samples=256, t=np.linspace(1, 0.01, 256),
                         sampler_step=np.arange(256), d=2, block_steps=256, sample_chunk=256)
    g = np.random.default_rng(0)
    vals = {n: g.normal(size=(256, 256, 2)) for n in schema.STEP_VECTOR}
    vals |= {n: g.random((256, 256)) for n in schema.STEP_SCALAR} | {n: g.random((256, 256)) > .5 for n in
    schema.STEP_BOOL}
    vals |= {n: g.integers(0, 3, (256, 256)).astype(np.int16) for n in schema.STEP_INT}
    mb = sum(v.nbytes for v in vals.values()) / 2**20
    rates = {}
    from ridgexr.store import layout as store_layout  # write_template reads the codecs there

    store_codecs = store_layout.CODECS
    for label, codecs in (("zstd + crc32c", store_codecs), ("zstd only", store_codecs[:1])):
        store_layout.CODECS = codecs
        path = tmp / f"w-{label.replace(' ', '')}.zarr"
        create_store(path, layout, np.zeros((2, 2)), {})
        rates[label] = mb / best_time(lambda: write_block(path, layout, (0, 0), 0, vals), 5)
    store_layout.CODECS = store_codecs
    print(f"\nwrite_block of one 256 x 256 block ({mb:.1f} MB): " +
          ", ".join(f"{k} {v:.0f} MB/s" for k, v in rates.items()) +
          f"; checksum overhead {rates['zstd only'] / rates['zstd + crc32c'] - 1:+.1%}")


# ------------------------------------------------------------------ what a store trusts (issue 59)
#: a store for the check costs: the same 6 cells, 256 samples x 101 recorded steps
TIMING_CATALOG = CATALOG.replace("n_samples: 32", "n_samples: 256").replace("n_steps: 60", "n_steps: 100") \
    .replace("block_steps: 8", "block_steps: 16").replace("tiny.zarr", "timing.zarr")


def _files(folder: Path) -> dict:
    """{file: bytes} of a store, the root zarr.json parsed without ``verified`` (what a verify records)."""
    return without_verified(file_bytes(folder))


def _cli(*args) -> tuple[int, str]:
    from typer.testing import CliRunner

    from ridgexr.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, " ".join(res.output.split())


def _copy(ref: Path, folder: Path, name: str) -> Path:
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    store = folder / name
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(ref, store)
    return store


def store_trials(tmp: Path, cat: Path, exp, n: int, rng: random.Random) -> list[tuple[str, int, int]]:
    """Each case of issue 59 on copies of one 6-cell store; (case, trials, held)."""
    import json
    import shutil
    import warnings

    import xarray as xr

    from ridgexr.run import ConfigMismatchError
    from ridgexr.store import StoreDamagedError, StoreReplacedError, StoreWarning
    from ridgexr.store.update import clear_completion

    ref = run_experiment(exp, store=tmp / "sref" / "tiny.zarr").store
    good = _files(ref)
    rows = []
    base = tmp / "trials"

    def intact(store) -> bool:  # the uninterrupted store, file for file (verify's record aside)
        return _files(store) == good

    # 1. the configuration against its hash and the record
    edits = [("n_samples", 33), ("seeds.sampler", 5), ("seeds.training", 1), ("process.n_steps", 61),
             ("process.T", 2.5), ("sampler.block_steps", 16), ("model.n_frequencies", 4)]
    held = 0
    for k in range(n):
        field, value = edits[k % len(edits)]
        store = _copy(ref, base / f"cfg{k}", "tiny.zarr")

        def change(m, field=field, value=value):
            cfg = json.loads(m["attributes"]["config"])
            *head, last = field.split(".")
            node = cfg
            for key in head:
                node = node[key]
            node[last] = value
            m["attributes"]["config"] = json.dumps(cfg, separators=(",", ":"))

        edit_json(store / "zarr.json", change)
        edited = _files(store)
        code, out = _cli("verify", store)
        code2, _ = _cli("verify", "--repair", store)
        untouched = _files(store) == edited
        code3, _ = _cli("verify", "--resolve-config", "creation", store)
        held += (code == 1 and f"{field}:" in out and "at creation" in out and code2 == 1 and untouched
                 and code3 == 0 and intact(store) and run_experiment(exp, store=store).cells_run == 0)
    rows.append(("a field of the configuration edited: both values reported, --repair rewrites nothing, "
                 "--resolve-config creation gives the store back", n, held))
    # 2. the training data
    held = 0
    for k in range(n):
        store = _copy(ref, base / f"train{k}", "tiny.zarr")
        how = rng.choice(["delete the chunk", "delete the folder", "flip a byte", "truncate"])
        chunk = store / "train_data" / "c" / "0" / "0"
        if how == "delete the chunk":
            chunk.unlink()
        elif how == "delete the folder":
            shutil.rmtree(store / "train_data")
        elif how == "flip a byte":
            data = bytearray(chunk.read_bytes())
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            chunk.write_bytes(bytes(data))
        else:
            chunk.write_bytes(chunk.read_bytes()[:rng.randrange(len(chunk.read_bytes()))])
        try:
            ridgexr.open_dataset(store)["train_data"].values
            refused = False
        except StoreDamagedError as exc:
            refused = "train_data" in str(exc)
        code, _ = _cli("verify", "--repair", store)
        held += refused and code == 1 and _cli("verify", store)[0] == 0 and intact(store)
    rows.append(("train_data deleted, flipped or truncated: readers refuse naming it, --repair restores the copy "
                 "kept at creation", n, held))
    store = _copy(ref, base / "train-nocopy", "tiny.zarr")
    (store / "train_data" / "c" / "0" / "0").unlink()
    (store / ".creation" / "train_data" / "c" / "0" / "0").write_bytes(b"x")
    code, out = _cli("verify", "--repair", store)
    rows.append(("train_data and its copy damaged: --repair refuses, nothing rebuilt from fill values", 1,
                 int(code == 1 and "not repaired: train_data" in out and not (store / "train_data/c/0/0").exists())))
    # 3. an --overwrite touches only its own store
    outer = _copy(ref, base / "nest", "tiny.zarr")
    before = _files(outer)
    nested = [("store: tiny.zarr/inner.zarr", lambda: _cli("run", _catalog(base / "nest", "tiny.zarr/inner.zarr"),
                                                           "--data-dir", base / "nest")[0] == 2),
              ("--data-dir inside a store", lambda: _cli("run", cat, "--data-dir", outer / "sub")[0] == 2),
              ("store= inside a store", lambda: _raises(ConfigMismatchError, run_experiment, exp,
                                                        store=outer / "inner.zarr"))]
    held = sum(bool(check()) for _, check in nested)
    shutil.copytree(ref, outer / "inner.zarr")
    held += _raises(ConfigMismatchError, run_experiment, exp.model_copy(update={"n_samples": 8}), store=outer,
                    overwrite=True) and (outer / "inner.zarr" / "zarr.json").is_file()
    shutil.rmtree(outer / "inner.zarr")
    (outer / "trajectory" / "mine.txt").write_text("mine")
    held += _raises(ConfigMismatchError, run_experiment, exp.model_copy(update={"n_samples": 8}), store=outer,
                    overwrite=True) and (outer / "trajectory" / "mine.txt").is_file()
    (outer / "trajectory" / "mine.txt").unlink()
    rows.append(("a store path or data folder inside a store, --overwrite of a store holding another store or a "
                 "user's file: refused, nothing deleted", 5, held if _files(outer) == before else 0))
    # 4. reads pinned to the store they opened
    other = exp.model_copy(update={"seeds": exp.seeds.model_copy(update={"sampler": 1})})
    store = _copy(ref, base / "pin", "tiny.zarr")
    held = 0
    for k in range(n):
        ds = ridgexr.open_dataset(store)
        run_experiment(other if k % 2 == 0 else exp, store=store, overwrite=True)
        held += _raises(StoreReplacedError, lambda: ds["trajectory"].values)
    rows.append(("a Dataset open across an --overwrite (same shapes, other values), then read: refused", n, held))
    whole, total, refused = _polling_reader(store, exp, other, n)
    rows.append((f"a reader polling open_dataset(complete_only=True).load() through {n} overwrites ({refused} "
                 "reads mid-swap refused): every read one store's", total, whole))
    # 5. readers verify what they apply
    kinds = {"scale_factor": ("trajectory", "ridge_distance", "ridge_projection", "excess_loss"),
             "add_offset": ("trajectory", "ridge_distance", "loss"), "_FillValue": ("resolved_rank",),
             "units": ("t",), "data_type": ("ridge_distance", "trajectory", "nearest_ratio")}
    held = 0
    for k in range(n):
        kind = rng.choice(sorted(kinds))
        name = rng.choice(kinds[kind])
        store = _copy(ref, base / f"read{k}", "tiny.zarr")

        def damage(m, kind=kind, name=name):
            meta = m["consolidated_metadata"]["metadata"][name]
            if kind == "data_type":
                meta["data_type"] = "int64"
            else:
                meta["attributes"][kind] = {"scale_factor": 2.0, "add_offset": 1.0, "_FillValue": 1,
                                            "units": "days since 2000-01-01"}[kind]

        edit_json(store / "zarr.json", damage)
        ok = 0
        for reader in (ridgexr.open_dataset, lambda s: xr.open_dataset(s, engine="ridgexr")):
            try:
                reader(store)
            except StoreDamagedError as exc:
                ok += f"'{name}'" in str(exc) and "ridgexr verify" in str(exc)
        held += ok == 2 and _cli("verify", "--repair", store)[0] == 1 and _cli("verify", store)[0] == 0 \
            and intact(store)
    rows.append(("a value-changing field of the consolidated metadata edited (scale, offset, fill, time units, "
                 "dtype): open_dataset and engine='ridgexr' refuse naming the array; --repair", n, held))
    held = 0
    for k in range(n):
        store = _copy(ref, base / f"crc{k}", "tiny.zarr")
        name = rng.choice(["trajectory", "ridge_distance", "ridge_projection", "residual_normal", "diverged"])
        chunks = sorted(p for p in (store / name / "c").rglob("*") if p.is_file())
        chunk = chunks[rng.randrange(len(chunks))]
        data = bytearray(chunk.read_bytes())
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        chunk.write_bytes(bytes(data))
        try:
            ridgexr.open_dataset(store)[name].values
            named = False
        except StoreDamagedError as exc:
            named = f"'{name}'" in str(exc) and str(chunk) in str(exc)
        held += named
    rows.append(("a byte of a chunk flipped: the read's error names the array and the chunk file", n, held))
    held = 0
    for k in range(2):
        store = _copy(ref, base / f"gone{k}", "tiny.zarr")
        what = ["t", "train_data"][k]
        shutil.rmtree(store / what) if what == "t" else (store / what / "c" / "0" / "0").unlink()
        held += _raises(StoreDamagedError, ridgexr.open_dataset, store)
    rows.append(("t/ or a train_data chunk deleted: open_dataset refuses (never NaN with every cell complete)", 2,
                 held))
    # 6. repair keeps what verifies
    fields = {"zstd level": lambda m: m["codecs"][1]["configuration"].__setitem__("level", 5),
              "fill_value": lambda m: m.__setitem__("fill_value", 7),
              "dimension names": lambda m: m["dimension_names"].__setitem__(-1, "other"),
              "data type": lambda m: m.__setitem__("data_type", "float32" if m["data_type"] == "float64" else "int64"),
              "shape": lambda m: m["shape"].__setitem__(-1, m["shape"][-1] + 3),
              "chunks": lambda m: m["chunk_grid"]["configuration"]["chunk_shape"].__setitem__(-1, 1),
              "codecs": lambda m: m.__setitem__("codecs", m["codecs"][:-1])}
    held = 0
    for k in range(n):
        store = _copy(ref, base / f"meta{k}", "tiny.zarr")
        case = rng.choice(sorted(fields) + ["cell_complete deleted", "a mark garbled"])
        if case == "cell_complete deleted":
            shutil.rmtree(store / "cell_complete")
        elif case == "a mark garbled":
            marks = sorted(p for p in (store / "cell_complete" / "c").rglob("*") if p.is_file())
            marks[rng.randrange(len(marks))].write_bytes(b"\0\1")
        else:
            name = rng.choice(["trajectory", "ridge_distance", "resolved_rank", "ridge_converged", "loss",
                               "diverged", "cell_digest"])
            edit_json(store / name / "zarr.json", fields[case])
        code, out = _cli("verify", "--repair", store)
        held += (code == 1 and "marked incomplete" not in out and bool(ridgexr.open_dataset(store).cell_complete.all())
                 and _cli("verify", store)[0] == 0 and run_experiment(exp, store=store).cells_run == 0
                 and intact(store))
    rows.append(("one field of an array's zarr.json edited, cell_complete deleted or a mark garbled: --repair "
                 "keeps every cell (none recomputed, bit-identical)", n, held))
    # any file, damaged at random
    outcome = {"repaired": 0, "harmless": 0, "refused": 0}
    for k in range(4 * n):
        store = _copy(ref, base / f"fuzz{k}", "tiny.zarr")
        files = sorted(p for p in store.rglob("*") if p.is_file() and (k % 2 == 0 or p.name == "zarr.json"
                                                                      or ".creation" in p.parts))
        f = files[rng.randrange(len(files))]
        kind = rng.choice(["delete", "truncate", "flip", "swap", "scale_factor"])
        data = f.read_bytes()
        if kind == "delete":
            f.unlink()
        elif kind == "truncate":
            f.write_bytes(data[:rng.randrange(max(1, len(data)))])
        elif kind == "flip" and data:
            b = bytearray(data)
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            f.write_bytes(bytes(b))
        elif kind == "swap" and f.name != "zarr.json":
            peers = [p for p in files if p != f and p.parent == f.parent and p.name != "zarr.json"]
            if peers:
                g = rng.choice(peers)
                other = g.read_bytes()
                g.write_bytes(data)
                f.write_bytes(other)
        elif kind == "scale_factor" and f.name == "zarr.json" and f.parent != store:
            edit_json(f, lambda m: m.setdefault("attributes", {}).__setitem__("scale_factor", 3.0))
        code, out = _cli("verify", store)
        if code == 2:  # the root metadata, which hold the configuration: named, refused
            outcome["refused"] += f == store / "zarr.json" and "root metadata file" in out
            continue
        if code == 0:
            outcome["harmless"] += same_store(ref, store)
            continue
        _cli("verify", "--repair", store)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StoreWarning)
            run_experiment(exp, store=store)
        outcome["repaired"] += same_store(ref, store) and _cli("verify", store)[0] == 0
    rows.append((f"random damage (delete, truncate, flip, swap, scale_factor) of any file, of a zarr.json or of the "
                 f"record: verify finds it and --repair + run give the uninterrupted store ({outcome['repaired']}), "
                 f"or it changes no value read ({outcome['harmless']}), or the root metadata are named and refused "
                 f"({outcome['refused']})", 4 * n, sum(outcome.values())))
    # 7. inputs and leftovers
    held = 0
    for k in range(n):
        store = _copy(ref, base / f"partial{k}", "tiny.zarr")
        folders = [p for p in store.rglob("*") if p.is_dir()]
        left = rng.choice(folders) / f"{rng.randrange(9)}.{os.urandom(16).hex()}.partial"
        left.write_bytes(os.urandom(32))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StoreWarning)
            done = run_experiment(exp, store=store).cells_run == 0
        held += done and not left.exists() and intact(store)
    rows.append(("a *.partial write left by a kill: removed by the next run", n, held))
    store = _copy(ref, base / "resume", "tiny.zarr")
    clear_completion(store, [{"schedule": "1", "width": 8}])
    import ridgexr.run.runner as experiment
    from ridgexr.datasets import load_training_set
    from ridgexr.run.plan import estimate_resources

    whole = estimate_resources(exp, load_training_set(exp.dataset))["store_size"]
    real, experiment._free_disk = experiment._free_disk, lambda path: whole / 3
    try:
        resumed = run_experiment(exp, store=store).cells_run == 1 and intact(store)
    finally:
        experiment._free_disk = real
    threads = subprocess.run([sys.executable, "-m", "ridgexr.cli", "run", str(cat), "--data-dir", str(base / "t"),
                              "--threads", "100000"], capture_output=True, text=True)
    empty = _cli("run", cat, "--data-dir", "")[0] == 2
    rows.append(("a resume on a disk with room for its unfinished cell only; --threads 100000; --data-dir ''", 3,
                 int(resumed) + int(threads.returncode == 2 and "between 1 and" in threads.stderr) + int(empty)))
    return rows


def _raises(kind, fn, *args, **kwargs) -> bool:
    try:
        fn(*args, **kwargs)
    except kind:
        return True
    return False


def _catalog(folder: Path, store: str) -> Path:
    f = folder / "nested.yaml"
    f.write_text(CATALOG.replace("store: tiny.zarr", f"store: {store}"))
    return f


POLL = """
import hashlib, sys, ridgexr
from ridgexr.store import StoreLockedError, StoreReplacedError
while True:
    try:
        ds = ridgexr.open_dataset(sys.argv[1], complete_only=True).load()
    except (StoreReplacedError, StoreLockedError, FileNotFoundError):
        print("refused", flush=True)
        continue
    print("read", ds.attrs["config_hash"], hashlib.sha256(ds["trajectory"].values.tobytes()).hexdigest(), flush=True)
"""


def _polling_reader(store: Path, exp, other, n: int) -> tuple[int, int, int]:
    """(whole reads, reads, reads refused mid-swap) of a reader process polling ``store`` while this one overwrites
    it ``n`` times between two configurations of the same shapes."""
    import hashlib
    import threading

    digest = lambda ds: hashlib.sha256(ds["trajectory"].values.tobytes()).hexdigest()  # noqa: E731
    known = {}
    ds = ridgexr.open_dataset(store)
    known[ds.attrs["config_hash"]] = digest(ds)
    proc = subprocess.Popen([sys.executable, "-c", POLL, str(store)], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        time.sleep(3)
        for k in range(n):
            res = run_experiment(other if k % 2 == 0 else exp, store=store, overwrite=True)
            ds = ridgexr.open_dataset(res.store)
            known[ds.attrs["config_hash"]] = digest(ds)
    finally:
        proc.kill()
        proc.wait()
        reader.join(timeout=30)
    reads = [ln.split() for ln in lines if ln.startswith("read")]
    whole = sum(len(r) == 3 and known.get(r[1]) == r[2] for r in reads)
    return whole, len(reads), sum(ln.startswith("refused") for ln in lines)


def check_costs(tmp: Path, quick: bool = False) -> list[str]:
    """The time the checks add, measured in one run on a 6-cell store of 256 samples x 101 recorded steps: opening
    it (metadata against the record, the creation chunks' presence) and reading it whole (a pinned store that
    checks the folder and each chunk's CRC32C before zarr does) against the same without; ``verify`` and a resume
    with nothing to do against the same store without its record (the configuration's template, as before)."""
    import shutil

    import xarray as xr

    from ridgexr.run import check_identity, schema_reference, verification as verification_module
    from ridgexr.store import open_store, verify_and_repair

    f = tmp / "timing.yaml"
    f.write_text(TIMING_CATALOG)
    exp = experiment_from_file(f)
    store = run_experiment(exp, store=tmp / "timing" / "timing.zarr").store
    legacy = tmp / "timing-legacy" / "timing.zarr"
    shutil.copytree(store, legacy)
    shutil.rmtree(legacy / ".creation")
    reps = 2 if quick else 7
    t_open = best_time(lambda: open_store(store), reps)
    t_open0 = best_time(lambda: open_store(store, check=False), reps)
    t_api = best_time(lambda: ridgexr.open_dataset(store), reps)
    t_read = best_time(lambda: ridgexr.open_dataset(store).load(), reps)
    t_read0 = best_time(lambda: xr.open_zarr(store, consolidated=True).load(), reps)

    def verify(path):
        verification_module._TEMPLATES.clear()  # as the first verify of a command: the template written afresh
        verify_and_repair(path, schema_reference, identity=check_identity)

    def resume(path):
        verification_module._TEMPLATES.clear()
        assert run_experiment(exp, store=path).cells_run == 0

    reps = 1 if quick else 3
    t_verify, t_verify0 = best_time(lambda: verify(store), reps), best_time(lambda: verify(legacy), reps)
    t_resume, t_resume0 = best_time(lambda: resume(store), reps), best_time(lambda: resume(legacy), reps)
    return [f"open_store with the checks {1e3 * t_open:.1f} ms, without {1e3 * t_open0:.1f} ms: "
            f"+{1e3 * (t_open - t_open0):.1f} ms ({t_open / t_open0:.2f}x); open_dataset {1e3 * t_api:.1f} ms",
            f"reading the whole store (every variable): pinned and checksummed {1e3 * t_read:.0f} ms, zarr's own "
            f"store {1e3 * t_read0:.0f} ms ({t_read / t_read0:.2f}x)",
            f"verify: against the record {t_verify:.2f} s, against the configuration's template (a store without a "
            f"record) {t_verify0:.2f} s ({t_verify / t_verify0:.2f}x)",
            f"a resume with nothing to do: with the record {t_resume:.2f} s, without {t_resume0:.2f} s "
            f"({t_resume / t_resume0:.2f}x)"]


if __name__ == "__main__":
    main()
