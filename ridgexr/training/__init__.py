"""Training random-feature denoisers by weighted denoising score matching.

Modules (imports point downward in this list):

- :mod:`.schedules` -- loss weights w(t);
- :mod:`.sample` -- the fixed (x0, t, z) sample and its model-independent cache;
- :mod:`.quadratic` -- targets, the quadratic form (U, V, C) and :class:`QuadraticLoss`;
- :mod:`.dynamics` -- closed-form gradient flow and gradient descent on that form;
- :mod:`.fit` -- :class:`RandomFeatureFit`, :func:`fit_random_features`, :func:`fit_sweep`;
- :mod:`.diagnostics` -- the per-cell diagnostic variables and :func:`fits_to_dataset`.


**The loss.**  With x_t = alpha_t x0 + sqrt(h_t) z, the weighted score-matching loss is

    L_SM(s) = E_t E_{x0, z} w(t) |s(x_t, t) + z / sqrt(h_t)|^2 / d,

t uniform on [t_min, T], x0 uniform over the training set, z ~ N(0, I).  The weight
w(t) multiplies the *score-matching* loss (as in the paper).  Schedules: ``"1"`` (w = 1),
``"h"`` (w = h_t), ``"h2"`` (w = h_t^2), or any callable w(t) -> array.

- ``parametrization="score"``: s = f, so L = E w |f + z / sqrt(h)|^2 / d.
- ``parametrization="posterior_mean"``: s = (f - x_t) / h and
  s + z/sqrt(h) = (f - alpha_t x0) / h, so L = E (w / h^2) |f - alpha_t x0|^2 / d: the
  same loss is a *denoising* loss with weight w / h^2 (tested in ``tests/test_training.py``).

In both cases the per-sample loss is lambda(t) |A psi - y|^2 / d with features
psi = act(...)/sqrt(p), target y (alpha_t x0, or -z/sqrt(h)) and lambda = w/h^2 or w.

**Quadratic form.**  L(A) = tr(A^T A U)/d - 2 tr(V A^T)/d + C with

    U = sum_s c_s lambda_s psi_s psi_s^T   (p x p),   V = sum_s c_s lambda_s y_s psi_s^T  (d x p),
    C = sum_s c_s lambda_s |y_s|^2 / d,

over a fixed sample s = (training point i, time node j, noise draw k): Gauss-Legendre
nodes in log t (``n_time``), ``n_noise`` Monte-Carlo draws per (i, j), and
c_s = (quadrature weight_j / (T - t_min)) (1/N) (1/n_noise).  U and V are accumulated in
batches by matrix products (no Python loop over times or data points).

**Gradient flow.**  dA/dtau = -grad L = -(2/d)(A U - V).  With U = Q diag(mu) Q^T,
B = A Q and Vt = V Q, each column evolves independently:
B_j(tau) = B_j(0) e^{-2 mu_j tau/d} + (Vt_j / mu_j)(1 - e^{-2 mu_j tau/d}); columns with
mu_j <= rcond mu_max (the null space) keep B_j(0).  tau = inf gives the minimum-norm
minimizer plus the untouched null-space part of A(0).  One eigendecomposition serves every
tau.  ``method="gd"`` runs plain full-batch gradient descent A <- A - lr grad L on the same
objective, with tau = lr x steps.

**Excess loss.**  The exact denoiser (posterior mean of p_t) minimises the loss; L* is its
loss on the same sample, and excess(tau) = L(A(tau)) - L* is estimated with paired
differences, with a Monte-Carlo standard error from the noise draws.  The excess splits
into tangent and normal parts: with f* the exact output, E lambda |f - f*|^2 / d =
E lambda |T^T (f - f*)|^2 / d + E lambda |N^T (f - f*)|^2 / d, the frame (T, N) given by
:func:`ridgexr.ridge_frame` at (x_t, t) (tangent = top-d* posterior-covariance
eigenvectors).  This direct estimate equals the excess loss in expectation.
"""

from .schedules import SCHEDULES, schedule_name, schedule_weight
from .sample import TrainingSample, draw_training_sample
from .quadratic import TARGETS, QuadraticLoss, accumulate_moments, exact_outputs, quadratic_loss, targets
from .dynamics import GradientFlow, ReadoutPath, gradient_descent
from .fit import METHODS, RandomFeatureFit, fit_random_features, fit_sweep
from .diagnostics import DIAGNOSTIC_VARIABLES, fits_to_dataset

__all__ = ["TARGETS", "SCHEDULES", "schedule_weight", "schedule_name", "TrainingSample", "draw_training_sample",
           "QuadraticLoss", "accumulate_moments", "exact_outputs", "quadratic_loss", "targets", "GradientFlow",
           "ReadoutPath", "gradient_descent", "METHODS", "RandomFeatureFit", "fit_random_features", "fit_sweep",
           "DIAGNOSTIC_VARIABLES", "fits_to_dataset"]
