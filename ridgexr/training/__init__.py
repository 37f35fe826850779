"""Training denoisers by weighted denoising score matching: random features and neural networks.

Modules (imports point downward in this list):

- :mod:`.schedules` -- loss weights w(t);
- :mod:`.quadrature` -- time nodes and weights of the loss's integral over t;
- :mod:`.sample` -- the fixed (x0, t, z) sample and its model-independent cache;
- :mod:`.quadratic` -- targets, the quadratic form (U, V, C) and :class:`QuadraticLoss`;
- :mod:`.dynamics` -- closed-form gradient flow and gradient descent on that form;
- :mod:`.fit` -- :class:`RandomFeatureFit`, :func:`fit_random_features`, :func:`fit_sweep`;
- :mod:`.diagnostics` -- the per-cell diagnostic variables and :func:`fits_to_dataset`;
- :mod:`.minibatch` -- :func:`fit_neural`: minibatch training of any torch model (Monte-Carlo t),
  resumable checkpoints (the mlp kind; any network kind);
- :mod:`.heldout` -- held-out diagnostics of models not fitted in closed form.


**The loss (the paper's definition and units).**  With x_t = alpha_t x0 + sqrt(h_t) z,

    L(f) = int_{t_min}^{T} w(t) E_{x0, z} |s(x_t, t) + z / sqrt(h_t)|^2 dt,

x0 uniform over the training set, z ~ N(0, I): an integral over t (not a time average) of
a squared error summed over coordinates (not divided by d).  The weight w(t) multiplies the
*score-matching* loss.  Schedules: ``"1"`` (w = 1), ``"h"`` (w = h_t), ``"h2"``
(w = h_t^2), or any callable w(t) -> array.

- ``parametrization="score"``: s = f, so L = int w E|f + z / sqrt(h)|^2 dt.
- ``parametrization="posterior_mean"``: s = (f - x_t) / h and s + z/sqrt(h) =
  (f - alpha_t x0) / h, so L = int lambda(t) E|f - alpha_t x0|^2 dt with lambda = w / h^2:
  the same loss is the paper's *denoising* loss with weight lambda = w / h_t^2 (tested in
  ``tests/test_training.py``).

**Quadrature and sample.**  The integral is a quadrature over time nodes t_j with weights
w_j (:func:`time_nodes`: Simpson's rule in t on 2001 nodes, the authors' choice, by
default; the trapezoid rule or Gauss-Legendre in log t as alternatives), the expectation an
average over ``n_noise`` draws per (point, node): row s = (i, j, k) has measure weight
c_s = w_j / (N n_noise).  The sample is streamed node by node (:class:`TrainingSample`).

**Quadratic form.**  With features psi = act(...)/sqrt(p), target y (alpha_t x0, or
-z/sqrt(h)) and lambda (w/h^2, or w):

    L(A) = tr(A U A^T) - 2 tr(V A^T) + C,
    U = sum_s c_s lambda_s psi_s psi_s^T (p x p),  V = sum_s c_s lambda_s y_s psi_s^T (d x p),
    C = sum_s c_s lambda_s |y_s|^2.

lambda depends on t only, so U of every schedule is sum_j lambda(t_j) G_j with G_j the
weighted Gram matrix of node j: :func:`accumulate` computes each G_j once for all schedules.

**Gradient flow (the paper's tau).**  dA/dtau = -grad L = -2 (A U - V), so

    A(tau) = A_inf + (A(0) - A_inf) exp(-2 tau U),

with A(0) ~ N(0, 1) entrywise by default (the authors'; ``init="zeros"`` as an option).
With U = Q diag(mu) Q^T each column of B = A Q relaxes at rate 2 mu_j; columns with
mu_j <= rcond mu_max (the null space) keep B_j(0).  tau = inf gives the minimum-norm
minimiser plus the untouched null-space part of A(0).  One eigendecomposition serves every
tau.  ``method="gd"`` runs full-batch gradient descent A <- A - lr grad L with tau = lr x steps.
(ridgexr 0.2 averaged over t and divided by d: one 0.2 tau unit is 1 / (d (T - t_min)) of
a paper unit.)

**Excess loss.**  The exact denoiser (posterior mean of p_t) minimises the loss; L* is its
loss on the same sample, and excess(tau) = L(A(tau)) - L* is estimated with paired
differences, with a Monte-Carlo standard error from the noise draws.  The excess splits
into tangent and normal parts: with f* the exact output, sum c lambda |f - f*|^2 =
sum c lambda |T^T (f - f*)|^2 + sum c lambda |N^T (f - f*)|^2, the frame (T, N) given by
:func:`ridgexr.ridge_frame` at (x_t, t) (tangent = top-d* posterior-covariance
eigenvectors).  This direct estimate equals the excess loss in expectation.
"""

from .schedules import SCHEDULES, schedule_name, schedule_weight
from .quadrature import DEFAULT_QUADRATURE, QUADRATURES, time_nodes
from .sample import SampleBlock, TrainingSample, draw_seed, draw_training_sample
from .quadratic import (TARGETS, QuadraticLoss, accumulate, accumulate_moments, exact_outputs, loss_weight,
                        quadratic_loss, targets)
from .dynamics import GradientFlow, ReadoutPath, gradient_descent
from .fit import (INITS, METHODS, PAPER_N_NOISE, PAPER_N_TIME, RandomFeatureFit, evaluate_denoiser, evaluate_fits,
                  fit_random_features, fit_sweep, initial_readout)
from .minibatch import OPTIMIZERS, NeuralFit, fit_neural, resolve_device
from .diagnostics import DIAGNOSTIC_VARIABLES, fits_to_dataset

__all__ = ["DEFAULT_QUADRATURE", "QUADRATURES", "time_nodes", "SampleBlock", "accumulate", "loss_weight",
           "INITS", "PAPER_N_TIME", "PAPER_N_NOISE", "evaluate_fits", "evaluate_denoiser", "OPTIMIZERS", "NeuralFit",
           "fit_neural", "resolve_device", "initial_readout", "TARGETS", "SCHEDULES", "schedule_weight", "schedule_name", "TrainingSample", "draw_training_sample", "draw_seed",
           "QuadraticLoss", "accumulate_moments", "exact_outputs", "quadratic_loss", "targets", "GradientFlow",
           "ReadoutPath", "gradient_descent", "METHODS", "RandomFeatureFit", "fit_random_features", "fit_sweep",
           "DIAGNOSTIC_VARIABLES", "fits_to_dataset"]
