"""The planner's estimate against the measured runs of ``benchmarks/measured_runs.toml``.

``python benchmarks/plan_vs_measured.py`` prints the Markdown table of ``docs/tables/plan_vs_measured.md``;
``--write`` writes it there.  ``tests/test_estimate.py`` checks every row (:func:`rows`): on an idle machine the
plan within 2x of the measured wall time, on a shared one the plan at most 2x it (the idle time is at most what a
loaded machine took), and each entry unchanged since it was measured (:func:`entry_digest`).  Nothing is run:
the plan is priced from the configuration and the training set's shape (``ridgexr run --plan``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE / "measured_runs.toml"
TABLE = HERE.parent / "docs" / "tables" / "plan_vs_measured.md"
#: the fields of an entry that do not change what a run costs: left out of its digest
NOT_COST = ("description", "claims", "timescales", "store")
#: the factor the plan must be within (idle machine), or below (shared machine)
FACTOR = 2.0


def entry_digest(entry: dict) -> str:
    """sha256 (16 hex digits) of a catalog entry as written (its YAML mapping), without :data:`NOT_COST`."""
    kept = {k: v for k, v in entry.items() if k not in NOT_COST}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def written_entries() -> dict[str, dict]:
    """{name: the entry's YAML mapping as written} of the built-in catalog files."""
    import yaml

    from ridgexr.catalog import builtin_catalog_files

    out = {}
    for f in builtin_catalog_files():
        out.update(yaml.safe_load(f.read_text(encoding="utf-8"))["experiments"])
    return out


def runs() -> list[dict]:
    """The measured runs (``[[run]]`` tables of :data:`RUNS`)."""
    return tomllib.loads(RUNS.read_text(encoding="utf-8"))["run"]


def _duration(s: float) -> str:
    from ridgexr.run.plan import format_seconds

    return format_seconds(s)


def rows() -> list[dict]:
    """One dict per measured run: the row of :data:`RUNS`, the plan's stages and total (seconds), the ratio
    plan / measured, whether the check holds (``ok``), why (``check``), and whether the entry is the one measured
    (``same_entry``)."""
    from ridgexr.catalog import Catalog, builtin_catalog_files
    from ridgexr.datasets import training_shape
    from ridgexr.run.plan import estimate_stage_seconds

    cat = Catalog(builtin_catalog_files())
    written = written_entries()
    out = []
    for run in runs():
        exp = cat[run["entry"]]
        stages = estimate_stage_seconds(exp, training_shape(exp.dataset, base_dir=exp.base_dir))
        plan = sum(stages.values())
        ratio = plan / run["wall_s"]
        same = entry_digest(written[run["entry"]]) == run["config_sha"]
        if run["machine"] == "idle":
            ok = 1 / FACTOR <= ratio <= FACTOR
            check = f"within {FACTOR:g}x" if ok else f"off: {'over' if ratio > 1 else 'under'} {FACTOR:g}x"
        else:
            ok = ratio <= FACTOR
            check = f"at most {FACTOR:g}x (an upper bound)" if ok else f"off: over {FACTOR:g}x a shared machine's time"
        if not same:
            ok, check = False, "the entry changed since it was measured"
        out.append({**run, "stages": stages, "plan_s": plan, "ratio": ratio, "ok": ok, "check": check,
                    "same_entry": same})
    return out


def table(found: list[dict]) -> str:
    """The Markdown table of :func:`rows`."""
    lines = ["| entry | plan (fit / diagnostics / sampling and observation) | measured | machine | plan / measured "
             "| check |", "|---|---|---|---|---|---|"]
    for r in found:
        stages = " / ".join(_duration(s) for s in r["stages"].values())
        cpu = f", {_duration(r['cpu_s'])} CPU" if "cpu_s" in r else ""
        machine = f"{r['machine']}: {r['note']}" if r["machine"] == "idle" else f"shared: {r['note']}"
        lines.append(f"| `{r['entry']}` | {_duration(r['plan_s'])} ({stages}) | {_duration(r['wall_s'])} wall, "
                     f"{r['threads']} thread{'s' if r['threads'] > 1 else ''}{cpu} | {machine} | "
                     f"{r['ratio']:.2f} | {r['check']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table to {TABLE}")
    args = parser.parse_args(argv)
    found = rows()
    text = table(found)
    if args.write:
        TABLE.parent.mkdir(parents=True, exist_ok=True)
        TABLE.write_text(text, encoding="utf-8")
    print(text, end="")
    off = [r for r in found if not r["ok"]]
    print(f"{len(found) - len(off)} of {len(found)} runs pass the check" + (
        ": " + "; ".join(f"{r['entry']} ({r['check']})" for r in off) if off else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
