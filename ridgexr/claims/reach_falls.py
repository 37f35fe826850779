"""``reach-falls``: by the claim's late time the model's states have fallen into the forward process's own tube
around the ridge.

"The ridge distance falls" is true of every sampler whose marginals follow the forward process, a memorizer and
a sampler that stays off the ridge included; the claim is that the states *enter the tube*.  Measure: the
model's median ridge distance at t_late over the tube radius there, the median ridge distance of the forward
process's own states at t_late (started at the cell's training set and observed by the store's code:
:func:`ridgexr.claims.evidence.observe_forward`) -- what the exact denoiser's states have, whatever the model.
Interval: the two medians' exact order-statistic intervals at 97.5 % each, combined
(:func:`ridgexr.verdicts.log_median_contrast`).  Criterion (margin 0.5): the ratio's interval at most 1.5
agrees (within one and a half tube radii), at least 1.5 disagrees.  A sampler ending three tube radii off the
ridge disagrees although its distance falls.

Untestable where the model's normal error cannot move a typical state by 1 % of the margin between the claim's
two times (the drift of the median state's normal error, :meth:`ridgexr.claims.evidence.StoreEvidence.normal_drift`):
its ridge distance is then the exact denoiser's by construction (two points on a line, every model predicting the
normal coordinate exactly).
"""

from __future__ import annotations

import math

import numpy as np

from ..verdicts import Claim, Criterion, Null, log_median_contrast, median_ci
from .claim_kind import ClaimKind, Control

__all__ = ["ReachFalls", "KIND", "tube_ratio", "REACH_MARGIN", "DRIFT_SHARE"]

#: the margin: within 1 + REACH_MARGIN tube radii agrees
REACH_MARGIN = 0.5
#: a normal error whose drift bound is below this share of the margin's distance cannot decide the claim
DRIFT_SHARE = 0.01
WRITTEN = "ridgexr.claims, before the runs it is read on"


def tube_ratio(model: np.ndarray, reference: np.ndarray) -> tuple[float, float, float, int, int]:
    """median(model) / median(reference) of the finite values, with the conservative interval of
    :func:`ridgexr.verdicts.log_median_contrast`: (ratio, low, high, n model values, excluded model values)."""
    model = np.asarray(model, dtype=np.float64).ravel()
    ok = np.isfinite(model)
    est, lo, hi = log_median_contrast([(model[ok], 1.0), (reference, -1.0)])
    return math.exp(est), math.exp(lo), math.exp(hi), int(ok.sum()), int(model.size - ok.sum())


def tube_null(reference: np.ndarray, how: str) -> Null:
    """The tube radius (the reference's median ridge distance) with its exact 95 % interval."""
    med, lo, hi, _ = median_ci(reference)
    return Null(med, lo, hi, how=f"the tube radius: median ridge distance of {how}")


def reach_untestable(evidence, label: dict, t_late: float, t_early: float, tube: float, margin: float) -> str:
    """Why a network's reach claim cannot be tested in this cell ("" when it can)."""
    if evidence.model_name(label) == "exact":
        return ""
    drift = evidence.normal_drift(label, t_late, t_early)
    if math.isfinite(drift) and math.isfinite(tube) and drift <= DRIFT_SHARE * margin * tube:
        return (f"the model's normal error is zero here (its median state's drift from t = {t_early:.3g} to "
                f"{t_late:.3g} is {drift:.2g}, below {DRIFT_SHARE:.0%} of the margin's {margin * tube:.2g}): its ridge "
                "distance is the exact denoiser's by construction")
    return ""


def tube_claim(kind: ClaimKind, evidence, spec, label: dict, step: int, t_late: float, t_early: float,
               margin: float, times: dict) -> Claim:
    """The cell's claim of ``kind`` on the ratio of its median ridge distance at ``step`` (time ``t_late``) to the
    tube radius there (:func:`tube_ratio`, :func:`tube_null`), untestable where the model's normal error cannot
    move a state by ``margin`` tube radii between ``t_early`` and ``t_late`` (:func:`reach_untestable`)."""
    ref = evidence.forward(label, step)
    est, lo, hi, n, excl = tube_ratio(evidence.resolved_at(label, step, "ridge_distance"), ref["ridge_distance"])
    null = tube_null(ref["ridge_distance"], ref["how"])
    return kind.cell_claim(evidence, spec, label, est, lo, hi, n, times=times, excluded=excl, null=null,
                           why_untestable=reach_untestable(evidence, label, t_late, t_early, null.value, margin))


class ReachFalls(ClaimKind):
    name = "reach-falls"
    times = 2
    statement = ("reach: from t = {t0:.3g} to t = {t1:.3g} the {model}'s ridge distance falls into the forward "
                 "process's tube")
    measure = ("median ridge distance at t_late over the tube radius, the forward process's median ridge distance "
               "at t_late (resolved states; exact median intervals at 97.5 % each, combined: 95 %)")
    reference = "the forward process's own states at t_late (the exact denoiser's law), observed by the store's code"
    null = "a sampler ending off the ridge: ratio > 1.5 (3 tube radii: 3)"
    margin = f"{REACH_MARGIN:g} tube radius"
    applies = ("every cell but the exact denoiser's; untestable where the model's normal error cannot move a typical "
               "state by 1 % of the margin (its ridge distance is the exact denoiser's by construction)")
    written = WRITTEN

    def criterion(self, **context) -> Criterion:
        level = 1 + REACH_MARGIN
        return Criterion.below(level, text=f"ratio to the tube radius: interval at most {level:g} agrees; at least "
                               f"{level:g} disagrees", written=self.written)

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        (s0, t0), (s1, t1) = (evidence.step(t) for t in spec.t)
        return [tube_claim(self, evidence, spec, label, s1, t1, t0, REACH_MARGIN, {"t0": t0, "t1": t1})]

    def controls(self) -> list[Control]:
        return reach_controls(self, lambda kind, ratio: [kind.claim(*ratio[:4], excluded=ratio[4])])


#: the controls' point set: three points on which the ridge is no straight line through them (reach is not true by
#: construction there)
THREE_POINTS = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


def reach_controls(kind: ClaimKind, make, t_late: float = 0.05, off: float = 3.0) -> list[Control]:
    """The exact denoiser (its states at t_late are the forward process's: a second, independent set of forward
    draws) and a sampler that ends ``off`` tube radii from the ridge (the forward states' ridge distance times
    ``off``: its distance still falls from t = 1), on :data:`THREE_POINTS` at ``t_late``."""
    from .evidence import observe_forward

    def build(which):
        def run():
            ref = observe_forward(THREE_POINTS, t_late, 1, 1000, seed=0)["ridge_distance"]
            model = observe_forward(THREE_POINTS, t_late, 1, 500, seed=1)["ridge_distance"]
            if which == "off":
                model = off * model
            return make(kind, tube_ratio(model, ref))
        return run

    return [Control(f"a sampler ending {off:g} tube radii off the ridge", "disagrees", build("off")),
            Control("the exact denoiser on three points", "agrees", build("exact"))]


KIND = ReachFalls()
