"""The sample quality of one cell of a run, from its final samples: what the store keeps per cell.

:func:`cell_quality` picks the measures a cell's dataset allows:

- **pixel images** of a named set with a classifier (Fashion-MNIST): :func:`ridgexr.quality.image_quality` of the
  cell's own gate draws (:func:`gate_draws` of them, drawn without ridge observation) against a fixed reference
  from the test split (the class share against the classifier's recall and off-class rate, the nearest ratio,
  the coverage of held-out reals, the Fréchet distance in the classifier's features with its floor and ceiling);
- **pixel images** of an IDX folder with a test split: the nearest ratio alone;
- **VAE latents** of images (``space: latent``): the nearest ratio against the encoder means of the test
  split's images of the cell's classes, through the same cached VAE;
- **manifolds** and **Gaussian mixtures**: :func:`ridgexr.quality.point_quality` against the store's ``population_data``, fresh
  draws of the law (the nearest ratio, the sliced Wasserstein distance and its null);
- anything else (point sets, files, MNIST latents): nothing, and the gate reads "not assessed".

Every dataset with fresh draws of its law (:func:`reference_draws`) also gets the memorized share's null
(:func:`memorized_null`): how many of those draws are memorized (d1/d2 < 1/3) against the cell's training set, what
the memorization claims and tau_mem subtract from the samples' share.

The returned keys are those of :data:`QUALITY_KEYS`, stored as ``quality_<key>``
(:data:`ridgexr.schema.QUALITY_VARIABLES`); a key a cell's measures do not give is NaN there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.arrays import memorized
from ..datasets.images import IMAGE_SETS, ImageError, load_images
from ..datasets.training_set import dataset_extras
from ..schema import QUALITY_VARIABLES
from .gate import GATE_DRAWS
from .measures import nearest_ratio, point_quality

__all__ = ["cell_quality", "QUALITY_KEYS", "final_samples", "reference_draws", "gate_draws", "gate_batch",
           "memorized_null"]

#: the gate's draws sampled at once: a fixed size, so that two entries with the same model and seeds draw the same
#: gate samples whatever their numbers of observed trajectories
GATE_BATCH = 32

#: every number cell_quality can return, in store order: the store's table (ridgexr.schema.QUALITY_VARIABLES)
#: names each as ``quality_<key>``
QUALITY_KEYS = tuple(name.removeprefix("quality_") for name in QUALITY_VARIABLES)


def gate_draws(dataset: Any) -> int:
    """How many final samples of its own a cell of ``dataset`` draws for the quality gate (without ridge
    observation; the store's ``gate_sample``): :data:`ridgexr.quality.GATE_DRAWS` for pixel images of a named set
    with a classifier (Fashion-MNIST), whose gate reads a class share at a decision size; 0 for every other
    dataset, whose measures read the observed trajectories' final samples.  From the configuration alone.

    >>> from ridgexr.catalog.data import DatasetSpec
    >>> fashion = DatasetSpec(images={"images": "fashion-mnist", "classes": [0], "scale": "symmetric"})
    >>> gate_draws(fashion), gate_draws(DatasetSpec(points="two-points"))
    (320, 0)
    """
    images = getattr(dataset, "images", None)
    return GATE_DRAWS if images is not None and images.space == "pixel" and images.images in IMAGE_SETS else 0


def gate_batch(n_gate: int) -> int:
    """How many of a cell's ``n_gate`` gate draws are sampled at once: :data:`GATE_BATCH`, capped at ``n_gate``
    (0 when there are none).

    >>> gate_batch(320), gate_batch(8), gate_batch(0)
    (32, 8, 0)
    """
    return min(int(n_gate), GATE_BATCH)


def final_samples(final: np.ndarray | None, denoised: np.ndarray | None, state: np.ndarray, alpha: float) -> np.ndarray:
    """The samples a cell's quality is measured on (n_samples, d): a scheduler's output at t = 0 when there is
    one, else the Tweedie-denoised final state, else the final state divided by alpha at its time (data units)."""
    if final is not None:
        return np.asarray(final, dtype=np.float64)
    if denoised is not None:
        return np.asarray(denoised, dtype=np.float64)
    return np.asarray(state, dtype=np.float64) / alpha


def cell_quality(dataset: Any, train: np.ndarray, samples: np.ndarray, *, base_dir: str | Path | None = None,
                 seed: int = 0, n_boot: int = 1000) -> dict[str, float]:
    """Quality measures of one cell's final ``samples`` (S, d) given its training set ``train`` (N, d).

    Parameters
    ----------
    dataset : validated ``dataset`` block of the entry (:class:`ridgexr.catalog.DatasetSpec`)
    train : (N, d) array
        The cell's training set (data units).
    samples : (S, d) array
        The cell's final samples (:func:`final_samples`): its gate draws where :func:`gate_draws` is positive, else
        the observed trajectories'; non-finite rows are left out and counted.
    base_dir : path, optional
        The catalog file's folder (relative IDX folders).
    seed, n_boot : int
        Seed and size of the bootstrap intervals (and of the reference draws).

    Returns
    -------
    dict: a subset of :data:`QUALITY_KEYS` -> float (empty when the dataset allows no measure), with the keys of
    :func:`memorized_null` where the dataset has fresh draws.
    """
    return (_sample_quality(dataset, train, samples, base_dir=base_dir, seed=seed, n_boot=n_boot)
            | memorized_null(dataset, train, base_dir=base_dir))


def _sample_quality(dataset, train, samples, *, base_dir, seed, n_boot) -> dict[str, float]:
    images = getattr(dataset, "images", None)
    if images is not None and images.space == "pixel":
        return _image_cell(dataset, train, samples, base_dir=base_dir, seed=seed, n_boot=n_boot)
    if images is not None:  # VAE latents: the test images encoded by the training set's VAE
        return _latent_cell(dataset, train, samples, base_dir=base_dir, seed=seed, n_boot=n_boot)
    if getattr(dataset, "manifold", None) is not None or getattr(dataset, "mixture", None) is not None:
        fresh, _ = reference_draws(dataset, base_dir=base_dir)
        q = point_quality(samples, train, fresh, n_boot=n_boot, seed=seed)
        return {k: float(v) for k, v in q.items() if k in QUALITY_KEYS}
    return {}


def reference_draws(dataset: Any, *, base_dir: str | Path | None = None) -> tuple[np.ndarray | None, str]:
    """Fresh draws of a cell's law in the units of its training set, and what they are: the null every
    measure of a cell is calibrated against (a perfect sampler draws like them).

    - pixel images: the test split's images of the cell's classes, in the training set's scale;
    - VAE latents: the same images encoded by the training set's cached VAE (encoder means);
    - manifolds and Gaussian mixtures: the store's ``population_data`` (fresh draws of the law);
    - anything else (point sets, files, MNIST latents, an IDX folder without a test split): ``None``.

    Returns
    -------
    (draws (M, d) float64 or None, a sentence saying what they are or why there are none)
    """
    images = getattr(dataset, "images", None)
    if images is not None:
        scale = images.scale if images.space == "pixel" else "unit"
        try:
            held, _, _, _ = load_images(images.images, classes=images.classes, scale=scale, split="test",
                                        base_dir=base_dir)
        except ImageError:  # no test split: no held-out reals
            return None, f"no test split of {images.images!r}: no held-out reals"
        if images.space == "pixel":
            return np.asarray(held, dtype=np.float64), f"{len(held)} held-out real images (test split)"
        import torch

        from ..datasets.training_set import image_latents

        vae = image_latents(images, base_dir).model  # cached with the training set's latents: the same encoder
        with torch.no_grad():
            mu, _ = vae.encode(torch.as_tensor(held, dtype=torch.float32))
        return mu.double().numpy(), f"{len(held)} held-out test images encoded by the training set's VAE"
    if getattr(dataset, "manifold", None) is not None or getattr(dataset, "mixture", None) is not None:
        fresh = dataset_extras(dataset)["population_data"][1]
        return np.asarray(fresh, dtype=np.float64), f"{len(fresh)} fresh draws of the law (population_data)"
    return None, "no fresh draws of this dataset's law"


def memorized_null(dataset: Any, train: np.ndarray, *, base_dir: str | Path | None = None) -> dict[str, float]:
    """The memorized share's null of one cell: how many fresh draws of the law (:func:`reference_draws`, all of
    them) are memorized against the cell's training set ``train`` (N, d), by the one criterion d1/d2 <
    :data:`ridgexr.defaults.MEMORIZED_RATIO` (:func:`ridgexr.analysis.arrays.memorized`, nearest over
    second-nearest training point; non-finite rows of ``train`` left out, as the claims leave them out).

    f_fresh = ``memorized_null_count`` / ``memorized_null_draws`` is what a sampler that draws from the law
    scores; the memorization claims (``does-not-memorize``, ``memorizes``) and tau_mem
    (:func:`ridgexr.analysis.training_timescales`) read the samples' share less it.

    Parameters
    ----------
    dataset : validated ``dataset`` block of the entry (:class:`ridgexr.catalog.DatasetSpec`)
    train : (N, d) array
        The cell's training set (data units).
    base_dir : path, optional
        The catalog file's folder (relative IDX folders).

    Returns
    -------
    dict: ``memorized_null_count`` and ``memorized_null_draws`` (floats, counts); empty when the dataset has no
    fresh draws, or draws of another dimension than ``train``'s.

    Examples
    --------
    >>> from ridgexr.catalog.data import DatasetSpec
    >>> memorized_null(DatasetSpec(points="two-points"), np.eye(2))
    {}
    """
    fresh, _ = reference_draws(dataset, base_dir=base_dir)
    tr = np.asarray(train, dtype=np.float64)
    tr = tr[np.isfinite(tr).all(1)]
    if fresh is None or fresh.shape[1] != tr.shape[1] or len(tr) < 1:
        return {}
    flags = memorized(fresh, tr)
    ok = np.isfinite(flags)
    return {"memorized_null_count": float(flags[ok].sum()), "memorized_null_draws": float(ok.sum())}


def _ratio_only(samples, held, train, *, seed, n_boot) -> dict[str, float]:
    """The nearest ratio of the finite samples against the held-out reals (the measure every dataset with
    held-out reals has)."""
    s = np.asarray(samples, dtype=np.float64)
    finite = s[np.isfinite(s).all(1)]
    if not len(finite):
        return {"n_finite": 0.0, "n_draws": float(len(s))}
    ratio, lo, hi = nearest_ratio(finite, held, train, n_boot=n_boot, seed=seed)
    return {"nearest_ratio": ratio, "nearest_ratio_lower": lo, "nearest_ratio_upper": hi,
            "n_finite": float(len(finite)), "n_draws": float(len(s))}


def _latent_cell(dataset, train, samples, *, base_dir, seed, n_boot) -> dict[str, float]:
    held, _ = reference_draws(dataset, base_dir=base_dir)
    if held is None:
        return {}
    return _ratio_only(samples, held, train, seed=seed, n_boot=n_boot)


def _image_cell(dataset, train, samples, *, base_dir, seed, n_boot) -> dict[str, float]:
    images = dataset.images
    symmetric = (lambda a: a) if images.scale == "symmetric" else (lambda a: 2.0 * a - 1.0)  # noqa: E731
    s = np.asarray(samples, dtype=np.float64)
    if images.images in IMAGE_SETS and train.shape[1] == 784:
        from .classifier import cached_classifier
        from .pixel_quality import image_quality, reference_for

        classifier = cached_classifier(images.images)
        reference = reference_for(classifier, images.images, images.classes)
        q = image_quality(symmetric(s), train=symmetric(train), classes=reference.classes, classifier=classifier,
                          reference=reference, seed=seed, n_boot=n_boot)
        return {k: float(v) for k, v in q.items() if k in QUALITY_KEYS}
    held, _ = reference_draws(dataset, base_dir=base_dir)
    if held is None:
        return {}
    return _ratio_only(s, held, train, seed=seed, n_boot=n_boot)
