"""The names of the package's options, torch-free (the catalog validates against these).

Each tuple is defined here once; the module that implements the choice imports it from here
(:mod:`ridgexr.process`, :mod:`ridgexr.training.schedules`, :mod:`ridgexr.training.quadrature`,
:mod:`ridgexr.training.quadratic`), so the catalog can check a name without importing torch.
This module imports nothing.
"""

from __future__ import annotations

__all__ = ["GRID_KINDS", "SCHEDULE_NAMES", "QUADRATURES", "TARGETS", "SAMPLER_KINDS", "TRAINING_METHODS",
           "INITS", "RF_ACTIVATIONS", "RF_PARAMETRIZATIONS", "OPTIMIZERS", "SCORE_SCALES", "KEEP_EPOCHS", "NULL_CUTOFFS", "IMAGE_SCALES", "IMAGE_SPACES",
           "FRAME_METHODS", "TIME_CONVENTIONS", "MIXED_PRECISIONS", "LOGIT_DTYPES", "TRAINED_WEIGHTS",
           "TIME_PROPOSALS", "DIVERGED_RULES", "QUALITY_RULES", "TIMESCALE_QUALITIES", "QUALITY_NULLS", "QUALITY_LABELS", "CELL_DIM_SOURCES", "CELL_DIMS", "MODEL_CELL_DIMS"]

#: spacings of the sampler's time grid (:func:`ridgexr.time_grid`)
GRID_KINDS = ("exponential", "linear", "cosine")
#: named loss-weight schedules w(t): 1, h_t, h_t^2 (:mod:`ridgexr.training.schedules`)
SCHEDULE_NAMES = ("1", "h", "h2")
#: time rules of the loss's integral (:func:`ridgexr.training.time_nodes`)
QUADRATURES = ("simpson-t", "trapezoid-log-t", "gauss-legendre-log-t")
#: fitted targets: the DSM target alpha_t x0, or its conditional mean (the exact denoiser's output)
TARGETS = ("dsm", "ideal")
#: samplers: reverse SDE (Euler-Maruyama), probability-flow ODE (Heun), or the model's diffusers scheduler
SAMPLER_KINDS = ("sde", "ode", "scheduler", "marginal")
#: how a random-feature readout is trained: closed-form gradient flow, or gradient descent
TRAINING_METHODS = ("flow", "gd")
#: A(0) of a random-feature readout
INITS = ("normal", "zeros")
#: nonlinearities of the random features (:data:`ridgexr.features.ACTIVATIONS`)
RF_ACTIVATIONS = ("relu", "tanh", "sigmoid")
#: what a random-feature network outputs: alpha_t E[x0 | x_t] or the score (:class:`ridgexr.RandomFeatureDenoiser`)
RF_PARAMETRIZATIONS = ("posterior_mean", "score")
#: how a share counts a diverged (non-finite) sample: as one outside the region (it left the data; the
#: default), or left out of numerator and denominator (:func:`ridgexr.analysis.gap_mass`)
DIVERGED_RULES = ("outside", "drop")
#: optimizers of minibatch training (:func:`ridgexr.fit_neural`)
OPTIMIZERS = ("adam", "adamw", "sgd")
#: how the sampler uses a model's score: as it is, or divided by sigma_t = sqrt(h_t) (the authors' MNIST
#: notebook; :func:`ridgexr.sampling.scale_score`)
SCORE_SCALES = ("none", "inverse_sigma")
#: which weights minibatch training keeps: the last epoch's, or the epoch with the smallest mean
#: minibatch loss (the authors' MNIST notebook; :func:`ridgexr.fit_neural`)
KEEP_EPOCHS = ("last", "best")
#: how minibatch training draws a row's time: t ~ U(t_min, T) in OU time, or a diffusers scheduler's
#: integer timestep uniformly, as its training loop does (:func:`ridgexr.fit_neural`)
TIME_CONVENTIONS = ("ou", "scheduler")
#: mixed precision of minibatch training: none (the parameters' dtype), torch.autocast to float16 with
#: a GradScaler (CUDA only), or to bfloat16 (:func:`ridgexr.fit_neural`)
MIXED_PRECISIONS = ("none", "fp16", "bf16")
#: null space of the loss form U in the minimum-norm fit: eigenvalues <= p eps mu_max ("relative", ours) or
#: <= 1 / (p 1e4) ("absolute", the authors' sampling_implementation_1126.py; :class:`ridgexr.training.GradientFlow`)
NULL_CUTOFFS = ("relative", "absolute")
#: pixel scales of an image dataset: [0, 1] or [-1, 1] (:mod:`ridgexr.datasets.images`)
IMAGE_SCALES = ("unit", "symmetric")
#: where image data is observed: the pixels themselves, or the VAE latents of the images
IMAGE_SPACES = ("pixel", "latent")
#: how a ridge frame's eigenpairs are computed: automatic (dense eigh at small d, the low-rank
#: paths of :mod:`ridgexr.empirical.lowrank` above), the dense (d, d) eigh, or low rank
FRAME_METHODS = ("auto", "dense", "lowrank")
#: the precision of the streamed top-k pass's logits: float64, or float32 products with float64
#: accumulation, certified by a rounding bound (:func:`ridgexr.empirical.kernels.logit_error_bound`)
LOGIT_DTYPES = ("float64", "float32")

#: which weights of a network trained with ``ema`` a cell samples with: the exponential moving average or the
#: optimizer's own (raw) weights
TRAINED_WEIGHTS = ("ema", "raw")

#: how minibatch training draws a row's time: uniformly, or from a density proportional to w(t) / h_t (the
#: weight's factor on the epsilon error; importance sampling, ridgexr.training.proposal)
TIME_PROPOSALS = ("uniform", "weight")

#: the store's cell dimensions, in store order, each with the part of a catalog entry whose labels it carries:
#: the entry's blocks and schedules, a model block's own sweep (its kind's ``values(dim)``), the training
#: block, the dataset block (docs/schema.md)
CELL_DIM_SOURCES = {"model": "entry", "schedule": "entry", "width": "model", "tau": "model", "epoch": "model",
                    "target": "training", "n_noise": "training", "draw": "training", "data_draw": "dataset",
                    "n_train": "dataset"}
#: the store's cell dimensions, in store order (:data:`ridgexr.schema.CELL_DIMS`)
CELL_DIMS = tuple(CELL_DIM_SOURCES)
#: the cell dimensions that model blocks label, in store order
MODEL_CELL_DIMS = tuple(dim for dim, source in CELL_DIM_SOURCES.items() if source == "model")

#: when a quality curve along training counts as good (tau_gen, ridgexr.analysis.training_timescales): within
#: a share of the gap between its worst and best checkpoint, within a factor of its own best, or within a factor
#: of what a perfect sampler scores (the quality's null)
QUALITY_RULES = ("gap", "best", "null")

#: the per-cell sample qualities tau_gen can be read from (a catalog entry's ``timescales.quality``): stored by the
#: run (the sliced Wasserstein distance, the Frechet distance in the classifier's features, the nearest ratio)
#: or computed from the stored samples (the Wasserstein distance along the law's axis, ridgexr.quality.axis_quality)
TIMESCALE_QUALITIES = ("quality_sliced_wasserstein", "quality_axis_wasserstein", "quality_frechet",
                       "quality_nearest_ratio")
#: the variable holding a quality's null (what the law's own draws score) where it is not ``<quality>_null``
QUALITY_NULLS = {"quality_frechet": "quality_frechet_floor"}
#: each of those qualities as an axis label (short, with what it is measured against)
QUALITY_LABELS = {"quality_sliced_wasserstein": "sliced W2 to the law's draws",
                  "quality_axis_wasserstein": "W1 along the law's axis",
                  "quality_frechet": "Frechet distance to held-out test images",
                  "quality_nearest_ratio": "nearest ratio (1: as new real data)"}
