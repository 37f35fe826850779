"""The store's lifecycle on disk, driven directly (issue 43): :func:`ridgexr.store.lifecycle.recover_store` through
every state a killed ``--overwrite`` swap or creation leaves, :func:`ridgexr.store.lifecycle.open_for_run`
(what ``run`` does with
its store path) through every case, the swap itself, and :func:`ridgexr.store.verify_and_repair` (``ridgexr
verify``).  Real zarr stores in ``tmp_path``, no mocks: each state is built with the file operations a kill
leaves, and the result is read back from the disk (which store is where, by its ``config_hash``; what is left
beside it; the lines a user reads).  The subprocess kills in test_run_kills.py and test_run_signals.py keep only
what a real kill shows."""

import json
import shutil
import warnings

import numpy as np
import pytest

from ridgexr.reader import store_path
from ridgexr.store import (ConfigMismatchError, StoreDamagedError, StoreLock, StoreWarning, is_store, open_store,
                           verify_and_repair)
from ridgexr.store.lifecycle import (Opening, commit_staging, create_staging, create_store, damaged_root,
                                     finish_interrupted, interrupted, journal_path, open_for_run, recover_store)
from ridgexr.store.layout import write_template
from ridgexr.store.update import consolidate
from ridgexr.store.write import write_block, write_cell_end
from ridgexr.store.lifecycle import _sibling
from ridgexr.store.layout import StoreLayout
from ridgexr.schema import empty_step_values


def _layout():
    return StoreLayout(coords=(("schedule", ("1",)), ("width", (4, 8))), n_samples=2, t=np.array([1.0, 0.5, 0.1]),
                       sampler_step=np.arange(3), d=2, block_steps=2, sample_chunk=2)


def _store(path, config_hash):
    create_store(path, _layout(), np.zeros((2, 2)), {"config_hash": config_hash})
    return path


def _hash(path):
    return json.loads((path / "zarr.json").read_text())["attributes"]["config_hash"]


def _beside(path):
    """The hidden folders and journals left beside the store ``path``."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.creating-")
                  or p.name.startswith(path.name + ".ridgexr-swap"))


def _recover(path, **kw):
    with StoreLock(path):
        return recover_store(path, **kw)


# ---------------------------------------------------------------------------- every state of a journalled swap
#: the steps of commit_staging, in order; a kill after each leaves the state that _swap_state builds
SWAP_STEPS = ["journal being written", "journal written", "old moved aside", "new in place", "old half removed",
              "old removed"]


def _swap_state(tmp_path, step):
    """A store ``s.zarr`` (config_hash "old") and the whole new store of an --overwrite ("new"), as commit_staging
    leaves them when killed right after ``step``; returns (store, staging, old-aside path)."""
    path = _store(tmp_path / "s.zarr", "old")
    staging = create_staging(path, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    old, journal = _sibling(path, "old-"), journal_path(path)
    for done in SWAP_STEPS[:SWAP_STEPS.index(step) + 1]:
        if done == "journal being written":
            journal.with_name(journal.name + ".4242-0123abcd").write_text('{"new": "')
        elif done == "journal written":
            journal.write_text(json.dumps({"new": staging.name, "old": old.name}))
        elif done == "old moved aside":
            path.rename(old)
        elif done == "new in place":
            staging.rename(path)
        elif done == "old half removed":  # rmtree killed half-way: the old store is no store any more
            files = sorted(p for p in old.rglob("*") if p.is_file())
            for p in files[::2]:
                p.unlink()
        elif done == "old removed":
            shutil.rmtree(old)
    return path, staging, old


@pytest.mark.parametrize("step", SWAP_STEPS)
@pytest.mark.parametrize("by", ["run", "reader", "verify"])
def test_every_journal_state_is_recovered_by_each_command_in_one_line(tmp_path, step, by):
    """A swap killed after any of its steps is finished (or, before its journal, left as it was) by the recovery
    that ``run`` (under its lock, resuming the new store), ``verify`` (keeping it) and the readers
    (``open_dataset``, ``info``: :func:`ridgexr.reader.store_path`) do, with one line per action."""
    path, staging, old = _swap_state(tmp_path, step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if by == "run":
            notes, resumable = _recover(path, resume_hash="new")
        elif by == "verify":
            notes, resumable = _recover(path, keep_staging=True)
        else:
            resumable = None
            assert store_path(path) == path
            notes = [str(w.message) for w in caught if issubclass(w.category, StoreWarning)]
    if step == "journal being written":  # before the journal: the old store never moved; the new one stays resumable
        assert _hash(path) == "old" and not old.exists()
        if by == "run":
            assert resumable == staging and notes == []
        elif by == "verify":
            assert resumable is None and _beside(path) == [staging.name] and len(notes) == 1 and "kept" in notes[0]
        else:  # nothing was interrupted between renames: a reader touches nothing
            assert notes == [] and staging.name in _beside(path)
        return
    assert _hash(path) == "new" and _beside(path) == [] and resumable is None
    if step == "old removed":
        assert notes == []  # only the journal was left: nothing a user needs to hear
    else:
        assert len(notes) == 1 and notes[0].startswith(f"finished the interrupted --overwrite of {str(path)!r}"), notes
        assert ("removed the store it replaced" in notes[0]) and (
            ("renamed the new store into place" in notes[0]) == (step in ("journal written", "old moved aside")))


def test_a_journal_whose_new_store_is_gone_rolls_back_to_the_old_store(tmp_path):
    """Journal written, old store moved aside, and the new store lost (deleted by hand): the old store goes back."""
    path, staging, old = _swap_state(tmp_path, "old moved aside")
    shutil.rmtree(staging)
    notes, resumable = _recover(path)
    assert _hash(path) == "old" and _beside(path) == [] and resumable is None
    assert len(notes) == 1 and notes[0].startswith(f"rolled back the interrupted --overwrite of {str(path)!r}")


def test_a_journal_over_a_store_with_a_damaged_root_finishes_the_swap(tmp_path):
    """The --overwrite of a store whose root zarr.json is damaged (a store by its arrays): its swap moves that
    folder aside like a store and removes it."""
    path, staging, old = _swap_state(tmp_path, "journal written")
    (path / "zarr.json").write_bytes(b"{trunc")
    assert damaged_root(path) is not None
    notes, _ = _recover(path)
    assert _hash(path) == "new" and _beside(path) == [] and "moved the old store aside" in notes[0]


@pytest.mark.parametrize("text", ['{"new": "', "[1, 2]", '{"new": "../elsewhere", "old": "x"}', '{"old": "x"}'])
def test_an_unreadable_or_escaping_journal_is_ignored_and_removed_and_nothing_moves(tmp_path, text):
    """A journal that does not parse, is not an object, or names a folder that is not a sibling of the store is
    reported and removed; no folder is renamed or deleted on its word."""
    path = _store(tmp_path / "s.zarr", "old")
    (tmp_path / "elsewhere").mkdir()
    journal_path(path).write_text(text)
    notes, resumable = _recover(path)
    assert notes == [f"ignored the unreadable swap journal {str(journal_path(path))!r}"] and resumable is None
    assert not journal_path(path).exists() and _hash(path) == "old" and (tmp_path / "elsewhere").is_dir()


# ---------------------------------------------------------------------------- no journal: leftovers beside the store
def test_an_old_store_aside_without_a_journal_is_restored_or_kept_never_deleted(tmp_path):
    """ridgexr <= 0.3 swapped without a journal: a kill between its two renames left the old store aside and the
    path empty.  It is renamed back; when the path holds a store too, it is kept and reported."""
    path = _store(tmp_path / "s.zarr", "old")
    aside = tmp_path / ".s.zarr.creating-4242-old-0123abcd"
    path.rename(aside)
    assert interrupted(path)
    notes, _ = _recover(path)
    assert _hash(path) == "old" and not aside.exists() and "restored the old store" in notes[0] and len(notes) == 1
    shutil.copytree(path, aside)
    assert not interrupted(path)  # the path holds a store: nothing for a reader to finish
    for _ in range(2):  # kept every time, never deleted
        notes, _ = _recover(path)
        assert aside.is_dir() and len(notes) == 1 and notes[0].startswith(f"kept {str(aside)!r}")


def test_a_half_written_template_is_removed_and_a_whole_staging_store_resumes_only_for_its_hash(tmp_path):
    """A template killed while being written (untagged name) holds no results: removed, with a line saying so.  A
    whole staging store is returned for its own config_hash, kept for verify and readers (keep_staging), and
    removed for another configuration or a run without --overwrite."""
    path = _store(tmp_path / "s.zarr", "old")
    half = _sibling(path)
    write_template(half, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    shutil.rmtree(half / "cell_complete")  # killed before zarr wrote cell_complete/zarr.json
    notes, resumable = _recover(path, resume_hash="new")
    assert resumable is None and not half.exists()
    assert len(notes) == 1 and "half-written template" in notes[0] and "--overwrite" not in notes[0], notes
    whole = create_staging(path, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    assert "-staging-" in whole.name and is_store(whole)
    assert _recover(path, resume_hash="new") == ([], whole)  # the whole one resumes
    notes, resumable = _recover(path, keep_staging=True)
    assert resumable is None and whole.is_dir() and notes[0].startswith(f"kept {str(whole)!r}")
    notes, resumable = _recover(path, resume_hash="other")  # another configuration's is removed
    assert resumable is None and not whole.exists() and "of another configuration" in notes[0]
    whole = create_staging(path, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    notes, _ = _recover(path)  # a run without --overwrite
    assert not whole.exists() and "unfinished new store" in notes[0] and "another configuration" not in notes[0]
    assert _hash(path) == "old" and _beside(path) == []


def test_finish_interrupted_waits_for_a_writer_only_when_the_path_holds_no_store(tmp_path):
    """Readers finish an interrupted swap under the lock; while a writer holds it they read the store in place, or,
    with no store in place, say that it is locked."""
    from ridgexr.store import StoreLockedError

    path, _, _ = _swap_state(tmp_path, "journal written")
    with StoreLock(path):  # the writer swapping it now; the old store is still in place
        assert finish_interrupted(path) == []
    path.rename(tmp_path / "moved.zarr")  # now nothing in place
    with StoreLock(path), pytest.raises(StoreLockedError):
        finish_interrupted(path)


# ---------------------------------------------------------------------------- the swap
def test_commit_staging_swaps_the_new_store_in_and_leaves_nothing(tmp_path):
    path = _store(tmp_path / "s.zarr", "old")
    staging = create_staging(path, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    assert _hash(path) == "old"  # staging touches nothing at the path
    commit_staging(path, staging)
    assert _hash(path) == "new" and _beside(path) == [] and not staging.exists()


# ---------------------------------------------------------------------------- what run does with its store path
def _open(path, *, overwrite=False, resume_hash="new"):
    with StoreLock(path), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opening = open_for_run(path, overwrite=overwrite, resume_hash=resume_hash)
    said = [str(w.message) for w in caught if issubclass(w.category, StoreWarning)]
    assert list(opening.notes) == said  # every note is warned, once
    return opening


def test_a_missing_or_empty_path_is_created(tmp_path):
    path = tmp_path / "s.zarr"
    assert _open(path) == Opening("create")
    path.mkdir()
    assert _open(path, overwrite=True) == Opening("create") and not path.exists()  # the empty folder is removed


def test_a_store_is_resumed_or_replaced(tmp_path):
    path = _store(tmp_path / "s.zarr", "old")
    assert _open(path) == Opening("resume")
    assert _open(path, overwrite=True) == Opening("replace")
    assert _hash(path) == "old" and _beside(path) == []


def test_an_interrupted_overwrite_of_the_same_configuration_resumes_its_new_store(tmp_path):
    """With the store in place, the new store is resumed beside it; with the path empty (the old store gone), the
    new store becomes the store and is resumed as one."""
    path = _store(tmp_path / "s.zarr", "old")
    staging = create_staging(path, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    assert _open(path, overwrite=True) == Opening("resume_replace", staging=staging)
    assert _open(path, overwrite=True, resume_hash="other").action == "replace" and not staging.exists()
    staging = create_staging(path, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    shutil.rmtree(path)
    assert _open(path, overwrite=True) == Opening("resume")
    assert _hash(path) == "new" and _beside(path) == []


def test_the_chunks_of_a_deleted_store_are_removed_with_a_line_and_a_new_store_created(tmp_path):
    path = tmp_path / "s.zarr"
    for var, key in [("trajectory", "0/0/0/0/0"), ("cell_complete", "0/1")]:
        (path / var / "c" / key).parent.mkdir(parents=True, exist_ok=True)
        (path / var / "c" / key).write_bytes(b"\x00" * 8)
    opening = _open(path)
    assert opening.action == "create" and not path.exists()
    assert len(opening.notes) == 1 and "2 chunk file(s) of cell_complete, trajectory" in opening.notes[0]


@pytest.mark.parametrize("extra", ["notes.txt", "trajectory/c/0/x"])
def test_a_folder_of_something_else_is_refused_and_kept(tmp_path, extra):
    path = tmp_path / "s.zarr"
    (path / extra).parent.mkdir(parents=True)
    (path / extra).write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(ConfigMismatchError, match="is not a ridgexr store"):
            _open(path, overwrite=overwrite)
    assert (path / extra).read_text() == "mine"


def test_a_store_with_a_damaged_root_is_refused_but_replaced_by_overwrite(tmp_path):
    path = _store(tmp_path / "s.zarr", "old")
    (path / "zarr.json").write_bytes(b"{trunc")
    with pytest.raises(StoreDamagedError, match=rf"root metadata file '{path / 'zarr.json'}' is damaged.*--overwrite"):
        _open(path)
    opening = _open(path, overwrite=True)
    assert opening.action == "replace" and opening.notes[0].endswith("--overwrite replaces it")
    staging = create_staging(path, _layout(), np.zeros((2, 2)), {"config_hash": "new"})
    commit_staging(path, staging)  # the damaged folder is swapped out like a store
    assert _hash(path) == "new" and _beside(path) == []


def test_opening_names_a_bad_action_or_staging():
    with pytest.raises(ValueError, match="`action` must be one of"):
        Opening("open")
    with pytest.raises(ValueError, match="`staging` is given exactly for action 'resume_replace'"):
        Opening("resume_replace")


# ---------------------------------------------------------------------------- verify and repair, one call
def _reference(path, folder):
    ref = folder / "reference.zarr"
    write_template(ref, _layout(), np.zeros((2, 2)), {"config_hash": _hash(path)})
    return ref


def test_verify_and_repair_finds_damage_rewrites_metadata_and_unmarks_damaged_cells(tmp_path):
    """One call: a clean store is ok (every chunk read); a value-changing attribute is schema damage, rewritten
    by the repair from the reference; a damaged chunk of a complete cell unmarks exactly that cell."""
    path = _store(tmp_path / "s.zarr", "old")
    for cell in [(0, 0), (0, 1)]:  # every block (steps [0, 2) and [2, 3)), then the cell's end
        for start, B in [(0, 2), (2, 1)]:
            block = empty_step_values(B, 2, 2, optional=True)
            block["trajectory"] = np.full((B, 2, 2), float(sum(cell) + start))
            write_block(path, _layout(), cell, start, block)
        write_cell_end(path, _layout(), cell, np.zeros(2, dtype=bool), {})
    consolidate(path)
    clean = verify_and_repair(path, _reference)
    assert clean.schema == [] and clean.damage == [] and clean.n_read > 0
    meta = json.loads((path / "loss" / "zarr.json").read_text())
    before = (path / "loss" / "zarr.json").read_bytes()
    meta["attributes"]["scale_factor"] = 2.0
    (path / "loss" / "zarr.json").write_text(json.dumps(meta))
    found = verify_and_repair(path, _reference)
    assert [d.variable for d in found.schema] == ["loss"] and found.n_read == 0 and found.rewritten == []
    fixed = verify_and_repair(path, _reference, repair=True)
    assert fixed.rewritten == ["loss"] and (path / "loss" / "zarr.json").read_bytes() == before
    (path / "diverged" / "c" / "0" / "1" / "0").write_bytes(b"garbage")
    bad = verify_and_repair(path, _reference, repair=True)
    assert bad.cells == [{"schedule": "1", "width": 8}] and [d.variable for d in bad.damage] == ["diverged"]
    assert open_store(path)["cell_complete"].values.tolist() == [[True, False]]
    assert json.loads(open_store(path).attrs["verified"])["repaired"] is True


def test_verify_and_repair_finishes_an_interrupted_swap_first_and_says_so(tmp_path):
    path, _, _ = _swap_state(tmp_path, "old moved aside")
    with pytest.warns(StoreWarning, match="finished the interrupted --overwrite"):
        report = verify_and_repair(path, _reference)
    assert _hash(path) == "new" and _beside(path) == [] and len(report.notes) == 1 and report.schema == []
