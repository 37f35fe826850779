"""The catalog reference (docs/catalogs.md), generated from the specs' JSON schemas."""

from __future__ import annotations

from ..models import REGISTRY
from .experiment import Experiment

__all__ = ["schema_markdown"]


def schema_markdown() -> str:
    """The catalog reference (docs/catalogs.md) generated from the pydantic models' JSON schema.

    ``tests/test_catalog.py`` checks that the file in the repository equals this text, so
    the published reference cannot drift from the code.
    """
    schema = Experiment.model_json_schema()
    defs = schema.pop("$defs")

    def kind(prop: dict) -> str:
        if "$ref" in prop:
            ref = prop["$ref"].split("/")[-1]
            return "[a model block](#model-blocks)" if ref == "ModelSpec" else f"[{ref}](#{ref.lower()})"
        if "anyOf" in prop:
            return " or ".join(kind(p) for p in prop["anyOf"])
        if "enum" in prop:
            return " / ".join(repr(v) for v in prop["enum"])
        if "const" in prop:
            return repr(prop["const"])
        if prop.get("type") == "array":
            return f"list of {kind(prop.get('items', {}))}"
        return prop.get("type", "any")

    def bounds(prop: dict) -> str:
        parts = [f"{sym} {prop[key]}" for key, sym in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                                                        ("exclusiveMaximum", "<"), ("minItems", "items >="))
                 if key in prop]
        for sub in prop.get("anyOf", []) + ([prop["items"]] if isinstance(prop.get("items"), dict) else []):
            parts += [f"{sym} {sub[key]}" for key, sym in (("minimum", ">="), ("exclusiveMinimum", ">"))
                      if key in sub]
        return ", ".join(parts)

    def cell(text: str) -> str:  # a '|' inside a table cell must be escaped in Markdown
        return text.replace("|", "\\|")

    def table(title: str, model: dict) -> list[str]:
        required = set(model.get("required", []))
        rows = [f"## {title}", "", (model.get("description") or "").strip(), "",
                "| field | type | default | constraints | meaning |", "|---|---|---|---|---|"]
        for name, prop in model["properties"].items():
            default = "required" if name in required else repr(prop.get("default", "[]" if prop.get("type") == "array"
                                                                         else None))
            rows.append(f"| `{name}` | {kind(prop)} | {default} | {bounds(prop)} | {cell(prop.get('description', ''))} |")
        return rows + [""]

    lines = ["# Catalog reference", "",
             "Generated from the pydantic models of `ridgexr.catalog` and the model kinds of `ridgexr.models` by `ridgexr.catalog.schema_markdown()`;",
             "a test keeps this file equal to the code. Types are checked strictly (no `true` for a number,",
             "no `\"16\"` for an integer); unknown fields and duplicate keys are errors. See running.md for",
             "how catalogs are found and where stores go.", ""]
    lines += table("Experiment (one entry)", schema)
    for name in sorted(defs):
        if name != "ModelSpec":  # the base of the kinds' specs: each kind has its table below
            lines += table(name, defs[name])
    lines += ["# Model blocks", "",
              "A block's `kind` (default `random_features`) picks its spec; a field of another kind is an error.", ""]
    for kind_name, entry in REGISTRY.items():
        spec = entry.spec_class()
        own = spec.model_json_schema()
        nested = own.pop("$defs", {})  # a kind's own sub-blocks (exact's SigmaStop) get their tables too
        lines += table(f"{spec.__name__} (kind: {kind_name})", own)
        for name in sorted(nested):
            if name not in defs:
                lines += table(name, nested[name])
    return "\n".join(lines).rstrip() + "\n"
