"""Sample quality on a store: the stored measures per cell, the gate's verdict, and gated claims.

:func:`sample_quality` reads the ``quality_*`` cell variables (written by the run,
:func:`ridgexr.quality.cells.cell_quality`) and adds ``gate``, the verdict of
:func:`ridgexr.quality.gate_verdict` per cell.  :func:`gated_verdict` is the one rule that turns a
claim about a cell that does not generate into "untestable": the analyses, the report and the docs'
tables all call it.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.claims import UNTESTABLE
from .cells import QUALITY_KEYS
from .measures import gate_verdict

__all__ = ["sample_quality", "gated_verdict", "UNTESTABLE", "quality_variable"]



def quality_variable(key: str) -> str:
    """The store variable of a quality measure (``quality_<key>``)."""
    return f"quality_{key}"


def sample_quality(ds: xr.Dataset) -> xr.Dataset:
    """The stored sample-quality measures of every cell and the gate's verdict on each.

    Parameters
    ----------
    ds : xarray.Dataset
        A store (schema 1.7 or later) or any selection of its cells.

    Returns
    -------
    xarray.Dataset over the cell dimensions: the ``quality_*`` variables that the store has (NaN where
    a cell's dataset allows no such measure, docs/quality.md) and ``gate`` (str): "generates",
    "does not generate", "not assessed", or "not run" for a masked or unfinished cell.

    Raises
    ------
    ValueError
        For a store written before the quality variables existed (schema < 1.7).
    """
    names = [quality_variable(k) for k in QUALITY_KEYS if quality_variable(k) in ds.data_vars]
    if not names:
        raise ValueError("`ds` has no quality_* variables: a store of schema 1.7 or later is needed (rerun the "
                         "entry with --overwrite, docs/schema.md)")
    q = ds[names + [n for n in ("cell_applies", "cell_complete") if n in ds]].compute()
    share = q.get(quality_variable("class_share"), xr.full_like(q[names[0]], np.nan))
    ratio = q.get(quality_variable("nearest_ratio"), xr.full_like(q[names[0]], np.nan))
    gate = xr.apply_ufunc(np.vectorize(lambda s, r: gate_verdict(float(s), float(r)), otypes=[object]), share, ratio)
    run = q["cell_complete"] if "cell_complete" in q else xr.ones_like(gate, dtype=bool)
    if "cell_applies" in q:
        run = run & q["cell_applies"]
    gate = gate.where(run, "not run").astype(str)
    gate.attrs.update(long_name="the quality gate's verdict (docs/quality.md)", units="1")
    return q[names].assign(gate=gate)


def gated_verdict(verdict: str, gate: str) -> str:
    """``verdict`` of a claim about a cell, or :data:`UNTESTABLE` when the cell's samples fail the gate.

    >>> gated_verdict("agrees", "generates"), gated_verdict("agrees", "does not generate")
    ('agrees', 'untestable: the network does not generate')
    """
    return UNTESTABLE if gate == "does not generate" else verdict
