"""Deprecated names that still work for one release, with a ``FutureWarning``.

Renames of public arguments and methods go through here, so the old spelling keeps
working, warns once per call site, and is removed in one place later (release 0.4; 0.3 changed units, so the
old spellings stay one more release).
This module imports nothing from ridgexr.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable

__all__ = ["renamed_kwargs", "warn_renamed", "REMOVAL"]

REMOVAL = "0.4"


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is now spelled ``new`` (a ``FutureWarning``, shown to users)."""
    warnings.warn(f"`{old}` is deprecated and will be removed in ridgexr {REMOVAL}; use `{new}` instead",
                  FutureWarning, stacklevel=stacklevel)


def renamed_kwargs(**renames: str) -> Callable:
    """Decorator: accept the old keyword names ``renames = {old: new}`` with a warning.

    Passing both the old and the new name is a ``TypeError``.

    Examples
    --------
    >>> @renamed_kwargs(dim="feature_dim")
    ... def f(*, feature_dim="dim"):
    ...     return feature_dim
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     f(dim="coord"), w[0].category.__name__
    ('coord', 'FutureWarning')
    """

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{func.__name__}() got both `{old}` (deprecated) and `{new}`")
                    warn_renamed(f"{func.__name__}({old}=...)", f"{new}=...")
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper

    return decorate
