"""Sample quality: does a cell's model generate new samples of its training law?

Array layer in :mod:`.measures` (numpy: Frechet distance, nearest ratio, class share, the gate
:data:`GATE` and :func:`gate_verdict`, :func:`point_quality` for point sets and latents); the
classifier whose features and labels the image measures use in :mod:`.classifier` (torch);
:func:`image_quality` for pixel-space Fashion-MNIST cells in :mod:`.images`; the measures of one run cell
(what the store keeps) in :mod:`.cells`; the labelled layer on a store (:func:`sample_quality`, the gate per
cell, and :func:`gated_verdict`, the rule that makes a claim about a cell that does not generate
"untestable") in :mod:`.labelled`.  docs/quality.md
describes each measure, its reference values and the gate.
"""

from .measures import (GATE, GATE_VERDICTS, class_share, frechet_distance, frechet_from_moments, gate_verdict,
                       gaussian_moments, nearest_ratio, point_quality, principal_axis, axis_wasserstein)
from .classifier import (ClassifierError, FashionClassifier, TrainedClassifier, cached_classifier,
                         train_classifier)
from .images import IMAGE_QUALITY_KEYS, heldout_reals, image_quality
from .cells import QUALITY_KEYS, cell_quality, final_samples, reference_draws
from .labelled import (AXIS_QUALITY, UNTESTABLE, axis_quality, gated_verdict, quality_variable, sample_quality,
                       stored_final_samples)

__all__ = ["GATE", "GATE_VERDICTS", "frechet_distance", "frechet_from_moments", "gaussian_moments", "nearest_ratio",
           "class_share", "gate_verdict", "point_quality", "FashionClassifier", "TrainedClassifier",
           "train_classifier", "cached_classifier", "ClassifierError", "image_quality", "heldout_reals",
           "IMAGE_QUALITY_KEYS", "QUALITY_KEYS", "cell_quality", "final_samples", "sample_quality", "gated_verdict",
           "UNTESTABLE", "quality_variable", "reference_draws", "principal_axis", "axis_wasserstein", "axis_quality",
           "stored_final_samples", "AXIS_QUALITY"]
