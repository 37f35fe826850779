"""``targets-gap-grows`` (variance C1, rows fixed): fitting the DSM target with the rows fixed and only the targets
redrawn moves mass into the gap, against the ideal fit on the same rows.

Measure: measured Delta G, the pooled gap mass of the DSM draws (diverged samples outside the gap) less that of the
ideal fit on the same rows (the draws' exact mean readout), 95 % bootstrap over the draws.  Null: two ensembles of
one target, the DSM draws' even minus odd halves, computed per cell.  Criterion (written and committed before the
runs; C1's region as first written: no margin): above 0 agrees, wholly at or below 0 disagrees.
"""

from __future__ import annotations

from .claim_kind import Control, IntervalAbove
from .gap_mass_grows import VARIANCE_DRAWS
from .vkernel_predicts import ANALYTIC_WRITTEN, reference_control

__all__ = ["TargetsGapGrows", "KIND"]


class TargetsGapGrows(IntervalAbove):
    name = "targets-gap-grows"
    scope = "table"
    statement = "C1: the DSM target moves mass into the gap (Delta G > 0, rows fixed)"
    measure = "pooled gap mass of the DSM draws minus the ideal fit's on the same rows, 95 % bootstrap over draws"
    reference = "the ideal fit on the same rows (the draws' exact mean readout)"
    null = "two ensembles of one target: the DSM draws' even minus odd halves"
    margin = "none: above 0 (as written before the run)"
    applies = "the variance-targets-* entries' cells with p / P >= 1/4 (analyses/variance.py --analytic)"
    min_draws = VARIANCE_DRAWS
    written = ANALYTIC_WRITTEN
    above = 0.0

    def controls(self) -> list[Control]:
        return [Control("DSM draws that put 0.02 less mass in the gap", "disagrees",
                        lambda: reference_control(self, -0.02)),
                Control("DSM draws that put 0.02 more mass in the gap", "agrees",
                        lambda: reference_control(self, 0.02))]


KIND = TargetsGapGrows()
