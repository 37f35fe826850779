"""Runs that survive corruption, races, full disks, divergence and bad input (issue: stores that survive any
crash; the kills are in test_run_kills.py and the signals in test_run_signals.py).  Every check here can fail:
each compares with an uninterrupted run, counts winners, or reads exit codes and files back.

What a run does with its store path (resume, replace, the chunks of a deleted store, a damaged root, a half
created new store), and the recovery of every state an interrupted swap leaves, are driven directly on small
stores in tests/test_store_lifecycle.py (issue 43).  The cases that stay here need a whole run, a real lock race,
a full disk, the CLI's lines or exit codes: corruption found and recomputed bit for bit, the lock race, a full
disk at the swap, a store deleted under a running writer, the one line of a kept old store and of a swap
finished by verify, refusals before any folder or lock is written."""

import json
import multiprocessing as mp
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import ridgexr
from ridgexr.catalog import experiment_from_file
from ridgexr.cli import app
from ridgexr.run import ConfigMismatchError, run_experiment
from ridgexr.store import StoreLock, StoreLockedError, is_store, verify_store

from reference_runs import assert_same_store, file_bytes, leftovers, old_store


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
def test_overwrite_with_a_config_that_fails_leaves_theold_store(small_reference, tmp_path, catalog_text):
    cat, exp, ref_store, _ = small_reference
    store = run_experiment(exp, store=tmp_path / "s.zarr").store
    bad = tmp_path / "bad.yaml"
    bad.write_text(catalog_text(20, 16).replace("d_star: 1", "d_star: 1\n    ridge: {d_star_alt: [5]}"))
    with pytest.raises(ValueError, match="d_star_alt"):
        run_experiment(experiment_from_file(bad), store=store, overwrite=True)
    with pytest.raises(ValueError, match="scheduler"):
        run_experiment(experiment_from_file(cat).model_copy(update={"n_samples": 8}), store=store, overwrite=True,
                       scheduler="tcp://127.0.0.1:9")
    assert_same_store(ref_store, store)
    other = experiment_from_file(cat).model_copy(update={"n_samples": 8})
    with pytest.raises(ConfigMismatchError, match=r"differing fields: n_samples: 16 -> 8"):
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
    "d_star of zero": ("d_star: 1", "d_star: 0"),  # issue 44: 1 <= d_star < d
    "d_star of the data dimension": ("d_star: 1", "d_star: 2"),
    "infinite T": ("T: 2.0", "T: .inf"),
}


def _run_edited_catalog(tmp_path, catalog_text, old, new):
    """``ridgexr run`` on the tiny catalog with ``old`` replaced by ``new``: (result, data folder)."""
    text = catalog_text(20, 16)
    assert old in text
    f = tmp_path / "c.yaml"
    f.write_text(text.replace(old, new, 1))
    data = tmp_path / "data"
    return CliRunner().invoke(app, ["run", str(f), "--data-dir", str(data)]), data


@pytest.fixture
def fits(monkeypatch):
    """The calls of ``plan_tasks``, where a run's work begins (fitting, then sampling): [] while every run was
    refused up front.  Counted, not timed: the refusal's speed depends on the machine's load."""
    import ridgexr.run.runner as experiment

    calls, plan_tasks = [], experiment.plan_tasks
    monkeypatch.setattr(experiment, "plan_tasks", lambda *a, **k: calls.append(a) or plan_tasks(*a, **k))
    return calls


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, catalog_text, case, fits):
    res, data = _run_edited_catalog(tmp_path, catalog_text, *BAD_INPUTS[case])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    assert fits == []  # refused up front, before any work
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
    assert "is not a folder" in res.output and "File exists" not in res.output  # issue 29, item 12
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
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["tiny.zarr"]  # refused before the lock


# ------------------------------------------------------------------ --overwrite as a transaction (issue 29)


def test_overwrite_that_fails_at_run_time_keeps_theold_store(small_reference, new_reference, tmp_path, monkeypatch):
    import ridgexr.run.runner as experiment

    other, _ = new_reference
    store = old_store(small_reference, tmp_path)
    before = file_bytes(store)
    real, calls = experiment.run_cell, []

    def fails_in_the_third_cell(*args, **kwargs):  # two cells of the new store are written, then a failure
        calls.append(args[3].index)
        if len(calls) == 3:
            raise RuntimeError("the model blew up")
        return real(*args, **kwargs)

    monkeypatch.setattr(experiment, "run_cell", fails_in_the_third_cell)
    with pytest.raises(RuntimeError, match="blew up") as info:
        run_experiment(other, store=store, overwrite=True)
    assert len(calls) == 3
    assert any(str(store) in note and "unchanged" in note for note in info.value.__notes__)
    assert file_bytes(store) == before  # every file of the old store, byte for byte
    assert leftovers(tmp_path) == []  # the partial new store is removed


def test_overwrite_that_fails_at_run_time_says_so_on_the_cli(reference, tmp_path, catalog_text):
    store = old_store(reference, tmp_path)
    before = file_bytes(store)
    f = tmp_path / "huge-T.yaml"
    f.write_text(catalog_text(60, 8).replace("T: 2.0", "T: 1.0e+308"))
    res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(tmp_path), "--overwrite"])
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    assert file_bytes(store) == before
    assert leftovers(tmp_path) == []


FULL_DISK_SCRIPT = """
set -e
mount -t tmpfs -o size={size}k tmpfs {disk}
cp -a {old} {disk}/tiny.zarr
set +e
{python} -m ridgexr.cli run {cat} --data-dir {disk} --overwrite --force 2> {out}/stderr
echo $? > {out}/rc
cp -a {disk}/. {out}/disk/
"""


def test_overwrite_on_a_full_disk_keeps_theold_store(reference, tmp_path, catalog_text):
    """A real full file system: a size-limited tmpfs in a private mount namespace (``unshare -rm``)."""
    import shutil

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no unprivileged mount namespace here (unshare -rm) to mount a size-limited tmpfs")
    old = reference[2]
    size_kib = sum(p.stat().st_size for p in old.rglob("*") if p.is_file()) // 1024
    n_files = sum(1 for p in old.rglob("*"))
    f = tmp_path / "big.yaml"  # 16x the samples: does not fit beside the old store
    f.write_text(catalog_text(60, 512))
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    (out / "disk").mkdir(parents=True)
    script = FULL_DISK_SCRIPT.format(size=2 * size_kib + 4 * n_files + 64, disk=disk, old=old, python=sys.executable,
                                     cat=f, out=out)
    subprocess.run(["unshare", "-rm", "sh", "-c", script], check=True, timeout=600)
    err = (out / "stderr").read_text()
    assert (out / "rc").read_text().strip() == "2", err
    assert "disk is full" in err and "unchanged" in err and "Traceback" not in err, err
    assert file_bytes(out / "disk" / "tiny.zarr") == file_bytes(old)
    assert leftovers(out / "disk") == []


def test_an_old_store_left_aside_is_kept_and_said_in_one_line_on_the_cli(reference, tmp_path):
    """A kill between the two renames of an --overwrite without a journal (ridgexr <= 0.3) leaves the old store in
    the hidden ``.NAME.creating-PID-old-...`` folder; with a store at the path too it is kept, and ``ridgexr run``
    says so in one warning line.  Restoring it when the path is empty, and keeping it, are driven directly in
    tests/test_store_lifecycle.py (issue 43; two in-process reruns were here)."""
    import shutil

    cat = reference[0]
    store = old_store(reference, tmp_path)
    aside = tmp_path / ".tiny.zarr.creating-4242-old-0123abcd"
    shutil.copytree(store, aside)
    res = CliRunner().invoke(app, ["run", str(cat), "--data-dir", str(tmp_path)])
    assert res.exit_code == 0 and res.output.replace("\n", "").count("warning: kept") == 1, res.output
    assert aside.is_dir()
    assert_same_store(reference[2], store)


def test_the_lock_file_never_follows_a_symbolic_link(tmp_path, catalog_text):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiny.zarr.ridgexr-lock").symlink_to(precious)
    with pytest.raises(OSError, match="symbolic link"):
        StoreLock(data / "tiny.zarr").acquire()
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(data)])
    assert res.exit_code == 2 and "symbolic link" in res.output and "tiny.zarr.ridgexr-lock" in res.output
    assert precious.read_text() == "keep me"
    assert not (data / "tiny.zarr").exists()


def test_chunks_swapped_between_cells_are_found_repaired_and_recomputed_identically(reference, tmp_path):
    """Issue 29, item 8: both chunks decode and pass their CRC32C; the per-cell digest ties them to their keys."""
    cat, exp, ref_store, _ = reference
    store = old_store(reference, tmp_path)
    a, b = store / "trajectory/c/0/0/0/0/0", store / "trajectory/c/1/1/0/0/0"
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    runner = CliRunner()
    bad = runner.invoke(app, ["verify", str(store), "--repair"])
    assert bad.exit_code == 1, bad.output
    assert "damaged: cell_digest schedule=1 width=8" in bad.output and "schedule=h2 width=16" in bad.output
    assert "repaired: 2 cell(s)" in bad.output
    res = run_experiment(exp, store=store)
    assert res.cells_run == 2
    assert_same_store(ref_store, store)
    assert runner.invoke(app, ["verify", str(store)]).exit_code == 0


def _flip(f):
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x10
    f.write_bytes(bytes(data))


def _edit_json(f, edit):
    meta = json.loads(f.read_text())
    edit(meta)
    f.write_text(json.dumps(meta))


METADATA_DAMAGE = {  # issue 29, items 2 and 7: damage that verify once reported as ok, or forgot after one repair
    "a variable's folder deleted": lambda s: __import__("shutil").rmtree(s / "ridge_distance"),
    "a variable's zarr.json deleted": lambda s: (s / "residual_normal" / "zarr.json").unlink(),
    "cell_complete deleted": lambda s: __import__("shutil").rmtree(s / "cell_complete"),
    "an array's zarr.json garbled": lambda s: (s / "trajectory" / "zarr.json").write_text('{"zarr_format": 3, "no'),
    "a byte of t flipped": lambda s: _flip(s / "t" / "c" / "0"),
    "a byte of a completion mark flipped": lambda s: _flip(s / "cell_complete" / "c" / "1" / "0"),
    "a shape in the consolidated metadata changed": lambda s: _edit_json(
        s / "zarr.json", lambda m: m["consolidated_metadata"]["metadata"]["trajectory"]["shape"].__setitem__(3, 41)),
    "a valid zarr.json with an unknown key": lambda s: _edit_json(
        s / "alpha" / "zarr.json", lambda m: m.__setitem__("storafe_transformers", m.pop("storage_transformers"))),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(METADATA_DAMAGE))
def test_metadata_damage_is_found_refused_by_run_and_repaired_from_the_configuration(small_reference, tmp_path, case):
    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    METADATA_DAMAGE[case](store)
    runner = CliRunner()
    found = runner.invoke(app, ["verify", str(store)])
    assert found.exit_code == 1 and "damaged:" in found.output and "ok:" not in found.output, found.output
    with pytest.raises(ValueError, match="verify|damaged"):  # never resumed, never re-consolidated as it is
        run_experiment(exp, store=store)
    fixed = runner.invoke(app, ["verify", str(store), "--repair"])
    assert fixed.exit_code == 1 and "repaired:" in fixed.output, fixed.output
    run_experiment(exp, store=store)
    assert_same_store(ref_store, store)
    again = runner.invoke(app, ["verify", str(store)])
    assert again.exit_code == 0 and "ok:" in again.output, again.output


def test_the_store_size_estimate_is_an_upper_bound_within_4x(reference):
    """Issue 29, item 1: the up-front disk check passed a store 140 times its estimate."""
    from ridgexr.datasets import load_training_set
    from ridgexr.run.plan import estimate_resources

    _, exp, store, _ = reference
    used = sum(os.lstat(p).st_blocks * 512 for p in [store, *store.rglob("*")])  # what du counts
    est = estimate_resources(exp, load_training_set(exp.dataset, base_dir=exp.base_dir))["store_size"]
    assert used <= est <= 4 * used, (est, used)


def _damage_one_file(store, rng):
    """Delete, truncate, flip a byte of, or swap with another of the same array, one random file of ``store``;
    returns what was done."""
    files = sorted(p for p in store.rglob("*") if p.is_file())
    f = files[rng.randrange(len(files))]
    kind = rng.choice(["delete", "truncate", "flip", "swap"])
    data = f.read_bytes()
    if kind == "delete":
        f.unlink()
    elif kind == "truncate":
        f.write_bytes(data[:rng.randrange(max(1, len(data)))])
    elif kind == "flip":
        if not data:
            return kind, f, False
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(b))
    else:
        top = store / f.relative_to(store).parts[0]
        peers = [p for p in files if p != f and p.name != "zarr.json" and p.is_relative_to(top)] if top != f else []
        if not peers or f.name == "zarr.json":
            return kind, f, False
        g = peers[rng.randrange(len(peers))]
        other = g.read_bytes()
        g.write_bytes(data)
        f.write_bytes(other)
    return kind, f, True


def _random_damage_trial(reference, folder, seed):
    """One trial: 'harmless' (verify ok and every reader value bit-identical), 'repaired' (verify reported it,
    --repair and a rerun give the uninterrupted store) or 'refused' (one line, exit 2: the root metadata that
    holds the configuration is gone)."""
    import shutil

    cat, exp, ref_store, _ = reference
    store = folder / f"s{seed}.zarr"
    shutil.copytree(ref_store, store)
    kind, f, done = _damage_one_file(store, random.Random(seed))
    runner = CliRunner()
    found = runner.invoke(app, ["verify", str(store)])
    if found.exit_code == 2:
        assert found.output.startswith("error:") and "Traceback" not in found.output, found.output
        return kind, f, "refused"
    if found.exit_code == 0:
        assert_same_store(ref_store, store)
        return kind, f, "harmless"
    assert found.exit_code == 1, found.output
    fixed = runner.invoke(app, ["verify", str(store), "--repair"])
    assert fixed.exit_code in (0, 1), fixed.output
    run_experiment(exp, store=store)
    assert_same_store(ref_store, store)
    assert runner.invoke(app, ["verify", str(store)]).exit_code == 0
    return kind, f, "repaired"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_random_damage_is_reported_and_repaired_or_harmless(small_reference, tmp_path, seed):
    kind, f, outcome = _random_damage_trial(small_reference, tmp_path, seed)
    assert outcome in ("harmless", "repaired") or f.name == "zarr.json" and f.parent.name.endswith(".zarr"), \
        (kind, f, outcome)


def test_data_beyond_the_resolved_scale_are_refused_and_the_largest_admitted_scale_memorizes(tmp_path, catalog_text):
    """Issue 29, item 4: from |x| ~ 1e8 float64 no longer resolved the geometry (ridge_distance exactly 0,
    converged; from 3e18 the exact denoiser stopped memorizing, unflagged; a negative loss at 3e15).  Such
    data are refused up front, naming the limit; just below the limit the exact denoiser memorizes and
    the ridge distance is the normal offset |x_1| (the two points' ridge is the x_0 axis)."""
    from ridgexr.run.runner import data_scale_limit

    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(20, 8).replace("{points: two-points}", "{file: big.npy}"))
    limit = data_scale_limit(0.01)  # the catalog's t_min
    assert 1.4e5 < limit < 1.41e5
    for s in (1e8, 3e15, 3e18, 3e50):
        np.save(tmp_path / "big.npy", np.array([[-s, 0.0], [s, 0.0]]))
        res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(tmp_path / "d")])
        assert res.exit_code == 2 and f"{s:.3g}" in res.output and "sqrt(h(t_min = 0.01))" in res.output
        assert "Traceback" not in res.output and not (tmp_path / "d" / "tiny.zarr").exists()
    s = 0.9 * limit
    np.save(tmp_path / "big.npy", np.array([[-s, 0.0], [s, 0.0]]))
    ds = ridgexr.open_dataset(run_experiment(experiment_from_file(f), data_dir=tmp_path / "d").store)
    exact = ds.sel(schedule="exact").isel(width=0)
    x = exact["trajectory"].values[:, -1]
    alpha = float(ds["alpha"].values[-1])
    # at the training points (up to Euler's step error, ~1e-3 with 20 steps, at every scale); 1e-20 from 3e18
    np.testing.assert_allclose(np.abs(x[:, 0]) / (alpha * s), 1.0, atol=5e-3)
    assert not exact["diverged"].values.any() and exact["ridge_converged"].values[:, -1].all()
    dist = exact["ridge_distance"].values[:, -1]
    assert (dist > 0).all()
    np.testing.assert_allclose(dist, np.abs(x[:, 1]), rtol=1e-3)
    loss = ds["loss"].values
    assert not (loss < 0).any()


# ------------------------------------------------------------------ input refused up front (issue 29, items 11, 12)
def _refused_up_front(res, data, *words):
    """Exit 2, one 'error:' line naming ``words``, no traceback, and no data folder, lock or store written."""
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output and "warning" not in res.output, res.output
    assert "━" not in res.output, res.output  # refused before any fitting started (no progress bar)
    for w in words:
        assert w in errors[0], (w, res.output)  # on the error's one line
    assert not data.exists(), sorted(map(str, data.rglob("*")))


UP_FRONT = {  # case: (old text, new text, words the one line must hold)
    "description nested 1000 deep": ("d_star: 1", "d_star: 1\n    description: " + "[" * 1000 + "]" * 1000,
                                     ["c.yaml", "nested deeper than 64"]),
    "mapping nested 1000 deep": ("d_star: 1", "d_star: 1\n    description: " + "{a: " * 1000 + "1" + "}" * 1000,
                                 ["c.yaml", "nested deeper than 64"]),
    # the smallest noise scale no longer resolves the data: refused by the data-scale check first
    "t_min of 1e-200 with random features": ("t_min: 0.01", "t_min: 1.0e-200",
                                             ["c.yaml", "process.t_min", "sqrt(h(t_min = 1e-200))"]),
    "loss t_min of 1e-200": ("n_noise: 4", "n_noise: 4, t_min: 1.0e-200", ["c.yaml", "training.t_min"]),
    "gd with tau = inf": ("n_noise: 4}", "n_noise: 4, method: gd, lr: 0.1}", ["c.yaml", "got [inf]"]),
    "gd without lr": ("n_noise: 4}", "n_noise: 4, method: gd}", ["c.yaml", "lr"]),
    "a module that does not import": ("model: {widths: [8, 16], n_frequencies: 3, include_exact: true}",
                                      "model: {kind: module, module: 'no_such_module_29:make'}",
                                      ["c.yaml", "cannot import 'no_such_module_29'"]),
    "a missing checkpoint": ("model: {widths: [8, 16], n_frequencies: 3, include_exact: true}",
                             "model: {kind: module, module: 'torch.nn:Identity', checkpoint: gone.pt}",
                             ["gone.pt", "does not exist"]),
    "a billion frequencies": ("n_frequencies: 3", "n_frequencies: 1000000000", ["tiny.zarr", "model.n_frequencies"]),
    "a million Gauss-Legendre nodes": ("n_time: 4", "n_time: 1000000", ["tiny.zarr", "training.n_time"]),
    "a billion Gauss-Legendre nodes": ("n_time: 4", "n_time: 1000000000", ["tiny.zarr", "training.n_time"]),
    "1e12 noise draws": ("n_noise: 4", "n_noise: 1000000000000", ["tiny.zarr", "training.n_noise"]),
}


@pytest.mark.parametrize("case", sorted(UP_FRONT))
def test_bad_input_is_refused_before_any_folder_or_lock(tmp_path, catalog_text, case, fits):
    old, new, words = UP_FRONT[case]
    res, data = _run_edited_catalog(tmp_path, catalog_text, old, new)
    _refused_up_front(res, data, *words)
    assert fits == []  # refused before any work


def test_a_binary_catalog_is_one_line_naming_the_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    data = tmp_path / "data"
    res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(data)])
    _refused_up_front(res, data, str(f), "not UTF-8", "0x89")
    res = CliRunner().invoke(app, ["list", "--catalog", str(f)])
    assert res.exit_code == 2 and str(f) in res.output and "Traceback" not in res.output


def test_nesting_within_the_bound_still_loads(tmp_path, catalog_text):
    from ridgexr.catalog.files import MAX_YAML_DEPTH, load_catalog_file

    f = tmp_path / "c.yaml"  # the catalog's own nesting (3 levels) plus a description 60 deep: 63 <= 64
    deep = "[" * (MAX_YAML_DEPTH - 4) + "]" * (MAX_YAML_DEPTH - 4)
    f.write_text(catalog_text(20, 16).replace("d_star: 1", "d_star: 1\n    extra_note: " + deep, 1))
    with pytest.raises(ridgexr.catalog.CatalogError, match="extra_note") as info:  # validated, not refused as deep
        load_catalog_file(f)
    assert "nested deeper" not in str(info.value)


def test_a_fit_that_fails_numerically_is_one_line_naming_the_fields(write_catalog, tmp_path):
    """The safety net behind the up-front check: the fit itself raises a FitError, no LinAlgError."""
    import warnings

    from ridgexr.datasets import load_training_set
    from ridgexr.run.plan import plan_layout, plan_tasks
    from ridgexr.training.fit import FitError

    exp = experiment_from_file(write_catalog(tmp_path))
    exp = exp.model_copy(update={"process": exp.process.model_copy(update={"t_min": 1e-200})})
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(FitError) as info:
            plan_tasks(exp, train, plan_layout(exp, train))
    msg = str(info.value)
    assert "\n" not in msg and "failed numerically" in msg and "process.t_min" in msg and "cat.yaml" in msg


def test_the_memory_estimate_counts_frequencies_and_noise_draws(write_catalog, tmp_path):
    from ridgexr.datasets import load_training_set
    from ridgexr.run.plan import estimate_resources

    exp = experiment_from_file(write_catalog(tmp_path))
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    base = estimate_resources(exp, train)["peak_memory"]
    rf = exp.model.model_copy(update={"n_frequencies": 10**9})
    est = estimate_resources(exp.model_copy(update={"model": rf}), train)
    # W_t (16 x (2e9 + 1)) float64 alone is 256 GB
    assert est["peak_memory"] - base >= 8.0 * 16 * (2e9 + 1) and est["memory_drivers"][0] == "model.n_frequencies"
    tr = exp.training.model_copy(update={"n_noise": 10**12})
    est = estimate_resources(exp.model_copy(update={"training": tr}), train)
    # one time node's noise (2 points x 1e12 draws x d = 2) float64 alone is 32 TB
    assert est["peak_memory"] - base >= 8.0 * 2 * 1e12 * 2 and est["memory_drivers"][0] == "training.n_noise"


def _chunk_only(folder):
    for var, key in [("trajectory", "0/0/0/0/0"), ("ridge_distance", "0/1/0/3"), ("cell_complete", "2/1")]:
        f = folder / var / "c" / key
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(os.urandom(64))


@pytest.mark.parametrize("extra", ["zarr.json", "trajectory/zarr.json", "notes.txt", "trajectory/c/0/x"])
def test_a_folder_with_anything_but_chunks_is_refused_and_kept(tmp_path, catalog_text, extra):
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    store = tmp_path / "data" / "tiny.zarr"
    _chunk_only(store)
    (store / extra).parent.mkdir(parents=True, exist_ok=True)
    (store / extra).write_text("{}")
    before = file_bytes(store)
    res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(tmp_path / "data")])
    assert res.exit_code == 2 and "not a ridgexr store" in res.output and "Traceback" not in res.output
    assert file_bytes(store) == before and not list(store.parent.glob("*.ridgexr-lock"))


def test_a_store_deleted_mid_run_says_so_and_the_rerun_starts_over(reference, tmp_path, monkeypatch):
    import shutil

    import ridgexr.run.runner as rx

    cat, exp, ref_store, _ = reference
    store = tmp_path / "s.zarr"
    real, calls = rx.run_cell, []

    def deleting_run_cell(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # after one complete cell, the store is deleted under the writer
            shutil.rmtree(store)
        return real(*args, **kwargs)

    monkeypatch.setattr(rx, "run_cell", deleting_run_cell)
    with pytest.raises(ridgexr.store.StoreDamagedError, match=r"s\.zarr.*was deleted .*while this run wrote"):
        run_experiment(exp, store=store)
    assert not is_store(store)  # at most the chunks the writer recreated (none when the cell failed at its start)
    _chunk_only(store)  # as a writer killed mid-cell leaves it
    monkeypatch.setattr(rx, "run_cell", real)
    with pytest.warns(ridgexr.store.StoreWarning, match="leftover of a store deleted"):
        run_experiment(exp, store=store)
    assert_same_store(ref_store, store)


# ---------------------------------------------------------------------------- issue 44: interrupted commands, damage
def _root_without_verified(store):
    meta = json.loads((store / "zarr.json").read_text())
    meta["attributes"].pop("verified", None)
    return meta


def test_a_swap_killed_between_its_renames_is_finished_by_verify_in_one_line(small_reference, new_reference,
                                                                            tmp_path):
    """Item 2: right after NAME.zarr became .NAME.zarr.creating-PID-old-*, verify, info and open_dataset said
    "neither a ridgexr store nor a catalog entry"; each now finishes the swap, with one warning line.  The
    recovery of every swap state by run, the readers and verify is driven directly in
    tests/test_store_lifecycle.py (issue 43); what stays is the CLI's one line (info and open_dataset ran here
    too until then)."""
    import shutil

    other, new_ref = new_reference
    runner = CliRunner()
    for command in ("verify",):
        folder = tmp_path / command
        folder.mkdir()
        store = old_store(small_reference, folder)
        staging = folder / ".tiny.zarr.creating-4242-staging-0123abcd"
        shutil.copytree(new_ref, staging)
        aside = folder / ".tiny.zarr.creating-4242-old-4567cdef"
        (folder / "tiny.zarr.ridgexr-swap").write_text(json.dumps({"new": staging.name, "old": aside.name}))
        store.rename(aside)
        if command == "open_dataset":
            with pytest.warns(ridgexr.store.StoreWarning, match="finished the interrupted --overwrite") as caught:
                ds = ridgexr.open_dataset(store)
            assert ds.sizes["sample"] == 8 and len(caught) == 1
        else:
            res = runner.invoke(app, [command, str(store)])
            assert res.exit_code == 0, res.output
            assert res.output.replace("\n", "").count("warning: finished the interrupted --overwrite") == 1, res.output
        assert leftovers(folder) == [] and not (folder / "tiny.zarr.ridgexr-swap").exists()
        assert_same_store(new_ref, store)


ATTRIBUTE_DAMAGE = {  # item 4: verify once said ok, then rebuilt the consolidated metadata from the damage
    "scale_factor on trajectory": ("trajectory/zarr.json", lambda m: m["attributes"].__setitem__("scale_factor", 2.0)),
    "_FillValue on resolved_rank": ("resolved_rank/zarr.json", lambda m: m["attributes"].__setitem__("_FillValue", 1)),
    "config_hash edited": ("zarr.json", lambda m: m["attributes"].__setitem__("config_hash", "0" * 64)),
}


@pytest.mark.parametrize("case", sorted(ATTRIBUTE_DAMAGE))
def test_attribute_damage_is_found_by_verify_and_repaired_to_a_bit_identical_store(small_reference, tmp_path, case):
    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    before = file_bytes(store)
    rel, edit = ATTRIBUTE_DAMAGE[case]
    _edit_json(store / rel, edit)
    runner = CliRunner()
    found = runner.invoke(app, ["verify", str(store)])
    assert found.exit_code == 1 and "ok:" not in found.output, found.output
    assert f"damaged: {rel.split('/')[0] if '/' in rel else 'configuration'}" in found.output, found.output
    assert_same_store(ref_store, store)  # readers still read the right values: nothing was consolidated from it
    if rel == "zarr.json":  # issue 59: a hash that disagrees with its configuration is resolved by the user
        refused = runner.invoke(app, ["verify", str(store), "--repair"])
        assert refused.exit_code == 1 and "not repaired" in refused.output, refused.output
        fixed = runner.invoke(app, ["verify", str(store), "--resolve-config", "creation"])
        assert fixed.exit_code == 0 and "resolved: restored config_hash" in fixed.output, fixed.output
    else:
        fixed = runner.invoke(app, ["verify", str(store), "--repair"])
        assert fixed.exit_code == 1 and "repaired: rewrote" in fixed.output, fixed.output
    after = file_bytes(store)
    assert {k: v for k, v in after.items() if k != "zarr.json"} == {k: v for k, v in before.items() if k != "zarr.json"}
    assert _root_without_verified(store) == json.loads(before["zarr.json"])
    again = runner.invoke(app, ["verify", str(store)])
    assert again.exit_code == 0 and "ok:" in again.output, again.output
    assert run_experiment(exp, store=store).cells_run == 0


def test_a_damaged_root_zarr_json_is_named_by_every_command(small_reference, tmp_path, catalog_text):
    """Item 3: every command said "neither a ridgexr store nor a catalog entry" and run --overwrite refused."""
    exp = small_reference[1]
    store = old_store(small_reference, tmp_path)
    (store / "zarr.json").write_bytes((store / "zarr.json").read_bytes()[:100])
    runner = CliRunner()
    for command in ("info", "verify"):
        res = runner.invoke(app, [command, str(store)])
        assert res.exit_code == 2 and f"root metadata file '{store / 'zarr.json'}' is damaged" in res.output, \
            res.output
    with pytest.raises(ridgexr.store.StoreDamagedError, match="--overwrite"):
        run_experiment(exp, store=store)
    # --overwrite replacing it (a decision and a swap) is driven directly in tests/test_store_lifecycle.py (issue 43)


def test_catalog_paths_that_are_folders_or_missing_are_one_line(tmp_path, catalog_text):
    """Item 6: a folder or a missing file as the catalog gave a 16-line usage box, and `--catalog DIR` without
    catalog files was ignored; `T: .inf` and `d_star: 0` name the file, the entry and the field."""
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {"folder": ["run", str(empty)], "missing file": ["run", str(tmp_path / "nope.yaml")],
             "--catalog DIR without catalogs": ["run", "tiny", "--catalog", str(empty)]}
    for case, args in cases.items():
        res = runner.invoke(app, args + ["--data-dir", str(tmp_path / "data")])
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (case, res.output)
        assert str(empty if case != "missing file" else tmp_path / "nope.yaml") in _flat_output(res.output), res.output
    for old, new, field in [("T: 2.0", "T: .inf", "process.T"), ("d_star: 1", "d_star: 0", "d_star")]:
        f = tmp_path / "c.yaml"
        f.write_text(catalog_text(20, 16).replace(old, new))
        res = runner.invoke(app, ["run", str(f), "--data-dir", str(tmp_path / "data")])
        assert res.exit_code == 2 and f"entry 'tiny', field '{field}'" in _flat_output(res.output), res.output
        assert str(f) in _flat_output(res.output)


def _flat_output(text):
    return text.replace("\n", "")


def test_a_full_disk_at_the_swap_says_what_is_intact_and_the_same_command_finishes(small_reference, new_reference,
                                                                                  tmp_path, monkeypatch):
    """Item 6: the disk full when the swap's journal is written gave "cannot use: the disk is full" with no path;
    and a complete store on a full disk was refused by the size estimate although nothing was left to write."""
    import errno

    import ridgexr.run.runner as experiment
    import ridgexr.store.lifecycle as lifecycle

    other, new_ref = new_reference
    store = old_store(small_reference, tmp_path)
    before = file_bytes(store)

    def full(path, staging):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lifecycle, "commit_staging", full)  # the swap run_experiment commits (store.commit_run)
    with pytest.raises(OSError) as info:
        run_experiment(other, store=store, overwrite=True)
    assert info.value.filename == str(tmp_path / "tiny.zarr.ridgexr-swap")
    note = " ".join(info.value.__notes__)
    assert f"the old store {str(store)!r} is unchanged and the new one is complete beside it" in note, note
    assert file_bytes(store) == before
    monkeypatch.undo()
    monkeypatch.setattr(experiment, "_free_disk", lambda path: 0)  # a full disk: only the swap is left to do
    res = run_experiment(other, store=store, overwrite=True)
    assert res.cells_run == 0 and leftovers(tmp_path) == []
    assert_same_store(new_ref, store)
    assert run_experiment(other, store=store).cells_run == 0  # complete: nothing to write, nothing refused


def test_the_schema_template_is_written_once_per_configuration_and_is_that_configurations(small_reference,
                                                                                          new_reference, tmp_path):
    """verify, run's resume check and --repair in one process write the template once per configuration and
    training set, then copy it; another configuration (8 samples instead of 16) never gets the first's."""
    from ridgexr.run import schema_reference, verification

    def arrays(ref):  # every file but the root metadata (its attributes are the first store's)
        return {k: v for k, v in file_bytes(ref).items() if k != "zarr.json"}

    _, _, store, _ = small_reference
    _, other = new_reference
    verification._TEMPLATES.clear()
    first, again = schema_reference(store, tmp_path / "a"), schema_reference(store, tmp_path / "b")
    assert len(verification._TEMPLATES) == 1 and arrays(first) == arrays(again)
    mine = schema_reference(other, tmp_path / "c")
    assert len(verification._TEMPLATES) == 2
    shape = lambda ref: json.loads((ref / "trajectory" / "zarr.json").read_text())["shape"]
    assert shape(first) != shape(mine) and 16 in shape(first) and 8 in shape(mine)
    verification._TEMPLATES.clear()  # written afresh: the copies equal it file for file
    assert arrays(schema_reference(other, tmp_path / "d")) == arrays(mine)
    assert arrays(schema_reference(store, tmp_path / "e")) == arrays(first)
