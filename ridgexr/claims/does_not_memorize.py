"""``does-not-memorize``: the model's final samples are no more often copies of training points than fresh draws
of the law are -- by less than the one memorization threshold.

Measure: f_model - f_fresh, the share of the cell's final samples with d1/d2 < 1/3 (nearest over second-nearest
training point, :data:`ridgexr.defaults.MEMORIZED_RATIO`) less that of fresh draws of the law against the same
training set (:func:`ridgexr.quality.reference_draws`; their count as the run stored it,
``quality_memorized_null_count`` / ``_draws``, where the store has it).  Interval: each share's Clopper-Pearson
interval at 97.5 %, combined (:func:`ridgexr.verdicts.share_difference_ci`; coverage >= 95 % at every share).
Criterion: the interval below :data:`ridgexr.defaults.MEMORIZED_SHARE` agrees, above it disagrees -- tau_mem's
rule on the same measure (:func:`ridgexr.analysis.training_timescales`), so the two never contradict each other.
A dataset without fresh draws (a point set: its law is its training set) has no null: untestable.
"""

from __future__ import annotations

import numpy as np

from .. import defaults
from ..verdicts import Claim, Criterion, Null, share_ci, share_difference_ci
from .claim_kind import ClaimKind, Control

__all__ = ["DoesNotMemorize", "KIND", "memorized_excess"]

WRITTEN = "ridgexr.claims, before the runs it is read on"


def memorized_excess(k: int, n: int, k0: int, n0: int, kind: ClaimKind, *, statement: str, null_how: str,
                     labels: dict | None = None, gate: str | None = None, excluded: int = 0,
                     post_hoc: bool = False) -> Claim:
    """A memorization claim from counts: ``k`` of ``n`` final samples memorized, ``k0`` of ``n0`` fresh draws."""
    est, lo, hi = share_difference_ci(k, n, k0, n0)
    null = Null(k0 / n0, *share_ci(k0, n0), how=null_how) if n0 else None
    return kind.claim(est, lo, hi, n, statement=statement, excluded=excluded, null=null, gate=gate, labels=labels,
                      post_hoc=post_hoc)


def evaluate_memorization(kind: ClaimKind, evidence, spec, label: dict, statement: str) -> list[Claim]:
    """The memorization contrast of one cell: its final samples and the store's fresh draws (their count as the run
    stored it where the store has it, the one tau_mem reads; else counted here)."""
    x = evidence.final_samples(label)
    k, n = evidence.memorized_count(x, label)
    fresh, how = evidence.fresh_draws()
    stored = evidence.stored_memorized_null(label)
    if stored is not None:
        k0, n0 = stored
        how = how if fresh is not None else "fresh draws of the law, counted by the run"
        return [memorized_excess(k, n, k0, n0, kind, statement=statement, labels=label, gate=evidence.gate(label),
                                 excluded=x.shape[0] - n, post_hoc=spec.post_hoc,
                                 null_how=f"{how}: their share with d1/d2 < 1/3 against the same training set "
                                          f"({k0} of {n0})")]
    if fresh is None:
        return [kind.claim(np.nan, np.nan, np.nan, n, statement=statement, excluded=x.shape[0] - n,
                           gate=evidence.gate(label), labels=label, post_hoc=spec.post_hoc,
                           why_untestable=f"no fresh draws of the law to contrast with ({how})",
                           null=Null(np.nan, how=how))]
    k0, n0 = evidence.memorized_count(fresh, label)
    return [memorized_excess(k, n, k0, n0, kind, statement=statement, labels=label, gate=evidence.gate(label),
                             excluded=x.shape[0] - n, post_hoc=spec.post_hoc,
                             null_how=f"{how}: their share with d1/d2 < 1/3 against the same training set "
                                      f"({k0} of {n0})")]


def _law(n: int, seed: int) -> np.ndarray:
    """A continuous law for the controls: a standard normal in 2-D."""
    return np.random.default_rng(seed).standard_normal((n, 2))


def memorization_controls(kind: ClaimKind, statement: str, memorizer_expect: str, fresh_expect: str) -> list[Control]:
    """The memorizer (its samples are training points, off by 1e-3) and a sampler drawing fresh from the law,
    each read against 2 000 fresh draws with a training set of 200 points of a 2-D standard normal."""
    from ..analysis import arrays

    def counts(x, train):
        f = arrays.memorized(x, train)
        return int(np.nansum(f)), int(np.isfinite(f).sum())

    def build(which):
        def run():
            train, fresh = _law(200, 0), _law(2000, 1)
            rng = np.random.default_rng(2)
            x = (train[rng.integers(0, 200, 500)] + 1e-3 * rng.standard_normal((500, 2)) if which == "memorizer"
                 else _law(500, 3))
            k, n = counts(x, train)
            k0, n0 = counts(fresh, train)
            return [memorized_excess(k, n, k0, n0, kind, statement=statement, null_how="2000 fresh draws")]
        return run

    return [Control("the memorizer: its final samples are training points", memorizer_expect, build("memorizer")),
            Control("fresh draws of the law", fresh_expect, build("fresh"))]


class DoesNotMemorize(ClaimKind):
    name = "does-not-memorize"
    statement = "the {model} does not memorize"
    measure = ("share of final samples with d1/d2 < 1/3 less that of fresh draws of the law against the same "
               "training set (each share Clopper-Pearson at 97.5 %, combined: 95 %)")
    reference = "fresh draws of the law (held-out reals, encoded test images, population_data)"
    null = "the memorizer: excess share near 1 - f_fresh"
    margin = f"{defaults.MEMORIZED_SHARE:g}, the one memorization threshold (MEMORIZED_SHARE, also tau_mem's)"
    applies = ("every cell but the exact denoiser's; untestable where the dataset has no fresh draws (a point "
               "set's law is its training set)")
    written = WRITTEN

    def criterion(self, **context) -> Criterion:
        m = defaults.MEMORIZED_SHARE
        return Criterion.below(m, text=f"excess memorized share: interval below {m:g} agrees; above {m:g} disagrees",
                               written=self.written)

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        return evaluate_memorization(self, evidence, spec, label,
                                     self.statement.format(model=evidence.display_name(label)))

    def controls(self) -> list[Control]:
        return memorization_controls(self, "the sampler does not memorize", "disagrees", "agrees")


KIND = DoesNotMemorize()
