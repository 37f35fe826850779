"""``coverage-resolved`` (manifold R): delta_N at the largest N is resolved above the floor a sample of that size
sets (a perfect sampler's delta_N), so that M1 reads the model and not the floor.

Measure: delta_N at the largest N (several training draws: mean with Student's t over the draws; one: the value
itself, too few draws).  Null: delta_N of as many fresh draws of the law (median [min, max] of 5 repetitions).
Criterion, post hoc (chosen after the data were seen): at least 3 x the floor's median agrees, at most 1.5 x its
largest value disagrees.
"""

from __future__ import annotations

import numpy as np

from ..verdicts import Criterion, Null, mean_t_ci
from .claim_kind import ClaimKind, Control
from .coverage_faster import MANIFOLD_DRAWS

__all__ = ["CoverageResolved", "KIND", "RESOLVED", "AT_FLOOR"]

#: delta_N at the largest N is resolved when at least this many times the ideal sampler's median
RESOLVED = 3.0
#: ... and at the floor when within this many times the ideal sampler's largest value
AT_FLOOR = 1.5


class CoverageResolved(ClaimKind):
    name = "coverage-resolved"
    scope = "table"
    statement = "R: delta_N at the largest N is resolved above the generated sample's floor (for M1)"
    measure = "delta_N at the largest N; mean over the training draws, 95 % Student-t"
    reference = "the floor: delta_N of as many fresh draws of the law"
    null = "fresh draws of the law: median [min, max] of 5 repetitions"
    margin = f"{RESOLVED:g} x the floor's median / {AT_FLOOR:g} x its largest value"
    applies = "every stopped model of a manifold-coverage entry"
    min_draws = MANIFOLD_DRAWS
    written = "docs/manifold.md, after the data were seen"

    def criterion(self, floor: Null | None = None, **context) -> Criterion:
        if floor is None:
            raise TypeError("the criterion of coverage-resolved needs the floor (a Null)")
        hi = min(AT_FLOOR * floor.high, RESOLVED * floor.value)
        return Criterion((RESOLVED * floor.value, np.inf), ((-np.inf, hi),),
                         text=f"delta_N at the largest N >= {RESOLVED:g} x the floor's median "
                              f"({RESOLVED * floor.value:.3g}) agrees (resolved); <= {AT_FLOOR:g} x its max ({hi:.3g}) "
                              "disagrees (at the floor)", written=self.written, post_hoc=True)

    def criterion_text(self) -> str:
        return (f"post hoc: delta_N at the largest N >= {RESOLVED:g} x the floor's median agrees; <= {AT_FLOOR:g} x "
                "its largest value disagrees")

    def controls(self) -> list[Control]:
        floor = Null(0.1, 0.09, 0.12, how="a floor of 0.1")

        def build(level):
            def run():
                v = level * (1 + 0.02 * np.random.default_rng(0).standard_normal(8))
                est, lo, hi, n = mean_t_ci(v)
                return [self.claim(est, lo, hi, n, floor=floor, null=floor)]
            return run

        return [Control("delta_N at the floor of a perfect sampler", "disagrees", build(0.1)),
                Control("delta_N five times the floor", "agrees", build(0.5))]


KIND = CoverageResolved()
