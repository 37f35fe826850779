"""The shape of a claim kind: what one module of :mod:`ridgexr.claims` declares, and its controls.

A kind states, before any run: the **measure** (a contrast), the **reference** it is contrasted with (what the
theory says must differ: the forward process's own tube, the exact denoiser, fresh draws of the law, an
isotropic error by its actual law, a memorizer), the **null** (the contrast's value when the claim is false,
computed), the **criterion** with its **margin**, the **statement**, where it **applies** (and where it is
untestable, and why), the fewest independent draws its interval may rest on, and its **controls**: evidence
built to be what it claims, one that must read "disagrees" and one that must read "agrees"
(tests/test_claim_kinds.py runs every registered kind's controls).

Two scopes: a ``"cell"`` kind is declared in a catalog entry's ``claims:`` block and evaluated per cell from the
store (:meth:`ClaimKind.evaluate`, :func:`ridgexr.claims.store_claims`); a ``"table"`` kind is evaluated by an
analysis on the numbers it computes (:meth:`ClaimKind.claim`: the variance, manifold and timescale criteria).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, ClassVar

from ..verdicts import MIN_DRAWS, Claim, Criterion, Null

__all__ = ["ClaimKind", "Control", "SCOPES", "IntervalAbove", "IntervalWithin", "ABOVE_ZERO"]

#: where a kind is evaluated: per cell of a store, or on an analysis's table
SCOPES = ("cell", "table")
#: "above 0": the lower end of the interval strictly above 0 (a lower end of exactly 0 is not above it)
ABOVE_ZERO = 1e-12


@dataclass(frozen=True)
class Control:
    """A control of a claim kind: ``build()`` makes evidence that is what ``name`` says and evaluates the kind on
    it; the claims it returns must all read a verdict starting with ``expect``."""

    name: str
    expect: str
    build: Callable[[], list[Claim]]


class ClaimKind:
    """Base of a claim kind (one module per kind; one line in :mod:`ridgexr.claims.registry`).

    Subclasses set the class attributes and implement :meth:`criterion`, :meth:`controls` and, for a cell kind,
    :meth:`evaluate` (a table kind builds its claims with :meth:`claim`).
    """

    #: the kind's name (a catalog entry's ``claims: - {kind: NAME}``)
    name: ClassVar[str] = ""
    #: "cell" or "table" (:data:`SCOPES`)
    scope: ClassVar[str] = "cell"
    #: the claim in words; a cell kind's may use {model}, {t0}, {t1}, {t}
    statement: ClassVar[str] = ""
    #: the contrast measured, and how its interval is made
    measure: ClassVar[str] = ""
    #: what the measure is contrasted with
    reference: ClassVar[str] = ""
    #: the contrast's value where the claim is false, and how it is computed
    null: ClassVar[str] = ""
    #: the margin of the criterion, in words
    margin: ClassVar[str] = ""
    #: which cells it is about by default, and where it reads "untestable"
    applies: ClassVar[str] = ""
    #: a cell kind: the diffusion times it compares (``t:``): 0 none, k exactly k, None one or more
    times: ClassVar[int | None] = 0
    #: the fewest independent draws its interval may rest on (coverage checked at this size)
    min_draws: ClassVar[int] = MIN_DRAWS
    #: what ``n`` counts
    unit: ClassVar[str] = "draws"
    #: where and when its criterion was written
    written: ClassVar[str] = ""
    #: the words the table of kinds puts for the statement's fields
    docs_words: ClassVar[dict] = {"model": "model", "t0": "t_early", "t1": "t_late", "t": "t"}

    def criterion(self, **context) -> Criterion:
        """The criterion (regions of the contrast's axis, with the margin), fixed before the run."""
        raise NotImplementedError

    def controls(self) -> list[Control]:
        """At least one control that must read "disagrees" and one that must read "agrees"."""
        raise NotImplementedError

    def applies_to(self, label: dict, is_exact: bool) -> bool:
        """Whether a cell kind is about a cell by default (a claim's ``models:`` overrides it): every cell but
        the exact denoiser's."""
        return not is_exact

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        """A cell kind's claims about one cell of a store (:class:`ridgexr.claims.evidence.StoreEvidence`)."""
        raise NotImplementedError(f"claim kind {self.name!r} is evaluated on a table (scope {self.scope!r})")

    def check_times(self, t) -> None:
        """Raise ValueError when ``t`` (a claim's times) does not fit :attr:`times`."""
        got = len(t or [])
        if self.times == 0 and got:
            raise ValueError(f"a {self.name!r} claim compares no times; remove t")
        if self.times is None and got == 0:
            raise ValueError(f"a {self.name!r} claim needs t: one or more diffusion times")
        if self.times and got != self.times:
            raise ValueError(f"a {self.name!r} claim needs t: {self.times} diffusion time(s); got {got}")

    def claim(self, estimate: float, low: float, high: float, n: int, *, statement: str | None = None,
              measure: str | None = None, excluded: int = 0, null: Null | None = None, gate: str | None = None,
              labels: dict | None = None, why_untestable: str = "", min_n: int | None = None,
              post_hoc: bool = False, **context) -> Claim:
        """One claim of this kind from its numbers: the kind's statement, measure, criterion (``context`` is
        passed to :meth:`criterion`) and minimum, unless given."""
        crit = self.criterion(**context)
        if post_hoc and not crit.post_hoc:
            crit = Criterion(crit.agrees, crit.disagrees, crit.text, crit.written, True)
        return Claim(statement if statement is not None else self.statement, measure if measure is not None
                     else self.measure, float(estimate), float(low), float(high), int(n), crit, excluded=int(excluded),
                     null=null, gate=gate, labels=dict(labels or {}), unit=self.unit,
                     min_n=self.min_draws if min_n is None else int(min_n), why_untestable=why_untestable,
                     kind=self.name)

    def cell_claim(self, evidence, spec, label: dict, estimate: float, low: float, high: float, n: int, *,
                   times: dict | None = None, **claim_args) -> Claim:
        """A cell kind's claim about the cell ``label`` of ``evidence`` (a
        :class:`ridgexr.claims.evidence.StoreEvidence`): :meth:`claim` with the statement's fields filled (the
        cell's model and ``times``, e.g. ``{"t0": .., "t1": ..}``), the cell's gate and labels (unless
        ``claim_args`` gives them) and the claim spec's post hoc flag."""
        claim_args.setdefault("labels", label)
        return self.claim(estimate, low, high, n,
                          statement=self.statement.format(model=evidence.display_name(label), **(times or {})),
                          gate=evidence.gate(label), post_hoc=spec.post_hoc, **claim_args)

    def criterion_text(self) -> str:
        """The criterion in words for the table of kinds (a kind whose regions depend on the store, such as the
        manifold's -1/k, says them in its own words)."""
        return self.criterion().label()

    def docs_row(self) -> dict:
        """The kind as one row of the generated table of kinds (docs/claims.md)."""
        text = self.criterion_text()
        claim = re.sub(r"\{(\w+)(:[^}]*)?\}", lambda m: self.docs_words.get(m.group(1), m.group(1)), self.statement)
        return {"kind": f"`{self.name}`", "scope": self.scope, "claim": claim, "measure": self.measure,
                "reference": self.reference, "null": self.null, "criterion": text, "margin": self.margin,
                "applies": self.applies, "minimum": f"{self.min_draws} {self.unit}"}


class IntervalAbove(ClaimKind):
    """A kind whose criterion is its interval above :attr:`above` (a superiority criterion): above it agrees,
    below it disagrees.  ``above = 0`` is "above 0" with no margin: the lower end strictly above 0
    (:data:`ABOVE_ZERO`) agrees, an interval wholly at or below 0 disagrees."""

    #: the level the interval must lie above
    above: ClassVar[float] = 0.0

    def criterion(self, **context) -> Criterion:
        if self.above == 0:
            return Criterion.above(ABOVE_ZERO, text="interval above 0 agrees; wholly at or below 0 disagrees",
                                   written=self.written)
        return Criterion.above(self.above, text=f"interval above {self.above:g} agrees; below {self.above:g} "
                               "disagrees", written=self.written)


class IntervalWithin(ClaimKind):
    """A kind whose criterion is equivalence within +- :attr:`within`: the interval inside [-within, within]
    agrees, wholly outside it disagrees."""

    #: the margin of the equivalence
    within: ClassVar[float] = 0.0

    def criterion(self, **context) -> Criterion:
        m = self.within
        return Criterion.within(-m, m, text=f"interval inside [-{m:g}, {m:g}] agrees; wholly outside disagrees",
                                written=self.written)
