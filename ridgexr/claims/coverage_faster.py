"""``coverage-faster`` (manifold M1): the outputs cover the manifold faster than a memorizer's spacing allows --
the slope of the coverage radius delta_N against N lies below -1/k by more than the margin.

Measure: the log-log slope of delta_N against N, per independent training draw; the mean of the per-draw slopes
with Student's t interval over the draws (exact for normal per-draw slopes; coverage checked by simulation at 4
draws).  The N of one training draw are not independent draws: a store with one training draw reads "untestable:
too few resolved draws (1 of 1)".  Reference: the memorizer, whose delta_N falls as N^(-1/k).  Criterion (margin
0.1): the interval below -1/k - 0.1 agrees, above it disagrees -- a sampler covering as the memorizer does
disagrees.  Evaluated by ``analyses/manifold.py`` (docs/manifold.md).
"""

from __future__ import annotations

import numpy as np

from ..verdicts import Criterion, mean_t_ci
from .claim_kind import ClaimKind, Control

__all__ = ["CoverageFaster", "KIND", "MANIFOLD_DRAWS", "MANIFOLD_WRITTEN", "RATE_MARGIN", "slope_control"]

#: the fewest independent training draws a slope's interval may rest on
MANIFOLD_DRAWS = 4
#: the margin of the rate criteria M1 and M2 distance (log-log slope units)
RATE_MARGIN = 0.1
MANIFOLD_WRITTEN = "docs/manifold.md M1-M3 (before the coverage runs); margins in the claims registry, after them"


def slope_control(kind: ClaimKind, center: float, *, draws: int = 8, spread: float = 0.03, seed: int = 0,
                  **context) -> list:
    """A claim of ``kind`` on ``draws`` independent per-draw slopes drawn from N(center, spread^2)."""
    slopes = center + spread * np.random.default_rng(seed).standard_normal(draws)
    est, lo, hi, n = mean_t_ci(slopes)
    return [kind.claim(est, lo, hi, n, **context)]


class CoverageFaster(ClaimKind):
    name = "coverage-faster"
    scope = "table"
    statement = "M1: coverage improves faster than a memorizer's spacing allows (delta_N slope below -1/k)"
    measure = ("log-log slope of delta_N against N; mean of the per-draw slopes, 95 % Student-t over the "
               "independent training draws")
    reference = "the memorizer: delta_N falls as N^(-1/k)"
    null = "a sampler covering as the memorizer does: slope -1/k"
    margin = f"{RATE_MARGIN:g} (log-log slope)"
    applies = "every stopped model of a manifold-coverage entry (analyses/manifold.py)"
    min_draws = MANIFOLD_DRAWS
    written = MANIFOLD_WRITTEN

    def criterion(self, k: int = 1, **context) -> Criterion:
        level = -1.0 / k - RATE_MARGIN
        return Criterion.below(level, text=f"slope interval below -1/k - {RATE_MARGIN:g} = {level:g} agrees; above "
                               "it disagrees", written=self.written)

    def criterion_text(self) -> str:
        return f"slope interval below -1/k - {RATE_MARGIN:g} agrees; above it disagrees"

    def controls(self) -> list[Control]:
        return [Control("per-draw slopes of a memorizer's spacing (-1/k, k = 1)", "disagrees",
                        lambda: slope_control(self, -1.0, k=1)),
                Control("per-draw slopes 0.3 steeper than -1/k", "agrees", lambda: slope_control(self, -1.3, k=1))]


KIND = CoverageFaster()
