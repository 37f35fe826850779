"""``outputs-novel`` (manifold M2 novelty): at the largest N the outputs are as novel as fresh draws of the law --
their median novelty (nearest-training distance over the training set's median nearest-neighbour spacing,
:func:`ridgexr.analysis.novelty`) is no less than fresh draws' (about 1) by more than the margin.

Measure: the median novelty at the largest N: one training draw, the median over the outputs with its exact
order-statistic interval (the outputs are the independent draws); several, the mean of the draws' medians with
Student's t over the draws.  Null: fresh draws of the law against the same training set (median about 1).
Criterion (non-inferiority, margin 0.25): the interval above 0.75 agrees, below 0.75 disagrees -- the memorizer
(copies of training points, novelty 0) disagrees, fresh draws of the law agree.
"""

from __future__ import annotations

import numpy as np

from ..verdicts import Criterion, median_ci
from .claim_kind import ClaimKind, Control
from .coverage_faster import MANIFOLD_WRITTEN

__all__ = ["OutputsNovel", "KIND", "NOVELTY_MARGIN"]

#: the margin over a fresh draw's novelty (1)
NOVELTY_MARGIN = 0.25


class OutputsNovel(ClaimKind):
    name = "outputs-novel"
    scope = "table"
    statement = "M2: the outputs are novel at the largest N (median novelty as fresh draws', within the margin)"
    measure = ("median novelty at the largest N (one training draw: exact median interval over the outputs; "
               "several: Student-t over the draws' medians)")
    reference = "fresh draws of the law against the same training set (median novelty about 1)"
    null = "the memorizer: copies of training points, novelty 0"
    margin = f"{NOVELTY_MARGIN:g} (non-inferiority)"
    applies = "every stopped model of a manifold-coverage entry"
    written = MANIFOLD_WRITTEN

    def criterion(self, **context) -> Criterion:
        level = 1 - NOVELTY_MARGIN
        return Criterion.above(level, text=f"interval of the median novelty above {level:g} agrees; below {level:g} "
                               "disagrees", written=self.written)

    def controls(self) -> list[Control]:
        from ..analysis import arrays

        def build(which):
            def run():
                rng = np.random.default_rng(0)
                circle = lambda a: np.stack([np.cos(a), np.sin(a)], -1)  # noqa: E731
                train = circle(rng.uniform(0, 2 * np.pi, 400))
                x = (circle(rng.uniform(0, 2 * np.pi, 2000)) if which == "fresh"
                     else train[rng.integers(0, 400, 2000)] + 1e-3 * rng.standard_normal((2000, 2)))
                med, lo, hi, n = median_ci(arrays.novelty(x, train))
                return [self.claim(med, lo, hi, n)]
            return run

        return [Control("the memorizer: copies of training points", "disagrees", build("memorizer")),
                Control("fresh draws of the law (a perfect sampler)", "agrees", build("fresh"))]


KIND = OutputsNovel()
