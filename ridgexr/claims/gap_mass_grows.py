"""``gap-mass-grows`` (variance C1): fitting the noisy DSM target instead of its conditional mean moves sample mass
into the gap between the training points -- by more than the margin.

Measure: Delta G, the pooled gap mass of the DSM fits' samples less that of the ideal fits' (diverged samples
counted outside the gap), with a 95 % percentile bootstrap over the training-noise draws (draw positions resampled
jointly, :func:`ridgexr.analysis.arrays.pooled_contrast_ci`; coverage checked by simulation at 32 draws).
Reference: the ideal target's fits.  Null: the same pooled difference between two ensembles of one target (the
ideal fit's even draws minus its odd draws).  Criterion (margin 0.02, two points of gap mass, the margin of C3):
the interval above 0.02 agrees, below 0.02 disagrees -- a DSM ensemble indistinguishable from the ideal one
disagrees.  Evaluated by ``analyses/variance.py`` on ``variance-ensemble``'s cells with p / P >= 1/4
(docs/variance.md).
"""

from __future__ import annotations

import numpy as np

from .claim_kind import ClaimKind, Control, IntervalAbove

__all__ = ["GapMassGrows", "KIND", "GAP_MARGIN", "VARIANCE_WRITTEN", "VARIANCE_DRAWS", "pooled_control"]

#: the margin of every gap-mass criterion (C1, C3, P1, P2): two percentage points of gap mass
GAP_MARGIN = 0.02
#: the fewest training-noise draws a cell's bootstrap interval may rest on (its coverage is >= 93 % there)
VARIANCE_DRAWS = 32
VARIANCE_WRITTEN = ("docs/variance.md C1-C3, P1-P2 (before their runs); margins in the claims registry, after the "
                    "32-draw run")


def pooled_control(kind: ClaimKind, shift: float, *, draws: int = 128, samples: int = 512,
                   seed: int = 0) -> list:
    """A claim of ``kind`` on two simulated ensembles of ``draws`` draws of ``samples`` samples, each draw's gap
    share from Beta(2, 60) (mean 0.032, overdispersed across draws), the first shifted by ``shift``."""
    from ..analysis import arrays

    rng = np.random.default_rng(seed)
    p = np.clip(rng.beta(2, 60, (2, draws)) + np.array([[shift], [0.0]]), 0, 1)
    k = rng.binomial(samples, p).astype(float)
    est, lo, hi = arrays.pooled_contrast_ci(k, np.full(k.shape, float(samples)), [1.0, -1.0])
    return [kind.claim(est, lo, hi, draws)]


class GapMassGrows(IntervalAbove):
    name = "gap-mass-grows"
    scope = "table"
    statement = "C1: the DSM target moves mass into the gap (Delta G > 0)"
    measure = ("pooled gap-mass difference DSM - ideal, 95 % bootstrap over training-noise draws (draw positions "
               "resampled jointly)")
    reference = "the ideal target's fits (its conditional mean)"
    null = "two ensembles of one target: the ideal fit's even draws minus its odd draws"
    margin = f"{GAP_MARGIN:g} of gap mass"
    applies = "variance-ensemble's cells with p / P >= 1/4 (analyses/variance.py)"
    min_draws = VARIANCE_DRAWS
    written = VARIANCE_WRITTEN
    above = GAP_MARGIN

    def controls(self) -> list[Control]:
        return [Control("a DSM ensemble drawn like the ideal one (128 draws)", "disagrees", lambda: pooled_control(self, 0.0)),
                Control("a DSM ensemble with 0.08 more gap mass", "agrees", lambda: pooled_control(self, 0.08))]


KIND = GapMassGrows()
