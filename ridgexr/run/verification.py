"""Verifying a store against its configuration: the one module that owns it.

What a store's own configuration (its root attribute ``config``) says the store must be, and the checks built on
it: the template of that configuration (:func:`schema_reference`, cached per process), the configuration against
its hash and the record kept at creation (:func:`check_identity`, :func:`check_config_hash`), the check a resume
makes (:func:`check_store_schema`), a user's explicit resolution (:func:`resolve_config`,
:func:`repair_config_hash`), and ``ridgexr verify [--repair] [--resolve-config]`` as one call (:func:`verify`).
The store-level mechanisms (digests, reading every chunk, the schema check and repair, the lock) are
:mod:`ridgexr.store.integrity`'s; this module hands them the schema and the identity checks, which need the
planner's layout and the entry's dataset (the run floor).
"""

from __future__ import annotations

import collections
import hashlib
import json
import shutil
from functools import partial
from pathlib import Path

import numpy as np

from ..catalog import NOT_HASHED, Experiment
from ..catalog.folders import root_metadata as _root_metadata
from ..datasets import dataset_extras, load_training_set
from ..store.integrity import Damage, VerifyReport, check_schema, creation_array, verify_and_repair
from ..store.layout import write_template
from ..store.opening import StoreDamagedError
from ..store.update import set_root_attrs
from ..store.record import IDENTITY_ATTRS, read_record, record_files, write_record_reference
from .plan import plan_layout

__all__ = ["verify", "schema_reference", "check_store_schema", "check_identity", "check_config_hash",
           "repair_config_hash", "stored_config_hash", "resolve_config", "RESOLUTIONS"]


def verify(path: str | Path, *, repair: bool = False, resolution: str | None = None) -> VerifyReport:
    """``ridgexr verify``: check (and with ``repair`` or ``resolution``, repair) a store against the record of
    its creation or, without one, the template of its configuration, with the configuration checked against its
    hash and the record first (:func:`ridgexr.store.integrity.verify_and_repair` with :func:`schema_reference` and
    :func:`check_identity`).

    Parameters
    ----------
    path : path
        The store.
    repair : bool
        Rewrite damaged metadata, restore what was written at creation from intact copies, unmark damaged cells.
    resolution : {"creation", "current"}, optional
        A user's choice when the configuration disagrees with its hash or the record (:func:`resolve_config`);
        implies ``repair``.

    Returns
    -------
    VerifyReport

    Raises
    ------
    ValueError
        For a ``resolution`` not in :data:`RESOLUTIONS`.
    StoreLockedError, OSError
        As :func:`ridgexr.store.integrity.verify_and_repair`.
    """
    if resolution is not None and resolution not in RESOLUTIONS:
        raise ValueError(f"--resolve-config must be one of {', '.join(RESOLUTIONS)}; got {resolution!r}")
    resolve = None if resolution is None else partial(resolve_config, choice=resolution)
    return verify_and_repair(path, schema_reference, repair=repair or resolution is not None, identity=check_identity,
                             resolve=resolve)


def _stored_experiment(path: Path) -> tuple[dict, Experiment]:
    """(root attributes, the configuration they record) of a store; :class:`StoreDamagedError` when the root
    metadata hold no readable configuration."""
    try:
        attrs = json.loads((path / "zarr.json").read_bytes())["attributes"]
        return attrs, Experiment.model_validate_json(attrs["config"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreDamagedError(f"store {str(path)!r}: the root metadata {str(path / 'zarr.json')!r} do not hold "
                                f"a readable configuration ({type(exc).__name__}: {exc}); the schema cannot be "
                                "derived: rerun the entry with --overwrite") from None


def schema_reference(path: str | Path, folder: str | Path) -> Path:
    """Write, under ``folder``, the template that the store's own configuration (root attribute ``config``)
    defines: every array's metadata and the arrays written at creation (coordinates, ``train_data``,
    ``cell_applies``), no data chunks.  Returns its path (``folder/reference.zarr``).  The schema of a store
    without a record of its creation (:mod:`ridgexr.store.record`): the record is the schema of the others.

    The training set is the store's own (the record's copy, else ``train_data`` when every chunk of it is there
    and decodes: :func:`ridgexr.store.integrity.creation_array`), else the entry's dataset when its hash with the
    configuration is the store's ``config_hash`` (the data the store was made from, to the hash).  Otherwise the
    reference has ``train_data``'s metadata but none of its chunk files: nothing is ever restored from a guess.

    Raises
    ------
    StoreDamagedError
        When the root metadata (which holds the configuration) is damaged.
    """
    path = Path(path)
    attrs, exp = _stored_experiment(path)
    train, trusted = creation_array(path, "train_data"), True
    if train is None:
        train = load_training_set(exp.dataset, base_dir=exp.base_dir)
        trusted = _hash_of(exp, attrs, train) == attrs.get("config_hash")
    ref = Path(folder) / "reference.zarr"
    attrs = {k: v for k, v in attrs.items() if k != "schema_version"}
    key = _template_key(attrs["config"], train)
    cached = _TEMPLATES.get(key)
    if cached is None or not (cached / "zarr.json").is_file():
        cached = _template_cache_dir() / key
        shutil.rmtree(cached, ignore_errors=True)
        write_template(cached, plan_layout(exp, train), train, attrs, dataset_extras(exp.dataset))
        _TEMPLATES[key] = cached
        while len(_TEMPLATES) > _TEMPLATES_KEPT:
            shutil.rmtree(_TEMPLATES.pop(next(iter(_TEMPLATES))), ignore_errors=True)
    _TEMPLATES.move_to_end(key)
    shutil.copytree(cached, ref)
    if not trusted:  # training data that are not the store's: its metadata only, never its values
        shutil.rmtree(ref / "train_data" / "c", ignore_errors=True)
        for q in (ref / "train_data").glob("c*"):
            q.unlink()
    return ref


#: templates written by :func:`schema_reference` in this process, newest last: {key: folder}.  Its arrays are a
#: pure function of the configuration and ``train_data`` (the root attributes, which a run updates, are those of
#: the first store seen; :func:`ridgexr.store.integrity.check_schema` and ``repair_schema`` read arrays only), so
#: ``verify``, ``run``'s resume check and ``--repair`` in one process write it once (~1.5 s for 60 arrays) and copy it
#: after.
_TEMPLATES: collections.OrderedDict[str, Path] = collections.OrderedDict()
_TEMPLATES_KEPT = 8


def _template_key(config: str, train: np.ndarray) -> str:
    """sha256 of the configuration (the root attribute ``config``, JSON) and of ``train_data``'s dtype, shape and
    bytes."""
    h = hashlib.sha256(str(config).encode())
    train = np.ascontiguousarray(train)
    h.update(f"{train.dtype.str}{train.shape}".encode())
    h.update(train.tobytes())
    return h.hexdigest()


def _template_cache_dir() -> Path:
    """A folder for this process's templates, removed when the process exits (TemporaryDirectory's finalizer)."""
    global _TEMPLATE_DIR
    if _TEMPLATE_DIR is None:
        import tempfile

        _TEMPLATE_DIR = tempfile.TemporaryDirectory(prefix="ridgexr-templates-")
    return Path(_TEMPLATE_DIR.name)


_TEMPLATE_DIR = None


def check_store_schema(path: str | Path) -> list:
    """The damage that stops a run from resuming a store: its configuration against its hash and the record of
    its creation (:func:`check_identity`), then its metadata and the chunk files written at creation against
    that record (:func:`ridgexr.store.integrity.check_schema`) or, for a store without one, against the template of its
    configuration (:func:`schema_reference`)."""
    import tempfile

    path = Path(path)
    damage = check_identity(path)
    manifest, why = read_record(path)
    if why is not None:
        damage.append(Damage("record", {}, why, "record"))
    with tempfile.TemporaryDirectory(prefix="ridgexr-schema-") as tmp:
        if manifest is not None:
            ref, _ = write_record_reference(path, manifest, tmp)
            return damage + check_schema(path, ref, expected=record_files(manifest))
        if damage:  # the configuration is in doubt: no schema derived from it
            return damage
        return check_schema(path, schema_reference(path, tmp))


def _hash_of(exp: Experiment, attrs: dict, train: np.ndarray | None) -> str | None:
    """The ``config_hash`` of configuration ``exp`` (recorded with root attributes ``attrs``) and training set
    ``train``; None when it cannot be recomputed: no training set, or ``d_star: auto`` or an ``auto`` entry of
    ``ridge.d_star_alt`` (the store records the resolved values, the hash is of the entry as written)."""
    try:
        if train is None or json.loads(attrs.get("d_star_info") or "{}").get("auto_rule") is not None:
            return None
    except (TypeError, ValueError):
        return None
    return exp.config_hash(train)


def stored_config_hash(path: str | Path) -> str | None:
    """The ``config_hash`` of the configuration a store records (root attribute ``config``) and its training set
    (the record's copy of ``train_data``, else the store's own when every chunk is there and decodes); None when
    it cannot be recomputed: ``d_star: auto`` or an ``auto`` entry of ``ridge.d_star_alt`` (the store records the
    resolved values, the hash is of the entry as written), or a configuration or training set that does not
    read."""
    path = Path(path)
    try:
        attrs, exp = _stored_experiment(path)
    except StoreDamagedError:  # check_schema names it
        return None
    return _hash_of(exp, attrs, creation_array(path, "train_data"))


def _json_config(text) -> dict | None:
    try:
        out = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def _fields_diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    """``field: old -> new`` of the fields that enter the config hash (not :data:`ridgexr.catalog.NOT_HASHED`)."""
    out = []
    for key in sorted(set(old) | set(new)):
        if not prefix and key in NOT_HASHED:
            continue
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _fields_diff(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out


def check_identity(path: str | Path) -> list:
    """[:class:`ridgexr.store.integrity.Damage`] (kind ``identity``) when what identifies the store's contents
    disagrees: the configuration (root attribute ``config``) with its hash (``config_hash``, recomputed with the
    store's training set where it can be: :func:`stored_config_hash`), or either with the record kept at creation (the
    configuration on the fields that enter the hash, the hash, the seeds and d*).  The message gives both values
    and the user's two choices (``ridgexr verify --resolve-config creation|current``); nothing is rewritten from
    either until the user chooses.  [] when they agree (or cannot be compared)."""
    path = Path(path)
    attrs = _root_metadata(path).get("attributes", {})
    manifest, _ = read_record(path)
    have = attrs.get("config_hash")
    want = stored_config_hash(path)
    problems = []
    if want is not None and have != want:
        problems.append(f"the configuration (root attribute config) hashes to {want[:12]}, the root attribute "
                        f"config_hash is {str(have)[:12]}")
    if manifest is not None:
        rec = manifest.get("root", {})
        old, new = _json_config(rec.get("config")), _json_config(attrs.get("config"))
        diff = ["config (unreadable)"] if old is None or new is None else _fields_diff(old, new)
        if diff:
            problems.append("the configuration differs from the one recorded at creation in "
                            + "; ".join(d.replace(" -> ", " at creation, now ") for d in diff))
        if rec.get("config_hash") != have:
            problems.append(f"config_hash is {str(have)[:12]}, at creation {str(rec.get('config_hash'))[:12]}")
        for key in IDENTITY_ATTRS[2:]:
            if rec.get(key) != attrs.get(key):
                problems.append(f"the root attribute {key} is {attrs.get(key)!r}, at creation {rec.get(key)!r}")
    if not problems:
        return []
    store = str(path)
    choices = (f"'ridgexr verify --resolve-config creation {store}' restores the configuration recorded at "
               f"creation (with its hash: what the data were computed with), 'ridgexr verify --resolve-config "
               f"current {store}' keeps the current one and rehashes it (its schema then decides which cells are "
               "recomputed)") if manifest is not None else (
        f"'ridgexr verify --resolve-config current {store}' keeps the current configuration and rehashes it (its "
        "schema then decides which cells are recomputed); or rerun the entry with --overwrite")
    return [Damage("configuration", {}, "; ".join(problems) + f" in {str(path / 'zarr.json')!r}: nothing was "
                   f"rewritten from either; choose: {choices}", "identity")]


def check_config_hash(path: str | Path) -> list:
    """[:class:`ridgexr.store.integrity.Damage`] (kind ``identity``) of the root attribute ``config_hash`` when
    it differs from the hash of the configuration the store records (:func:`stored_config_hash`): ``run`` would refuse
    the store as another configuration's.  [] when it matches or cannot be recomputed.  :func:`check_identity` checks
    this and the record kept at creation."""
    path = Path(path)
    want = stored_config_hash(path)
    have = _root_metadata(path).get("attributes", {}).get("config_hash")
    if want is None or have == want:
        return []
    return [Damage("config_hash", {}, f"the root attribute config_hash {str(have)[:12]!r} in "
                   f"{str(path / 'zarr.json')!r} differs from the hash of the configuration the store records "
                   f"({want[:12]})", "identity")]


def repair_config_hash(path: str | Path) -> bool:
    """Rewrite the root attribute ``config_hash`` from the configuration the store records; whether it changed.
    Only on a user's explicit choice (``--resolve-config current``: :func:`resolve_config`).  Call with the store's
    :class:`ridgexr.store.StoreLock` held."""
    want = stored_config_hash(path)
    if want is None or _root_metadata(path).get("attributes", {}).get("config_hash") == want:
        return False
    set_root_attrs(path, config_hash=want)
    return True


#: the choices of :func:`resolve_config` (``ridgexr verify --resolve-config``)
RESOLUTIONS = ("creation", "current")


def resolve_config(path: str | Path, choice: str) -> list[str]:
    """A user's explicit resolution of a configuration that disagrees with its hash or the record of the store's
    creation (:func:`check_identity`); returns one note per change.  Call with the store's lock held.

    - ``creation``: write back the root attributes recorded at creation (:data:`ridgexr.store.record.IDENTITY_ATTRS`:
      the configuration, its hash, the seeds, d*);
    - ``current``: keep the current configuration, rewrite ``config_hash`` from it (where it can be recomputed)
      and, for a store with a record, rewrite the record from the template of that configuration (its arrays'
      metadata and the arrays written at creation, the training set the record's copy): the store is then
      checked against that schema, and the cells that do not match it are recomputed.

    Raises
    ------
    ValueError
        For another ``choice``, or ``creation`` on a store without an intact record.
    """
    import tempfile

    from ..store.record import write_record

    path = Path(path)
    if choice not in RESOLUTIONS:
        raise ValueError(f"`resolve_config` must be one of {RESOLUTIONS}; got {choice!r}")
    manifest, why = read_record(path)
    if choice == "creation":
        if manifest is None:
            raise ValueError(f"--resolve-config creation: store {str(path)!r} has no intact record of its creation "
                             f"({why or 'it was written before ridgexr kept one'}); only 'current' (or --overwrite)")
        rec = manifest.get("root", {})
        now = _root_metadata(path).get("attributes", {})
        changed = {k: rec[k] for k in IDENTITY_ATTRS if k in rec and now.get(k) != rec[k]}
        if not changed:
            return []
        set_root_attrs(path, **changed)
        return [f"restored {', '.join(changed)} of {str(path)!r} from the record kept at creation"]
    notes = []
    if repair_config_hash(path):
        notes.append(f"rewrote config_hash of {str(path)!r} from its current configuration")
    if manifest is not None:
        with tempfile.TemporaryDirectory(prefix="ridgexr-resolve-") as tmp:
            ref = schema_reference(path, tmp)
            if not any((ref / "train_data").rglob("c*")):
                raise ValueError(f"--resolve-config current: the training set of {str(path)!r} cannot be read "
                                 "from the store or its record; rerun the entry with --overwrite")
            root = json.loads((ref / "zarr.json").read_bytes())
            root["attributes"] = {**_root_metadata(path).get("attributes", {})}
            (ref / "zarr.json").write_text(json.dumps(root, allow_nan=True))
            shutil.rmtree(path / ".creation")
            write_record(path, manifest.get("generation", ""), source=ref)
        notes.append(f"rewrote the record kept at creation of {str(path)!r} from the schema of its current "
                     "configuration")
    return notes
