"""The quality gate: its bounds, its decision size, its diversity null and its verdict (numpy and scipy only).

Does a cell's model *generate*?  For a pixel-space Fashion-MNIST cell the gate reads four measures of the cell's
own draws (:data:`GATE_DRAWS` final samples drawn without ridge observation, ``gate_sample`` in the store):

- the **class share** k / n of draws the classifier puts in the cell's classes, against a bound set from the
  classifier's measured confusion (:func:`gate_design`): the share a perfect sampler scores is the classifier's
  recall r on held-out reals of the classes, the share a sampler with 20 % of its draws from other classes scores
  is 0.8 r + 0.2 f (f: the largest rate at which the classifier puts held-out reals of one other class in the
  cell's classes), and the decision size is the least n at which one bound separates the two at 96 / 95 %;
- the **nearest ratio** (median distance of the draws to their nearest training image over that of held-out
  reals): at most 1.5;
- the **coverage** (Naeem et al. 2020) of a fixed reference of held-out reals by the draws, in the classifier's
  features, over what a perfect sampler of as many draws covers in expectation (:func:`expected_coverage`, exact
  for exchangeable draws): at least 0.7 -- copies of one image, or draws from a few modes, cover almost nothing.

The Fréchet distance to the same fixed reference (with its floor and ceiling) is reported beside the verdict, not
read by it: at the gate's sizes its spread for a perfect sampler reaches the gap between floor and ceiling where
the crude model is close to the law in the classifier's features (every class at once).

Point sets and latents have no classifier: their gate is the nearest ratio alone (:func:`gate_verdict`).

Everything the verdict needs is a number the store keeps per cell, so :func:`gate_verdict` recomputes the
decision size and the class-share bound from them (:func:`gate_design`): the gate has one definition,
:data:`GATE`.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from .._validation import check_float, check_int
from ..verdicts import AGREES, DISAGREES, Criterion, interval_verdict

__all__ = ["GATE", "GATE_VERDICTS", "GATE_KEYS", "GATE_DRAWS", "GATE_CRITERION", "GateDesign", "gate_design",
           "decision_size", "expected_coverage", "knn_radii", "coverage", "gate_slack", "gate_verdict", "gate_seed"]

#: The quality gate, fixed before any run (docs/quality.md, "The gate"):
#:
#: - ``off_class_share`` 0.2, ``alpha`` 0.04, ``beta`` 0.05: the class-share bound and the decision size are those
#:   at which a perfect sampler fails the class-share term with probability at most ``alpha`` and a sampler with
#:   ``off_class_share`` of its draws from other classes passes it with probability at most ``beta``
#:   (:func:`gate_design`).  ``alpha`` is 0.04, not 0.05, so that the two other terms may fail a perfect sampler
#:   one time in a hundred and the whole gate still passes it 95 % of the time (it does, by simulation:
#:   docs/quality.md);
#: - ``nearest_ratio_max`` 1.5: a sampler of the law scores ~1; class-mean-plus-noise images 1.7; copies of
#:   training images << 1 (copies of a large training set pass the gate: the memorization analyses measure
#:   memorization; copies of a few images fail the coverage);
#: - ``coverage_min`` 0.7 with ``coverage_k`` 5 neighbours: coverage over a perfect sampler's expectation; a
#:   perfect sampler scores 1 with a spread of 0.02-0.07 (64-320 draws), copies of the class mean 0.01-0.03;
#: - ``min_draws`` 64: the decision size where the class share sets none (every class in the cell, no off-class
#:   law) and its least value otherwise (the coverage is read against its null at the number of draws).
GATE = {"off_class_share": 0.2, "alpha": 0.04, "beta": 0.05, "nearest_ratio_max": 1.5, "coverage_min": 0.7,
        "coverage_k": 5, "min_draws": 64}

#: the gate's own final samples per cell of a pixel-space Fashion-MNIST run: above the decision size of every
#: single class with the cached classifier (Shirt, recall 0.68: 257; Coat 135; T-shirt/top 99; docs/quality.md),
#: with room for a classifier trained with other threads (Shirt at recall 0.66 needs 295)
GATE_DRAWS = 320

#: the verdicts of :func:`gate_verdict`
GATE_VERDICTS = ("generates", "does not generate", "not assessed")

#: the gate's criterion on its slack (:func:`gate_slack`: each read term over its bound, the least of them), read
#: by the verdict kernel's one rule (:func:`ridgexr.verdicts.interval_verdict`) on the slack itself: the gate is a
#: test whose bounds already hold the sampling error (the class share's margin is set from its binomial law, at size
#: ``alpha`` and power ``1 - beta`` at the decision size), so no interval is put around it
GATE_CRITERION = Criterion.above(
    1.0, text="the gate's slack (each term over its bound, the least of them) at least 1 agrees; below 1 disagrees",
    written="docs/quality.md, before the gate's own draws were run")

#: the measures :func:`gate_verdict` reads, by keyword (each stored as ``quality_<key>``)
GATE_KEYS = ("class_share", "nearest_ratio", "class_share_heldout", "class_share_offclass", "n_heldout", "n_draws",
             "coverage", "coverage_null")

#: the largest decision size :func:`gate_design` searches (a classifier that needs more cannot gate the cell)
MAX_DECISION_SIZE = 5000

#: the random stream of the gate's draws (``0x67617465`` spells "gate"), apart from the observed trajectories'
GATE_STREAM = 0x67617465


def gate_seed(seed: int, batch: int = 0) -> int:
    """The sampler seed of batch ``batch`` of a cell's gate draws: a 63-bit integer of
    ``numpy.random.SeedSequence([seed, GATE_STREAM, batch])``, so they are independent of the observed
    trajectories (seed ``seed``) and of each other.

    >>> gate_seed(0) == gate_seed(0) != gate_seed(1), gate_seed(0) != gate_seed(0, 1)
    (True, True)
    """
    seed = check_int(seed, "seed", min_val=0)
    batch = check_int(batch, "batch", min_val=0)
    state = np.random.SeedSequence([seed, GATE_STREAM, batch]).generate_state(1, np.uint64)[0]
    return int(state >> np.uint64(1))


@dataclass(frozen=True)
class GateDesign:
    """The class-share term of the gate for one cell.

    Attributes
    ----------
    n : int
        The decision size of the term: the least number of draws at which ``share_min`` separates the two
        samplers.
    share_min : float
        The bound: the class share (k / n) must be at least this, r - ``margin``.
    margin : float
        How far below the recall r the share may fall.
    recall, offclass : float
        The share a perfect sampler scores (r, measured on ``n_heldout`` held-out reals) and the rate f at which
        the classifier puts held-out reals of the most confusable other class in the cell's classes.
    n_heldout : int
        How many held-out reals r was measured on.
    alternative : float
        The share a sampler with ``off_class_share`` of its draws from that class scores: (1 - s) r + s f.
    false_fail, false_pass : float
        At ``n``: the chance a perfect sampler fails the term (<= alpha) and that the alternative passes it
        (<= beta), both over the draws and over the held-out reals r is measured on (exact binomial sums).
    """

    n: int
    share_min: float
    margin: float
    recall: float
    offclass: float
    n_heldout: int
    alternative: float
    false_fail: float
    false_pass: float


def _tails(n: int, margin: float, p0: float, p1: float, m: int) -> tuple[float, float]:
    """P(X0/n < Y/m - margin) and P(X1/n >= Y/m - margin) for X0 ~ Bin(n, p0), X1 ~ Bin(n, p1), Y ~ Bin(m, p0):
    a perfect sampler failing and the alternative passing, the recall Y/m measured on m held-out reals (exact sums
    over Y; X < n (y/m - margin) is X <= ceil(n (y/m - margin)) - 1)."""
    from scipy import stats

    lo, hi = stats.binom.ppf([1e-13, 1 - 1e-13], m, p0)  # Y outside these: a total weight below 1e-12
    y = np.arange(int(lo), int(hi) + 1)
    weight = stats.binom.pmf(y, m, p0)
    below = np.ceil(n * (y / m - margin) - 1e-12) - 1.0  # the largest count that fails
    return float(weight @ stats.binom.cdf(below, n, p0)), float(weight @ stats.binom.sf(below, n, p1))


def _margin(n: int, p0: float, m: int, alpha: float) -> float:
    """The least margin whose failure chance for a perfect sampler at n draws is <= alpha (bisection: the chance
    falls with the margin)."""
    lo, hi = 0.0, 1.0
    for _ in range(40):  # to ~1e-12, below every lattice step k/n - y/m
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _tails(n, mid, p0, p0, m)[0] <= alpha else (mid, hi)
    return hi


@functools.lru_cache(maxsize=1024)
def _design(recall: float, offclass: float, n_heldout: int, off_share: float, alpha: float,
            beta: float) -> GateDesign | None:
    p1 = (1.0 - off_share) * recall + off_share * offclass
    if not p1 < recall:
        return None

    def passes(n: int) -> tuple[bool, float, float, float]:
        margin = _margin(n, recall, n_heldout, alpha)
        fail0, pass1 = _tails(n, margin, recall, p1, n_heldout)
        return pass1 <= beta, margin, fail0, pass1

    # where to start: half the size the normal approximation asks (the exact criterion is a sawtooth in n; below
    # half the approximate size it fails by a wide margin), then every n upward: the least n that passes
    from statistics import NormalDist

    z_a, z_b = NormalDist().inv_cdf(1 - alpha), NormalDist().inv_cdf(1 - beta)
    n = np.arange(1, MAX_DECISION_SIZE + 1)
    q0, q1 = recall * (1 - recall), p1 * (1 - p1)
    need = z_a * np.sqrt(q0 * (1 / n + 1 / n_heldout)) + z_b * np.sqrt(q1 / n + q0 / n_heldout)
    approx = np.flatnonzero(need <= recall - p1)
    start = max(1, int(n[approx[0]]) // 2) if approx.size else MAX_DECISION_SIZE // 2
    hi = next((k for k in range(start, MAX_DECISION_SIZE + 1) if passes(k)[0]), None)
    if hi is None:
        return None
    _, margin, fail0, pass1 = passes(hi)
    return GateDesign(n=hi, share_min=float(recall - margin), margin=float(margin), recall=float(recall),
                      offclass=float(offclass), n_heldout=int(n_heldout), alternative=float(p1),
                      false_fail=fail0, false_pass=pass1)


def gate_design(recall: float, offclass: float, n_heldout: int, *,
                off_class_share: float = GATE["off_class_share"], alpha: float = GATE["alpha"],
                beta: float = GATE["beta"]) -> GateDesign | None:
    """The class-share bound and the decision size of the gate, from the classifier's measured confusion.

    A perfect sampler's draws land in the cell's classes with probability p0, the classifier's recall on reals of
    the classes; it is measured as r = Y / m on m = ``n_heldout`` held-out reals.  A sampler with a share
    s = ``off_class_share`` of its draws from another class lands there with p1 = (1 - s) p0 + s f, f =
    ``offclass``.  The gate passes n draws of which k land in the classes when k / n >= r - margin.  With
    p0 = ``recall``, for each n the margin is the least one at which a perfect sampler fails with probability
    <= ``alpha``, the probability taken over its draws (X ~ Bin(n, p0)) and over the held-out reals
    (Y ~ Bin(m, p0)), so that a recall measured a little high does not fail perfect samplers; the decision size is
    the least n at which the alternative (X ~ Bin(n, p1)) passes with probability <= ``beta``.  Exact binomial
    sums over Y (scipy), the margin by bisection, n by a scan upward from half the normal approximation's size.
    With more draws than the decision size the same bound's two error rates keep falling (up to the binomial
    lattice's small sawtooth).

    Parameters
    ----------
    recall : float in (0, 1]
        r, the classifier's recall on held-out reals of the cell's classes.
    offclass : float in [0, 1]
        The largest rate, over the classes not in the cell, at which the classifier puts held-out reals of that
        class in the cell's classes (a sampler whose off-class draws mix several classes lands in the cell's
        classes less often, so it fails at least as often).
    n_heldout : int
        m, the held-out reals ``recall`` was measured on.
    off_class_share, alpha, beta : float in (0, 1)

    Returns
    -------
    GateDesign, or None when no n up to :data:`MAX_DECISION_SIZE` separates the two (p1 >= p0: a classifier
    that cannot tell the classes apart).

    Examples
    --------
    >>> d = gate_design(0.865, 0.142, 750)  # T-shirt/top with the cached classifier; Shirts land there at 0.142
    >>> d.n, round(d.share_min, 3), d.false_fail <= 0.04, d.false_pass <= 0.05
    (96, 0.798, True, True)
    """
    recall = check_float(recall, "recall", min_val=0, max_val=1, include_boundaries="right")
    offclass = check_float(offclass, "offclass", min_val=0, max_val=1)
    n_heldout = check_int(n_heldout, "n_heldout", min_val=1)
    off_class_share = check_float(off_class_share, "off_class_share", min_val=0, max_val=1,
                                  include_boundaries="neither")
    alpha = check_float(alpha, "alpha", min_val=0, max_val=1, include_boundaries="neither")
    beta = check_float(beta, "beta", min_val=0, max_val=1, include_boundaries="neither")
    return _design(float(recall), float(offclass), int(n_heldout), float(off_class_share), float(alpha), float(beta))


def decision_size(recall: float | None = None, offclass: float | None = None,
                  n_heldout: float | None = None) -> int | None:
    """The gate's decision size for a cell: max(:func:`gate_design`'s n, ``GATE["min_draws"]``), or
    ``GATE["min_draws"]`` when the cell has no off-class law (``offclass`` None or NaN: every class is the
    cell's); None when the classifier cannot separate the two samplers, or ``recall`` or ``n_heldout`` is missing.

    >>> decision_size(0.865, 0.142, 750), decision_size(0.973, 0.002, 750), decision_size()
    (96, 64, 64)
    """
    if offclass is None or math.isnan(offclass):
        return int(GATE["min_draws"])
    if recall is None or math.isnan(recall) or n_heldout is None or math.isnan(n_heldout):
        return None
    design = gate_design(recall, offclass, int(n_heldout))
    return None if design is None else max(design.n, int(GATE["min_draws"]))


# ---------------------------------------------------------------------------------------------- coverage
def expected_coverage(n: int, m: int, k: int = GATE["coverage_k"]) -> float:
    """What a perfect sampler of ``n`` draws covers in expectation of a reference of ``m`` reals (k neighbours).

    A real is covered when a draw lies closer to it than its k-th nearest other real.  For draws exchangeable
    with the reals (fresh draws of the same law), the k points nearest to a real among the m - 1 other reals and
    the n draws are a uniformly random k-subset, so the real is uncovered with probability
    C(m - 1, k) / C(m - 1 + n, k):

        E[coverage] = 1 - prod_{i=0}^{k-1} (m - 1 - i) / (m - 1 + n - i),

    whatever the law and the feature map (exact; ties have probability 0).

    Examples
    --------
    >>> round(expected_coverage(500, 500), 4)  # Naeem et al.'s n = m: about 1 - 2^-k
    0.9692
    """
    n = check_int(n, "n", min_val=0)
    m = check_int(m, "m", min_val=2)
    k = check_int(k, "k", min_val=1, max_val=m - 1)
    i = np.arange(k)
    return float(1.0 - np.prod((m - 1 - i) / (m - 1 + n - i)))


def _pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances (len(a), len(b)), float64, clipped at 0 before the root."""
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.sqrt(np.clip(d2, 0.0, None))


def knn_radii(reference, k: int = GATE["coverage_k"]) -> np.ndarray:
    """Distance of each reference point (m, f) to its k-th nearest other reference point, (m,).

    >>> knn_radii(np.array([[0.0], [1.0], [3.0]]), k=1).tolist()
    [1.0, 1.0, 2.0]
    """
    ref = np.asarray(reference, dtype=np.float64)
    if ref.ndim != 2 or not np.isfinite(ref).all():
        raise ValueError(f"`reference` must be a finite 2-D array; got shape {ref.shape}")
    k = check_int(k, "k", min_val=1, max_val=ref.shape[0] - 1)
    d = _pairwise(ref, ref)
    np.fill_diagonal(d, np.inf)
    return np.partition(d, k - 1, axis=1)[:, k - 1]


def coverage(samples, reference, radii) -> float:
    """Share of reference points with a sample strictly inside their k-NN ball (Naeem et al. 2020's coverage).

    coverage = (1/m) sum_j 1[min_i |s_i - r_j| < radius_j], radius_j = :func:`knn_radii` of the reference.

    Parameters
    ----------
    samples : (n, f) array
        Features of the draws (finite).
    reference : (m, f) array
        Features of the reference reals.
    radii : (m,) array
        :func:`knn_radii` of ``reference``.

    Returns
    -------
    float in [0, 1]; NaN for no sample.

    Examples
    --------
    >>> ref = np.array([[0.0], [1.0], [3.0]])
    >>> coverage(np.array([[0.5]]), ref, knn_radii(ref, k=1))  # inside the balls of 0 and 1, not of 3
    0.6666666666666666
    """
    s = np.asarray(samples, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    if not len(s):
        return math.nan
    nearest = _pairwise(ref, s).min(1)  # (m,): a few hundred x a few hundred features
    return float(np.mean(nearest < np.asarray(radii, dtype=np.float64)))


# --------------------------------------------------------------------------------------------- verdict
def _measure(value, name: str, *, max_val: float | None = None) -> float | None:
    """None for a missing measure (None or NaN), else the value as a float >= 0 (inf allowed)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a real number or None; got {value!r} of type {type(value).__name__}")
    if math.isnan(value):
        return None
    value = check_float(value, name, min_val=0, finite=False)
    if max_val is not None and value > max_val:
        raise ValueError(f"`{name}` must be <= {max_val}; got {value!r}")
    return float(value)


def gate_verdict(class_share: float | None = None, nearest_ratio: float | None = None, *,
                 class_share_heldout: float | None = None, class_share_offclass: float | None = None,
                 n_heldout: float | None = None, n_draws: float | None = None, coverage: float | None = None,
                 coverage_null: float | None = None) -> str:
    """The quality gate's verdict on a cell from the measures of its draws (:data:`GATE`).

    Each term that the cell's measures allow is read (a measure given as None or NaN is not available):

    - **class share** (images with a classifier): ``class_share`` >= the bound of
      :func:`gate_design` (``class_share_heldout``, ``class_share_offclass``, ``n_heldout``); with no off-class law
      (``class_share_offclass`` NaN: every class is the cell's) the term is not read;
    - **nearest ratio**: <= ``GATE["nearest_ratio_max"]`` (inf fails);
    - **coverage**: ``coverage`` / ``coverage_null`` >= ``GATE["coverage_min"]``.

    "does not generate" when a read term fails; else "not assessed" when the image measures rest on fewer draws
    than the decision size (:func:`decision_size`; ``n_draws`` missing: a store written before the gate drew its
    own samples) or when nothing is available; else "generates".  Bounds are inclusive.  Point sets and latents
    have the nearest ratio alone, at any number of samples.  Whether a term fails is the verdict kernel's rule
    (:func:`ridgexr.verdicts.interval_verdict`) under :data:`GATE_CRITERION` on the gate's slack
    (:func:`gate_slack`): "disagrees" is "does not generate", "agrees" at the decision size "generates".

    Parameters
    ----------
    class_share, class_share_heldout, class_share_offclass : float in [0, 1], optional
        k / n of the draws, the recall r on held-out reals of the classes, the off-class rate f.
    n_heldout : float, optional
        The held-out reals r was measured on.
    nearest_ratio : float >= 0, optional
    n_draws : float, optional
        The number of draws the measures were taken on (diverged draws included: they count against the share).
    coverage, coverage_null : float in [0, 1], optional

    Returns
    -------
    str, one of :data:`GATE_VERDICTS`.

    Examples
    --------
    >>> gate_verdict(nearest_ratio=1.5), gate_verdict(nearest_ratio=1.6), gate_verdict()
    ('generates', 'does not generate', 'not assessed')
    >>> m = dict(class_share_heldout=0.865, class_share_offclass=0.142, n_heldout=750, n_draws=320, coverage=0.9,
    ...          coverage_null=0.984)
    >>> gate_verdict(0.80, 1.1, **m), gate_verdict(0.79, 1.1, **m), gate_verdict(0.80, 1.1, **m | {"n_draws": 16})
    ('generates', 'does not generate', 'not assessed')
    """
    terms, unsure = _gate_terms(class_share, nearest_ratio, class_share_heldout=class_share_heldout,
                                class_share_offclass=class_share_offclass, n_heldout=n_heldout, n_draws=n_draws,
                                coverage=coverage, coverage_null=coverage_null)
    slack = min(terms.values()) if terms else math.nan
    verdict = interval_verdict(slack, slack, GATE_CRITERION) if terms else None
    if verdict == DISAGREES:
        return "does not generate"
    if unsure or verdict != AGREES:
        return "not assessed"
    return "generates"


def _gate_terms(class_share=None, nearest_ratio=None, *, class_share_heldout=None, class_share_offclass=None,
                n_heldout=None, n_draws=None, coverage=None, coverage_null=None) -> tuple[dict, bool]:
    """The read terms of the gate, each as its measure over its bound (>= 1 passes), and whether the cell is
    below its decision size (or has a class share without a design): (terms, unsure)."""
    share = _measure(class_share, "class_share", max_val=1)
    ratio = _measure(nearest_ratio, "nearest_ratio")
    recall = _measure(class_share_heldout, "class_share_heldout", max_val=1)
    offclass = _measure(class_share_offclass, "class_share_offclass", max_val=1)
    n = _measure(n_draws, "n_draws")
    m = _measure(n_heldout, "n_heldout")
    cov, cov0 = _measure(coverage, "coverage", max_val=1), _measure(coverage_null, "coverage_null", max_val=1)
    terms, unsure = {}, False
    if ratio is not None:  # ratio <= max  <=>  max / ratio >= 1 (0 passes, inf fails)
        terms["nearest_ratio"] = math.inf if ratio == 0 else GATE["nearest_ratio_max"] / ratio
    if cov is not None and cov0:  # cov / cov0 >= min  <=>  (cov / cov0) / min >= 1 (division is monotone)
        terms["coverage"] = (cov / cov0) / GATE["coverage_min"]
    images = share is not None or cov is not None  # a cell read through the classifier
    if share is not None and offclass is not None:
        design = gate_design(recall, offclass, int(m)) if recall is not None and m else None
        if design is None:
            unsure = True
        else:  # share >= share_min  <=>  share / share_min >= 1
            terms["class_share"] = share / design.share_min if design.share_min > 0 else math.inf
    if images:
        size = decision_size(recall, offclass, m)
        unsure |= n is None or size is None or n < size
    return terms, unsure


def gate_slack(class_share: float | None = None, nearest_ratio: float | None = None, *,
               class_share_heldout: float | None = None, class_share_offclass: float | None = None,
               n_heldout: float | None = None, n_draws: float | None = None, coverage: float | None = None,
               coverage_null: float | None = None) -> float:
    """The gate's slack: over the terms :func:`gate_verdict` reads, the least of each measure over its bound,
    written so that 1 is the bound and more is better (k/n over the class-share bound, 1.5 over the nearest ratio,
    coverage over its null over 0.7).  A term at its bound gives exactly 1; the gate's verdict is
    :data:`GATE_CRITERION` read on it (below its decision size the cell is "not assessed" whatever the slack).

    Parameters
    ----------
    The measures of :func:`gate_verdict`, by the same names.

    Returns
    -------
    float >= 0 (inf when every read term is unbounded); NaN when no term can be read.

    Examples
    --------
    >>> gate_slack(nearest_ratio=1.5), gate_slack(nearest_ratio=3.0, coverage=0.7, coverage_null=1.0), gate_slack()
    (1.0, 0.5, nan)
    """
    terms, _ = _gate_terms(class_share, nearest_ratio, class_share_heldout=class_share_heldout,
                           class_share_offclass=class_share_offclass, n_heldout=n_heldout, n_draws=n_draws,
                           coverage=coverage, coverage_null=coverage_null)
    return min(terms.values()) if terms else math.nan
