"""``excess-fills-gap`` (variance P2): the DSM fits' excess V-kernel alone, at the ideal fits' mean, moves mass into
the gap -- by more than the margin.

Measure: the Gaussian ensemble with the ideal mean and the DSM V-kernel less the one with the ideal mean and the
ideal V-kernel, pooled gap mass, 95 % bootstrap over the draw positions.  Criterion (margin 0.02, as C1): above
0.02 agrees, below 0.02 disagrees.
"""

from __future__ import annotations

from .claim_kind import Control, IntervalAbove
from .gap_mass_grows import GAP_MARGIN, VARIANCE_DRAWS, VARIANCE_WRITTEN, pooled_control

__all__ = ["ExcessFillsGap", "KIND"]


class ExcessFillsGap(IntervalAbove):
    name = "excess-fills-gap"
    scope = "table"
    statement = "P2: the DSM V-kernel's excess alone fills the gap"
    measure = ("Gaussian gap mass, DSM V-kernel at the ideal mean - ideal V-kernel at the ideal mean, 95 % "
               "bootstrap over the draw positions")
    reference = "the Gaussian ensemble with the ideal fits' mean and V-kernel"
    null = "an excess kernel of zero: 0"
    margin = f"{GAP_MARGIN:g} of gap mass"
    applies = "variance-ensemble's prediction cells with p / P >= 1/4"
    min_draws = VARIANCE_DRAWS
    written = VARIANCE_WRITTEN
    above = GAP_MARGIN

    def controls(self) -> list[Control]:
        return [Control("an excess kernel that changes nothing", "disagrees", lambda: pooled_control(self, 0.0)),
                Control("an excess kernel adding 0.08 of gap mass", "agrees", lambda: pooled_control(self, 0.08))]


KIND = ExcessFillsGap()
