"""``vkernel-fills-gap`` (variance P2, analytic): the DSM target's V-kernel in closed form, at the exact mean
readout (the ideal fit on the same rows), moves mass into the gap.

Measure: the predicted Delta G, G(Gaussian readouts of the analytic kernel) - G(the mean readout), 95 % bootstrap
over the readouts.  In the rows-fixed design the ideal fit has no variance and is the readouts' mean exactly, so
this is the DSM kernel's excess on its own.  Null: a kernel of zero, i.e. the mean readout itself: 0.  Criterion
(written and committed before the runs; P2's region, unchanged: no margin): above 0 agrees, wholly at or below 0
disagrees -- so a kernel that moves nothing reads "inconclusive", not "disagrees" (a control says so).
"""

from __future__ import annotations

from .claim_kind import Control, IntervalAbove
from .gap_mass_grows import VARIANCE_DRAWS
from .vkernel_predicts import ANALYTIC_WRITTEN, reference_control

__all__ = ["VKernelFillsGap", "KIND"]

class VKernelFillsGap(IntervalAbove):
    name = "vkernel-fills-gap"
    scope = "table"
    statement = "P2: the DSM V-kernel's excess alone fills the gap (analytic)"
    measure = ("Gaussian readouts of the analytic kernel at the exact mean: gap mass minus the mean readout's, "
               "95 % bootstrap over the readouts")
    reference = "the mean readout (the ideal fit on the same rows), sampled with the same sampler states"
    null = "a kernel of zero (the mean readout itself): 0"
    margin = "none: above 0 (as written before the run)"
    applies = "the variance-targets-* entries' cells with p / P >= 1/4 (analyses/variance.py --analytic)"
    min_draws = VARIANCE_DRAWS
    unit = "readouts"
    written = ANALYTIC_WRITTEN
    above = 0.0

    def controls(self) -> list[Control]:
        return [Control("a kernel that moves 0.02 of gap mass out of the gap", "disagrees",
                        lambda: reference_control(self, -0.02)),
                Control("a kernel that changes nothing (no margin: unresolved)", "inconclusive",
                        lambda: reference_control(self, 0.0)),
                Control("a kernel that moves 0.02 of gap mass into the gap", "agrees",
                        lambda: reference_control(self, 0.02))]


KIND = VKernelFillsGap()
