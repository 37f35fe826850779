"""The one error of the catalog layer."""

from __future__ import annotations

__all__ = ["CatalogError"]


class CatalogError(ValueError):
    """A catalog file or entry is invalid (the message names file, entry and field)."""
