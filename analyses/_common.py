"""Helpers shared by the analysis scripts: run (or resume) a catalog entry, save figures."""

from __future__ import annotations

import argparse
from pathlib import Path

import holoviews as hv
import numpy as np

import ridgexr
from ridgexr import plot
from ridgexr.analysis.arrays import proportion_ci
from ridgexr.analysis.arrays import median_interval
from ridgexr.choices import CELL_DIMS
from ridgexr.run import run_experiment

ROOT = Path(__file__).resolve().parent.parent


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="data folder of the stores (default: $RIDGEXR_DATA, else the user data folder)")
    ap.add_argument("--figures", default=str(ROOT / "docs" / "figures"), help="where PNG figures go")
    return ap


def experiment_for(name: str, catalog: str | None = None):
    """The catalog entry ``name`` (of the built-in catalogs, or of the file ``catalog``), validated."""
    if catalog:
        from ridgexr.catalog import load_catalog_file

        return load_catalog_file(catalog)[name]
    return ridgexr.open_catalog()[name]


def store_for(name: str, data: str | None, catalog: str | None = None):
    """Run (or resume) a catalog entry (:func:`experiment_for`) and open its store lazily."""
    res = run_experiment(experiment_for(name, catalog), data_dir=data)
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


def median_ci_text(v: np.ndarray) -> str:
    """The median of the finite values of ``v`` with its percentile-bootstrap 95 % interval
    (:func:`ridgexr.analysis.arrays.median_interval`) as "median [low, high]" ("-" when none is finite)."""
    med, low, high, _ = median_interval(v)
    return "-" if np.isnan(med) else f"{med:.3g} [{low:.3g}, {high:.3g}]"


def share(mask: np.ndarray) -> str:
    """The share of True in ``mask`` with its Wilson 95 % interval, "share [low, high]" ("-" when empty)."""
    k, n = int(mask.sum()), int(mask.size)
    if n == 0:
        return "-"
    lo, hi = proportion_ci(k, n)
    return f"{k / n:.2f} [{float(lo):.2f}, {float(hi):.2f}]"


def complete_cells(ds):
    """Yield ``(label, cell)`` for every cell of ``ds`` that applies and is complete: ``label`` maps each
    cell dimension present (:data:`ridgexr.choices.CELL_DIMS`, in store order) to its value (its position where
    the dimension has no coordinate), ``cell`` is ``ds`` at that cell."""
    dims = [d for d in CELL_DIMS if d in ds.dims]
    for idx in np.ndindex(*(ds.sizes[d] for d in dims)):
        cell = ds.isel(dict(zip(dims, idx)))
        if bool(cell.cell_applies) and bool(cell.cell_complete):
            yield {d: cell[d].item() if d in ds.coords else i for d, i in zip(dims, idx)}, cell
