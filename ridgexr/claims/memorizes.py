"""``memorizes``: the sampler's final samples are copies of training points more often than fresh draws of the law
are -- by more than the one memorization threshold (the exact denoiser's claim).

The same contrast as ``does-not-memorize`` (:mod:`ridgexr.claims.does_not_memorize`), read the other way:
the excess share's interval above :data:`ridgexr.defaults.MEMORIZED_SHARE` agrees, below it disagrees.
"""

from __future__ import annotations

from .. import defaults
from ..verdicts import Claim, Criterion
from .claim_kind import ClaimKind, Control
from .does_not_memorize import WRITTEN, evaluate_memorization, memorization_controls

__all__ = ["Memorizes", "KIND"]


class Memorizes(ClaimKind):
    name = "memorizes"
    statement = "the {model} memorizes: its final samples are training points"
    measure = ("share of final samples with d1/d2 < 1/3 less that of fresh draws of the law against the same "
               "training set (each share Clopper-Pearson at 97.5 %, combined: 95 %)")
    reference = "fresh draws of the law (held-out reals, encoded test images, population_data)"
    null = "fresh draws of the law: excess share 0"
    margin = f"{defaults.MEMORIZED_SHARE:g}, the one memorization threshold (MEMORIZED_SHARE, also tau_mem's)"
    applies = "the exact denoiser's cells; untestable where the dataset has no fresh draws"
    written = WRITTEN

    def criterion(self, **context) -> Criterion:
        m = defaults.MEMORIZED_SHARE
        return Criterion.above(m, text=f"excess memorized share: interval above {m:g} agrees; below {m:g} disagrees",
                               written=self.written)

    def applies_to(self, label: dict, is_exact: bool) -> bool:
        return is_exact

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        return evaluate_memorization(self, evidence, spec, label,
                                     self.statement.format(model=evidence.display_name(label)))

    def controls(self) -> list[Control]:
        return memorization_controls(self, "the sampler memorizes", "agrees", "disagrees")


KIND = Memorizes()
