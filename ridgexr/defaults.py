"""The numbers that define the paper's models, in one place.

He, Qiu & Tao (2026) and the authors' code (rf_diffusion_experiments) fix these choices.  The
API constructors (:class:`ridgexr.models.RandomFeatureDenoiser`, :func:`ridgexr.fit_random_features`,
:class:`ridgexr.models.MLPDenoiser`, :func:`ridgexr.fit_neural`, ...) and the catalog's field
defaults (:mod:`ridgexr.catalog`) both read them from here, so a model built by hand in a
notebook and a model built from a catalog entry that lists only its required fields are the
same model (``tests/test_defaults.py`` compares every default of both).

Which results depend on which of these is documented in docs/findings.md (sensitivity table).
This module imports nothing.
"""

from __future__ import annotations

__all__ = ["T", "T_MIN", "N_STEPS", "GRID", "N_SAMPLES", "N_FREQUENCIES", "FEATURE_PERIOD", "INIT",
           "ACTIVATION", "QUADRATURE", "N_TIME", "N_NOISE", "TARGET", "METHOD", "MLP_HIDDEN", "MLP_DEPTH",
           "MLP_EMBED_DIM", "MLP_EMBED_SCALE", "MLP_EPOCHS", "MLP_BATCH_SIZE", "MLP_LR", "MLP_OPTIMIZER",
           "MLP_PARAMETRIZATION", "RF_PARAMETRIZATION", "HELDOUT_N_TIME", "HELDOUT_N_NOISE",
           "UNET_BLOCK_OUT_CHANNELS", "UNET_LAYERS_PER_BLOCK", "UNET_NORM_GROUPS", "UNET_IN_CHANNELS",
           "UNET_TIMESTEPS", "UNET_EPOCHS", "UNET_BATCH_SIZE", "UNET_LR", "UNET_EMA", "REPORT_N_FRAMES",
           "MEMORIZED_RATIO", "TIMESCALE_GEN_RULE", "TIMESCALE_GEN_FACTOR", "TIMESCALE_QUALITY_TOL", "MEMORIZED_SHARE", "TIMESCALE_N_BOOT", "TIMESCALE_CI",
           "TIMESCALE_SLOPE_AGREE", "TIMESCALE_SLOPE_DISAGREE", "TIMESCALE_MEM_SLOPE", "TIMESCALE_GEN_SLOPE",
           "SCORE_ERROR_TIMES", "SCORE_ERROR_POINTS"]

# ---------------------------------------------------------------- the sampler (2-D runs)
#: start time of the sampler, OU time units (the authors' 2-D scripts: 10)
T = 10.0
#: end time of the sampler and smallest time of the loss, OU time units (the authors': 1e-3)
T_MIN = 1e-3
#: sampler steps (the authors' 2-D runs: 2000)
N_STEPS = 2000
#: spacing of the sampler's time grid (the authors': exponential)
GRID = "exponential"
#: trajectories per cell (the authors' 2-D runs: 2000)
N_SAMPLES = 2000

# ---------------------------------------------------------------- random features
#: K, Fourier time frequencies (phi has 2K + 1 entries; the authors': 128)
N_FREQUENCIES = 128
#: period of the time features: None means "the sampler's T" (the authors' choice, phi(T) = phi(0));
#: a model built without a sampler uses the paper's T = 10
FEATURE_PERIOD = None
#: A(0): iid N(0, 1) entries (the authors' initialisation)
INIT = "normal"
#: nonlinearity of the random features (the paper's: ReLU)
ACTIVATION = "relu"
#: what a random-feature network outputs: alpha_t E[x0 | x_t] (the paper's denoiser)
RF_PARAMETRIZATION = "posterior_mean"

# ---------------------------------------------------------------- the loss's quadrature and sample
#: time rule of the loss's integral (the authors': Simpson's rule in t)
QUADRATURE = "simpson-t"
#: time nodes of the quadrature (the authors': 2001)
N_TIME = 2001
#: noise draws per (training point, time node) (the authors': 2000)
N_NOISE = 2000
#: fitted target (denoising score matching)
TARGET = "dsm"
#: how the readout is trained: the closed-form gradient flow A(tau)
METHOD = "flow"

# ---------------------------------------------------------------- held-out diagnostics (not the paper's)
#: at most this many time nodes (of the entry's quadrature rule) in the held-out sample of the
#: models not fitted in closed form (mlp, module, exact); random features keep the training
#: sample's size.  Chosen so the diagnostics stay under 10 % of a cell's time (docs/performance.md)
HELDOUT_N_TIME = 65
#: at most this many noise draws per (training point, node) in that held-out sample
HELDOUT_N_NOISE = 64

# ---------------------------------------------------------------- the paper's MLP (MNIST latents)
#: hidden width and number of hidden layers
MLP_HIDDEN = 512
MLP_DEPTH = 2
#: Gaussian Fourier time embedding: size and std of its frequencies
MLP_EMBED_DIM = 128
MLP_EMBED_SCALE = 30.0
#: training: epochs (the authors' notebook: 150), minibatch size (ours; the authors' MNIST notebook: 1024),
#: learning rate (ours; the notebook: 1e-4 for the score network, 1e-3 for the VAE), optimizer (Adam). The
#: authors' values are the catalog entry mnist-authors (catalogs/mnist.yaml)
MLP_EPOCHS = 150
MLP_BATCH_SIZE = 128
MLP_LR = 1e-3
MLP_OPTIMIZER = "adam"
#: what the MLP outputs: the score
MLP_PARAMETRIZATION = "score"

# ---------------------------------------------------------------- the unet kind (not the paper's: image issue 25)
#: U-Net levels' channels and ResNet layers per level: ~0.27 M parameters at 28 x 28 x 1, sized for 2 CPU cores
UNET_BLOCK_OUT_CHANNELS = (16, 32, 32)
UNET_LAYERS_PER_BLOCK = 1
UNET_NORM_GROUPS = 8
UNET_IN_CHANNELS = 1
#: timesteps of the DDPMScheduler that fixes a trained U-Net's timestep convention (diffusers' default)
UNET_TIMESTEPS = 1000
#: training: epochs, images per Adam step, learning rate, EMA decay of the sampled weights
UNET_EPOCHS = 10
UNET_BATCH_SIZE = 128
UNET_LR = 2e-3
UNET_EMA = 0.999

# ---------------------------------------------------------------- the command line (not a model's)
#: the catalog entry `ridgexr run` runs without a name: the quick demo whose cells differ in reach, slide and
#: memorization, with claims (catalogs/points2d.yaml)
DEFAULT_ENTRY = "three-points-demo"

# ---------------------------------------------------------------- the report (not a model's)
#: snapshots (steps) in the report's grid of a 2-D store's samples (make_report, 'ridgexr report --n-frames')
REPORT_N_FRAMES = 6

# ---------------------------------------------------------------- training time scales (issue 41; not the paper's)
#: d1/d2 below this is a memorized sample (Bonnaire et al. 2025; ridgexr.analysis.memorized)
MEMORIZED_RATIO = 1 / 3
#: the one memorization threshold of a cell: it has memorized when the share of its final samples with d1/d2 <
#: MEMORIZED_RATIO less that of fresh draws of the law (ridgexr.analysis.memorized_excess) exceeds this: the
#: claims memorizes / does-not-memorize (its interval above / below it) and tau_mem (the first checkpoint whose
#: interval reaches it; on a store without the null, the raw share's interval wholly above it)
MEMORIZED_SHARE = 0.1
#: tau_gen's rule (ridgexr.choices.QUALITY_RULES; ridgexr.analysis.training_timescales): since 2026-12-03 'best',
#: the first checkpoint whose quality is within TIMESCALE_GEN_FACTOR of the best the curve reaches, written
#: before timescales-gmm-seed1 ran (docs/timescales.md); 'gap' was the rule written before timescales-gmm ran
TIMESCALE_GEN_RULE = "best"
#: the factor of the ratio rules ('best', 'null'): q <= factor x reference for a distance
TIMESCALE_GEN_FACTOR = 2.0
#: the 'gap' rule: the first checkpoint whose quality has closed all but this share of the gap between the
#: checkpoints' worst and best quality, (q - best) / (worst - best) <= tol
TIMESCALE_QUALITY_TOL = 0.1
#: bootstrap resamples and interval level of f_mem and of the slope b
TIMESCALE_N_BOOT = 2000
TIMESCALE_CI = 0.95
#: the criteria fixed before the run (docs/timescales.md): the slope b of log tau = a + b log n "agrees" with
#: the expected slope when its interval lies within expected +- TIMESCALE_SLOPE_AGREE, "disagrees" when it
#: lies wholly outside expected +- TIMESCALE_SLOPE_DISAGREE, else "inconclusive"
TIMESCALE_SLOPE_AGREE = 0.3
TIMESCALE_SLOPE_DISAGREE = 0.5
#: the expected slopes: tau_mem proportional to n, tau_gen independent of n (Bonnaire et al. 2025)
TIMESCALE_MEM_SLOPE = 1.0
TIMESCALE_GEN_SLOPE = 0.0
#: diffusion times (OU units) at which ridgexr.run.score_errors compares a network's score with the population and
#: empirical scores (Bonnaire et al.'s GMM measure); the authors' scripts that choose theirs are not published, so
#: these are ours: small t, where memorization lives (e_mem grows as t -> 0), to t = 1
SCORE_ERROR_TIMES = (0.01, 0.1, 1.0)
#: evaluation points per time (fresh draws of the law, noised to t)
SCORE_ERROR_POINTS = 1000
