"""Helpers shared by the analysis scripts: run (or resume) a catalog entry, save figures."""

from __future__ import annotations

import argparse
from pathlib import Path

import holoviews as hv
import numpy as np

import ridgexr
from ridgexr import plot
from ridgexr.analysis.arrays import proportion_ci
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


def median_ci(v: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Median of the finite values of ``v`` with a percentile-bootstrap 95 % interval over them (NaNs if none)."""
    v = v[np.isfinite(v)]
    if v.size == 0:
        return (np.nan, np.nan, np.nan)
    rng = np.random.default_rng(seed)
    boot = np.median(v[rng.integers(0, v.size, (n_boot, v.size))], axis=1)
    return float(np.median(v)), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def median_ci_text(v: np.ndarray) -> str:
    """:func:`median_ci` as "median [low, high]" ("-" when ``v`` has no finite value)."""
    m = median_ci(v)
    return "-" if np.isnan(m[0]) else f"{m[0]:.3g} [{m[1]:.3g}, {m[2]:.3g}]"


def share(mask: np.ndarray) -> str:
    """The share of True in ``mask`` with its Wilson 95 % interval, "share [low, high]" ("-" when empty)."""
    k, n = int(mask.sum()), int(mask.size)
    if n == 0:
        return "-"
    lo, hi = proportion_ci(k, n)
    return f"{k / n:.2f} [{float(lo):.2f}, {float(hi):.2f}]"


#: the cell dimensions a store may have, in label order
CELL_DIMS = ("model", "schedule", "width", "epoch", "tau")


def complete_cells(ds):
    """Yield ``(label, cell)`` for every cell of ``ds`` that applies and is complete: ``label`` maps each
    cell dimension present to its value, ``cell`` is ``ds`` at that cell."""
    dims = [d for d in CELL_DIMS if d in ds.dims]
    for idx in np.ndindex(*(ds.sizes[d] for d in dims)):
        cell = ds.isel(dict(zip(dims, idx)))
        if bool(cell.cell_applies) and bool(cell.cell_complete):
            yield {d: cell[d].item() for d in dims}, cell
