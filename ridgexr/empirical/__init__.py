"""The smoothed empirical density p_t and its posterior moments.

For training points x_1..x_N with weights w_i (sum 1) and the OU process,

    p_t(x) = sum_i w_i N(x; alpha_t x_i, h_t I).

Everything the ridge needs follows from the posterior over which training point
generated x ("responsibilities" r_i(x) = softmax_i(log w_i - |x - alpha_t x_i|^2 / (2 h_t))):

    score(x)          = (alpha_t E[x0 | x] - x) / h_t
    posterior_mean(x) = E[x0 | x_t = x] = sum_i r_i x_i
    posterior_cov(x)  = Cov[x0 | x_t = x]
    hessian(x)        = (alpha_t^2 Cov[x0 | x] - h_t I) / h_t^2     (Hessian of log p_t)

All moments are computed with one streamed pass over the training set: logits by a
matrix product, an online log-sum-exp across training chunks, and first and second
moments as matrix products of the (queries x train) weights with the training points
and their outer products.  Memory is bounded by ``memory_budget`` bytes.  Posteriors
concentrated on one point (where E[xx^T] - m m^T cancels), and every query of a training
set of at most ``SMALL_N`` points, use a shifted, scaled form without cancellation.

Modules (imports point downward in this list):

- :mod:`.moments` -- the :class:`Moments` result and :func:`~.moments.scaled_form`, the
  shifted, scaled (cancellation-free) mean and covariance;
- :mod:`.kernels` -- the moments of one chunk of queries as plain functions on tensors: the
  prepared training set, the exact paths (small N, streamed, resolved concentrated
  covariances) and top-k truncation;
- :mod:`.lowrank` -- :class:`~.lowrank.LowRankSpectrum`: the top eigenpairs of the posterior
  covariance without forming it (Gram matrix of the weighted support, or a certified randomized
  subspace iteration);
- :mod:`.density` -- :class:`SmoothedEmpirical`: validation, ``with_time``, the training set
  cached per dtype/device, chunk planning within the memory budget, and the public methods.

Kernel interface.  Besides the public methods (numpy or torch in, the same kind out),
:class:`SmoothedEmpirical` offers three documented entry points for the geometry
kernels of :mod:`ridgexr.scms`, which work on flat, already validated torch tensors:
:meth:`SmoothedEmpirical.validate_queries`, :meth:`SmoothedEmpirical.moments_flat`,
:meth:`SmoothedEmpirical.spectrum_flat` and :attr:`SmoothedEmpirical.radius`.
"""

from .density import DEFAULT_MEMORY_BUDGET, LOWRANK_MAX_ITER, SMALL_N, SmoothedEmpirical
from .kernels import upper_pair_count
from .lowrank import LOWRANK_MIN_D, RANDOMIZED_MIN_D, LowRankSpectrum, support_path
from .moments import Moments

__all__ = ["SmoothedEmpirical", "Moments", "LowRankSpectrum", "DEFAULT_MEMORY_BUDGET", "SMALL_N", "LOWRANK_MIN_D", "RANDOMIZED_MIN_D",
           "LOWRANK_MAX_ITER", "support_path", "upper_pair_count"]
