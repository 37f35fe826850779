"""``generates``: the network generates -- its own draws are images of the cell's classes, spread like held-out
reals, not class-mean blobs -- the quality gate as a claim kind.

The measure is the gate's slack (:func:`ridgexr.quality.gate_slack`): each term the cell's measures allow, over
its bound, the least of them (k / n over the class-share bound, 1.5 over the nearest ratio, coverage over its
exact null over 0.7), so 1 is the bound.  The reference is held-out reals of the classes (the classifier's recall
on them, the coverage that as many fresh draws reach in expectation, their nearest training distance).  The
criterion is :data:`ridgexr.quality.GATE_CRITERION` read by the verdict kernel on the slack itself: the bounds
already hold the sampling error (the class-share bound is set from the binomial laws of the draws and of the
held-out reals, so that a perfect sampler fails at most 4 % of the time and one with 20 % off-class draws passes
at most 5 % of the time at the decision size).  Below the decision size the claim is untestable.

The controls are the gate's measures of three samplers built with the cached classifier's T-shirt confusion
(recall 0.865 on 750 held-out reals, Shirts labelled T-shirt at 0.142) and a two-dimensional Gaussian standing
in for the classifier's features: fresh draws of the law ("agrees"), 20 % of the draws from the confusable class
at the decision size, and 256 copies of the class mean ("disagrees").  The same controls on real Fashion-MNIST
images and the classifier's own features are tests/test_quality.py's (they need the data set).
"""

from __future__ import annotations

import math

import numpy as np

from ..quality.gate import (GATE, GATE_CRITERION, GATE_KEYS, coverage, decision_size, expected_coverage, gate_slack,
                            gate_verdict, knn_radii)
from ..quality.measures import nearest_distances
from ..verdicts import Claim, Criterion, Null
from .claim_kind import ClaimKind, Control

__all__ = ["Generates", "KIND", "CONTROL_CONFUSION", "control_measures"]

#: the cached classifier's confusion for T-shirt/top (docs/quality.md): recall, the rate at which it labels
#: held-out Shirts T-shirt, and the held-out reals the recall is measured on
CONTROL_CONFUSION = {"recall": 0.865, "offclass": 0.142, "n_heldout": 750}


def control_measures(n: int, *, off_class_share: float = 0.0, mean_copies: bool = False, seed: int = 0,
                     n_reference: int = 300, n_train: int = 1000) -> dict:
    """The gate's measures of ``n`` draws of a simulated sampler, the controls' evidence.

    The classifier's labels follow :data:`CONTROL_CONFUSION`: an in-class draw is labelled in the class with
    probability r, an off-class one with probability f; r and f are the classifier's measured rates (on
    ``n_heldout`` held-out reals), as a store keeps them.  The features are a standard two-dimensional Gaussian (the law of
    the class) with off-class draws shifted by 4 along the first axis; copies of the class mean all sit at its
    mean and get one label (the classifier labels the one image: in the class).  The coverage of ``n_reference``
    fresh reals, its exact null and the nearest ratio against ``n_train`` training points are the package's
    (:func:`ridgexr.quality.coverage`, :func:`ridgexr.quality.expected_coverage`).

    Parameters
    ----------
    n : int >= 1
        Draws.
    off_class_share : float in [0, 1)
        Share of the draws from the confusable class (rounded to a count).
    mean_copies : bool
        Draws that are all copies of the class mean.
    seed : int
    n_reference, n_train : int
        Fresh reals of the coverage's reference and of the nearest ratio's denominator (each), training points.

    Returns
    -------
    dict of :data:`ridgexr.quality.gate.GATE_KEYS`.

    Examples
    --------
    >>> m = control_measures(96, seed=0)
    >>> m["n_draws"], m["coverage_null"] == expected_coverage(96, 300)
    (96, True)
    """
    rng = np.random.default_rng(seed)
    r, f, m = CONTROL_CONFUSION["recall"], CONTROL_CONFUSION["offclass"], CONTROL_CONFUSION["n_heldout"]
    train = rng.standard_normal((n_train, 2))
    reference = rng.standard_normal((n_reference, 2))
    reals = rng.standard_normal((n_reference, 2))
    n_off = int(round(off_class_share * n))
    if mean_copies:
        draws = np.repeat(train.mean(0, keepdims=True), n, 0)
        k = n
    else:
        draws = rng.standard_normal((n, 2))
        draws[:n_off, 0] += 4.0
        k = int(rng.binomial(n - n_off, r) + rng.binomial(n_off, f))
    near_s, near_r = nearest_distances(draws, train), nearest_distances(reals, train)
    out = {"class_share": k / n, "nearest_ratio": float(np.median(near_s) / np.median(near_r)),
           "class_share_heldout": r, "class_share_offclass": f, "n_heldout": m, "n_draws": n,
           "coverage": coverage(draws, reference, knn_radii(reference)),
           "coverage_null": expected_coverage(n, n_reference)}
    assert set(out) == set(GATE_KEYS)
    return out


class Generates(ClaimKind):
    name = "generates"
    statement = "the {model} generates: its own draws are images of the cell's classes, spread like held-out reals"
    measure = ("the gate's slack on its own draws: each term over its bound, the least (class share k/n over its "
               "bound, 1.5 over the nearest ratio, coverage over its exact null over 0.7); a test, so no interval: "
               "its bounds hold the sampling error")
    reference = "held-out reals of the classes: the classifier's recall on them, their expected coverage, their nearest distance"
    null = ("a perfect sampler: the recall over the bound (class share), 1.5 (nearest ratio ~1), 1 / 0.7 "
            "(coverage at its null); it fails at most 5 % of the time at the decision size (simulated)")
    margin = ("the class-share bound r - margin(n) from the classifier's measured confusion (size 4 %, power 95 % "
              "against 20 % off-class draws); nearest ratio 1.5; coverage 0.7 of its null")
    applies = ("every trained model's cell with quality measures; untestable below the gate's decision size (a store "
               "written before the gate drew its own samples) or without a measure")
    min_draws = int(GATE["min_draws"])
    written = "docs/quality.md, before the gate's own draws were run"

    def criterion(self, **context) -> Criterion:
        return GATE_CRITERION

    def make(self, measures: dict, *, labels: dict | None = None, post_hoc: bool = False, n_samples: int = 0,
             model: str = "model") -> Claim:
        """The claim on one cell from the gate's measures (:data:`ridgexr.quality.gate.GATE_KEYS`; None or NaN:
        not available; ``n_samples``: the draws a point set's nearest ratio rests on, where ``n_draws`` is not
        stored).  Its verdict is the gate's: "agrees" for "generates", "disagrees" for "does not generate",
        "untestable: <why>" for "not assessed"."""
        clean = {k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                 for k, v in measures.items()}
        verdict = gate_verdict(**clean)
        slack = gate_slack(**clean)
        n = int(clean.get("n_draws") or n_samples or 1)
        why = ""
        if verdict == "not assessed":
            size = (decision_size(clean.get("class_share_heldout"), clean.get("class_share_offclass"),
                                  clean.get("n_heldout")) if clean.get("class_share") is not None
                    or clean.get("coverage") is not None else None)
            if math.isnan(slack):
                why = "no quality measure of the cell"
            elif clean.get("n_draws") is None:
                why = "the gate's own draws were not taken (a store written before them)"
            elif size is None:
                why = "the classifier cannot separate the cell's classes from the others"
            else:
                why = f"too few draws ({n} of the decision size {size})"
        perfect = dict(clean, nearest_ratio=1.0 if clean.get("nearest_ratio") is not None else None)
        if clean.get("class_share") is not None:
            perfect["class_share"] = clean.get("class_share_heldout")
        if clean.get("coverage") is not None:
            perfect["coverage"] = clean.get("coverage_null")
        null = Null(gate_slack(**perfect), how="what a perfect sampler scores on average: the recall over the "
                    "class-share bound, a nearest ratio of 1, coverage at its null")
        return self.claim(slack, slack, slack, n, null=null, labels=labels, why_untestable=why,
                          min_n=1, post_hoc=post_hoc, statement=self.statement.format(model=model))

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        return [self.make(evidence.quality(label), labels=label, post_hoc=spec.post_hoc,
                          n_samples=evidence.n_samples, model=evidence.display_name(label))]

    def controls(self) -> list[Control]:
        conf = CONTROL_CONFUSION
        size = decision_size(conf["recall"], conf["offclass"], conf["n_heldout"])

        def build(**how):
            return lambda: [self.make(control_measures(**how))]

        return [Control("fresh draws of the law at the decision size", "agrees", build(n=size, seed=0)),
                Control("20 % of the draws from the confusable class at the decision size", "disagrees",
                        build(n=size, off_class_share=0.2, seed=0)),
                Control("256 copies of the class mean", "disagrees", build(n=256, mean_copies=True, seed=0))]


KIND = Generates()
