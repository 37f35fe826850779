"""Sample quality: does a cell's model generate new samples of its training law?

Array layer in :mod:`.measures` (numpy: Frechet distance, nearest ratio, class share, :func:`point_quality` for
point sets and latents); the gate in :mod:`.gate` (:data:`GATE`, its decision size :func:`gate_design`, the
coverage of held-out reals and its exact null :func:`expected_coverage`, :func:`gate_verdict`); the classifier
whose features and labels the image measures use in :mod:`.classifier` (torch); :func:`image_quality` for
pixel-space Fashion-MNIST cells, read against a fixed test-split reference (:func:`gate_reference`), in
:mod:`.images`; the measures of one run cell (what the store keeps, and how many draws of its own the gate
takes, :func:`gate_draws`) in :mod:`.cells`; the labelled layer on a store (:func:`sample_quality`, the gate
per cell, and :func:`gated_verdict`, the rule that makes a claim about a cell that does not generate
"untestable") in :mod:`.store_quality`.  docs/quality.md describes each measure, its reference values and the gate.
"""

from .gate import (GATE, GATE_DRAWS, GATE_VERDICTS, GateDesign, coverage, decision_size, expected_coverage,
                   gate_design, gate_seed, gate_verdict, knn_radii)
from .measures import (class_share, frechet_distance, frechet_from_moments, gaussian_moments, nearest_ratio,
                       point_quality, principal_axis, axis_wasserstein)
from .classifier import (ClassifierError, FashionClassifier, TrainedClassifier, cached_classifier,
                         train_classifier)
from .pixel_quality import (IMAGE_QUALITY_KEYS, GateReference, draw_measures, gate_power, gate_reference, heldout_reals,
                     image_quality,
                     reference_for)
from .cells import QUALITY_KEYS, cell_quality, final_samples, gate_draws, reference_draws
from .store_quality import (AXIS_QUALITY, UNTESTABLE, axis_quality, gated_verdict, quality_variable, sample_quality,
                       stored_final_samples)

__all__ = ["GATE", "GATE_DRAWS", "GATE_VERDICTS", "GateDesign", "gate_design", "decision_size", "expected_coverage",
           "knn_radii", "coverage", "gate_verdict", "gate_seed", "frechet_distance", "frechet_from_moments",
           "gaussian_moments", "nearest_ratio", "class_share", "point_quality", "FashionClassifier",
           "TrainedClassifier", "train_classifier", "cached_classifier", "ClassifierError", "image_quality",
           "heldout_reals", "gate_reference", "reference_for", "GateReference", "draw_measures", "gate_power",
           "IMAGE_QUALITY_KEYS", "QUALITY_KEYS", "cell_quality", "final_samples", "gate_draws", "sample_quality",
           "gated_verdict", "UNTESTABLE", "quality_variable", "reference_draws", "principal_axis", "axis_wasserstein",
           "axis_quality", "stored_final_samples", "AXIS_QUALITY"]


def __getattr__(name: str):
    if name == "labelled":
        raise AttributeError("ridgexr.quality.labelled was renamed ridgexr.quality.store_quality (same functions)")
    if name == "images":
        raise AttributeError("ridgexr.quality.images was renamed ridgexr.quality.pixel_quality (same functions)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
