"""Repair that never makes a store worse, readers that verify what they apply, reads pinned to the store they
opened, an --overwrite that touches only its own store, and the inputs of the store's commands.

Every case runs on a real store (a copy of the ``small_reference`` run: 6 cells) damaged as a user, a disk or a
killed command damages it, and reads the result back from the disk or the command's lines.  Each of these failed
before the store kept a record of its creation (``.creation``): a repair rebuilt the training data from fill
values and rewrote a configuration's hash from a damaged configuration, metadata damage cost every cell, readers
returned scaled, masked or NaN values, an open Dataset read a store swapped in under it, ``--overwrite`` deleted a
store nested inside.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from typer.testing import CliRunner

import ridgexr
from ridgexr.cli import app
from ridgexr.run import ResourceError, run_experiment
from ridgexr.store import StoreDamagedError, StoreReplacedError, is_store

from reference_runs import assert_same_store, edit_json, file_bytes, old_store, without_verified


def _verify(*args):
    res = CliRunner().invoke(app, ["verify", *map(str, args)])
    assert "Traceback" not in res.output, res.output
    return res


def _flat(text):
    return " ".join(text.split())


# ---------------------------------------------------------------- 1. the configuration and its hash check each other
CONFIG_EDITS = {
    "a byte of n_samples": ('"n_samples":16', '"n_samples":17', "n_samples: 16 at creation, now 17"),
    "the sampler seed": ('"sampler":0,"init"', '"sampler":5,"init"', "seeds.sampler: 0 at creation, now 5"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_EDITS))
def test_a_configuration_that_disagrees_with_its_hash_is_reported_with_both_and_never_rewritten(small_reference,
                                                                                               tmp_path, case):
    """Issue 59, item 1: one byte of the root ``config`` made the first repair rewrite 20 arrays and unmark every
    cell, the second rewrite config_hash from it (the results lost); a sampler seed edited 0 -> 5 was "repaired"
    into a store claiming seed 5 for data drawn with seed 0.  Now both values are reported, --repair rewrites
    nothing, and the user's explicit choice resolves it: the configuration recorded at creation, bit for bit."""
    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    old, new, field = CONFIG_EDITS[case]
    edit_json(store / "zarr.json", lambda m: m["attributes"].__setitem__(
        "config", m["attributes"]["config"].replace(old, new)))
    edited = without_verified(file_bytes(store))
    found = _verify(store)
    assert found.exit_code == 1 and "ok:" not in found.output, found.output
    text = _flat(found.output)
    assert "damaged: configuration" in text and field in text and "--resolve-config creation" in text, text
    hashes = json.loads((store / "zarr.json").read_text())["attributes"]["config_hash"]
    assert hashes[:12] in text  # the stored hash, beside the configuration's own
    repaired = _verify("--repair", store)
    assert repaired.exit_code == 1 and "not repaired" in repaired.output and "repaired: rewrote" not in \
        repaired.output, repaired.output
    assert without_verified(file_bytes(store)) == edited  # nothing rewritten from either
    assert bool(ridgexr.open_dataset(store).cell_complete.all())
    with pytest.raises(StoreDamagedError, match="configuration"):  # never resumed while in doubt
        run_experiment(exp, store=store)
    resolved = _verify("--resolve-config", "creation", store)
    assert resolved.exit_code == 0 and "resolved: restored config" in resolved.output, resolved.output
    assert without_verified(file_bytes(store)) == without_verified(file_bytes(ref_store))
    assert run_experiment(exp, store=store).cells_run == 0
    assert_same_store(ref_store, store)


def test_resolving_with_the_current_configuration_is_an_explicit_choice_that_recomputes(small_reference, tmp_path):
    """--resolve-config current: the user declares the edited configuration right; its hash and the record are
    rewritten from it, and the store is then checked against its schema (17 samples: every cell recomputed by
    the next run, none read as complete with 16)."""
    store = old_store(small_reference, tmp_path)
    edit_json(store / "zarr.json", lambda m: m["attributes"].__setitem__(
        "config", m["attributes"]["config"].replace('"n_samples":16', '"n_samples":17')))
    res = _verify("--resolve-config", "current", store)
    assert res.exit_code == 1 and "resolved: rewrote config_hash" in res.output, res.output
    other = small_reference[1].model_copy(update={"n_samples": 17})
    assert json.loads((store / "zarr.json").read_text())["attributes"]["config_hash"] == \
        other.config_hash(np.array([[-3.0, 0.0], [3.0, 0.0]]))
    assert run_experiment(other, store=store).cells_run == 6
    assert _verify(store).exit_code == 0
    assert ridgexr.open_dataset(store).sizes["sample"] == 17


# ---------------------------------------------------------------- 2. inputs are restored from a copy, or refused
@pytest.mark.parametrize("how", ["its chunk", "its folder"])
def test_deleted_training_data_are_refused_by_readers_and_restored_from_the_record(small_reference, tmp_path, how):
    """Item 2: deleting train_data's one chunk (or its folder) and --repair gave train_data = NaN, verify ok and a
    store run refused.  Readers now refuse the store naming the chunk; --repair restores the checksummed copy kept
    at creation, bit for bit."""
    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    if how == "its chunk":
        (store / "train_data" / "c" / "0" / "0").unlink()
    else:
        shutil.rmtree(store / "train_data")
    with pytest.raises(StoreDamagedError, match=r"train_data.*verify"):
        ridgexr.open_dataset(store)
    assert _verify(store).exit_code == 1
    fixed = _verify("--repair", store)
    assert fixed.exit_code == 1 and "repaired: rewrote train_data" in fixed.output, fixed.output
    assert file_bytes(store / "train_data") == file_bytes(ref_store / "train_data")
    assert _verify(store).exit_code == 0
    assert run_experiment(exp, store=store).cells_run == 0
    assert_same_store(ref_store, store)


def test_training_data_with_no_intact_copy_are_never_rebuilt_from_fill_values(small_reference, tmp_path):
    store = old_store(small_reference, tmp_path)
    (store / "train_data" / "c" / "0" / "0").unlink()
    (store / ".creation" / "train_data" / "c" / "0" / "0").write_bytes(b"damaged")
    fixed = _verify("--repair", store)
    assert fixed.exit_code == 1 and "not repaired: train_data" in _flat(fixed.output), fixed.output
    assert not (store / "train_data" / "c" / "0" / "0").exists()  # nothing written in its place
    with pytest.raises(StoreDamagedError, match="train_data"):
        ridgexr.open_dataset(store)


# ---------------------------------------------------------------- 3. an --overwrite touches only its own store
def test_a_store_path_or_data_folder_inside_a_store_is_refused(small_reference, tmp_path, catalog_text):
    """Item 3: the catalog accepted ``store: outer.zarr/inner.zarr`` and --data-dir could point inside a store:
    an --overwrite of the outer store then deleted the inner one."""
    outer = old_store(small_reference, tmp_path)  # tmp_path/tiny.zarr
    before = file_bytes(outer)
    f = tmp_path / "nested.yaml"
    f.write_text(catalog_text(20, 8).replace("store: tiny.zarr", "store: tiny.zarr/inner.zarr"))
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(f), "--data-dir", str(tmp_path)])
    assert res.exit_code == 2 and "inside the ridgexr store" in _flat(res.output), res.output
    f.write_text(catalog_text(20, 8))
    res = runner.invoke(app, ["run", str(f), "--data-dir", str(outer / "sub")])
    assert res.exit_code == 2 and "data folder" in res.output and "inside the ridgexr store" in _flat(res.output)
    with pytest.raises(ridgexr.run.ConfigMismatchError, match="inside the ridgexr store"):
        run_experiment(small_reference[1], store=outer / "inner.zarr")
    assert file_bytes(outer) == before and not (outer / "sub").exists()


def test_overwrite_refuses_a_store_that_holds_what_it_did_not_write(small_reference, new_reference, tmp_path):
    other, _ = new_reference
    outer = old_store(small_reference, tmp_path)
    shutil.copytree(small_reference[2], outer / "inner.zarr")  # a store someone put inside another
    (outer / "trajectory" / "notes.txt").write_text("mine")
    before = file_bytes(outer)
    with pytest.raises(ridgexr.run.ConfigMismatchError, match=r"--overwrite refuses .*inner\.zarr"):
        run_experiment(other, store=outer, overwrite=True)
    assert file_bytes(outer) == before and is_store(outer / "inner.zarr")
    shutil.rmtree(outer / "inner.zarr")
    (outer / "trajectory" / "notes.txt").unlink()
    assert run_experiment(other, store=outer, overwrite=True).cells_run == 6  # a store of its own: replaced


# ---------------------------------------------------------------- 4. reads pinned to the store they opened
def test_a_dataset_open_across_an_overwrite_raises_instead_of_mixing_the_two_stores(small_reference, tmp_path):
    """Item 4: an open Dataset read after an --overwrite swap returned the new values under the old attributes.
    The new configuration here draws other samples into the same shapes (sampler seed 1), so a mixed read would
    pass unnoticed: it raises StoreReplacedError instead, and a fresh open reads the new store whole."""
    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    ds = ridgexr.open_dataset(store)
    other = exp.model_copy(update={"seeds": exp.seeds.model_copy(update={"sampler": 1})})
    run_experiment(other, store=store, overwrite=True)
    with pytest.raises(StoreReplacedError, match="open it again"):
        ds["trajectory"].values
    with pytest.raises(StoreReplacedError):  # the summary's second view of the store is the same store, or refused
        ridgexr.reader.summarize(store, ds)
    new = ridgexr.open_dataset(store)
    assert new.attrs["config_hash"] != ds.attrs["config_hash"]
    assert not np.array_equal(new["trajectory"].values, ridgexr.open_dataset(ref_store)["trajectory"].values)


POLL = """
import hashlib, sys, ridgexr
from ridgexr.store import StoreLockedError, StoreReplacedError
while True:
    try:
        ds = ridgexr.open_dataset(sys.argv[1], complete_only=True).load()
    except (StoreReplacedError, StoreLockedError, FileNotFoundError):  # mid-swap: a clear error, never a mix
        print("replaced", flush=True)
        continue
    except Exception as exc:
        print("error", type(exc).__name__, exc, flush=True)
        continue
    print("read", ds.attrs["config_hash"], hashlib.sha256(ds["trajectory"].values.tobytes()).hexdigest(), flush=True)
"""


@pytest.mark.slow
def test_a_reader_polling_through_overwrites_reads_one_store_or_the_other_never_a_mix(small_reference, tmp_path):
    """Item 4: a reader polling ``open_dataset(path, complete_only=True).load()`` got a mixed read in 3 of 3
    overwrites.  Here a reader process polls while this one overwrites the store four times between two
    configurations of the same shapes; every read is whole: its config_hash and its values are one store's (an
    instant mid-swap gives a clear error: the store replaced, or locked by its writer)."""
    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    other = exp.model_copy(update={"seeds": exp.seeds.model_copy(update={"sampler": 1})})
    ref = ridgexr.open_dataset(ref_store)
    digest = lambda ds: hashlib.sha256(ds["trajectory"].values.tobytes()).hexdigest()  # noqa: E731
    sums = {ref.attrs["config_hash"]: digest(ref)}
    proc = subprocess.Popen([sys.executable, "-c", POLL, str(store)], stdout=subprocess.PIPE, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        for k in range(4):
            res = run_experiment(other if k % 2 == 0 else exp, store=store, overwrite=True)
            ds = ridgexr.open_dataset(res.store)
            sums[ds.attrs["config_hash"]] = digest(ds)
    finally:
        proc.kill()
        proc.wait()
        reader.join(timeout=30)
    reads = [ln.split() for ln in lines if ln.startswith("read")]
    assert len(reads) > 4 and not [ln for ln in lines if ln.startswith("error")], lines[:20]
    for _, config_hash, values in reads:  # the values of the store whose config_hash was read with them
        assert values == sums[config_hash], (config_hash, values, sums)


# ---------------------------------------------------------------- 5. readers verify what they apply
def _consolidated(name, edit):
    return lambda m: edit(m["consolidated_metadata"]["metadata"][name])


READER_DAMAGE = {
    "scale_factor 2 on trajectory": ("trajectory", _consolidated("trajectory", lambda a: a["attributes"].__setitem__(
        "scale_factor", 2.0))),
    "add_offset on ridge_distance": ("ridge_distance", _consolidated("ridge_distance", lambda a: a[
        "attributes"].__setitem__("add_offset", 1.0))),
    "_FillValue 1 on int16 resolved_rank": ("resolved_rank", _consolidated("resolved_rank", lambda a: a[
        "attributes"].__setitem__("_FillValue", 1))),
    "t in days since 2000": ("'t'", _consolidated("t", lambda a: a["attributes"].__setitem__(
        "units", "days since 2000-01-01"))),
    "data_type int64 with a NaN fill": ("ridge_distance", _consolidated("ridge_distance", lambda a: a.__setitem__(
        "data_type", "int64"))),
}


@pytest.mark.parametrize("case", sorted(READER_DAMAGE))
def test_readers_refuse_consolidated_metadata_that_would_change_the_values_read(small_reference, tmp_path, case):
    """Item 5: scale_factor doubled every value, add_offset shifted it, a _FillValue on an int16 read as NaN, t read
    as dates; open_dataset, engine="ridgexr" and `info` applied them.  Each now refuses naming the array and
    `ridgexr verify`, which finds the damage; --repair rebuilds the consolidated copy and the store reads as
    written (the int64 copy once crashed verify: "Invalid type: NaN")."""
    import xarray as xr

    ref_store = small_reference[2]
    store = old_store(small_reference, tmp_path)
    name, edit = READER_DAMAGE[case]
    edit_json(store / "zarr.json", edit)
    with pytest.raises(StoreDamagedError, match=rf"{name}.*ridgexr verify"):
        ridgexr.open_dataset(store)
    with pytest.raises(StoreDamagedError, match=name):
        xr.open_dataset(store, engine="ridgexr")
    info = CliRunner().invoke(app, ["info", str(store)])
    assert info.exit_code == 2 and "ridgexr verify" in info.output and "Traceback" not in info.output
    assert _verify(store).exit_code == 1
    fixed = _verify("--repair", store)
    assert fixed.exit_code == 1 and "consolidated metadata" in fixed.output, fixed.output
    assert _verify(store).exit_code == 0
    assert_same_store(ref_store, store)


@pytest.mark.parametrize("what", ["t", "train_data"])
def test_missing_chunks_every_complete_cell_needs_are_an_error_not_nan(small_reference, tmp_path, what):
    """Item 5: a deleted t/ (or train_data chunk) read as all-NaN, with "complete cells: 6 of 6"."""
    store = old_store(small_reference, tmp_path)
    if what == "t":
        shutil.rmtree(store / "t")
    else:
        (store / "train_data" / "c" / "0" / "0").unlink()
    with pytest.raises(StoreDamagedError, match=rf"array '{what}' misses its chunk file"):
        ridgexr.open_dataset(store)
    info = CliRunner().invoke(app, ["info", str(store)])
    assert info.exit_code == 2 and "complete cells" not in info.output and what in info.output


def test_a_checksum_error_names_the_array_and_the_chunk_file(small_reference, tmp_path):
    """Item 7: a chunk that failed its CRC32C raised zarr's "Stored and computed checksum do not match" through
    open_dataset, info and analyze, naming neither the array nor the chunk."""
    store = old_store(small_reference, tmp_path)
    chunk = store / "ridge_distance" / "c" / "1" / "0" / "0" / "2"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x10
    chunk.write_bytes(bytes(data))
    ds = ridgexr.open_dataset(store)
    with pytest.raises(StoreDamagedError) as info:
        ds["ridge_distance"].values
    assert "'ridge_distance'" in str(info.value) and str(chunk) in str(info.value) and "verify" in str(info.value)
    for command in ("info", "analyze"):
        res = CliRunner().invoke(app, [command, str(store)])
        assert res.exit_code == 2 and str(chunk) in _flat(res.output) and "verify" in res.output, res.output


# ---------------------------------------------------------------- 6. repair keeps what verifies
def _trajectory_edit(edit):
    return lambda s: edit_json(s / "trajectory" / "zarr.json", edit)


METADATA_EDITS = {
    "zstd level": _trajectory_edit(lambda m: m["codecs"][1]["configuration"].__setitem__("level", 3)),
    "fill_value": _trajectory_edit(lambda m: m.__setitem__("fill_value", 1.0)),
    "dimension names": _trajectory_edit(lambda m: m["dimension_names"].__setitem__(2, "draw")),
    "data type": _trajectory_edit(lambda m: m.__setitem__("data_type", "float32")),
    "shape": _trajectory_edit(lambda m: m["shape"].__setitem__(3, 41)),
    "chunks": _trajectory_edit(lambda m: m["chunk_grid"]["configuration"].__setitem__("chunk_shape", [1, 1, 8, 8, 2])),
    "codecs": _trajectory_edit(lambda m: m.__setitem__("codecs", m["codecs"][:2])),
    "cell_complete deleted": lambda s: shutil.rmtree(s / "cell_complete"),
    "a completion mark flipped": lambda s: (s / "cell_complete" / "c" / "1" / "0").write_bytes(b"\x00\x01"),
}


@pytest.mark.parametrize("case", sorted(METADATA_EDITS))
def test_metadata_damage_is_repaired_keeping_every_chunk_that_verifies(small_reference, tmp_path, case):
    """Item 6: one field of an array's zarr.json made the repair delete every chunk of that array and recompute
    every cell, and a deleted cell_complete/ recomputed every cell though cell_digest could confirm them.  Now the
    metadata are rewritten from the record, the chunks kept, and every cell whose digest verifies stays complete:
    nothing is recomputed and the store is the uninterrupted one, bit for bit."""
    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    METADATA_EDITS[case](store)
    assert _verify(store).exit_code == 1
    fixed = _verify("--repair", store)
    assert fixed.exit_code == 1 and "repaired:" in fixed.output and "marked incomplete" not in fixed.output, \
        fixed.output
    assert bool(ridgexr.open_dataset(store).cell_complete.all())
    assert _verify(store).exit_code == 0
    assert run_experiment(exp, store=store).cells_run == 0
    assert_same_store(ref_store, store)


# ---------------------------------------------------------------- 7. the commands' inputs and what a kill leaves
def test_a_resume_is_sized_by_its_remaining_cells(small_reference, tmp_path, monkeypatch):
    """Item 7: after a repair, a resume on a nearly full disk was refused by the whole store's size estimate (1 MB
    of work needed --force)."""
    import ridgexr.run.runner as experiment
    from ridgexr.datasets import load_training_set
    from ridgexr.run.plan import estimate_resources
    from ridgexr.store.update import clear_completion

    cat, exp, ref_store, _ = small_reference
    store = old_store(small_reference, tmp_path)
    clear_completion(store, [{"schedule": "1", "width": 8}])
    whole = estimate_resources(exp, load_training_set(exp.dataset))["store_size"]
    monkeypatch.setattr(experiment, "_free_disk", lambda path: whole / 3)  # room for 1 cell in 6, not for the store
    assert run_experiment(exp, store=store).cells_run == 1
    assert_same_store(ref_store, store)
    with pytest.raises(ResourceError, match=r"store up to"):
        run_experiment(exp, store=tmp_path / "new.zarr")


def test_unfinished_writes_a_kill_left_are_removed_by_the_next_command(small_reference, tmp_path):
    """Item 7: a ``*.partial`` file left by a kill (zarr writes a chunk as NAME.<hex>.partial, then renames it) was
    never removed."""
    cat, exp, ref_store, _ = small_reference
    for command in ("run", "verify"):
        folder = tmp_path / command
        folder.mkdir()
        store = old_store(small_reference, folder)
        left = [store / "trajectory" / "c" / "0" / "0" / "0" / "0" / ("0." + "ab" * 16 + ".partial"),
                store / ("zarr." + "cd" * 16 + ".partial")]
        for f in left:
            f.write_bytes(b"half a chunk")
        if command == "run":
            with pytest.warns(ridgexr.store.StoreWarning, match="unfinished chunk write"):
                assert run_experiment(exp, store=store).cells_run == 0
        else:
            assert _verify(store).exit_code == 0
        assert not any(f.exists() for f in left)
        assert_same_store(ref_store, store)


def test_threads_beyond_the_bound_are_one_line_exit_2(tmp_path, catalog_text):
    """Item 7: ``--threads 100000`` printed the plan and exited 139 (a segfault)."""
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    res = subprocess.run([sys.executable, "-m", "ridgexr.cli", "run", str(f), "--data-dir", str(tmp_path / "d"),
                          "--threads", "100000"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "--threads" in res.stderr and "between 1 and" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "d").exists()


def test_an_empty_data_dir_is_refused(tmp_path, catalog_text, monkeypatch):
    """Item 7: ``--data-dir ""`` wrote the store into the working folder."""
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    res = CliRunner().invoke(app, ["run", str(f), "--data-dir", ""])
    assert res.exit_code == 2 and "`data_dir` (--data-dir) is empty" in res.output, res.output
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("code, words", [(28, "the disk is full"), (30, "read-only file system")])
def test_disk_full_and_read_only_name_the_path(tmp_path, catalog_text, monkeypatch, code, words):
    """Item 7: "cannot use: the disk is full" named no path when the error came from a write that names none."""
    import ridgexr.store.lifecycle as lifecycle

    def fails(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(lifecycle, "write_template", fails)
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    res = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(tmp_path / "d")])
    assert res.exit_code == 2 and f"cannot use '{tmp_path / 'd' / 'tiny.zarr'}': {words}" in _flat(res.output), \
        res.output


READ_ONLY_SCRIPT = """
set -e
mount --bind {folder} {folder}
mount -o remount,bind,ro {folder}
set +e
{python} -m ridgexr.cli verify {store} > {out}/stdout 2> {out}/stderr
echo $? > {out}/rc
"""


def test_verify_works_on_a_read_only_file_system(small_reference, tmp_path):
    """Item 7: verify was impossible on a read-only file system (it needed its lock file).  A real read-only
    bind mount in a private mount namespace (``unshare -rm``)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no unprivileged mount namespace here (unshare -rm) to mount a folder read-only")
    folder = tmp_path / "ro"
    folder.mkdir()
    store = old_store(small_reference, folder)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["unshare", "-rm", "sh", "-c", READ_ONLY_SCRIPT.format(
        folder=folder, python=sys.executable, store=store, out=out)], check=True, timeout=600)
    stdout = (out / "stdout").read_text()
    assert (out / "rc").read_text().strip() == "0", (out / "stderr").read_text() + stdout
    assert "ok:" in stdout and "read-only" in stdout
    assert not (folder / "tiny.zarr.ridgexr-lock").exists()


def test_a_damaged_copy_in_the_record_is_reported_and_rewritten_from_the_stores_own_file(small_reference, tmp_path):
    """The record's copies are checked too (a repair could not restore from a damaged one): a truncated copy is
    reported, and --repair rewrites it from the store's file, whose SHA-256 the record holds."""
    ref_store = small_reference[2]
    store = old_store(small_reference, tmp_path)
    copy = store / ".creation" / "t" / "c" / "0"
    copy.write_bytes(copy.read_bytes()[:5])
    found = _verify(store)
    assert found.exit_code == 1 and "the record's copy of t/c/0" in _flat(found.output), found.output
    fixed = _verify("--repair", store)
    assert fixed.exit_code == 1 and "record's copy of 1 chunk file(s) rewritten" in _flat(fixed.output), fixed.output
    assert file_bytes(store / ".creation") == file_bytes(ref_store / ".creation")
    assert _verify(store).exit_code == 0
