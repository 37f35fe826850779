"""The base of every configuration block (catalog sections and model specs).

Strict pydantic models: unknown fields are errors, no bool-as-int (``n_samples: true``), no
str-as-number; ints are accepted where floats are asked.  This module imports nothing from
ridgexr, so both :mod:`ridgexr.models` (each kind's spec) and :mod:`ridgexr.catalog` build on it.
"""

from __future__ import annotations

import difflib
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["Spec", "as_list", "distinct_sweep"]


class Spec(BaseModel):
    """A strict, frozen configuration block.

    An unknown field is refused with the closest known name ("did you mean"); a field name
    removed in an earlier release (:attr:`removed_fields`) is refused with its replacement.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, ser_json_inf_nan="constants")

    #: field names removed in a release -> the field that replaced them (refused, never read)
    removed_fields: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data):
        if isinstance(data, dict):
            known = list(cls.model_fields)
            for key in data:
                if key in known or not isinstance(key, str):
                    continue
                if key in cls.removed_fields:
                    raise ValueError(f"field {key!r} was removed in ridgexr 0.4; use {cls.removed_fields[key]!r}")
                close = difflib.get_close_matches(key, known, n=1)
                if close:
                    raise ValueError(f"unknown field {key!r}; did you mean {close[0]!r}?")
        return data


def as_list(v) -> list:
    """A field that is one value or a swept list, as a list."""
    return list(v) if isinstance(v, list) else [v]


def distinct_sweep(v):
    """A swept list must be non-empty with distinct values (a single value passes)."""
    if isinstance(v, list) and (not v or len(set(v)) != len(v)):
        raise ValueError("a swept list must be non-empty with distinct values")
    return v
