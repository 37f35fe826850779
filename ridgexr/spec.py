"""The base of every configuration block (catalog sections and model specs).

Strict pydantic models: unknown fields are errors, no bool-as-int (``n_samples: true``), no
str-as-number; ints are accepted where floats are asked.  This module imports nothing from
ridgexr, so both :mod:`ridgexr.models` (each kind's spec) and :mod:`ridgexr.catalog` build on it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Spec", "as_list", "distinct_sweep"]


class Spec(BaseModel):
    """A strict, frozen configuration block."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, ser_json_inf_nan="constants")


def as_list(v) -> list:
    """A field that is one value or a swept list, as a list."""
    return list(v) if isinstance(v, list) else [v]


def distinct_sweep(v):
    """A swept list must be non-empty with distinct values (a single value passes)."""
    if isinstance(v, list) and (not v or len(set(v)) != len(v)):
        raise ValueError("a swept list must be non-empty with distinct values")
    return v
