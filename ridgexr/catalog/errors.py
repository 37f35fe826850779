"""The error and the warning of the catalog layer."""

from __future__ import annotations

__all__ = ["CatalogError", "CatalogWarning"]


class CatalogError(ValueError):
    """A catalog file or entry is invalid (the message names file, entry and field)."""


class CatalogWarning(UserWarning):
    """A catalog file of the data folder was skipped (the message names it and says why)."""
