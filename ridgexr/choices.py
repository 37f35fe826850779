"""The names of the package's options, torch-free (the catalog validates against these).

Each tuple is defined here once; the module that implements the choice imports it from here
(:mod:`ridgexr.process`, :mod:`ridgexr.training.schedules`, :mod:`ridgexr.training.quadrature`,
:mod:`ridgexr.training.quadratic`), so the catalog can check a name without importing torch.
This module imports nothing.
"""

from __future__ import annotations

__all__ = ["GRID_KINDS", "SCHEDULE_NAMES", "QUADRATURES", "TARGETS", "SAMPLER_KINDS", "TRAINING_METHODS",
           "INITS", "OPTIMIZERS", "FRAME_METHODS"]

#: spacings of the sampler's time grid (:func:`ridgexr.time_grid`)
GRID_KINDS = ("exponential", "linear", "cosine")
#: named loss-weight schedules w(t): 1, h_t, h_t^2 (:mod:`ridgexr.training.schedules`)
SCHEDULE_NAMES = ("1", "h", "h2")
#: time rules of the loss's integral (:func:`ridgexr.training.time_nodes`)
QUADRATURES = ("simpson-t", "trapezoid-log-t", "gauss-legendre-log-t")
#: fitted targets: the DSM target alpha_t x0, or its conditional mean (the exact denoiser's output)
TARGETS = ("dsm", "ideal")
#: samplers: reverse SDE (Euler-Maruyama) or probability-flow ODE (Heun)
SAMPLER_KINDS = ("sde", "ode")
#: how a random-feature readout is trained: closed-form gradient flow, or gradient descent
TRAINING_METHODS = ("flow", "gd")
#: A(0) of a random-feature readout
INITS = ("normal", "zeros")
#: optimizers of minibatch training (:func:`ridgexr.fit_neural`)
OPTIMIZERS = ("adam", "adamw", "sgd")
#: how a ridge frame's eigenpairs are computed: automatic (dense eigh at small d, the low-rank
#: paths of :mod:`ridgexr.empirical.lowrank` above), the dense (d, d) eigh, or low rank
FRAME_METHODS = ("auto", "dense", "lowrank")
