"""``distance-falls`` (manifold M2 distance): the outputs' distance to the manifold falls with N.

Measure: the log-log slope of the outputs' distance to M against N, per independent training draw, Student's t
over the draws.  Reference: fresh draws of the law lie on M (distance 0 at every N: no slope); a sampler at a
constant distance has slope 0.  Criterion (margin 0.1): the interval below -0.1 agrees, above -0.1 disagrees --
a constant distance disagrees.
"""

from __future__ import annotations

from ..verdicts import Criterion
from .claim_kind import ClaimKind, Control
from .coverage_faster import MANIFOLD_DRAWS, MANIFOLD_WRITTEN, RATE_MARGIN, slope_control

__all__ = ["DistanceFalls", "KIND"]


class DistanceFalls(ClaimKind):
    name = "distance-falls"
    scope = "table"
    statement = "M2: the outputs' distance to M falls with N"
    measure = ("log-log slope of dist to M against N; mean of the per-draw slopes, 95 % Student-t over the "
               "independent training draws")
    reference = "a sampler at a constant distance from M: slope 0"
    null = "0 (fresh draws of the law lie on M: distance 0 at every N)"
    margin = f"{RATE_MARGIN:g} (log-log slope)"
    applies = "every stopped model of a manifold-coverage entry"
    min_draws = MANIFOLD_DRAWS
    written = MANIFOLD_WRITTEN

    def criterion(self, **context) -> Criterion:
        return Criterion.below(-RATE_MARGIN, text=f"slope interval below -{RATE_MARGIN:g} agrees; above "
                               f"-{RATE_MARGIN:g} disagrees", written=self.written)

    def controls(self) -> list[Control]:
        return [Control("outputs at a constant distance from M", "disagrees", lambda: slope_control(self, 0.0)),
                Control("outputs whose distance falls as N^-1/2", "agrees", lambda: slope_control(self, -0.5))]


KIND = DistanceFalls()
