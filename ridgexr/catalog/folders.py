"""Where stores go: the data folder, an entry's store path under it, and the stores it holds.

An entry's ``store`` is a relative path resolved under the *data folder*: ``--data-dir DIR`` /
``data_dir=`` when given, else ``$RIDGEXR_DATA``, else the user data folder of the platform
(``platformdirs.user_data_dir("ridgexr")``, e.g. ``~/.local/share/ridgexr`` on Linux), the same
from every working directory.  A store path that escapes its data folder is refused.

A store records the name of the entry that made it (root attribute ``experiment``), so
:func:`stores_named` finds it by that name whichever catalog file defined the entry (a file given
once with ``ridgexr run FILE``, say).  Reading a store's root metadata is plain JSON: no zarr import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..paths import data_folder
from .errors import CatalogError

__all__ = ["default_data_dir", "data_dir_source", "resolve_store", "root_metadata", "is_store", "stores_in",
           "stores_named", "STORE_SEARCH_DEPTH", "enclosing_store"]


def default_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data folder: ``data_dir`` when given, else ``$RIDGEXR_DATA``, else the platform's user data folder
    (:func:`ridgexr.paths.data_folder`)."""
    return data_folder(data_dir)


def data_dir_source(data_dir: str | Path | None = None) -> str:
    """Where the data folder came from, for messages: "--data-dir", "$RIDGEXR_DATA" or "the default"."""
    if data_dir is not None:
        return "--data-dir / data_dir="
    return "$RIDGEXR_DATA" if os.environ.get("RIDGEXR_DATA") else "the default (no --data-dir, no $RIDGEXR_DATA)"


def resolve_store(exp, data_dir: str | Path | None = None) -> Path:
    """Absolute store path of ``exp`` under the data folder; refuses a path that escapes it, and a data folder or a
    store path inside a store (:func:`enclosing_store`: a run there would write into that store, and an
    ``--overwrite`` of it would delete what was written)."""
    base = default_data_dir(data_dir)
    path = (base / exp.store).resolve()
    if base != path and base not in path.parents:
        raise CatalogError(f"store path {exp.store!r} of entry {exp.name!r} escapes the data directory {base}")
    outer = enclosing_store(base, itself=True)
    if outer is not None:
        raise CatalogError(f"the data folder {str(base)!r} ({data_dir_source(data_dir)}) lies inside the ridgexr store "
                           f"{str(outer)!r}: choose a data folder outside every store")
    outer = enclosing_store(path)
    if outer is not None:
        raise CatalogError(f"store path {exp.store!r} of entry {exp.name!r} lies inside the ridgexr store "
                           f"{str(outer)!r}: choose a store path outside every store")
    return path


def enclosing_store(path: str | Path, *, itself: bool = False) -> Path | None:
    """The ridgexr store that holds ``path`` (``itself``: or that ``path`` is), nearest first; None when no folder
    above it is a store.  A store whose root metadata are damaged counts (its arrays' folders say what it is)."""
    path = Path(path).absolute()
    for folder in ([path] if itself else []) + list(path.parents):
        if is_store(folder) or (folder / "cell_complete" / "zarr.json").is_file() and (
                folder / "trajectory" / "zarr.json").is_file():
            return folder
    return None


def root_metadata(path: str | Path) -> dict:
    """The store's root ``zarr.json`` as a dict; {} when it is missing or unreadable."""
    try:
        meta = json.loads((Path(path) / "zarr.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def is_store(path: str | Path) -> bool:
    """Whether ``path`` holds a whole ridgexr store (root metadata with a schema version)."""
    return "schema_version" in root_metadata(path).get("attributes", {})


#: how many folders deep under the data folder :func:`stores_in` looks for stores (an entry's ``store``
#: may be a path such as ``paper/two-points.zarr``)
STORE_SEARCH_DEPTH = 3


def stores_in(data_dir: str | Path | None = None) -> dict[Path, str]:
    """The ridgexr stores under the data folder -> the entry name each records ("" when it records none).

    Folders named ``*.zarr`` up to :data:`STORE_SEARCH_DEPTH` folders deep (hidden folders and the
    insides of stores are not searched), sorted by path; {} when the data folder does not exist.
    """
    base = default_data_dir(data_dir)
    found = {}
    for root, dirs, _ in os.walk(base):
        depth = len(Path(root).relative_to(base).parts)
        for d in [d for d in dirs if d.endswith(".zarr")]:
            attrs = root_metadata(Path(root) / d).get("attributes", {})
            if "schema_version" in attrs:
                found[Path(root) / d] = str(attrs.get("experiment", ""))
        dirs[:] = [] if depth + 1 >= STORE_SEARCH_DEPTH else sorted(
            d for d in dirs if not d.startswith(".") and not d.endswith(".zarr"))
    return dict(sorted(found.items()))


def stores_named(name: str, data_dir: str | Path | None = None) -> list[Path]:
    """The stores of the data folder that ``name`` refers to, when it is not a catalog entry's name.

    The stores that record ``name`` as the entry that made them (:func:`stores_in`); when none does,
    ``<data folder>/<name>.zarr`` if it is a store; else [].  More than one path means the name is
    ambiguous (the caller says so).
    """
    recorded = [p for p, entry in stores_in(data_dir).items() if entry == name]
    if recorded:
        return recorded
    path = default_data_dir(data_dir) / f"{name}.zarr"
    return [path] if name and "/" not in name and is_store(path) else []
