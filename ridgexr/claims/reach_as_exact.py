"""``reach-as-exact``: at the claim's time the model's states are as far from the ridge as the exact denoiser's --
the forward process's own states at that time -- within 10 %.

Measure: the model's median ridge distance at t over the forward process's (the tube radius of
:mod:`ridgexr.claims.reach_falls`), exact median intervals at 97.5 % each, combined.  Criterion (equivalence,
margin 0.1): the ratio's interval inside [0.9, 1.1] agrees, wholly outside it disagrees.  Untestable where the
model's normal error cannot move its states by 1 % of the margin from the sampler's start to t.
"""

from __future__ import annotations

import numpy as np

from ..verdicts import Claim, Criterion
from .claim_kind import ClaimKind, Control
from .reach_falls import WRITTEN, tube_claim, tube_ratio

__all__ = ["ReachAsExact", "KIND", "AS_EXACT_MARGIN"]

#: the equivalence margin of the ratio to the tube radius
AS_EXACT_MARGIN = 0.1


class ReachAsExact(ClaimKind):
    name = "reach-as-exact"
    times = 1
    statement = "reach: at t = {t:.3g} the {model}'s states are as far from the ridge as the exact denoiser's"
    measure = ("median ridge distance at t over the forward process's at t (resolved states; exact median "
               "intervals at 97.5 % each, combined: 95 %)")
    reference = "the forward process's own states at t (the exact denoiser's law), observed by the store's code"
    null = "ratio 1 for the exact denoiser; a sampler 1.5 x farther: 1.5"
    margin = f"{AS_EXACT_MARGIN:g} (equivalence)"
    applies = ("every cell but the exact denoiser's; untestable where the model's normal error cannot move a typical "
               "state by 1 % of the margin")
    written = WRITTEN

    def criterion(self, **context) -> Criterion:
        lo, hi = 1 - AS_EXACT_MARGIN, 1 + AS_EXACT_MARGIN
        return Criterion.within(lo, hi, text=f"ratio to the forward process's: interval inside [{lo:g}, {hi:g}] "
                                f"agrees; wholly outside it disagrees", written=self.written)

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        s, t = evidence.step(spec.t[0])
        t_start = float(np.max(evidence.ds["t"].values))
        return [tube_claim(self, evidence, spec, label, s, t, t_start, AS_EXACT_MARGIN, {"t": t})]

    def controls(self) -> list[Control]:
        from .evidence import observe_forward
        from .reach_falls import THREE_POINTS

        def build(scale):
            def run():
                ref = observe_forward(THREE_POINTS, 0.05, 1, 8000, seed=0)["ridge_distance"]
                model = scale * observe_forward(THREE_POINTS, 0.05, 1, 8000, seed=1)["ridge_distance"]
                est, lo, hi, n, excl = tube_ratio(model, ref)
                return [self.claim(est, lo, hi, n, excluded=excl)]
            return run

        return [Control("a sampler 1.5 x farther from the ridge", "disagrees", build(1.5)),
                Control("the exact denoiser on three points", "agrees", build(1.0))]


KIND = ReachAsExact()
