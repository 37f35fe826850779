"""The catalog reference (docs/catalogs.md), generated from the specs' JSON schemas."""

from __future__ import annotations

from ..models import REGISTRY
from .experiment import Experiment

__all__ = ["schema_markdown", "EXAMPLE_CATALOG"]

#: A complete catalog file of one entry, shown at the top of docs/catalogs.md: every section an entry can set,
#: each line commented.  ``tests/test_docs_pages.py`` loads it from the page and checks its cells and claims.
EXAMPLE_CATALOG = """\
experiments:
  my-three-points:                      # the entry's name: ridgexr run my-three-points
    description: >-
      Three training points (0,0),(5,0),(0,5); random-feature denoisers at two widths and
      two loss weights, beside the exact (memorizing) denoiser.
    dataset: {points: three-points}     # or file: my_points.npy, mnist, images, manifold, mixture
    process:                            # the sampler's time grid, in OU time
      T: 3.0                            # start of the reverse process
      t_min: 0.001                      # its end
      grid: exponential
      n_steps: 200
    model:                              # one model block; `models:` lists several
      kind: random_features             # see the Model blocks below for every kind
      widths: [64, 256]                 # one cell per width
      n_frequencies: 16                 # K Fourier time features
      tau: .inf                         # training time of the gradient flow: converged
      include_exact: true               # add the exact denoiser as schedule 'exact'
    training:                           # the score-matching fit
      quadrature: gauss-legendre-log-t  # cheap at few time nodes
      n_time: 32
      n_noise: 128                      # noise draws per (training point, time node)
      method: flow                      # closed-form gradient flow
    schedules: ["1", "h2"]              # loss weights w(t): one cell per schedule
    sampler: {kind: sde, record_every: 2, block_steps: 128}
    n_samples: 128                      # trajectories per cell
    d_star: 1                           # the ridge is a curve
    ridge: {tol: 1.0e-8, max_iter: 200}
    seeds: {features: 0, training: 0, sampler: 0, init: 0}
    claims:                             # written before the run; `ridgexr claims my-three-points` reads them
      - {kind: reach-falls, t: [1.0, 0.01], written: "my notes, before the first run"}
      - {kind: align-tangent, t: [0.1], written: "my notes, before the first run"}
    store: my-three-points.zarr         # relative to the data folder
"""


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
             "no `\"16\"` for an integer); unknown fields and duplicate keys are errors. See",
             "[Running experiments](running.md) for how catalogs are found and where stores go.", "",
             "## A complete entry", "",
             "A catalog is a YAML file with one key, `experiments`, mapping entry names to entries. Save this one as",
             "`my.yaml` and run it with `ridgexr run my-three-points --catalog my.yaml` (`--plan` first prints what",
             "it will cost); the tables below give every field, its default and its bounds.", "",
             "```yaml", EXAMPLE_CATALOG.rstrip(), "```", ""]
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
