"""Sample quality of a pixel-space Fashion-MNIST cell, read against a fixed reference of held-out reals: class
share, nearest ratio, coverage and the Fréchet distance in the classifier's features, and the gate's verdict.

The reference (:func:`gate_reference`) is built once per classifier and set of classes from the test split, never
from the cell's training images, so that no null depends on the cell's training-set size:

- a fixed **reference set** of :data:`N_REFERENCE` test images of the classes (a seeded subset): the coverage's
  reals (with their k-NN radii), the Fréchet distance's reference moments, and the **crude model** of the
  ceiling: the per-class mean reference image plus independent Gaussian noise with the class's per-pixel spread,
  clipped to [-1, 1] (the pixel range every real image has, so the ceiling measures missing structure, not
  out-of-range pixels);
- the other test images of the classes, the **pool** (reals that are not in the reference): the classifier's
  **recall** r is measured on them, and the Fréchet floor draws from them (as many as the draws: what a perfect
  sampler scores);
- the classifier's **off-class rate** f, the largest share of the test images of one other class that it puts in
  the cell's classes: with r, the class share's null and alternative (:func:`ridgexr.quality.gate_design`);
- every test image of the classes: the nearest ratio's held-out reals.

The floor and the ceiling depend on the number of draws only (each the mean over ``n_reference_draws`` seeded
draws), which is the same for every cell of a run (:data:`ridgexr.quality.GATE_DRAWS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._validation import check_int
from ..analysis.arrays import proportion_ci
from ..datasets.images import load_images
from .classifier import TrainedClassifier
from .gate import GATE, GATE_KEYS, coverage, expected_coverage, gate_verdict, knn_radii
from .measures import (check_ci, check_points, frechet_from_moments, gaussian_moments, nearest_distances,
                       ratio_interval)

__all__ = ["image_quality", "heldout_reals", "gate_reference", "reference_for", "GateReference", "draw_measures",
           "gate_power",
           "IMAGE_QUALITY_KEYS", "N_REFERENCE_DRAWS", "N_REFERENCE"]

#: default number of seeded draws the Frechet floor and ceiling are averaged over
N_REFERENCE_DRAWS = 5

#: test images of the cell's classes in the fixed reference set (coverage, Fréchet moments); the others (750 of a
#: Fashion-MNIST class) measure the recall and are the Fréchet floor's draws
N_REFERENCE = 250

#: the random stream of the reference subset (``0x72656665`` spells "refe")
REFERENCE_STREAM = 0x72656665

#: the keys of :func:`image_quality`'s result, in order
IMAGE_QUALITY_KEYS = ("nearest_ratio", "nearest_ratio_lower", "nearest_ratio_upper", "frechet", "frechet_floor",
                      "frechet_ceiling", "class_share", "class_share_lower", "class_share_upper",
                      "class_share_heldout", "class_share_offclass", "n_heldout", "coverage", "coverage_null",
                      "classifier_accuracy", "n_draws", "n_finite", "gate")


def heldout_reals(images: str = "fashion-mnist", classes=None, scale: str = "symmetric"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The test-split images of ``classes`` (Fashion-MNIST: 1 000 per class), flattened, and their labels.

    Read by :func:`ridgexr.datasets.load_images` (``split="test"``), so the files are located and
    count-checked as for a training set.

    Parameters
    ----------
    images : str
        A named set or an IDX folder.
    classes : sequence of int, optional
        Classes to keep (all when None).
    scale : {"unit", "symmetric"}
        Pixels in [0, 1] or [-1, 1] (the scale of the image models and of the classifier).

    Returns
    -------
    images : (R, H * W) float64 array
    labels : (R,) int64 array

    Examples
    --------
    >>> x, y = heldout_reals(classes=[0])  # doctest: +SKIP
    >>> x.shape, set(y.tolist())  # doctest: +SKIP
    ((1000, 784), {0})
    """
    x, y, _, _ = load_images(images, classes=classes, scale=scale, split="test")
    return x, y


@dataclass
class GateReference:
    """What the gate reads a cell's draws against (:func:`gate_reference`): one per classifier and set of classes.

    Attributes
    ----------
    classes : (c,) int array
        The cell's classes.
    reals : (R, 784) array
        Every test image of the classes, [-1, 1]: the nearest ratio's held-out reals.
    reference_features : (M, 64) array
        Classifier features of the reference set (M = min(:data:`N_REFERENCE`, R // 2) test images).
    radii : (M,) array
        Their k-NN radii (:func:`ridgexr.quality.knn_radii`, k = ``GATE["coverage_k"]``).
    moments : (mu (64,), cov (64, 64))
        Gaussian moments of ``reference_features``.
    pool_features : (R - M, 64) array
        Features of the other test images of the classes (the floor's draws).
    reference_index, pool_index : (M,), (R - M) int arrays
        Which rows of ``reals`` are the reference set and the pool.
    crude_mean, crude_std : (c', 784) arrays; crude_weight : (c',) array
        Per class of the reference set: mean and per-pixel standard deviation of its images, and its share.
    recall : float
        Share of the pool's images that the classifier puts in the classes.
    n_heldout : int
        The pool's size (the reals ``recall`` is measured on).
    offclass : float
        Largest share, over the other classes, of their test images that it puts in the classes; NaN when the
        cell has every class.
    accuracy : float
        The classifier's accuracy on the whole test split.
    seed : int
        Seed of the reference subset and of the floor's and ceiling's draws.
    n_reference_draws : int
    """

    classes: np.ndarray
    reals: np.ndarray
    reference_features: np.ndarray
    radii: np.ndarray
    moments: tuple[np.ndarray, np.ndarray]
    pool_features: np.ndarray
    reference_index: np.ndarray
    pool_index: np.ndarray
    crude_mean: np.ndarray
    crude_std: np.ndarray
    crude_weight: np.ndarray
    recall: float
    n_heldout: int
    offclass: float
    accuracy: float
    seed: int
    n_reference_draws: int
    classifier: TrainedClassifier = field(repr=False)
    _floors: dict = field(default_factory=dict, repr=False)

    def floor_ceiling(self, n: int) -> tuple[float, float]:
        """The Fréchet floor and ceiling at ``n`` draws (n >= 2), each the mean over ``n_reference_draws``
        seeded draws: ``n`` pool reals (without replacement while the pool lasts) and ``n`` crude images, each
        against the reference moments.  Cached per n."""
        n = check_int(n, "n", min_val=2)
        if n not in self._floors:
            rng = np.random.default_rng([self.seed, n])
            floors, ceilings = [], []
            pool = self.pool_features
            for _ in range(self.n_reference_draws):  # a few seeded draws
                rows = rng.choice(len(pool), size=n, replace=n > len(pool))
                floors.append(frechet_from_moments(*gaussian_moments(pool[rows]), *self.moments))
                which = rng.choice(len(self.crude_weight), size=n, p=self.crude_weight)
                crude = np.clip(self.crude_mean[which] + self.crude_std[which]
                                * rng.standard_normal((n, self.crude_mean.shape[1])), -1.0, 1.0)
                ceilings.append(frechet_from_moments(*gaussian_moments(self.classifier.features(crude)),
                                                     *self.moments))
            self._floors[n] = (float(np.mean(floors)), float(np.mean(ceilings)))
        return self._floors[n]


def gate_reference(classifier: TrainedClassifier, images, labels, classes=None, *, n_reference: int = N_REFERENCE,
                   seed: int = 0, n_reference_draws: int = N_REFERENCE_DRAWS) -> GateReference:
    """The gate's reference for a cell's classes, from the test split (every class, with labels).

    Parameters
    ----------
    classifier : TrainedClassifier
    images : (T, 784) array
        The whole test split in [-1, 1] (:func:`heldout_reals` with ``classes=None``).
    labels : (T,) int array
        Their classes.
    classes : sequence of int, optional
        The cell's classes (every label when None).
    n_reference : int
        Size of the reference set (at most half the test images of the classes).
    seed : int
        Seed of the reference subset and of the floor's and ceiling's draws.
    n_reference_draws : int
        Draws averaged for the Fréchet floor and ceiling.

    Returns
    -------
    GateReference

    Raises
    ------
    ValueError
        Shapes, non-finite images, labels not integers, or classes with no test image.
    """
    x = check_points(images, "images", k=784, min_rows=4)
    y = np.asarray(labels)
    if y.shape != (len(x),) or y.dtype.kind not in "iu":
        raise ValueError(f"`labels` must be ({len(x)},) integers; got shape {y.shape}, dtype {y.dtype}")
    cls = np.unique(y) if classes is None else np.asarray(classes)
    if cls.ndim != 1 or cls.size == 0 or cls.dtype.kind not in "iu":
        raise ValueError(f"`classes` must be a non-empty sequence of integers; got {classes!r}")
    cls = np.unique(cls)
    inside = np.isin(y, cls)
    missing = sorted(set(cls.tolist()) - set(y[inside].tolist()))
    if missing:
        raise ValueError(f"`classes` {cls.tolist()}: no test image of class {missing}")
    n_reference = check_int(n_reference, "n_reference", min_val=2)
    seed = check_int(seed, "seed", min_val=0)
    n_reference_draws = check_int(n_reference_draws, "n_reference_draws", min_val=1)
    all_features, predicted = classifier.features_and_predictions(x)  # one pass over the test split
    predicted_in = np.isin(predicted, cls)
    others = [c for c in np.unique(y) if c not in cls]
    offclass = max((float(predicted_in[y == c].mean()) for c in others), default=math.nan)
    reals, real_labels = x[inside], y[inside]
    rng = np.random.default_rng([seed, REFERENCE_STREAM])
    order = rng.permutation(len(reals))
    m = min(n_reference, len(reals) // 2)
    ref, pool = np.sort(order[:m]), np.sort(order[m:])
    recall = float(predicted_in[inside][pool].mean())
    feats = all_features[inside].astype(np.float64)
    present = np.unique(real_labels[ref])
    by_class = [real_labels[ref] == c for c in present]
    return GateReference(
        classes=cls, reals=reals, reference_features=feats[ref], radii=knn_radii(feats[ref], GATE["coverage_k"]),
        moments=gaussian_moments(feats[ref]), pool_features=feats[pool], reference_index=ref, pool_index=pool,
        crude_mean=np.stack([reals[ref][w].mean(0) for w in by_class]),  # per class (a few), not per image
        crude_std=np.stack([reals[ref][w].std(0) for w in by_class]),
        crude_weight=np.array([w.mean() for w in by_class]), recall=recall, n_heldout=len(pool), offclass=offclass,
        accuracy=float(classifier.test_accuracy), seed=seed, n_reference_draws=n_reference_draws,
        classifier=classifier)


#: references built by :func:`reference_for` in this process: {(images, classifier key, classes): reference}
_REFERENCES: dict = {}
#: at most this many are kept
REFERENCES_KEPT = 4


def reference_for(classifier: TrainedClassifier, images: str, classes=None) -> GateReference:
    """:func:`gate_reference` of a named set's test split for ``classes``, built once per process and classifier
    (every cell of a run shares it)."""
    key = (str(images), classifier.key, None if classes is None else tuple(sorted(int(c) for c in classes)))
    if key not in _REFERENCES:
        x, y = heldout_reals(images)
        _REFERENCES[key] = gate_reference(classifier, x, y, classes)
        while len(_REFERENCES) > REFERENCES_KEPT:  # the oldest first (~70 MB each for every class at once)
            _REFERENCES.pop(next(iter(_REFERENCES)))
    return _REFERENCES[key]


def draw_measures(reference: GateReference, features, in_class: int, n_draws: int, sample_nearest,
                  real_nearest, *, frechet: bool = True) -> dict:
    """The gate's measures of a cell's draws from what each draw contributes (no intervals): what
    :func:`image_quality` computes from the images, and what a simulation of the gate's power resamples.

    Parameters
    ----------
    reference : GateReference
    features : (n_finite, 64) array
        Classifier features of the finite draws.
    in_class : int
        How many finite draws the classifier puts in the cell's classes.
    n_draws : int
        How many draws there are (diverged ones included: they count against the class share and the coverage's
        null).
    sample_nearest : (n_finite,) array
        Distance of each finite draw to its nearest training image.
    real_nearest : (R,) array
        The same for the reference's held-out reals.
    frechet : bool
        Whether to compute the Fréchet distance (NaN otherwise: the verdict does not read it).

    Returns
    -------
    dict: ``class_share``, ``class_share_heldout``, ``class_share_offclass``, ``n_heldout``, ``nearest_ratio``,
    ``coverage``,
    ``coverage_null``, ``frechet``, ``frechet_floor``, ``frechet_ceiling``, ``classifier_accuracy``, ``n_draws``,
    ``n_finite`` (floats; NaN where fewer than 1, or 2 for the Fréchet distance, finite draws) and ``gate``.
    """
    f = np.asarray(features, dtype=np.float64)
    n_fin = len(f)
    nan = math.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = float(np.median(sample_nearest) / np.median(real_nearest)) if n_fin else nan
    fd = floor = ceiling = nan
    if n_fin >= 2 and frechet:
        fd = frechet_from_moments(*gaussian_moments(f), *reference.moments)
        floor, ceiling = reference.floor_ceiling(n_fin)
    out = {"class_share": in_class / n_draws if n_draws else nan, "class_share_heldout": reference.recall,
           "class_share_offclass": reference.offclass, "n_heldout": float(reference.n_heldout), "nearest_ratio": ratio,
           "coverage": coverage(f, reference.reference_features, reference.radii) if n_fin else nan,
           "coverage_null": expected_coverage(int(n_draws), len(reference.radii), GATE["coverage_k"]),
           "frechet": fd, "frechet_floor": floor, "frechet_ceiling": ceiling,
           "classifier_accuracy": reference.accuracy, "n_draws": float(n_draws), "n_finite": float(n_fin)}
    out["gate"] = gate_verdict(**{k: out[k] for k in GATE_KEYS})
    return out


def image_quality(samples, *, train, classes, classifier: TrainedClassifier, reference: GateReference | None = None,
                  images: str = "fashion-mnist", n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> dict:
    """The gate's measures of a pixel-space Fashion-MNIST cell's draws and its verdict.

    Against :func:`gate_reference` (the test split, never the training images, so no null depends on the cell's
    training-set size):

    - ``class_share`` k / n: the share of the n draws (diverged ones count as outside) that the classifier puts in
      ``classes``, with its Wilson interval; ``class_share_heldout`` the classifier's recall r there, measured on
      ``n_heldout`` held-out reals, ``class_share_offclass`` its off-class rate f; the gate's bound comes from them
      (:func:`ridgexr.quality.gate_design`);
    - ``nearest_ratio``: the median distance of the finite draws to their nearest training image over that of
      every test image of the classes (:func:`ridgexr.quality.nearest_ratio`), with its percentile-bootstrap
      interval;
    - ``coverage``: the share of the reference reals with a draw inside their k-NN ball (classifier features),
      and ``coverage_null`` what n perfect draws cover in expectation (:func:`ridgexr.quality.expected_coverage`);
    - ``frechet``: the Fréchet distance between Gaussians fitted to the features of the finite draws and of the
      reference set (squared feature units), with ``frechet_floor`` (as many held-out reals outside the
      reference) and ``frechet_ceiling`` (as many class-mean-plus-noise images), means over seeded draws;
    - ``gate``: :func:`ridgexr.quality.gate_verdict` on them.

    Parameters
    ----------
    samples : (S, 784) array
        The cell's draws in the symmetric scale [-1, 1] (they may overshoot it a little; non-finite rows are
        diverged draws).
    train : (N, 784) array
        The cell's training images, [-1, 1].
    classes : sequence of int
        The cell's classes.
    classifier : TrainedClassifier
        From :func:`ridgexr.quality.cached_classifier`.
    reference : GateReference, optional
        Built from ``images``' test split with ``classifier`` and ``classes`` when not given.
    images : str
        The named set whose test split is the reference (when ``reference`` is None).
    n_boot, ci, seed : int, float, int
        Replicates, coverage and seed of the nearest ratio's bootstrap interval and of the share's Wilson interval.

    Returns
    -------
    dict
        The floats of :data:`IMAGE_QUALITY_KEYS` and ``gate`` (str).

    Raises
    ------
    ValueError
        Shapes, non-finite ``train``, a reference of other classes, or bad ``n_boot``, ``ci``, ``seed``.
    """
    s = check_points(samples, "samples", k=784, finite=False, min_rows=0)
    tr = check_points(train, "train", k=784, min_rows=1)
    cls = np.asarray(classes)
    if cls.ndim != 1 or cls.size == 0 or cls.dtype.kind not in "iu":
        raise ValueError(f"`classes` must be a non-empty sequence of integers; got {classes!r}")
    if reference is None:
        x, y = heldout_reals(images)
        reference = gate_reference(classifier, x, y, cls)
    elif not np.array_equal(np.unique(cls), reference.classes):
        raise ValueError(f"`reference` was built for classes {reference.classes.tolist()}; got classes "
                         f"{np.unique(cls).tolist()}")
    n_boot = check_int(n_boot, "n_boot", min_val=1)
    ci = check_ci(ci)
    seed = check_int(seed, "seed", min_val=0)
    finite = s[np.isfinite(s).all(1)]
    n_fin = len(finite)
    feats, predicted = classifier.features_and_predictions(finite)
    feats, in_class = feats.astype(np.float64).reshape(n_fin, -1), int(np.isin(predicted, cls).sum())
    dist = nearest_distances(np.concatenate([finite, reference.reals]), tr)
    ds, dr = dist[:n_fin], dist[n_fin:]
    out = draw_measures(reference, feats, in_class, len(s), ds, dr)
    r_lo, r_hi = ratio_interval(ds, dr, n_boot, ci, seed) if n_fin else (math.nan, math.nan)
    c_lo, c_hi = proportion_ci(in_class, len(s), ci, "wilson") if len(s) else (math.nan, math.nan)
    out |= {"nearest_ratio_lower": r_lo, "nearest_ratio_upper": r_hi, "class_share_lower": float(c_lo),
            "class_share_upper": float(c_hi)}
    return {k: out[k] for k in IMAGE_QUALITY_KEYS}


def gate_power(reference: GateReference, train, images, labels, *, n: int | None = None, n_rep: int = 400,
               seed: int = 0) -> dict:
    """How often the gate passes its controls at ``n`` draws, by simulation from the test split.

    Each replicate draws ``n`` images and scores them through :func:`draw_measures` and
    :func:`ridgexr.quality.gate_verdict` (what :func:`image_quality` does with the draws' features, labels and
    nearest distances, computed here once per image):

    - ``perfect``: held-out reals of the classes drawn with replacement from the reference's pool (not in the
      reference set; the reals the recall is measured on): independent draws of their empirical law;
    - ``off_class``: the same with round(0.2 n) of the draws replaced by test images of the most confusable other
      class (the one the class share's bound is designed against, :func:`ridgexr.quality.gate_design`);
      ``off_class_mixed``: replaced by test images of the other classes drawn uniformly;
    - ``mean_copies``: ``n`` copies of the mean training image (mode collapse; deterministic, one replicate);
    - ``crude``: ``n`` class-mean-plus-noise images (the Fréchet ceiling's crude model).

    Parameters
    ----------
    reference : GateReference
    train : (N, 784) array
        The cell's training images, [-1, 1].
    images, labels : (T, 784), (T,) arrays
        The whole test split (the off-class draws).
    n : int, optional
        Draws per replicate (default: the decision size, :func:`ridgexr.quality.decision_size`).
    n_rep : int
        Replicates of each random control.
    seed : int

    Returns
    -------
    dict: ``n``; for each control the number of replicates that read "generates" (``<control>``) and of
    replicates (``<control>_reps``); the off-class controls are left out when the cell has every class; for the
    two deterministic controls their class share, nearest ratio and coverage with its null
    (``<control>_measures``).
    """
    from .gate import decision_size

    tr = check_points(train, "train", k=784, min_rows=1)
    x = check_points(images, "images", k=784)
    y = np.asarray(labels)
    n_rep = check_int(n_rep, "n_rep", min_val=1)
    seed = check_int(seed, "seed", min_val=0)
    size = decision_size(reference.recall, reference.offclass, reference.n_heldout)
    n = check_int(size if n is None else n, "n", min_val=2)
    clf, cls = reference.classifier, reference.classes
    real_near = nearest_distances(reference.reals, tr)
    pool = reference.pool_index
    pool_in = np.isin(clf.predict(reference.reals[pool]), cls)
    sets = {"pool": (reference.pool_features, pool_in, real_near[pool])}
    others = [c for c in np.unique(y) if c not in cls]
    if others:
        shares = [np.isin(clf.predict(x[y == c]), cls).mean() for c in others]
        worst = others[int(np.argmax(shares))]
        for name, rows in (("worst", y == worst), ("mixed", ~np.isin(y, cls))):
            sets[name] = (clf.features(x[rows]).astype(np.float64), np.isin(clf.predict(x[rows]), cls),
                          nearest_distances(x[rows], tr))
    rng = np.random.default_rng(seed)

    def verdict(parts):  # parts: [(set name, row indices)]
        f = np.concatenate([sets[s][0][i] for s, i in parts])
        k = int(sum(sets[s][1][i].sum() for s, i in parts))
        near = np.concatenate([sets[s][2][i] for s, i in parts])
        return draw_measures(reference, f, k, len(f), near, real_near, frechet=False)["gate"] == "generates"

    def pick(name, m):
        return rng.integers(0, len(sets[name][0]), size=m)

    out = {"n": n}
    m_off = int(round(GATE["off_class_share"] * n))
    controls = {"perfect": lambda: [("pool", pick("pool", n))]}
    if others:
        controls["off_class"] = lambda: [("pool", pick("pool", n - m_off)), ("worst", pick("worst", m_off))]
        controls["off_class_mixed"] = lambda: [("pool", pick("pool", n - m_off)), ("mixed", pick("mixed", m_off))]
    for name, draw in controls.items():  # replicates of index draws: each scored as a cell's draws
        out[name] = sum(verdict(draw()) for _ in range(n_rep))
        out[f"{name}_reps"] = n_rep
    mean = tr.mean(0, keepdims=True)
    crude_rng = np.random.default_rng([seed, 1])
    which = crude_rng.choice(len(reference.crude_weight), size=n, p=reference.crude_weight)
    crude = np.clip(reference.crude_mean[which] + reference.crude_std[which] * crude_rng.standard_normal((n, 784)),
                    -1.0, 1.0)
    for name, imgs in (("mean_copies", np.repeat(mean, n, 0)), ("crude", crude)):
        q = image_quality(imgs, train=tr, classes=cls, classifier=clf, reference=reference, n_boot=1)
        out[name], out[f"{name}_reps"] = int(q["gate"] == "generates"), 1
        out[f"{name}_measures"] = {k: q[k] for k in ("class_share", "nearest_ratio", "coverage", "coverage_null")}
    return out
