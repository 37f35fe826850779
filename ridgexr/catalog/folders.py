"""Where stores go: the data folder and an entry's store path under it.

An entry's ``store`` is a relative path resolved under the *data folder*: ``--data-dir DIR`` /
``data_dir=`` when given, else ``$RIDGEXR_DATA``, else the user data folder of the platform
(``platformdirs.user_data_dir("ridgexr")``, e.g. ``~/.local/share/ridgexr`` on Linux), the same
from every working directory.  A store path that escapes its data folder is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..paths import data_folder
from .errors import CatalogError

__all__ = ["default_data_dir", "data_dir_source", "resolve_store"]


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
    """Absolute store path of ``exp`` under the data folder; refuses a path that escapes it."""
    base = default_data_dir(data_dir)
    path = (base / exp.store).resolve()
    if base != path and base not in path.parents:
        raise CatalogError(f"store path {exp.store!r} of entry {exp.name!r} escapes the data directory {base}")
    return path
