"""Claims: a statement, the measure, the effect with its interval, and a criterion fixed before the run.

The one rule that turns evidence into a verdict (docs/claims.md).  A :class:`Criterion` names two kinds of
regions of the measure's axis, written down before the run: the region where the whole interval must lie
for "agrees", and the regions where it must lie for "disagrees".  Anything else is "inconclusive"; a claim
whose interval could not be computed (no resolved state, no draw) is "untestable: no resolved state"; a
claim about a network whose samples fail the quality gate is "untestable: the network does not generate"
(:data:`UNTESTABLE`, docs/quality.md).

An inconclusive claim says how many draws would settle it *at the observed spread*
(:func:`draws_to_resolve`: the interval's half-widths scale as 1 / sqrt(n)), or that more draws cannot,
because the estimate itself lies between the regions.

A claim carries its **null calibration** (:class:`Null`): the value the measure takes for a perfect sampler
or for fresh draws of the law, computed by the caller and stored beside the effect, never assumed.  And it
counts the draws it could not use (masked, diverged, dropped): a claim that rests on fewer than
``1 - excluded_limit`` of its draws says so in its note.

Array and scalar kernels only: no xarray here.  The store's claims are :mod:`ridgexr.claims`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import arrays

__all__ = ["Criterion", "Null", "Claim", "interval_verdict", "draws_to_resolve", "claims_frame", "claims_markdown",
           "median_interval", "UNTESTABLE", "NO_STATE", "VERDICTS", "EXCLUDED_LIMIT"]

#: a claim about a cell whose samples fail the quality gate (ridgexr.quality.gate_verdict)
UNTESTABLE = "untestable: the network does not generate"
#: a claim whose interval could not be computed (every state masked, no draw)
NO_STATE = "untestable: no resolved state"
VERDICTS = ("agrees", "disagrees", "inconclusive", NO_STATE, UNTESTABLE)
#: a claim resting on fewer than (1 - EXCLUDED_LIMIT) of its draws says so (masked, diverged, dropped)
EXCLUDED_LIMIT = 0.25

_INF = math.inf


def _region(lo: float, hi: float) -> tuple[float, float]:
    lo, hi = float(lo), float(hi)
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise ValueError(f"a region is [lo, hi] with lo <= hi (either may be infinite); got [{lo}, {hi}]")
    return lo, hi


@dataclass(frozen=True)
class Criterion:
    """Where the interval must lie for each verdict, fixed before the run.

    Parameters
    ----------
    agrees : (lo, hi)
        The closed region (either bound may be infinite) that must contain the whole interval for "agrees".
    disagrees : sequence of (lo, hi)
        The regions, any of which containing the whole interval gives "disagrees".  They must not overlap
        ``agrees`` except at a boundary.
    text : str
        The criterion in words, as written before the run.
    written : str
        Where and when it was written (a docs page and a date, or a release).
    """

    agrees: tuple[float, float]
    disagrees: tuple[tuple[float, float], ...]
    text: str
    written: str = ""

    def __post_init__(self):
        a = _region(*self.agrees)
        d = tuple(_region(*r) for r in self.disagrees)
        for lo, hi in d:
            if max(lo, a[0]) < min(hi, a[1]):
                raise ValueError(f"criterion {self.text!r}: the disagree region [{lo}, {hi}] overlaps the agree "
                                 f"region [{a[0]}, {a[1]}]")
        object.__setattr__(self, "agrees", a)
        object.__setattr__(self, "disagrees", d)

    @classmethod
    def above(cls, level: float, *, disagree_below: float | None = None, text: str = "", written: str = ""):
        """"agrees" when the interval lies above ``level``; "disagrees" when below ``disagree_below``
        (default: ``level``)."""
        low = level if disagree_below is None else disagree_below
        return cls((level, _INF), ((-_INF, low),), text or f"interval above {level:g} agrees; below {low:g} "
                   "disagrees", written)

    @classmethod
    def below(cls, level: float, *, disagree_above: float | None = None, text: str = "", written: str = ""):
        """"agrees" when the interval lies below ``level``; "disagrees" when above ``disagree_above``
        (default: ``level``)."""
        high = level if disagree_above is None else disagree_above
        return cls((-_INF, level), ((high, _INF),), text or f"interval below {level:g} agrees; above {high:g} "
                   "disagrees", written)

    @classmethod
    def within(cls, lo: float, hi: float, *, text: str = "", written: str = ""):
        """"agrees" when the interval lies inside [lo, hi]; "disagrees" when wholly outside it."""
        return cls((lo, hi), ((-_INF, lo), (hi, _INF)), text or f"interval inside [{lo:g}, {hi:g}] agrees; "
                   "wholly outside it disagrees", written)


def _inside(low: float, high: float, region: tuple[float, float]) -> bool:
    return region[0] <= low and high <= region[1]


def interval_verdict(low: float, high: float, criterion: Criterion) -> str:
    """"agrees" / "disagrees" when the interval [low, high] lies inside one of the criterion's regions,
    "inconclusive" otherwise, :data:`NO_STATE` when either bound is NaN.

    >>> c = Criterion.below(0.35, disagree_above=0.5)
    >>> interval_verdict(0.0, 0.19, c), interval_verdict(0.6, 0.9, c), interval_verdict(0.2, 0.6, c)
    ('agrees', 'disagrees', 'inconclusive')
    """
    low, high = float(low), float(high)
    if math.isnan(low) or math.isnan(high):
        return NO_STATE
    if low > high:
        raise ValueError(f"`low` ({low}) must not exceed `high` ({high})")
    if _inside(low, high, criterion.agrees):
        return "agrees"
    if any(_inside(low, high, r) for r in criterion.disagrees):
        return "disagrees"
    return "inconclusive"


#: above this multiple of a claim's draws, its note says the estimate sits at a region's edge instead of printing
#: the count (an estimate of exactly 0 against "above 0" would need ~10^20 draws by the 1 / sqrt(n) scaling; the
#: largest count in the stored tables is 1 602 x its draws)
SETTLE_LIMIT = 10_000


def draws_to_resolve(estimate: float, low: float, high: float, n: int, criterion: Criterion) -> int | None:
    """The number of draws at which the interval, shrinking as 1 / sqrt(n) about ``estimate``, would fit
    inside the region that holds ``estimate``; ``None`` when no region holds it (more draws cannot settle
    the claim at this effect) or the interval has no width to scale.

    >>> c = Criterion.below(0.35, disagree_above=0.5)
    >>> draws_to_resolve(0.2, 0.1, 0.4, 16, c)  # the upper half-width 0.2 must shrink to 0.15
    29
    """
    estimate, low, high = float(estimate), float(low), float(high)
    if not all(map(math.isfinite, (estimate, low, high))) or n < 1:
        return None
    for lo, hi in (criterion.agrees, *criterion.disagrees):
        if lo < estimate < hi:
            below, above = estimate - low, high - estimate
            k = min((estimate - lo) / below if below > 0 else _INF, (hi - estimate) / above if above > 0 else _INF)
            if not math.isfinite(k):
                return None
            return max(n, math.ceil(n / k**2))
    return None


@dataclass(frozen=True)
class Null:
    """What the measure scores for a perfect sampler or fresh draws of the law (computed, not assumed).

    ``how`` says what was computed (e.g. "256 held-out real T-shirts against the training set")."""

    value: float
    low: float = math.nan
    high: float = math.nan
    how: str = ""

    def text(self) -> str:
        """The value and its interval ("not computed" when there is none); :attr:`how` says what it is."""
        if math.isnan(self.value):
            return "not computed"
        ci = f" [{_fmt(self.low)}, {_fmt(self.high)}]" if math.isfinite(self.low) and math.isfinite(self.high) else ""
        return f"{_fmt(self.value)}{ci}"


def _fmt(v: float) -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


@dataclass(frozen=True)
class Claim:
    """One claim about one cell (or one pooled set of cells), evaluated by its criterion.

    Parameters
    ----------
    statement : str
        What is claimed, in words ("the U-Net does not memorize").
    measure : str
        What was measured and how the interval was made ("share of final samples with d1/d2 < 1/3, Wilson
        95 %").
    estimate, low, high : float
        The effect and its interval (NaN when it could not be computed).
    n : int
        The draws the interval rests on.
    criterion : Criterion
    excluded : int
        Draws that were masked, diverged or dropped and are *not* in ``n``.
    null : Null, optional
        The measure's value for a perfect sampler or fresh draws of the law.
    gate : str, optional
        The cell's quality-gate verdict ("generates", "does not generate", "not assessed"); a claim about a
        cell that does not generate reads :data:`UNTESTABLE`.  ``None`` for claims not about a network.
    labels : dict
        The cell's labels (model, schedule, ...).
    unit : str
        What ``n`` counts, as the note names it ("draws", the default; "cells" for a correlation over cells).
    """

    statement: str
    measure: str
    estimate: float
    low: float
    high: float
    n: int
    criterion: Criterion
    excluded: int = 0
    null: Null | None = None
    gate: str | None = None
    labels: dict = field(default_factory=dict)
    unit: str = "draws"

    def __post_init__(self):
        if int(self.n) < 0 or int(self.excluded) < 0:
            raise ValueError(f"claim {self.statement!r}: `n` and `excluded` count draws (>= 0); got {self.n}, "
                             f"{self.excluded}")

    @property
    def evidence(self) -> str:
        """The verdict of the interval alone, before the quality gate."""
        if self.n == 0:
            return NO_STATE
        return interval_verdict(self.low, self.high, self.criterion)

    @property
    def verdict(self) -> str:
        """:func:`interval_verdict`, or :data:`UNTESTABLE` when the cell fails the quality gate."""
        return UNTESTABLE if self.gate == "does not generate" else self.evidence

    @property
    def excluded_share(self) -> float:
        total = self.n + self.excluded
        return self.excluded / total if total else math.nan

    @property
    def note(self) -> str:
        """What would settle an inconclusive claim, and whether it rests on few of its draws."""
        parts = []
        if self.verdict == "inconclusive":
            need = draws_to_resolve(self.estimate, self.low, self.high, self.n, self.criterion)
            if need is None:
                parts.append(f"the estimate lies between the regions: more {self.unit} cannot settle it at this "
                             "effect")
            elif need > SETTLE_LIMIT * self.n:  # an estimate at a region's edge: the 1 / sqrt(n) scaling runs away
                parts.append(f"the estimate lies at a region's edge: more than {SETTLE_LIMIT} x the {self.unit} "
                             f"({self.n}) would be needed at this spread")
            else:
                parts.append(f"~{need} {self.unit} would settle it at this spread")
        if self.excluded and self.excluded_share > EXCLUDED_LIMIT:
            parts.append(f"rests on {self.n} of {self.n + self.excluded} draws ({self.excluded_share:.0%} masked, "
                         "diverged or dropped)")
        return "; ".join(parts)

    def row(self) -> dict:
        """The claim as one table row (labels first)."""
        return {**self.labels, "claim": self.statement, "measure": self.measure,
                "criterion (before the run)": self.criterion.text,
                "measured [95 %]": f"{_fmt(self.estimate)} [{_fmt(self.low)}, {_fmt(self.high)}]",
                "n": int(self.n), "excluded": int(self.excluded),
                "null": self.null.text() if self.null is not None else "",
                "null from": self.null.how if self.null is not None else "",
                "gate": self.gate or "", "verdict": self.verdict, "note": self.note}


def claims_frame(claims):
    """A pandas DataFrame of :meth:`Claim.row` per claim (columns of every claim's labels first)."""
    import pandas as pd

    rows = [c.row() for c in claims]
    labels = list(dict.fromkeys(k for c in claims for k in c.labels))
    frame = pd.DataFrame(rows)
    return frame[labels + [c for c in frame.columns if c not in labels]] if len(frame) else frame


def claims_markdown(claims, drop: tuple[str, ...] = ()) -> str:
    """The claims as a Markdown table (``drop``: columns to leave out, e.g. ``("measure",)``)."""
    frame = claims_frame(claims)
    if not len(frame):
        return "(no claims)"
    frame = frame[[c for c in frame.columns if c not in drop]]
    cells = [[str(v).replace("|", "\\|") for v in row] for row in frame.itertuples(index=False)]
    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    return head + "\n".join("| " + " | ".join(r) + " |" for r in cells)


def median_interval(values: np.ndarray, *, n_boot: int = 2000, ci: float = 0.95, seed: int = 0
                    ) -> tuple[float, float, float, int]:
    """Median of the finite ``values`` with a seeded percentile-bootstrap interval, and the number of finite
    values: (median, low, high, n).  NaN and 0 when none is finite.

    The bootstrap medians come from :func:`ridgexr.analysis.arrays.bootstrap_medians` (resampled, or above
    its ``RESAMPLE_LIMIT`` values drawn from the same law through order statistics).
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan, math.nan, 0
    rng = np.random.default_rng(seed)
    meds = arrays.bootstrap_medians(v, n_boot, rng)
    a = (1 - ci) / 2
    return float(np.median(v)), float(np.quantile(meds, a)), float(np.quantile(meds, 1 - a)), int(v.size)
