"""The verdict kernel: a claim's contrast, its interval, its null, and the one rule that turns them into a verdict.

A claim is a contrast, not a level: the measure is compared with a *reference* the theory says must differ (the
forward process's own tube, the exact denoiser, fresh draws of the law, an isotropic error by its actual law),
and the criterion is stated on that contrast with a *margin* fixed before the run, so that a control identical
to its reference reads "disagrees", not "inconclusive" (docs/claims.md).

- :class:`Criterion`: the region of the measure's axis where the whole interval must lie for "agrees", and the
  regions for "disagrees"; anything else is "inconclusive" (:func:`interval_verdict`).  ``post_hoc`` marks a
  criterion chosen after the numbers were seen: its rows say so.
- :class:`Null`: what the measure (or the contrast's reference) scores for a perfect sampler, fresh draws of the
  law or the reference itself -- computed, never assumed -- shown beside the effect.
- :class:`Claim`: one statement about one cell, with its effect, interval, draws and null.  Its verdict is
  "untestable: <why>" where the claim is true by construction or has no reference, "untestable: too few
  resolved draws (k of n)" below its minimum of independent draws (:data:`MIN_DRAWS` by default), "untestable:
  the network does not generate" where the quality gate fails, else the interval's verdict.
- Intervals whose coverage holds at :data:`MIN_DRAWS` (checked by simulation in the tests): the exact
  order-statistic interval of a median (:func:`median_ci`), the Clopper-Pearson interval of a share
  (:func:`share_ci`), Bonferroni combinations of them for contrasts of several medians or shares
  (:func:`log_median_contrast`, :func:`share_difference_ci`), and Student's t for a mean of independent
  draws (:func:`mean_t_ci`, exact under normality).

The lowest floor of the package (numpy and the standard library; scipy and pandas are imported where used):
the quality gate, the analyses and the claims registry (:mod:`ridgexr.claims`) all read their verdicts from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = ["Criterion", "Null", "Claim", "interval_verdict", "draws_to_resolve", "claims_frame", "claims_markdown",
           "median_ci", "share_ci", "share_difference_ci", "log_median_contrast", "mean_t_ci", "bonferroni_level",
           "untestable", "too_few", "AGREES", "DISAGREES", "INCONCLUSIVE", "UNTESTABLE", "NO_STATE", "VERDICTS",
           "VERDICT_WORDS", "EXCLUDED_LIMIT", "SETTLE_LIMIT", "MIN_DRAWS", "CI", "CRITERION_COLUMN", "markdown_cell"]

AGREES, DISAGREES, INCONCLUSIVE = "agrees", "disagrees", "inconclusive"
#: a claim about a cell whose samples fail the quality gate (ridgexr.quality.gate_verdict)
UNTESTABLE = "untestable: the network does not generate"
#: a claim whose interval could not be computed (every state masked, no draw)
NO_STATE = "untestable: no resolved state"
VERDICTS = (AGREES, DISAGREES, INCONCLUSIVE, NO_STATE, UNTESTABLE)
#: the words a verdict starts with: only generated tables hold them in a docs table cell (tests/test_docs_verdicts.py)
VERDICT_WORDS = (AGREES, DISAGREES, INCONCLUSIVE, "untestable")
#: a claim resting on fewer than (1 - EXCLUDED_LIMIT) of its draws says so (masked, diverged or dropped)
EXCLUDED_LIMIT = 0.25
#: the interval level of every claim
CI = 0.95
#: the fewest independent draws (trajectories, final samples, training draws: never trajectory x time) a claim's
#: interval may rest on: at 10 every interval of this module exists at the levels the claim kinds use (an exact
#: median interval at level 1 - 0.05 / 8 needs 9) and keeps its coverage (tests/test_verdicts.py simulates it);
#: below it a claim reads "untestable: too few resolved draws (k of n)"
MIN_DRAWS = 10
#: the name of the criterion's column in a claims table (a post-hoc criterion's cell starts with "post hoc")
CRITERION_COLUMN = "criterion"

_INF = math.inf


def untestable(why: str) -> str:
    """The verdict of a claim that cannot be tested here, and why: ``"untestable: <why>"``.

    >>> untestable("no fresh draws of the law")
    'untestable: no fresh draws of the law'
    """
    return f"untestable: {why}"


def too_few(k: int, n: int) -> str:
    """The verdict of a claim resting on fewer independent draws than its minimum: ``k`` resolved of ``n``.

    >>> too_few(3, 16)
    'untestable: too few resolved draws (3 of 16)'
    """
    return untestable(f"too few resolved draws ({int(k)} of {int(n)})")


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
        The criterion in words, as written before the run (with its margin).
    written : str
        Where and when it was written (a docs page and a date, or a release).
    post_hoc : bool
        True when it was chosen after the numbers it is read on were seen; its rows say "post hoc".
    """

    agrees: tuple[float, float]
    disagrees: tuple[tuple[float, float], ...]
    text: str
    written: str = ""
    post_hoc: bool = False

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
    def above(cls, level: float, *, disagree_below: float | None = None, text: str = "", written: str = "",
              post_hoc: bool = False):
        """"agrees" when the interval lies above ``level``; "disagrees" when below ``disagree_below`` (default:
        ``level``: a superiority criterion, where an interval wholly on either side of the level settles it)."""
        low = level if disagree_below is None else disagree_below
        return cls((level, _INF), ((-_INF, low),), text or f"interval above {level:g} agrees; below {low:g} "
                   "disagrees", written, post_hoc)

    @classmethod
    def below(cls, level: float, *, disagree_above: float | None = None, text: str = "", written: str = "",
              post_hoc: bool = False):
        """"agrees" when the interval lies below ``level``; "disagrees" when above ``disagree_above``
        (default: ``level``)."""
        high = level if disagree_above is None else disagree_above
        return cls((-_INF, level), ((high, _INF),), text or f"interval below {level:g} agrees; above {high:g} "
                   "disagrees", written, post_hoc)

    @classmethod
    def within(cls, lo: float, hi: float, *, text: str = "", written: str = "", post_hoc: bool = False):
        """"agrees" when the interval lies inside [lo, hi]; "disagrees" when wholly outside it (equivalence)."""
        return cls((lo, hi), ((-_INF, lo), (hi, _INF)), text or f"interval inside [{lo:g}, {hi:g}] agrees; "
                   "wholly outside it disagrees", written, post_hoc)

    @classmethod
    def equivalent(cls, center: float, agree: float, disagree: float, *, text: str = "", written: str = "",
                   post_hoc: bool = False):
        """"agrees" when the interval lies within ``center`` +- ``agree``; "disagrees" when it lies wholly
        outside ``center`` +- ``disagree`` (``disagree`` >= ``agree``); between them "inconclusive".

        >>> c = Criterion.equivalent(1.0, 0.3, 0.5)
        >>> [interval_verdict(lo, hi, c) for lo, hi in [(0.8, 1.2), (1.6, 2.0), (1.2, 2.0)]]
        ['agrees', 'disagrees', 'inconclusive']
        """
        if not (0 <= agree <= disagree):
            raise ValueError(f"`agree` and `disagree` must satisfy 0 <= agree <= disagree; got {agree}, {disagree}")
        return cls((center - agree, center + agree), ((-_INF, center - disagree), (center + disagree, _INF)),
                   text or f"interval within {center:g} +- {agree:g} agrees; wholly outside {center:g} +- "
                   f"{disagree:g} disagrees", written, post_hoc)

    def label(self) -> str:
        """The criterion as a table shows it: its text, prefixed "post hoc: " when it was chosen after the data."""
        return f"post hoc: {self.text}" if self.post_hoc else self.text


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
        return AGREES
    if any(_inside(low, high, r) for r in criterion.disagrees):
        return DISAGREES
    return INCONCLUSIVE


#: above this multiple of a claim's draws, its note says the estimate sits at a region's edge instead of printing
#: the count (an estimate of exactly 0 against "above 0" would need ~10^20 draws by the 1 / sqrt(n) scaling)
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
    """What the measure (or the contrast's reference) scores for a perfect sampler, fresh draws of the law or the
    reference itself (computed, not assumed); ``how`` says what was computed."""

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
        The contrast that was measured and how its interval was made.
    estimate, low, high : float
        The effect and its interval (NaN when it could not be computed).
    n : int
        The independent draws the interval rests on (trajectories, final samples, training draws).
    criterion : Criterion
    excluded : int
        Draws that were masked, diverged or dropped and are *not* in ``n``.
    null : Null, optional
        The reference's value (or the measure's under the null).
    gate : str, optional
        The cell's quality-gate verdict ("generates", "does not generate", "not assessed"); a claim about a
        cell that does not generate reads :data:`UNTESTABLE`.  ``None`` for claims not about a network.
    labels : dict
        The cell's labels (model, schedule, ...).
    unit : str
        What ``n`` counts, as the note names it ("draws", the default; "cells" for a correlation over cells).
    min_n : int
        The fewest ``n`` the interval may rest on (default :data:`MIN_DRAWS`); below it the verdict is
        :func:`too_few`.
    why_untestable : str
        Non-empty when the claim cannot be tested here (true by construction, no reference): the verdict is
        ``"untestable: <why_untestable>"``.
    kind : str
        The claim kind of the registry (:data:`ridgexr.claims.KINDS`) that made it.
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
    min_n: int = MIN_DRAWS
    why_untestable: str = ""
    kind: str = ""

    def __post_init__(self):
        if int(self.n) < 0 or int(self.excluded) < 0:
            raise ValueError(f"claim {self.statement!r}: `n` and `excluded` count draws (>= 0); got {self.n}, "
                             f"{self.excluded}")
        if int(self.min_n) < 1:
            raise ValueError(f"claim {self.statement!r}: `min_n` must be >= 1; got {self.min_n}")

    @property
    def evidence(self) -> str:
        """The verdict of the evidence alone, before the quality gate: untestable here, too few draws, no state,
        else :func:`interval_verdict`."""
        if self.why_untestable:
            return untestable(self.why_untestable)
        if self.n == 0:
            return NO_STATE
        if self.n < self.min_n:
            return too_few(self.n, self.n + self.excluded)
        return interval_verdict(self.low, self.high, self.criterion)

    @property
    def verdict(self) -> str:
        """:attr:`evidence`, or :data:`UNTESTABLE` when the cell fails the quality gate."""
        return UNTESTABLE if self.gate == "does not generate" else self.evidence

    @property
    def excluded_share(self) -> float:
        total = self.n + self.excluded
        return self.excluded / total if total else math.nan

    @property
    def note(self) -> str:
        """What would settle an inconclusive claim, and whether it rests on few of its draws."""
        parts = []
        if self.verdict == INCONCLUSIVE:
            need = draws_to_resolve(self.estimate, self.low, self.high, self.n, self.criterion)
            if not (math.isfinite(self.low) and math.isfinite(self.high)):  # e.g. every interval-censored time censored
                parts.append(f"the interval is unbounded: these {self.unit} do not bound the estimate, and more of the "
                             "same cannot")
            elif need is None:
                parts.append(f"the estimate lies between the regions: more {self.unit} cannot settle it at this "
                             "effect")
            elif need > SETTLE_LIMIT * self.n:  # an estimate at a region's edge: the 1 / sqrt(n) scaling runs away
                parts.append(f"the estimate lies at a region's edge: more than {SETTLE_LIMIT} x the {self.unit} "
                             f"({self.n}) would be needed at this spread")
            else:
                parts.append(f"~{need} {self.unit} would settle it at this spread")
        elif self.verdict.startswith("untestable: too few"):
            parts.append(f"needs at least {self.min_n} resolved {self.unit}")
        if self.excluded and self.excluded_share > EXCLUDED_LIMIT:
            parts.append(f"rests on {self.n} of {self.n + self.excluded} draws ({self.excluded_share:.0%} masked, "
                         "diverged or dropped)")
        return "; ".join(parts)

    def row(self) -> dict:
        """The claim as one table row (labels first)."""
        return {**self.labels, "claim": self.statement, "measure": self.measure,
                CRITERION_COLUMN: self.criterion.label(),
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


def markdown_cell(value) -> str:
    """One value as a Markdown table cell (pipes escaped, line breaks as spaces)."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def claims_markdown(claims, drop: tuple[str, ...] = ()) -> str:
    """The claims as a Markdown table (``drop``: columns to leave out, e.g. ``("measure",)``)."""
    frame = claims_frame(claims)
    if not len(frame):
        return "(no claims)"
    frame = frame[[c for c in frame.columns if c not in drop]]
    frame = frame.astype(object).where(frame.notna(), "")  # a label one claim has and another lacks: empty
    cells = [[markdown_cell(v) for v in row] for row in frame.itertuples(index=False)]
    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    return head + "\n".join("| " + " | ".join(r) + " |" for r in cells)


# ------------------------------------------------------------------------------------------------ intervals


def bonferroni_level(ci: float, m: int) -> float:
    """The level of each of ``m`` intervals whose joint coverage is at least ``ci`` (the union bound):
    1 - (1 - ci) / m.  It needs no independence between them (medians of the same trajectories at two times).

    >>> bonferroni_level(0.95, 2)
    0.975
    """
    return 1.0 - (1.0 - float(ci)) / int(m)


def _finite(values) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).ravel()
    return v[np.isfinite(v)]


def _order_rank(n: int, level: float) -> int:
    """The largest k >= 1 with P(Binomial(n, 1/2) <= k - 1) <= (1 - level) / 2, or 0 when there is none: the
    exact interval [x_(k), x_(n-k+1)] of the median then covers it with probability >= level."""
    from scipy import stats

    alpha = (1.0 - level) / 2
    j = int(stats.binom.ppf(alpha, n, 0.5))  # the smallest j with P(B <= j) >= alpha
    k = j + 1 if stats.binom.cdf(j, n, 0.5) <= alpha else j
    return max(0, min(k, (n + 1) // 2))


def median_ci(values, ci: float = CI) -> tuple[float, float, float, int]:
    """The median of the finite ``values`` with its exact distribution-free interval: (median, low, high, n).

    [x_(k), x_(n-k+1)], k the largest order whose binomial tail P(Binomial(n, 1/2) <= k - 1) is at most
    (1 - ci) / 2, covers the population median with probability at least ``ci`` for any continuous law
    (conservative; no bootstrap).  Bounds are NaN where n is too small for the level (2^-n > (1 - ci) / 2).

    >>> med, lo, hi, n = median_ci(np.arange(1.0, 21.0))
    >>> med, lo, hi, n
    (10.5, 6.0, 15.0, 20)
    """
    v = np.sort(_finite(values))
    n = int(v.size)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    k = _order_rank(n, ci)
    med = float(np.median(v))
    if k == 0:
        return med, math.nan, math.nan, n
    return med, float(v[k - 1]), float(v[n - k]), n


def log_median_contrast(groups: Sequence[tuple[np.ndarray, float]], ci: float = CI
                        ) -> tuple[float, float, float]:
    """sum_j c_j log median(values_j) with a conservative interval: each median's exact interval
    (:func:`median_ci`) at the Bonferroni level of the m groups (:func:`bonferroni_level`), combined by interval
    arithmetic.  Valid whatever the dependence between the groups (the same trajectories at two times).

    Parameters
    ----------
    groups : sequence of (values (n_j,), c_j)
        Positive values (finite ones are used) and the coefficient of their log median.
    ci : float

    Returns
    -------
    (estimate, low, high); NaN where a median or a bound is not positive or does not exist.

    Examples
    --------
    >>> a, b = np.arange(1.0, 101.0), np.arange(1.0, 101.0) / 2
    >>> est, lo, hi = log_median_contrast([(a, 1.0), (b, -1.0)])
    >>> round(float(np.exp(est)), 6), bool(lo < est < hi)
    (2.0, True)
    """
    level = bonferroni_level(ci, len(groups))
    est, low, high = 0.0, 0.0, 0.0
    for values, c in groups:
        med, lo, hi, _ = median_ci(values, level)
        if not (med > 0 and lo > 0 and hi > 0):
            return math.nan, math.nan, math.nan
        est += c * math.log(med)
        low += c * math.log(lo if c > 0 else hi)
        high += c * math.log(hi if c > 0 else lo)
    return est, low, high


def share_ci(k, n, ci: float = CI) -> tuple[float, float]:
    """The Clopper-Pearson (exact) interval of a share k / n: coverage at least ``ci`` at every true share and
    every n (conservative).  (0, 1) bounds at k = 0 and k = n are exact; NaN where n = 0.

    >>> [round(v, 4) for v in share_ci(0, 16)]
    [0.0, 0.2059]
    """
    from scipy import stats

    k, n = int(k), int(n)
    if n == 0:
        return math.nan, math.nan
    alpha = 1.0 - ci
    low = float(stats.beta.ppf(alpha / 2, k, n - k + 1)) if k > 0 else 0.0
    high = float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k)) if k < n else 1.0
    return low, high


def share_difference_ci(k1: int, n1: int, k0: int, n0: int, ci: float = CI) -> tuple[float, float, float]:
    """k1 / n1 - k0 / n0 with a conservative interval: each share's Clopper-Pearson interval at the Bonferroni
    level of two (:func:`bonferroni_level`), combined by interval arithmetic: (difference, low, high).

    >>> d, lo, hi = share_difference_ci(16, 16, 0, 1000)
    >>> d, lo > 0.7, hi
    (1.0, True, 1.0)
    """
    if n1 == 0 or n0 == 0:
        return math.nan, math.nan, math.nan
    level = bonferroni_level(ci, 2)
    lo1, hi1 = share_ci(k1, n1, level)
    lo0, hi0 = share_ci(k0, n0, level)
    return k1 / n1 - k0 / n0, lo1 - hi0, hi1 - lo0


def mean_t_ci(values, ci: float = CI) -> tuple[float, float, float, int]:
    """Mean of the finite ``values`` with Student's t interval over them: (mean, low, high, n) -- exact for
    independent normal draws; one value: NaN bounds; none: NaN and 0.

    >>> mean_t_ci([1.0, 2.0, 3.0])[0]
    2.0
    """
    from scipy import stats

    v = _finite(values)
    if v.size == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(v.mean())
    if v.size == 1:
        return mean, math.nan, math.nan, 1
    half = float(stats.t.ppf(0.5 + ci / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return mean, mean - half, mean + half, int(v.size)
