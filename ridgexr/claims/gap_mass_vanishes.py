"""``gap-mass-vanishes`` (variance C3): where the training rows far outnumber the features (P >> p) the DSM
target's effect vanishes: Delta G within +-0.02.

The measure, reference and null of ``gap-mass-grows`` (:mod:`ridgexr.claims.gap_mass_grows`); criterion
(equivalence, margin 0.02): the interval inside [-0.02, 0.02] agrees, wholly outside it disagrees.  Evaluated
on the cells with P / p >= 16.
"""

from __future__ import annotations

from .claim_kind import Control, IntervalWithin
from .gap_mass_grows import GAP_MARGIN, VARIANCE_DRAWS, VARIANCE_WRITTEN, pooled_control

__all__ = ["GapMassVanishes", "KIND"]


class GapMassVanishes(IntervalWithin):
    name = "gap-mass-vanishes"
    scope = "table"
    statement = "C3: Delta G vanishes where P >> p"
    measure = ("pooled gap-mass difference DSM - ideal, 95 % bootstrap over training-noise draws (draw positions "
               "resampled jointly)")
    reference = "the ideal target's fits (its conditional mean)"
    null = "two ensembles of one target: the ideal fit's even draws minus its odd draws"
    margin = f"{GAP_MARGIN:g} of gap mass (equivalence)"
    applies = "variance-ensemble's cells with P / p >= 16 (analyses/variance.py)"
    min_draws = VARIANCE_DRAWS
    written = VARIANCE_WRITTEN
    within = GAP_MARGIN

    def controls(self) -> list[Control]:
        return [Control("a DSM ensemble with 0.08 more gap mass", "disagrees", lambda: pooled_control(self, 0.08)),
                Control("a DSM ensemble drawn like the ideal one (128 draws)", "agrees", lambda: pooled_control(self, 0.0))]


KIND = GapMassVanishes()
