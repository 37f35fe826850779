"""``gaussian-reproduces`` (variance P1): the ensemble's Gaussian (second-cumulant) approximation reproduces the
measured Delta G within +-0.02.

Measure: measured - predicted Delta G (the five ensembles of ``analyses/variance.py --prediction``), 95 %
percentile bootstrap over the draw positions, resampled jointly in all five.  Reference: the measured Delta G.
Criterion (equivalence, margin 0.02, the margin of C3): inside [-0.02, 0.02] agrees, wholly outside disagrees.
"""

from __future__ import annotations

from .claim_kind import Control, IntervalWithin
from .gap_mass_grows import GAP_MARGIN, VARIANCE_DRAWS, VARIANCE_WRITTEN, pooled_control

__all__ = ["GaussianReproduces", "KIND"]


class GaussianReproduces(IntervalWithin):
    name = "gaussian-reproduces"
    scope = "table"
    statement = "P1: the Gaussian approximation reproduces Delta G"
    measure = "measured - predicted Delta G, 95 % bootstrap over the draw positions (all five ensembles jointly)"
    reference = "the measured Delta G of the same draws"
    null = "a prediction equal to the measurement: 0"
    margin = f"{GAP_MARGIN:g} of gap mass (equivalence)"
    applies = "variance-ensemble's prediction cells (analyses/variance.py --prediction)"
    min_draws = VARIANCE_DRAWS
    written = VARIANCE_WRITTEN
    within = GAP_MARGIN

    def controls(self) -> list[Control]:
        return [Control("a prediction off by 0.08 of gap mass", "disagrees", lambda: pooled_control(self, 0.08)),
                Control("a prediction drawn like the measurement (128 draws)", "agrees", lambda: pooled_control(self, 0.0))]


KIND = GaussianReproduces()
