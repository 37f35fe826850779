"""``memorizer-rate`` (manifold reference): the memorizing reference covers no faster than -1/k, as the comparison
of M1 assumes.

Measure: the memorizer's log-log slope of delta_N against N (per independent training draw, Student's t over the
draws).  Criterion: the interval above -1/k agrees, below it disagrees (an interval across -1/k reads
"inconclusive", which the page's rule accepts as "consistent with -1/k"); no margin: it checks the reference,
not the theory.
"""

from __future__ import annotations

from ..verdicts import Criterion
from .claim_kind import ClaimKind, Control
from .coverage_faster import MANIFOLD_DRAWS, MANIFOLD_WRITTEN, slope_control

__all__ = ["MemorizerRate", "KIND"]


class MemorizerRate(ClaimKind):
    name = "memorizer-rate"
    scope = "table"
    statement = "the memorizer covers no faster than -1/k (the comparison is with memorization)"
    measure = ("log-log slope of delta_N against N; mean of the per-draw slopes, 95 % Student-t over the "
               "independent training draws")
    reference = "the spacing of N points on a k-dimensional manifold: slope -1/k"
    null = "-1/k"
    margin = "none (a check of the reference)"
    applies = "the memorizing model of a manifold-coverage entry"
    min_draws = MANIFOLD_DRAWS
    written = MANIFOLD_WRITTEN

    def criterion(self, k: int = 1, **context) -> Criterion:
        ref = -1.0 / k
        return Criterion.above(ref, text=f"slope interval above -1/k = {ref:g} agrees, below disagrees; one across "
                               "-1/k (inconclusive) also meets 'consistent with -1/k or shallower'", written=self.written)

    def criterion_text(self) -> str:
        return "slope interval above -1/k agrees, below disagrees"

    def controls(self) -> list[Control]:
        return [Control("per-draw slopes 0.3 steeper than -1/k (k = 1)", "disagrees",
                        lambda: slope_control(self, -1.3, k=1)),
                Control("per-draw slopes 0.3 shallower than -1/k", "agrees", lambda: slope_control(self, -0.7, k=1))]


KIND = MemorizerRate()
