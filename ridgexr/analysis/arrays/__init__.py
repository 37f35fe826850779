"""Array layer of the analyses: numpy in, numpy out, time along the last axis, one module per domain.

All functions are vectorised over leading (batch) axes; none loops over samples.  Each name is importable from
here (``ridgexr.analysis.arrays.<name>``) and from the module that owns it:

- :mod:`.phases`: reach, align and slide along one trajectory, the tangential distance, the integrated residual;
- :mod:`.distances`: the nearest training points (memorized, near-mode, novelty) and distances between samples
  (Wasserstein, MMD, Hausdorff), a network's score errors;
- :mod:`.intervals`: binomial, bootstrap and median intervals (:func:`median_interval`), the memorized share's
  interval;
- :mod:`.draw_ensembles`: pooled shares over training-noise draws, their contrasts, the Gaussian ensemble;
- :mod:`.coverage`: mass in balls, the coverage radius, rates over the training-set size;
- :mod:`.censored`: first-reached training times (right-censored) and their slope fits.

A module-level limit (``KD_TREE_MAX_DIM``, ``RESAMPLE_LIMIT``, ``SLICED_BLOCK``) is read from the module that owns
it: set it there.
"""

from .censored import (CENSORED_FITS, censored_slope, censored_slope_ci, first_reached, loss_gen_time, loss_min_time,
                       order_verdict, quality_reached, slope_range)
from .coverage import ball_mass, ball_weight, coverage_radius, draw_rate_fit, rate_fit, weight_share
from .distances import (KD_TREE_MAX_DIM, SLICED_BLOCK, hausdorff, memorized, mmd2, near_mode, nearest_two, novelty,
                        score_errors, sliced_wasserstein, wasserstein_1d)
from .draw_ensembles import gaussian_ensemble, pooled_contrast_ci, pooled_share_ci
from .intervals import (CI_METHODS, RESAMPLE_LIMIT, bootstrap_mean_ci, bootstrap_medians, median_difference_ci,
                        median_interval, memorized_share_ci, proportion_ci, share_with_ci)
from .phases import (align_time, crossing, enter_and_stay_time, integrated_residual, reach_time, slide_distance,
                     tangential_distance)

__all__ = ["pooled_share_ci", "pooled_contrast_ci", "gaussian_ensemble", "bootstrap_medians", "RESAMPLE_LIMIT",
           "ball_weight", "ball_mass", "weight_share", "coverage_radius", "wasserstein_1d", "sliced_wasserstein",
           "mmd2", "hausdorff", "novelty", "rate_fit", "draw_rate_fit", "proportion_ci", "share_with_ci", "CI_METHODS",
           "enter_and_stay_time", "reach_time", "align_time", "slide_distance", "nearest_two", "KD_TREE_MAX_DIM",
           "SLICED_BLOCK", "memorized", "near_mode", "bootstrap_mean_ci", "crossing", "integrated_residual",
           "tangential_distance", "memorized_share_ci", "quality_reached", "first_reached", "censored_slope",
           "censored_slope_ci", "order_verdict", "loss_gen_time", "loss_min_time", "median_difference_ci",
           "score_errors", "slope_range", "CENSORED_FITS", "median_interval"]
