"""``target-rate`` (manifold M3): the outputs converge near-parametrically to the smoothed-and-projected target.

Measure: the log-log slope of the outputs' W2 distance to the smoothed-and-projected target against N, per
independent training draw, Student's t over the draws.  Null: a perfect sampler of the target (its slope, by the
same code).  Criterion (margin: -0.25, a rate at least N^-1/4): the interval below -0.25 agrees, above -0.25
disagrees.
"""

from __future__ import annotations

from ..verdicts import Criterion
from .claim_kind import ClaimKind, Control
from .coverage_faster import MANIFOLD_DRAWS, MANIFOLD_WRITTEN, slope_control

__all__ = ["TargetRate", "KIND", "TARGET_RATE"]

#: the slowest rate counted as near-parametric
TARGET_RATE = -0.25


class TargetRate(ClaimKind):
    name = "target-rate"
    scope = "table"
    statement = "M3: the outputs converge near-parametrically to the smoothed-and-projected target"
    measure = ("log-log slope of W2 to smoothed target against N; mean of the per-draw slopes, 95 % Student-t "
               "over the independent training draws")
    reference = "a sampler that does not approach the target: slope 0"
    null = "a perfect sampler of the smoothed target, by the same code"
    margin = f"{TARGET_RATE:g} (the slope at least as steep as N^{TARGET_RATE:g})"
    applies = "every stopped model of a manifold-coverage entry"
    min_draws = MANIFOLD_DRAWS
    written = MANIFOLD_WRITTEN

    def criterion(self, **context) -> Criterion:
        return Criterion.below(TARGET_RATE, text=f"slope interval below {TARGET_RATE:g} agrees; above "
                               f"{TARGET_RATE:g} disagrees", written=self.written)

    def controls(self) -> list[Control]:
        return [Control("outputs whose W2 to the target does not fall", "disagrees", lambda: slope_control(self, 0.0)),
                Control("outputs converging as N^-1/2", "agrees", lambda: slope_control(self, -0.5))]


KIND = TargetRate()
