"""Lazy analyses of ridgexr stores: the array layer in :mod:`.arrays` (one module per domain), the labelled
analyses of the sampled trajectories in :mod:`.trajectories`, manifold datasets in :mod:`.manifold`, the pooled
samples of an ensemble over training-noise draws in :mod:`.pooled_draws`, training time scales in
:mod:`.timescales` (their laws over n in :mod:`.scaling`), shared selections and checks in :mod:`.selection`."""

from . import arrays, manifold, pooled_draws, scaling, timescales
from .pooled_draws import gap_mass, pool_draws
from .timescales import (interval_law, loss_timescales, memorization_collapse, memorized_excess, memorized_share,
                         memorizer_observation, reference_observation, separation_timescales, training_timescales,
                         training_window)
from .manifold import (coverage, distribution_distance, manifold_density, manifold_distance, novelty, rate_fit,
                       ridge_vs_manifold, smoothed_target_distance)
from .trajectories import (degenerate_share, final_state, resolved, ridge_dimension, ridge_motion, tangential_distance, distance_curves, memorization_fraction, mode_counts, near_mode_fraction, nearest_ratio_at,
                       phase_summary,
                       phase_times, phase_transition, position_density, position_histogram, ridge_position,
                       spread_curves, summary_table, target_effect, theory_check)

__all__ = ["arrays", "distance_curves", "ridge_dimension", "ridge_motion", "tangential_distance", "resolved", "degenerate_share", "phase_times", "phase_summary", "spread_curves", "ridge_position",
           "position_histogram", "position_density", "mode_counts", "memorization_fraction", "nearest_ratio_at", "near_mode_fraction",
           "phase_transition", "theory_check", "summary_table", "target_effect", "manifold",
           "manifold_distance", "novelty", "manifold_density", "distribution_distance", "ridge_vs_manifold", "rate_fit",
           "pooled_draws", "pool_draws", "gap_mass", "coverage", "smoothed_target_distance",
           "final_state", "timescales", "memorized_share", "memorized_excess", "training_timescales", "loss_timescales",
           "training_window", "reference_observation", "memorizer_observation", "separation_timescales",
           "interval_law", "memorization_collapse", "scaling"]

#: submodules that were renamed or removed: the name, and where its contents are now
_MOVED = {"ensemble": "was renamed ridgexr.analysis.pooled_draws (same functions)",
          "labelled": "was renamed ridgexr.analysis.trajectories (same functions)",
          "claims": ("was removed: the verdict names are ridgexr.verdicts', median_interval is "
                     "ridgexr.analysis.arrays.median_interval")}


def __getattr__(name: str):
    if name in _MOVED:
        raise AttributeError(f"ridgexr.analysis.{name} {_MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
