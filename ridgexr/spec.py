"""The base of every configuration block (catalog sections and model specs).

Strict pydantic models: unknown fields are errors, no bool-as-int (``n_samples: true``), no
str-as-number; ints are accepted where floats are asked.  This module imports nothing from
ridgexr, so both :mod:`ridgexr.models` (each kind's spec) and :mod:`ridgexr.catalog` build on it.
"""

from __future__ import annotations

import difflib
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["Spec", "as_list", "distinct_sweep"]


class Spec(BaseModel):
    """A strict, frozen configuration block.

    An unknown field is refused at its own location with the closest known name ("did you mean"); a
    field name removed in an earlier release (:attr:`removed_fields`) is refused with its replacement.
    Either is reported together with every other error of the block.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, ser_json_inf_nan="constants")

    #: field names removed in a release -> the field that replaced them (refused, never read)
    removed_fields: ClassVar[dict[str, str]] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _known_fields(cls, data, handler):
        """Every error of the block at once: an unknown field (pydantic's ``extra_forbidden``) is reported
        at its own location with the closest known name, or as removed with its replacement, beside the
        block's other errors (a "before" check would stop at the first unknown field)."""
        try:
            return handler(data)
        except ValidationError as err:
            errors = err.errors()
            if not any(e["type"] == "extra_forbidden" and len(e["loc"]) == 1 for e in errors):
                raise
            raise ValidationError.from_exception_data(cls.__name__, [
                InitErrorDetails(type=cls._unknown_field(e["loc"][0]), loc=e["loc"], input=e["input"])
                if e["type"] == "extra_forbidden" and len(e["loc"]) == 1 else
                InitErrorDetails(type=PydanticCustomError(e["type"], _template(e["msg"]), e.get("ctx")),
                                 loc=e["loc"], input=e["input"])
                for e in errors]) from None

    @classmethod
    def _unknown_field(cls, key) -> PydanticCustomError:
        """The error of an unknown field ``key``: removed (with its replacement), a close known name, or none."""
        known = list(cls.model_fields)
        if key in cls.removed_fields:
            return PydanticCustomError("removed_field", _template(
                f"field {key!r} was removed in ridgexr 0.4; use {cls.removed_fields[key]!r}"))
        close = difflib.get_close_matches(str(key), known, n=1)
        if close:
            return PydanticCustomError("unknown_field", _template(f"unknown field {key!r}; did you mean {close[0]!r}?"))
        # still "extra_forbidden": a model block names its kind's fields instead (ridgexr.models.validate_block)
        return PydanticCustomError("extra_forbidden", _template(f"unknown field {key!r}"))


def _template(text: str) -> str:
    """``text`` as a pydantic message template (its own braces kept literally)."""
    return text.replace("{", "{{").replace("}", "}}")


def as_list(v) -> list:
    """A field that is one value or a swept list, as a list."""
    return list(v) if isinstance(v, list) else [v]


def distinct_sweep(v):
    """A swept list must be non-empty with distinct values (a single value passes)."""
    if isinstance(v, list) and (not v or len(set(v)) != len(v)):
        raise ValueError("a swept list must be non-empty with distinct values")
    return v
