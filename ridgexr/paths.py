"""The data folder: where stores, user catalogs and named image sets are looked for.

``data_dir`` when given (``--data-dir``), else ``$RIDGEXR_DATA``, else the platform's user data
folder (``platformdirs.user_data_dir("ridgexr")``, e.g. ``~/.local/share/ridgexr`` on Linux), the
same from every working directory.  The one definition that :mod:`ridgexr.catalog.folders` (stores,
catalogs) and :mod:`ridgexr.datasets.images` (``<data folder>/images/<name>``) share.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_folder"]


def data_folder(data_dir: str | Path | None = None) -> Path:
    """The data folder (absolute): ``data_dir`` when given, else ``$RIDGEXR_DATA``, else the
    platform's user data folder.  An empty ``data_dir`` is refused (``ValueError``): it would be the working
    folder, silently."""
    if data_dir is not None:
        if not str(data_dir).strip():
            raise ValueError("`data_dir` (--data-dir) is empty; give a folder (or leave it out: $RIDGEXR_DATA, else "
                             "the platform's user data folder)")
        return Path(data_dir).expanduser().resolve()
    env = os.environ.get("RIDGEXR_DATA")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("ridgexr", appauthor=False)).resolve()
