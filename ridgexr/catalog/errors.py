"""The error and the warning of the catalog layer, and the words of a field's wrong type."""

from __future__ import annotations

import json
import math

__all__ = ["CatalogError", "CatalogWarning", "wrong_type"]


class CatalogError(ValueError):
    """A catalog file or entry is invalid (the message names file, entry and field)."""


class CatalogWarning(UserWarning):
    """A catalog file of the data folder was skipped (the message names it and says why)."""


#: pydantic's error types for a value of the wrong type -> what the field takes, in words
EXPECTED = {"list_type": "a list", "tuple_type": "a list", "int_type": "an integer", "int_parsing": "an integer",
            "int_from_float": "an integer", "float_type": "a number", "float_parsing": "a number",
            "string_type": "a string", "bool_type": "true or false", "bool_parsing": "true or false",
            "dict_type": "a mapping", "model_type": "a mapping of its fields", "model_attributes_type":
            "a mapping of its fields"}


def _kind(value) -> str:
    """What a YAML value is, in words ("an integer", "a string", ...)."""
    if isinstance(value, bool):
        return "a boolean"
    for cls, words in ((int, "an integer"), (float, "a number"), (str, "a string"), (list, "a list"),
                       (dict, "a mapping")):
        if isinstance(value, cls):
            return words
    return type(value).__name__


def _yaml(value) -> str:
    """``value`` written as in a catalog file (flow style): a string quoted where YAML would read it as something
    else (a number, a boolean, a list)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return (".inf" if value > 0 else "-.inf") if isinstance(value, float) and math.isinf(value) else repr(value)
    if isinstance(value, str):
        import yaml

        try:
            plain = yaml.safe_load(value) == value and value.strip() == value and ":" not in value
        except yaml.YAMLError:
            plain = False
        return value if plain and value else json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _example(kind: str, value):
    """A value of the type ``kind`` asks for, made from ``value`` where it reads as one (``64`` -> ``[64]``,
    ``'16'`` -> ``16``), else None."""
    try:
        if kind in ("list_type", "tuple_type"):
            return value if isinstance(value, list) else [value] if not isinstance(value, dict) else None
        if kind in ("int_type", "int_parsing", "int_from_float"):
            number = float(value) if not isinstance(value, bool) else None
            return int(number) if number is not None and math.isfinite(number) else None
        if kind in ("float_type", "float_parsing"):
            return float(value) if not isinstance(value, bool) else None
        if kind == "string_type":
            return str(value) if isinstance(value, (int, float)) else None
        if kind in ("bool_type", "bool_parsing"):
            return {"yes": True, "no": False, "on": True, "off": False, "1": True, "0": False}.get(str(value).lower())
    except (TypeError, ValueError):
        return None
    return None


def wrong_type(error: dict) -> str | None:
    """The words for one pydantic error (an item of ``ValidationError.errors()``) of a value of the wrong type:
    what the field takes, the value given and, where the value converts, the line to write instead; None for
    every other error.

    >>> wrong_type({"type": "list_type", "loc": ("model", "widths"), "input": 64, "msg": ""})
    'expected a list, got 64 (an integer); write e.g. `widths: [64]`'
    >>> wrong_type({"type": "int_type", "loc": ("n_samples",), "input": "16", "msg": ""})
    "expected an integer, got '16' (a string); write e.g. `n_samples: 16`"
    """
    kind = error.get("type")
    if kind not in EXPECTED:
        return None
    value = error.get("input")
    field = next((str(p) for p in reversed(error.get("loc", ())) if isinstance(p, str)), "field")
    text = f"expected {EXPECTED[kind]}, got {value!r} ({_kind(value)})"
    example = _example(kind, value)
    if example is not None:
        text += f"; write e.g. `{field}: {_yaml(example)}`"
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        text += f"; write e.g. `{field}: {{name: value, ...}}` (docs/catalogs.md lists the fields)"
    return text
