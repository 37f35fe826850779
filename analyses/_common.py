"""Helpers shared by the analysis scripts: run (or resume) a catalog entry, save figures."""

from __future__ import annotations

import argparse
from pathlib import Path

import holoviews as hv

import ridgexr
from ridgexr import plot
from ridgexr.run import run_experiment

ROOT = Path(__file__).resolve().parent.parent


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="data folder of the stores (default: $RIDGEXR_DATA, else the user data folder)")
    ap.add_argument("--figures", default=str(ROOT / "docs" / "figures"), help="where PNG figures go")
    return ap


def store_for(name: str, data: str | None, catalog: str | None = None):
    """Run (or resume) a catalog entry (of the built-in catalogs, or of the file ``catalog``) and open its
    store lazily."""
    if catalog:
        from ridgexr.catalog import load_catalog_file

        exp = load_catalog_file(catalog)[name]
    else:
        exp = ridgexr.open_catalog()[name]
    res = run_experiment(exp, data_dir=data)
    return ridgexr.open_dataset(res.store)


def save_png(obj, path: Path, **opts) -> Path:
    plot.ensure_backends()
    path.parent.mkdir(parents=True, exist_ok=True)
    if opts:
        obj = obj.opts(**opts, backend="matplotlib")
    hv.save(obj, path, backend="matplotlib", fmt="png")
    return path


def markdown_table(df, floatfmt: str = ".3g") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(format(v, floatfmt) if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)
