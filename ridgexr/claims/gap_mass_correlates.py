"""``gap-mass-correlates`` (variance C2): across the cells, Delta G grows with p / P (and with the V-kernel's
excess in the gap).

Measure: Spearman's rho of Delta G with the cell's p / P (or V_gap dsm - ideal) over the cells, 95 % percentile
bootstrap over the cells (coverage checked by simulation at 10 cells).  Reference: no dependence (rho = 0).
Criterion (margin 0.3): the interval above 0.3 agrees, below 0.3 disagrees -- cells whose Delta G does not
depend on p / P disagree.
"""

from __future__ import annotations

import numpy as np

from .claim_kind import Control, IntervalAbove
from .gap_mass_grows import VARIANCE_WRITTEN

__all__ = ["GapMassCorrelates", "KIND", "spearman_ci", "RHO_MARGIN", "MIN_CELLS"]

#: the margin of the rank correlation
RHO_MARGIN = 0.3
#: the fewest cells the bootstrap interval may rest on
MIN_CELLS = 10


def spearman_ci(x, y, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float, int]:
    """Spearman's rho of the finite pairs (x, y) with a percentile-bootstrap interval over them (pairs resampled):
    (rho, low, high, pairs); NaN bounds where a resample has ties only or fewer than 3 pairs."""
    from scipy import stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 3:
        return np.nan, np.nan, np.nan, int(x.size)
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))
    rx = stats.rankdata(x[idx], axis=1)
    ry = stats.rankdata(y[idx], axis=1)
    rx -= rx.mean(1, keepdims=True)
    ry -= ry.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (rx * ry).sum(1) / np.sqrt((rx**2).sum(1) * (ry**2).sum(1))  # NaN where a resample has ties only
    boot = boot[np.isfinite(boot)]
    rho = float(stats.spearmanr(x, y).statistic)
    if boot.size == 0:
        return rho, np.nan, np.nan, int(x.size)
    return rho, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975)), int(x.size)


class GapMassCorrelates(IntervalAbove):
    name = "gap-mass-correlates"
    scope = "table"
    statement = "C2: Delta G grows with {what}"
    measure = "Spearman rho over the cells, 95 % bootstrap over cells (n counts cells)"
    reference = "no dependence on the cell: rho 0"
    null = "Delta G independent of the cell: rho 0"
    margin = f"{RHO_MARGIN:g} of rho"
    applies = "every variance-ensemble cell with a Delta G"
    min_draws = MIN_CELLS
    unit = "cells"
    docs_words = {"what": "p / P (or V_gap dsm - ideal)"}
    written = VARIANCE_WRITTEN
    above = RHO_MARGIN

    def controls(self) -> list[Control]:
        def build(slope):
            def run():
                rng = np.random.default_rng(0)
                x = rng.uniform(0, 1, 100)
                rho, lo, hi, n = spearman_ci(x, slope * x + 0.1 * rng.standard_normal(100))
                return [self.claim(rho, lo, hi, n, statement=self.statement.format(what="p / P"))]
            return run

        return [Control("100 cells whose Delta G does not depend on p / P", "disagrees", build(0.0)),
                Control("100 cells whose Delta G grows with p / P", "agrees", build(1.0))]


KIND = GapMassCorrelates()
