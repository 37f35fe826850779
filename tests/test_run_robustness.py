"""Runs that survive crashes, signals, races, corruption, divergence and bad input (issue: stores that
survive any crash).  Every check here can fail: each compares with an uninterrupted run, counts winners,
or reads exit codes and files back."""

import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import ridgexr
from ridgexr.catalog import experiment_from_file
from ridgexr.cli import app
from ridgexr.run import ConfigMismatchError, run_experiment
from ridgexr.store import StoreLock, StoreLockedError, is_store, verify_store

RUN_SCRIPT = """
import sys
from ridgexr.catalog import experiment_from_file
from ridgexr.run import run_experiment
run_experiment(experiment_from_file(sys.argv[1]), store=sys.argv[2])
"""


def assert_same_store(a_path, b_path):
    a, b = ridgexr.open_dataset(a_path), ridgexr.open_dataset(b_path)
    assert set(a.variables) == set(b.variables)
    for name in a.variables:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, write_catalog):
    tmp = tmp_path_factory.mktemp("ref")
    cat = write_catalog(tmp, steps=60, samples=32)
    exp = experiment_from_file(cat)
    t0 = time.perf_counter()
    res = run_experiment(exp, store=tmp / "ref.zarr")
    return cat, exp, res.store, time.perf_counter() - t0


def _kill_then_resume(cat, exp, ref_store, store, delay, *, wait_for=None):
    proc = subprocess.Popen([sys.executable, "-c", RUN_SCRIPT, str(cat), str(store)])
    if wait_for is not None:  # poll for a file to appear, then wait `delay`
        deadline = time.time() + 60
        while time.time() < deadline and not wait_for() and proc.poll() is None:
            time.sleep(0.002)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    res = run_experiment(exp, store=store)  # no --overwrite: a rerun always finishes the store
    assert_same_store(ref_store, res.store)
    return res


@pytest.mark.slow
def test_kill_9_during_store_creation_then_resume_is_identical(reference, tmp_path):
    cat, exp, ref_store, _ = reference
    rng = random.Random(7)
    for k in range(3):
        store = tmp_path / f"s{k}.zarr"

        def created(store=store):
            return store.exists() or any(store.parent.glob(f".{store.name}.creating-*"))

        _kill_then_resume(cat, exp, ref_store, store, rng.uniform(0, 0.15), wait_for=created)
        assert not list(tmp_path.glob(".*.creating-*"))  # leftovers of the killed creation are gone


@pytest.mark.slow
def test_kill_9_at_random_instants_then_resume_is_identical(reference, tmp_path):
    cat, exp, ref_store, _ = reference
    rng = random.Random(11)
    t0 = time.perf_counter()  # how long the killed process would run uninterrupted, imports included
    subprocess.run([sys.executable, "-c", RUN_SCRIPT, str(cat), str(tmp_path / "timing.zarr")], check=True)
    whole = time.perf_counter() - t0
    instants = sorted(rng.uniform(0.3, 1.2 * whole) for _ in range(10))
    skipped = [_kill_then_resume(cat, exp, ref_store, tmp_path / f"k{k}.zarr", delay).cells_skipped
               for k, delay in enumerate(instants)]
    # most kills landed before the end, so resumes did real work
    assert sum(s < 6 for s in skipped) >= 3, f"uninterrupted {whole:.1f} s; kills at {instants}; kept {skipped}"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_stop_cleanly_and_resume(tmp_path, sig, write_catalog):
    cat = write_catalog(tmp_path, steps=200, samples=64)  # long enough that the signal lands mid-run
    exp = experiment_from_file(cat)
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "ridgexr.cli", "run", str(cat), "--data-dir", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    store = data / "tiny.zarr"
    marks = store / "cell_complete" / "c"
    deadline = time.time() + 120
    while time.time() < deadline and not (marks.exists() and any(marks.rglob("*"))):
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    with StoreLock(store):  # released
        pass
    assert 1 <= int(ridgexr.open_dataset(store).cell_complete.sum()) < 6
    run_experiment(exp, store=store)
    assert_same_store(run_experiment(exp, store=tmp_path / "ref.zarr").store, store)


def _race(path, rounds, barrier, queue):
    for r in range(rounds):
        barrier.wait()
        lock = StoreLock(path)
        try:
            lock.acquire()
            won = True
        except StoreLockedError:
            won = False
        barrier.wait()  # everyone has tried while the winner still holds it
        if won:
            lock.release()
        queue.put((r, won))
        barrier.wait()


def test_lock_race_has_exactly_one_winner_per_round(tmp_path):
    n_proc, rounds = 4, 50
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(n_proc), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(tmp_path / "s.zarr", rounds, barrier, queue)) for _ in range(n_proc)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in range(n_proc * rounds)]
    for p in procs:
        p.join(timeout=30)
    winners = np.zeros(rounds, dtype=int)
    for r, won in results:
        winners[r] += won
    assert (winners == 1).all(), winners


@pytest.mark.parametrize("content", [b"", b"\x00\xffgarbage{", b'{"pid": "x"}', b"[1, 2]"])
def test_empty_or_garbage_lock_files_are_harmless(tmp_path, content):
    lock = StoreLock(tmp_path / "s.zarr")
    lock.path.write_bytes(content)
    with lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    with pytest.raises(StoreLockedError, match=r"pid \d+"):
        with StoreLock(tmp_path / "s.zarr"):
            StoreLock(tmp_path / "s.zarr").acquire()


def _chunks(store, name):
    return sorted(p for p in (store / name / "c").rglob("*") if p.is_file())


@pytest.mark.slow
def test_corruption_is_detected_repaired_and_recomputed_identically(reference, tmp_path):
    cat, exp, ref_store, _ = reference
    store = run_experiment(exp, store=tmp_path / "s.zarr").store
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(store)])
    assert ok.exit_code == 0 and "ok:" in ok.output
    flipped = _chunks(store, "trajectory")[0]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    truncated = _chunks(store, "ridge_distance")[-1]
    truncated.write_bytes(truncated.read_bytes()[:7])
    deleted = _chunks(store, "residual_tangent")[2]
    deleted.unlink()
    damage, _ = verify_store(store)
    assert {d.variable for d in damage} == {"trajectory", "ridge_distance", "residual_tangent"}
    bad = runner.invoke(app, ["verify", str(store)])
    assert bad.exit_code == 1
    assert "damaged: trajectory schedule=" in bad.output and "missing" in bad.output
    assert "ridge_distance" in bad.output
    fixed = runner.invoke(app, ["verify", str(store), "--repair"])
    assert fixed.exit_code == 1 and "repaired:" in fixed.output
    n_incomplete = int((~ridgexr.open_dataset(store).cell_complete).sum())
    assert n_incomplete == len({tuple(d.cell.items()) for d in damage})
    res = run_experiment(exp, store=store)
    assert res.cells_run == n_incomplete
    assert_same_store(ref_store, store)
    assert runner.invoke(app, ["verify", str(store)]).exit_code == 0
    info = runner.invoke(app, ["info", str(store)])
    assert "verified: 20" in info.output and "0 damaged" in info.output


DIVERGING = """
experiments:
  div:
    dataset: {points: two-points}
    process: {T: 20000.0, t_min: 1.0, grid: linear, n_steps: 200}
    model: {widths: [8], n_frequencies: 3, include_exact: true}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1"]
    sampler: {kind: sde, block_steps: 64}
    n_samples: 8
    d_star: 1
    store: div.zarr
"""


def test_divergence_is_data_for_every_denoiser(tmp_path):
    f = tmp_path / "div.yaml"
    f.write_text(DIVERGING)
    res = run_experiment(experiment_from_file(f), data_dir=tmp_path)  # completes, never raises
    ds = ridgexr.open_dataset(res.store)
    assert bool(ds.cell_complete.all())
    exact = ds.sel(schedule="exact", width=8)
    assert exact.diverged.values.all()
    bound = ds.attrs["divergence_bound"]
    x = exact.trajectory.values
    beyond = ~(np.linalg.norm(np.nan_to_num(x, nan=np.inf, posinf=np.inf), axis=-1) <= bound)
    assert beyond[:, -1].all()
    # no geometry, and never "converged", for a diverged or huge state
    assert np.isnan(exact.ridge_projection.values[beyond]).all()
    assert not exact.ridge_converged.values[beyond].any()
    assert np.isnan(exact.ridge_residual.values[beyond]).all()


@pytest.mark.slow
def test_overwrite_with_a_config_that_fails_leaves_the_old_store(reference, tmp_path, catalog_text):
    cat, exp, ref_store, _ = reference
    store = run_experiment(exp, store=tmp_path / "s.zarr").store
    bad = tmp_path / "bad.yaml"
    bad.write_text(catalog_text(60, 32).replace("d_star: 1", "d_star: 1\n    ridge: {d_star_alt: [5]}"))
    with pytest.raises(ValueError, match="d_star_alt"):
        run_experiment(experiment_from_file(bad), store=store, overwrite=True)
    with pytest.raises(ValueError, match="scheduler"):
        run_experiment(experiment_from_file(cat).model_copy(update={"n_samples": 8}), store=store, overwrite=True,
                       scheduler="tcp://127.0.0.1:9")
    assert_same_store(ref_store, store)
    other = experiment_from_file(cat).model_copy(update={"n_samples": 8})
    with pytest.raises(ConfigMismatchError, match=r"differing fields: n_samples: 32 -> 8"):
        run_experiment(other, store=store)
    res = run_experiment(other, store=store, overwrite=True)
    assert ridgexr.open_dataset(res.store).sizes["sample"] == 8 and not list(tmp_path.glob(".*creating*"))


BAD_INPUTS = {
    "bool as a count": ("n_samples: 16", "n_samples: true"),
    "duplicate key": ("n_samples: 16", "n_samples: 16\n    n_samples: 17"),
    "negative extra d*": ("d_star: 1", "d_star: 1\n    ridge: {d_star_alt: [-1, 1]}"),
    "extra d* beyond d - 1": ("d_star: 1", "d_star: 1\n    ridge: {d_star_alt: [7]}"),
    "hidden store name": ("store: tiny.zarr", "store: .zarr"),
    "seed beyond 64 bits": ("d_star: 1", "d_star: 1\n    seeds: {sampler: 100000000000000000000000}"),
    "absurd sample count": ("n_samples: 16", "n_samples: 1000000000"),
    "absurd step count": ("n_steps: 20", "n_steps: 1000000000"),
    "absurd width": ("widths: [8, 16]", "widths: [8, 1000000000]"),
    "even node count for Simpson's rule": ("quadrature: gauss-legendre-log-t, n_time: 4",
                                           "quadrature: simpson-t, n_time: 4"),
    "unknown quadrature": ("quadrature: gauss-legendre-log-t", "quadrature: midpoint"),
    "feature period of zero": ("n_frequencies: 3", "n_frequencies: 3, feature_period: 0"),
    "top_k of zero": ("d_star: 1", "d_star: 1\n    ridge: {top_k: 0}"),
    "string for a number": ("n_samples: 16", "n_samples: '16'"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, catalog_text, case):
    old, new = BAD_INPUTS[case]
    text = catalog_text(20, 16)
    assert old in text
    f = tmp_path / "c.yaml"
    f.write_text(text.replace(old, new, 1))
    data = tmp_path / "data"
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(data)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    assert time.perf_counter() - t0 < 20  # refused up front, not after seconds of work
    assert not (data.exists() and any(p.suffix == ".zarr" for p in data.rglob("*")))


def test_absurd_training_data_and_os_errors_are_one_line(tmp_path, catalog_text):
    np.save(tmp_path / "big.npy", np.array([[0.0, 0.0], [1e200, 0.0]]))
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4).replace("{points: two-points}", "{file: big.npy}"))
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(f), "--data-dir", str(tmp_path / "d")])
    assert res.exit_code == 2 and "1e+200" in res.output and "Traceback" not in res.output
    f.write_text(catalog_text(5, 4))
    afile = tmp_path / "a-file"
    afile.write_text("x")
    res = runner.invoke(app, ["run", str(f), "--data-dir", str(afile)])
    assert res.exit_code == 2 and "error: cannot use" in res.output and str(afile) in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(app, ["--debug", "run", str(f), "--data-dir", str(afile)])
    assert res.exit_code != 0 and isinstance(res.exception, OSError)  # --debug: the real exception


def test_not_a_store_is_refused_without_suggesting_overwrite(tmp_path, catalog_text):
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    (tmp_path / "data" / "tiny.zarr").mkdir(parents=True)
    (tmp_path / "data" / "tiny.zarr" / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(tmp_path / "data"), *extra])
        assert res.exit_code == 2 and "not a ridgexr store" in res.output
        assert "--overwrite to" not in res.output
    assert (tmp_path / "data" / "tiny.zarr" / "notes.txt").read_text() == "mine"
    assert not is_store(tmp_path / "data" / "tiny.zarr")
