"""The store's lifecycle on disk: create (atomically), stage and commit an ``--overwrite`` (a journalled swap),
recover what a killed command left, and the decision a run takes for its store path (:func:`open_for_run`).

The store is created once from a lazy (dask) template with ``compute=False``, so only metadata is written, in a
hidden sibling folder (``.NAME.creating-PID-xxxxxxxx``) that is renamed into place when complete: a store path
either holds a whole store or nothing (a crash during creation leaves only the sibling, which the next run
removes).  An ``--overwrite`` builds the whole new store beside the old one (``.NAME.creating-PID-staging-...``),
then swaps it in under a journal (``NAME.ridgexr-swap``) from which :func:`recover_store` finishes or rolls back a
swap killed at any instant; the old store is moved aside as ``.NAME.creating-PID-old-...`` meanwhile.  These names
are spelled here only.  ``cell_complete`` is written last by each cell (:mod:`ridgexr.store.write`): a cell killed
half-way stays incomplete and is recomputed on resume.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
import warnings
from dataclasses import dataclass
from glob import escape as glob_escape
from pathlib import Path

import numpy as np

from ..catalog.folders import is_store, root_metadata
from .layout import StoreLayout, write_template
from .opening import StoreDamagedError, StoreWarning, array_meta
from .lock import StoreLock, StoreLockedError
from .record import RECORD, new_generation, write_record

__all__ = ["chunk_leftover", "SWAP_NAME", "journal_path", "recover_store", "IDENTIFYING_ARRAYS", "damaged_root",
           "interrupted", "finish_interrupted", "remove_partial_creations", "create_store", "create_staging",
           "commit_staging", "replace_store", "staging_stores", "ConfigMismatchError", "refuse_not_a_store",
           "OPENING_ACTIONS", "Opening", "open_for_run", "abandon_staging", "commit_run", "PARTIAL",
           "remove_partial_files", "foreign_entries"]


class ConfigMismatchError(RuntimeError):
    """The store on disk was written by a different configuration (the message names the fields), or its path
    holds something that is not a ridgexr store."""


def chunk_leftover(path: str | Path) -> list[str] | None:
    """The variables of ``path`` when it is only the chunk files of a store deleted while a run wrote
    to it, else None.

    Such a folder has no ``zarr.json`` anywhere (the metadata went with the store) and nothing but
    files at ``VARIABLE/c/I/J/...`` with integer chunk coordinates and empty folders: a
    run's chunk writes recreate exactly that.  A store, even a damaged one, keeps some metadata;
    any other file makes the folder someone else's.
    """
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return None
    names = set()
    for p in path.rglob("*"):
        rel = p.relative_to(path).parts
        if p.is_symlink() or (not p.is_dir() and not p.is_file()):
            return None
        if p.is_dir():
            if len(rel) >= 2 and (rel[1] != "c" or not all(k.isdigit() for k in rel[2:])):
                return None
            continue
        if len(rel) < 3 or rel[1] != "c" or not all(k.isdigit() for k in rel[2:]) or not rel[0].isidentifier():
            return None
        names.add(rel[0])
    return sorted(names)


#: the name zarr gives a chunk (or metadata) file while writing it: ``NAME.<32 hex digits>.partial``, renamed over
#: ``NAME`` when whole; a command killed mid-write leaves it
PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")


def remove_partial_files(path: str | Path) -> list[Path]:
    """Remove the unfinished writes (:data:`PARTIAL`) that a killed command left inside the store ``path``;
    returns them.  Call with the store's :class:`StoreLock` held (no writer is running)."""
    out = []
    for root, _, files in os.walk(path):
        for name in files:
            if PARTIAL.search(name):
                p = Path(root) / name
                p.unlink(missing_ok=True)
                out.append(p)
    return out


def foreign_entries(path: str | Path, limit: int = 5) -> list[str]:
    """What the folder of the store ``path`` holds that a ridgexr store does not write (at most ``limit`` paths):
    anything but its root ``zarr.json``, array folders (a ``zarr.json`` and chunk files under ``c/`` named by
    integers), the record kept at creation (the same, in its group) and unfinished writes (:data:`PARTIAL`).  A
    nested store, a data folder or a user's file inside a store is foreign: ``--overwrite`` refuses to delete it.
    """
    path = Path(path)
    out: list[str] = []

    def foreign(p: Path) -> bool:
        out.append(str(p))
        return len(out) >= limit

    def array(folder: Path) -> bool:  # an array's folder: zarr.json, c (a file: 0-d) or c/<ints>/.../<int>
        for p in sorted(folder.iterdir()):
            if p.is_symlink() or (p.name not in ("zarr.json", "c") and not PARTIAL.search(p.name)):
                if foreign(p):
                    return True
            elif p.name == "c" and p.is_dir():
                for root, dirs, files in os.walk(p):
                    for name in dirs + files:
                        q = Path(root) / name
                        if q.is_symlink() or not (name.isdigit() or (name in files and PARTIAL.search(name))):
                            if foreign(q):
                                return True
                    dirs[:] = [d for d in dirs if d.isdigit() and not (Path(root) / d).is_symlink()]
        return False

    def group(folder: Path, record: bool) -> bool:
        for p in sorted(folder.iterdir()):
            if not p.is_symlink() and p.is_file() and (p.name == "zarr.json" or PARTIAL.search(p.name)):
                continue
            if p.is_symlink() or not p.is_dir():
                if foreign(p):
                    return True
            elif p.name == RECORD and not record:
                if group(p, True):
                    return True
            elif array(p):  # an array's folder, its metadata damaged or not
                return True
        return False

    if path.is_dir() and not path.is_symlink():
        group(path, False)
    return out


def _creation_prefix(path: Path) -> str:
    return f".{path.name}.creating-"


def _sibling(path: Path, tag: str = "") -> Path:
    """A fresh hidden folder name beside ``path`` that :func:`remove_partial_creations` recognises."""
    return path.parent / f"{_creation_prefix(path)}{os.getpid()}-{tag}{uuid.uuid4().hex[:8]}"


_OLD_TAG = "old-"
#: tag of a staging store that is whole (every array's metadata and the arrays written at creation): the template is
#: written under an untagged name and renamed to a tagged one, so a staging store killed half-created is never resumed
_STAGING_TAG = "staging-"
SWAP_NAME = ".ridgexr-swap"



def journal_path(path: Path) -> Path:
    """The journal of an ``--overwrite`` swap, beside the store (``STORE.ridgexr-swap``)."""
    return Path(str(path).rstrip("/") + SWAP_NAME)


def _leftovers(path: Path) -> list[Path]:
    if not path.parent.is_dir():
        return []
    return sorted(path.parent.glob(glob_escape(_creation_prefix(path)) + "*"))


def _tag(p: Path, path: Path) -> str:
    """The tag of the hidden sibling ``p`` (``.NAME.creating-PID-TAGxxxxxxxx``): "old" (a store moved aside by an
    ``--overwrite`` swap), "staging" (the whole new store of an ``--overwrite``) or "" (a template being written)."""
    rest = p.name[len(_creation_prefix(path)):].split("-", 1)[-1]
    return next((tag[:-1] for tag in (_OLD_TAG, _STAGING_TAG) if rest.startswith(tag)), "")


def _is_old(p: Path, path: Path) -> bool:
    """Whether the hidden sibling ``p`` is a store moved aside by an ``--overwrite`` swap."""
    return _tag(p, path) == "old"


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_store(path: str | Path, *, resume_hash: str | None = None,
                  keep_staging: bool = False) -> tuple[list[str], Path | None]:
    """Finish or roll back an interrupted ``--overwrite`` and clear the leftovers of killed creations.

    Call only while holding the store's :class:`StoreLock`.  With a swap journal
    (``STORE.ridgexr-swap``, written once the new store is complete): the swap is finished (the
    new store renamed into place, then the store it replaced removed); when the new store is
    gone and ``path`` holds no store, the old one is put back.  Without a journal, a store moved
    aside by an ``--overwrite`` (``.NAME.creating-PID-old-...``) is renamed back to ``path`` when
    ``path`` holds no store, and otherwise kept and reported, never deleted.  Templates killed while
    being written (``.NAME.creating-PID-xxxxxxxx``) are removed.  The whole new store of an interrupted
    ``--overwrite`` (``.NAME.creating-PID-staging-...``, renamed to that name once every array exists) is
    returned when its ``config_hash`` equals ``resume_hash`` (the overwrite resumes), kept with
    ``keep_staging`` (``verify``, readers), and removed otherwise.

    Parameters
    ----------
    path : path
        The store.
    resume_hash : str, optional
        The ``config_hash`` of the ``--overwrite`` being run.
    keep_staging : bool
        Keep the new store of an interrupted ``--overwrite`` (reported) instead of removing it.

    Returns
    -------
    notes : list of str
        One sentence per action that a user should hear of (each also warned as :class:`StoreWarning`
        by the caller, if it wishes).
    resumable : path or None
        The new store of an interrupted ``--overwrite`` with this ``resume_hash``.
    """
    path = Path(path)
    notes: list[str] = []
    journal = journal_path(path)
    if journal.exists() or journal.is_symlink():
        try:
            plan = json.loads(journal.read_text())
            new, old = path.parent / plan["new"], path.parent / plan["old"]
            if Path(plan["new"]).name != plan["new"] or Path(plan["old"]).name != plan["old"]:
                raise ValueError("not a sibling")
        except (OSError, ValueError, KeyError, TypeError):
            notes.append(f"ignored the unreadable swap journal {str(journal)!r}")
        else:
            done = []
            if is_store(new):  # the new store is complete: finish the swap
                if (is_store(path) or damaged_root(path)) and not old.exists():
                    os.rename(path, old)
                    done.append("moved the old store aside")
                if not path.exists():
                    os.rename(new, path)
                    _fsync_dir(path.parent)
                    done.append("renamed the new store into place")
            if old.exists():
                if is_store(path):  # the swap is done: ``old`` is the store it replaced
                    shutil.rmtree(old)
                    done.append(f"removed the store it replaced ({str(old)!r})")
                elif not path.exists():
                    os.rename(old, path)
                    _fsync_dir(path.parent)
                    notes.append(f"rolled back the interrupted --overwrite of {str(path)!r}: its new store was gone, "
                                 f"the old store is back in place (from {str(old)!r})")
            if done:
                notes.append(f"finished the interrupted --overwrite of {str(path)!r}: " + ", ".join(done)
                             + "; the new store is in place")
        journal.unlink()
    for tmp in path.parent.glob(glob_escape(journal.name) + ".*"):  # a journal killed while being written
        tmp.unlink()
    resumable = None
    for p in _leftovers(path):
        tag = _tag(p, path)
        if tag == "old":  # an old store moved aside, with no journal to say what happened
            if not path.exists() and is_store(p):
                os.rename(p, path)
                _fsync_dir(path.parent)
                notes.append(f"restored the old store of {str(path)!r} from {str(p)!r} "
                             "(an --overwrite was interrupted between its two renames)")
            else:
                notes.append(f"kept {str(p)!r}: the old store of an interrupted --overwrite ({str(path)!r} holds "
                             "a store too); compare them and delete the one you do not need yourself")
        elif tag == "staging" and resume_hash is not None and resumable is None and is_store(p) \
                and root_metadata(p).get("attributes", {}).get("config_hash") == resume_hash:
            resumable = p
        elif tag == "staging" and keep_staging:
            notes.append(f"kept {str(p)!r}, the new store of an interrupted --overwrite of {str(path)!r}: the same "
                         "'ridgexr run --overwrite' resumes it (a run without --overwrite removes it)")
        elif tag == "staging":
            shutil.rmtree(p, ignore_errors=True)
            notes.append(f"removed {str(p)!r}, the unfinished new store of an interrupted --overwrite"
                         + (" of another configuration" if resume_hash is not None else "")
                         + f"; {str(path)!r} is unchanged")
        else:
            shutil.rmtree(p, ignore_errors=True)
            notes.append(f"removed {str(p)!r}, the half-written template of a store creation that was killed "
                         "(it held no results)")
    return notes, resumable


#: arrays that identify a folder as a ridgexr store when its root metadata are damaged
IDENTIFYING_ARRAYS = ("cell_complete", "trajectory")


def damaged_root(path: str | Path) -> str | None:
    """Why ``path`` is a ridgexr store whose root ``zarr.json`` is damaged, or None.

    A folder is such a store when it is not a store (:func:`is_store`) but holds the arrays of one
    (:data:`IDENTIFYING_ARRAYS`, each with array metadata that parse); the reason names the root file.
    """
    path = Path(path)
    if path.is_symlink() or not path.is_dir() or is_store(path):
        return None
    if any(array_meta(path / name)[0] is None for name in IDENTIFYING_ARRAYS):
        return None
    meta = path / "zarr.json"
    try:
        root = json.loads(meta.read_bytes())
    except FileNotFoundError:
        return f"its root metadata file {str(meta)!r} is missing"
    except (OSError, ValueError) as exc:
        return f"its root metadata file {str(meta)!r} is damaged ({type(exc).__name__}: {exc})"
    if not isinstance(root, dict) or not isinstance(root.get("attributes"), dict):
        return f"its root metadata file {str(meta)!r} is not a JSON object with attributes"
    return f"its root metadata file {str(meta)!r} lacks the attribute schema_version"


def interrupted(path: str | Path) -> bool:
    """Whether an interrupted ``--overwrite`` left a swap journal beside ``path``, or an old store beside it while
    ``path`` holds none (:func:`finish_interrupted` finishes it)."""
    path = Path(path)
    if journal_path(path).exists() or journal_path(path).is_symlink():  # committed: the new store is complete
        return True
    return not is_store(path) and any(_is_old(p, path) for p in _leftovers(path))


def finish_interrupted(path: str | Path) -> list[str]:
    """For readers (``open_dataset``, ``info``, ``verify``): when ``path`` holds no store but an interrupted
    ``--overwrite`` left a swap journal or an old store aside, take the lock and finish or roll it back
    (:func:`recover_store`, keeping a resumable new store).  Returns the notes (one line per action); [] when
    there was nothing to do.

    Raises :class:`StoreLockedError` when a writer holds the store (it is swapping it now) and ``path`` holds no
    store; while ``path`` holds one, a reader reads it and leaves the swap to its writer.
    """
    path = Path(path)
    if not interrupted(path):
        return []
    try:
        lock = StoreLock(path).acquire()
    except StoreLockedError:
        if is_store(path):
            return []
        raise
    try:
        return recover_store(path, keep_staging=True)[0]
    finally:
        lock.release()


def remove_partial_creations(path: str | Path) -> list[Path]:
    """Remove folders left beside ``path`` by creations that were killed; returns them.

    Call only while holding the store's :class:`StoreLock` (no creation is then running).
    Stores moved aside by an interrupted ``--overwrite`` are not removed (see :func:`recover_store`).
    """
    path = Path(path)
    left = [p for p in _leftovers(path) if not _is_old(p, path)]
    for p in left:
        shutil.rmtree(p, ignore_errors=True)
    return left


def _write_new(target: Path, layout: StoreLayout, train: np.ndarray, attrs: dict, extra: dict | None) -> None:
    """A new store's template at ``target`` with a fresh ``generation`` id (a root attribute) and the record of
    its creation (:func:`ridgexr.store.record.write_record`)."""
    generation = new_generation()
    write_template(target, layout, train, {**attrs, "generation": generation}, extra)
    write_record(target, generation)


def create_store(path: str | Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                 extra: dict | None = None) -> None:
    """Create the store's metadata and coordinates (no data chunks) from a lazy template, atomically.

    ``extra`` maps further variable names to ``(dims, array)`` written eagerly beside
    ``train_data`` (:func:`ridgexr.datasets.dataset_extras`).  The store gets a fresh ``generation`` id (a root
    attribute that readers pin) and the record of its creation (:mod:`ridgexr.store.record`): a checksummed copy
    of what it holds at creation, from which ``ridgexr verify --repair`` restores.

    The template is written into a hidden sibling folder and renamed to ``path`` when whole,
    so ``path`` never holds half a store.  ``path`` must not exist (see :func:`replace_store`).
    """
    path = Path(path)
    tmp = _sibling(path)
    try:
        _write_new(tmp, layout, train, attrs, extra)
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def create_staging(path: str | Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                   extra: dict | None = None) -> Path:
    """Create the new store of an ``--overwrite`` in a hidden folder beside ``path``; returns that folder.

    Run the cells into it, then :func:`commit_staging` swaps it in; the store at ``path`` is not
    touched before.  A killed run leaves it beside ``path``, where :func:`recover_store` finds it
    (to resume it, or to remove it).
    """
    path = Path(path)
    tmp, staging = _sibling(path), _sibling(path, _STAGING_TAG)
    try:
        _write_new(tmp, layout, train, attrs, extra)
        os.rename(tmp, staging)  # whole: from now on a rerun of the same command resumes it
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return staging


def commit_staging(path: str | Path, staging: str | Path) -> None:
    """Swap the complete store ``staging`` in for the store at ``path`` (``--overwrite``), as a journalled
    transaction.

    A journal naming both folders is written (and synced) first; then ``path`` is renamed aside,
    ``staging`` renamed to ``path``, the old store removed and the journal last.  A kill at any
    instant leaves a journal from which :func:`recover_store` finishes the swap, so a complete
    store is never lost: before the journal, ``path`` still holds the old store.
    """
    path, staging = Path(path), Path(staging)
    old = _sibling(path, _OLD_TAG)
    journal = journal_path(path)
    tmp = journal.with_name(journal.name + f".{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, json.dumps({"new": staging.name, "old": old.name}).encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, journal)
    _fsync_dir(path.parent)
    os.rename(path, old)
    os.rename(staging, path)
    _fsync_dir(path.parent)
    shutil.rmtree(old)
    os.unlink(journal)


def replace_store(path: str | Path, layout: StoreLayout, train: np.ndarray, attrs: dict,
                  extra: dict | None = None) -> None:
    """Replace the store at ``path`` by a new, empty one (its template), as one journalled swap.

    ``ridgexr run --overwrite`` does not use this: it runs every cell into the staging store first
    (:func:`create_staging`, :func:`commit_staging`), so the old store stays until the new one is
    complete.
    """
    commit_staging(path, create_staging(path, layout, train, attrs, extra))



def staging_stores(path: str | Path) -> list[Path]:
    """The whole new stores of interrupted ``--overwrite`` runs beside ``path`` (``.NAME.creating-PID-staging-...``,
    each a store or what a kill left of it), sorted by name."""
    path = Path(path)
    return [p for p in _leftovers(path) if _tag(p, path) == "staging"]


def refuse_not_a_store(path: str | Path, *, pending: bool, overwrite: bool = False) -> None:
    """Raise :class:`ConfigMismatchError` when ``path`` holds something that is not a ridgexr store (and
    neither an empty folder nor the chunks of a deleted store, which a run replaces).  Before the lock
    (``pending=False``) only when no interrupted ``--overwrite`` or creation beside it could change that.
    A store whose root metadata are damaged (:func:`damaged_root`) is refused with
    :class:`StoreDamagedError` naming the file, unless ``overwrite`` (which replaces it)."""
    path = Path(path)
    if is_store(path) or not (path.exists() or path.is_symlink()):
        return
    if not pending and (journal_path(path).exists() or _leftovers(path)):
        return  # the recovery under the lock decides
    why = damaged_root(path)
    if why is not None:
        if overwrite:
            return
        raise StoreDamagedError(f"store {str(path)!r} is damaged: {why}; the configuration it recorded is lost with "
                                "it: rerun with --overwrite, which replaces it")
    if path.is_dir() and not path.is_symlink() and (not any(path.iterdir()) or chunk_leftover(path) is not None):
        return
    raise ConfigMismatchError(f"{str(path)!r} exists and is not a ridgexr store; remove it yourself "
                              "or choose another store path (--overwrite only replaces ridgexr stores)")


#: what a run does with its store path (:attr:`Opening.action`): ``create`` a new store there; ``resume`` the
#: store there (its configuration is the caller's to check); ``replace`` it (``--overwrite``: a new store is built
#: beside it and swapped in); ``resume_replace``: resume the new store of an interrupted ``--overwrite`` of the
#: same configuration (:attr:`Opening.staging`), then swap it in
OPENING_ACTIONS = ("create", "resume", "replace", "resume_replace")


@dataclass(frozen=True)
class Opening:
    """The decision :func:`open_for_run` takes: :attr:`action` (one of :data:`OPENING_ACTIONS`), the staging
    store to resume (``resume_replace`` only) and the notes it warned (one line each)."""

    action: str
    staging: Path | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        if self.action not in OPENING_ACTIONS:
            raise ValueError(f"`action` must be one of {OPENING_ACTIONS}; got {self.action!r}")
        if (self.staging is not None) != (self.action == "resume_replace"):
            raise ValueError(f"`staging` is given exactly for action 'resume_replace'; got action {self.action!r} "
                             f"with staging {self.staging!r}")


def open_for_run(path: str | Path, *, overwrite: bool, resume_hash: str | None = None) -> Opening:
    """Decide what a run does with the store path ``path``, after recovering what killed commands left.

    Call with the store's :class:`StoreLock` held.  In order: :func:`recover_store` (finishing or rolling back an
    interrupted ``--overwrite``; with ``overwrite``, a whole new store of ``resume_hash`` beside ``path`` is kept
    to resume); with ``overwrite``, a store whose root metadata are damaged counts as a store (it is replaced);
    an empty folder at ``path`` is removed, and so is a folder of nothing but chunk files (what a store deleted
    while a run wrote to it leaves, :func:`chunk_leftover`); anything else that is not a store is refused
    (:func:`refuse_not_a_store`).  When ``path`` holds no store but a resumable new store is beside it, that
    store is renamed into place and resumed.  Each action a user should hear of is warned as a
    :class:`StoreWarning` (attributed to the caller's caller) and listed in :attr:`Opening.notes`.

    Parameters
    ----------
    path : path
        The store path.
    overwrite : bool
        The run replaces the store (``--overwrite``).
    resume_hash : str, optional
        The ``config_hash`` of the run: with ``overwrite``, the new store of an interrupted ``--overwrite`` with
        this hash is resumed.

    Returns
    -------
    Opening

    Raises
    ------
    ConfigMismatchError
        When ``path`` holds something that is not a ridgexr store.
    StoreDamagedError
        When ``path`` holds a store whose root metadata are damaged and not ``overwrite``.
    """
    path = Path(path)
    said: list[str] = []

    def note(msg: str) -> None:
        said.append(msg)
        warnings.warn(msg, StoreWarning, stacklevel=4)

    notes, staging = recover_store(path, resume_hash=resume_hash if overwrite else None)
    for msg in notes:
        note(msg)
    exists = is_store(path)
    if not exists and overwrite and damaged_root(path) is not None:  # a store by its arrays: replaced as one
        note(f"store {str(path)!r}: {damaged_root(path)}; --overwrite replaces it")
        exists = True
    if not exists and path.exists():
        leftover = chunk_leftover(path)
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        elif leftover is not None:  # no metadata at all: it cannot be (or become) a store
            n_files = sum(1 for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path)
            note(f"removed {str(path)!r}: {n_files} chunk file(s) of {', '.join(leftover) or 'no variable'} "
                 "and no metadata, the leftover of a store deleted while a run wrote to it; starting a new store")
        else:
            refuse_not_a_store(path, pending=True, overwrite=overwrite)
    if not exists and staging is not None:  # nothing left to replace: the resumed new store becomes the store
        os.rename(staging, path)
        return Opening("resume", notes=tuple(said))
    if not exists:
        return Opening("create", notes=tuple(said))
    if not overwrite:
        return Opening("resume", notes=tuple(said))
    if staging is not None:
        return Opening("resume_replace", staging=staging, notes=tuple(said))
    return Opening("replace", notes=tuple(said))


def abandon_staging(exc: BaseException, path: str | Path, staging: str | Path) -> None:
    """An ``--overwrite`` failed before its swap: the old store is untouched.  Say so on the exception; remove
    the partial new store, unless the run was interrupted (then the same command resumes it)."""
    if isinstance(exc, KeyboardInterrupt):
        exc.add_note(f"--overwrite: the old store {str(path)!r} is unchanged; the new one, "
                     f"{str(staging)!r}, resumes with the same command")
        return
    shutil.rmtree(staging, ignore_errors=True)
    exc.add_note(f"--overwrite did not complete: the old store {str(path)!r} is unchanged "
                 "(the new one was built beside it and removed)")


def commit_run(path: str | Path, staging: str | Path) -> None:
    """:func:`commit_staging`, with a note on an ``OSError`` (e.g. the disk full when the journal is written)
    saying what is intact: the old store and the whole new one beside it (the swap did not start), or an
    interrupted swap that the same command (or ``ridgexr verify``) finishes."""
    path, staging = Path(path), Path(staging)
    try:
        commit_staging(path, staging)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(journal_path(path))
        if not journal_path(path).exists() and is_store(path) and is_store(staging):
            exc.add_note(f"the --overwrite swap did not start: the old store {str(path)!r} is unchanged and "
                         f"the new one is complete beside it ({str(staging)!r}); free some space and rerun "
                         "the same command to swap it in")
        else:
            exc.add_note(f"the --overwrite swap of {str(path)!r} was interrupted: rerun the same command "
                         "(or 'ridgexr verify') to finish it")
        raise
