"""Sample quality of a pixel-space Fashion-MNIST cell: nearest ratio, Frechet distance in the
classifier's features with its floor and ceiling, class share, and the gate's verdict.

The Frechet distance between Gaussians fitted to n and N points grows as n falls even when both
sets come from one law, so a value alone says little.  :func:`image_quality` therefore computes,
at the same number of images as the samples,

- the **floor**: held-out real images of the cell's classes against the training images (what a
  sampler of the law scores), and
- the **ceiling**: a crude model against the training images -- each image the per-class mean
  training image plus independent Gaussian noise with the class's per-pixel variance, clipped to
  [-1, 1] (the pixel range every real image has; clipping keeps the crude model's images inside
  the range the classifier was trained on, so the ceiling measures the missing structure, not the
  out-of-range pixels);

each the mean over ``n_reference_draws`` seeded draws.  A sample set near the floor is as close to
the training law as new real images; one near the ceiling no better than blobs of the right
mean and pixel variance.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_int
from ..datasets.images import load_images
from .classifier import TrainedClassifier
from .measures import check_points, class_share, frechet_from_moments, gate_verdict, gaussian_moments, nearest_ratio

__all__ = ["image_quality", "heldout_reals", "IMAGE_QUALITY_KEYS", "N_REFERENCE_DRAWS"]

#: default number of seeded draws the Frechet floor and ceiling are averaged over
N_REFERENCE_DRAWS = 5

#: the keys of :func:`image_quality`'s result, in order
IMAGE_QUALITY_KEYS = ("nearest_ratio", "nearest_ratio_lower", "nearest_ratio_upper", "frechet", "frechet_floor",
                      "frechet_ceiling", "class_share", "class_share_lower", "class_share_upper",
                      "class_share_heldout", "classifier_accuracy", "n_samples", "n_finite", "gate")


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


def image_quality(samples, *, train, heldout, classes, classifier: TrainedClassifier, train_labels=None,
                  n_boot: int = 1000, ci: float = 0.95, seed: int = 0,
                  n_reference_draws: int = N_REFERENCE_DRAWS) -> dict:
    """Sample-quality measures of one pixel-space Fashion-MNIST cell and the gate's verdict.

    - ``nearest_ratio`` (and its bootstrap interval): :func:`ridgexr.quality.nearest_ratio` of the
      finite samples against the training images, with ``heldout`` as the reals (reference 1);
    - ``frechet``: the Frechet distance in the classifier's features (64 penultimate activations)
      between the S' finite samples and the training images, with ``frechet_floor`` (S' held-out
      images vs the training images) and ``frechet_ceiling`` (S' class-mean-plus-noise images vs the
      training images), each the mean over ``n_reference_draws`` draws (held-out images drawn without
      replacement, with replacement when S' > R); squared feature units;
    - ``class_share`` (and its Wilson interval): the share of finite samples the classifier puts in
      ``classes``; its reference value ``class_share_heldout`` is the same share of the held-out real
      images (the classifier's recall on the cell's classes: what a sampler of the law scores; the
      classifier's overall test accuracy is ``classifier_accuracy``);
    - ``gate``: :func:`ridgexr.quality.gate_verdict` on the class share and the nearest ratio.

    Samples with a non-finite pixel (diverged) are left out of every measure and counted:
    ``n_samples`` is S, ``n_finite`` is S'.

    Parameters
    ----------
    samples : (S, 784) array
        Generated images in the symmetric scale [-1, 1] (they may overshoot it a little).
    train : (N, 784) array
        The cell's training images, [-1, 1].
    heldout : (R, 784) array
        Test-split images of the same classes (:func:`heldout_reals`), [-1, 1].
    classes : sequence of int
        The cell's classes.
    classifier : TrainedClassifier
        From :func:`ridgexr.quality.cached_classifier`.
    train_labels : (N,) int array, optional
        Classes of the training images, for the ceiling's per-class means and variances; needed when
        ``classes`` has more than one class (with one class every image is of that class).
    n_boot, ci, seed : int, float, int
        Bootstrap replicates and coverage of the intervals; seed of the bootstrap and the reference draws.
    n_reference_draws : int
        Draws averaged for the Frechet floor and ceiling.

    Returns
    -------
    dict
        The floats of :data:`IMAGE_QUALITY_KEYS` and ``gate`` (str).  With S' = 0 every measure is NaN
        and the gate "not assessed"; the Frechet values need S' >= 2.

    Raises
    ------
    ValueError
        Shapes, non-finite ``train`` or ``heldout``, labels outside ``classes``, missing ``train_labels``.
    """
    s = check_points(samples, "samples", k=784, finite=False, min_rows=0)
    tr = check_points(train, "train", k=784, min_rows=2)
    held = check_points(heldout, "heldout", k=784, min_rows=2)
    cls = np.asarray(classes)
    if cls.ndim != 1 or cls.size == 0 or cls.dtype.kind not in "iu":
        raise ValueError(f"`classes` must be a non-empty sequence of integers; got {classes!r}")
    if train_labels is None:
        if cls.size > 1:
            raise ValueError(f"`train_labels` must be given when `classes` has more than one class; got classes "
                             f"{cls.tolist()}")
        labels = np.full(len(tr), int(cls[0]))
    else:
        labels = np.asarray(train_labels)
        if labels.shape != (len(tr),) or labels.dtype.kind not in "iu" or not np.isin(labels, cls).all():
            raise ValueError(f"`train_labels` must be ({len(tr)},) integers in `classes` {cls.tolist()}; got shape "
                             f"{labels.shape}, dtype {labels.dtype}")
    n_reference_draws = check_int(n_reference_draws, "n_reference_draws", min_val=1)
    seed = check_int(seed, "seed", min_val=0)

    finite = s[np.isfinite(s).all(1)]
    n_fin = len(finite)
    ratio, r_lo, r_hi = nearest_ratio(finite, held, tr, n_boot=n_boot, ci=ci, seed=seed)
    share, c_lo, c_hi = class_share(classifier.predict(finite) if n_fin else np.zeros(0, np.int64), cls, ci)
    share_heldout = class_share(classifier.predict(held), cls, ci)[0]
    frechet = floor = ceiling = math.nan
    if n_fin >= 2:
        ref = gaussian_moments(classifier.features(tr))
        frechet = frechet_from_moments(*gaussian_moments(classifier.features(finite)), *ref)
        rng = np.random.default_rng([seed, 1])  # the reference draws' own stream
        f_held = classifier.features(held)
        present = np.unique(labels)
        mean = np.stack([tr[labels == c].mean(0) for c in present])  # per class (a few), not per image
        std = np.stack([tr[labels == c].std(0) for c in present])
        floors, ceilings = [], []
        for _ in range(n_reference_draws):  # a few seeded draws
            rows = rng.choice(len(held), size=n_fin, replace=n_fin > len(held))
            floors.append(frechet_from_moments(*gaussian_moments(f_held[rows]), *ref))
            which = np.searchsorted(present, labels[rng.integers(0, len(tr), size=n_fin)])
            crude = np.clip(mean[which] + std[which] * rng.standard_normal((n_fin, tr.shape[1])), -1.0, 1.0)
            ceilings.append(frechet_from_moments(*gaussian_moments(classifier.features(crude)), *ref))
        floor, ceiling = float(np.mean(floors)), float(np.mean(ceilings))
    return {"nearest_ratio": ratio, "nearest_ratio_lower": r_lo, "nearest_ratio_upper": r_hi, "frechet": frechet,
            "frechet_floor": floor, "frechet_ceiling": ceiling, "class_share": share, "class_share_lower": c_lo,
            "class_share_upper": c_hi, "class_share_heldout": share_heldout, "classifier_accuracy": float(classifier.test_accuracy),
            "n_samples": float(len(s)), "n_finite": float(n_fin),
            "gate": gate_verdict(class_share=share, nearest_ratio=ratio)}
