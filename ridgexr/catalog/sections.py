"""The sampler, training, ridge and seed sections of a catalog entry.

Defaults that the paper fixes come from :mod:`ridgexr.defaults` (the API constructors read
the same values); option names from :mod:`ridgexr.choices`.  Torch-free.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from .. import defaults
from ..choices import (GRID_KINDS, KEEP_EPOCHS, LOGIT_DTYPES, NULL_CUTOFFS, QUADRATURES, QUALITY_RULES,
                       SAMPLER_KINDS, SCORE_SCALES, TARGETS, TIMESCALE_QUALITIES, TRAINING_METHODS)
from ..spec import Spec, as_list, distinct_sweep

__all__ = ["ProcessSpec", "TrainingSpec", "SamplerSpec", "RidgeSpec", "SeedSpec", "SEED_MAX", "ClaimSpec",
           "TimescaleSpec"]


class ProcessSpec(Spec):
    """Time range and grid of the sampler (OU time units)."""

    T: float = Field(defaults.T, gt=0, allow_inf_nan=False, description="start time of the sampler (OU time); the paper's 2-D runs: 10")
    t_min: float = Field(defaults.T_MIN, gt=0, allow_inf_nan=False, description="end time of the sampler (OU time); the paper's: 1e-3")
    grid: Literal[GRID_KINDS] = Field(defaults.GRID,
        description="spacing of the time grid (ridgexr.time_grid); the paper's: exponential")
    n_steps: int = Field(defaults.N_STEPS, ge=1, description="sampler steps; the paper's 2-D runs: 2000")

    @model_validator(mode="after")
    def _order(self):
        if not self.t_min < self.T:
            raise ValueError(f"t_min ({self.t_min}) must be < T ({self.T})")
        return self


class TrainingSpec(Spec):
    """Sample and method of the score-matching fit."""

    quadrature: Literal[QUADRATURES] = Field(defaults.QUADRATURE,
        description="time rule of the loss's integral: 'simpson-t' (the paper's), 'trapezoid-log-t' or "
                    "'gauss-legendre-log-t' (cheap at few nodes)")
    n_time: int = Field(defaults.N_TIME, ge=1,
        description="time nodes of the quadrature (odd for simpson-t); the paper's: 2001")
    n_noise: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] = Field(defaults.N_NOISE,
        description="noise draws per (training point, time node); the paper's: 2000; a list makes an n_noise "
                    "cell dimension (one fit per value)")
    target: Literal[TARGETS] | list[Literal[TARGETS]] = Field(defaults.TARGET,
        description="fitted target: 'dsm' (alpha_t x0, the denoising score-matching target) or 'ideal' (its "
                    "conditional mean E[alpha_t x0 given x_t], the exact denoiser's output on the same sample); a "
                    "list makes a target cell dimension")
    draws: int = Field(1, ge=1,
        description="independent draws of the training noise (the (x_t, t) sample's noise; features, A(0) and "
                    "time nodes fixed); > 1 makes a `draw` cell dimension 0 .. draws-1 (one fit per draw; draw 0 "
                    "is the single fit's sample); random features only")
    method: Literal[TRAINING_METHODS] = Field(defaults.METHOD, description="closed-form gradient 'flow' or gradient descent 'gd'")
    lr: float | None = Field(None, gt=0, description="learning rate of method 'gd'")
    t_min: float | None = Field(None, gt=0, description="smallest time of the loss (null: the sampler's t_min)")
    null_cutoff: Literal[NULL_CUTOFFS] = Field("relative",
        description="random features, method 'flow': the null space of the loss form U kept at A(0) -- eigenvalues "
                    "<= p eps mu_max ('relative', ours) or <= 1 / (p 1e4) ('absolute', the authors' "
                    "sampling_implementation_1126.py)")
    keep: Literal[KEEP_EPOCHS] = Field("last",
        description="mlp and unet models: keep the weights of the 'last' epoch, or of the 'best' "
                    "epoch by its mean minibatch loss (the authors' MNIST notebook), up to each listed epoch")

    @field_validator("n_noise", "target")
    @classmethod
    def _sweep_list(cls, v):
        return distinct_sweep(v)

    @property
    def n_noises(self) -> list[int]:
        return as_list(self.n_noise)

    @property
    def targets(self) -> list[str]:
        return as_list(self.target)

    def sweeps(self) -> tuple[tuple[str, tuple], ...]:
        """The cell dimensions this block adds, (name, labels), in store order."""
        out = []
        if isinstance(self.target, list):
            out.append(("target", tuple(self.target)))
        if isinstance(self.n_noise, list):
            out.append(("n_noise", tuple(sorted(self.n_noise))))
        if self.draws > 1:
            out.append(("draw", tuple(range(self.draws))))
        return tuple(out)

    @model_validator(mode="after")
    def _nodes(self):
        if self.quadrature == "simpson-t" and (self.n_time < 3 or self.n_time % 2 == 0):
            raise ValueError(f"n_time must be odd and >= 3 for quadrature 'simpson-t'; got {self.n_time}")
        if self.quadrature == "trapezoid-log-t" and self.n_time < 2:
            raise ValueError(f"n_time must be >= 2 for quadrature 'trapezoid-log-t'; got {self.n_time}")
        return self


class SamplerSpec(Spec):
    kind: Literal[SAMPLER_KINDS] = Field("sde",
        description="'sde' (reverse SDE, Euler-Maruyama), 'ode' (probability flow, Heun), 'scheduler' (the "
                    "diffusers scheduler of the entry's diffusers/unet block, process.n_steps inference steps, "
                    "states recorded at the OU times of its timesteps) or 'marginal' (exact blocks only: each "
                    "sample's state at every recorded time is a draw of the exact score's own marginal p_t, "
                    "alpha_t x_I + sqrt(h_t) xi with one (I, xi) per sample: the law a perfect integrator of the "
                    "exact reverse process started from p_T reaches, without discretization error; frozen below "
                    "a stopped block's t_stop; the score is never evaluated)")
    record_every: int = Field(1, ge=1, description="record every k-th step (the last is always recorded)")
    block_steps: int = Field(256, ge=1, description="recorded steps per block (and per chunk along step)")
    score_scale: Literal[SCORE_SCALES] = Field("none",
        description="'none': step with the model's score; 'inverse_sigma': with score / sigma_t, sigma_t = sqrt(h_t) "
                    "(what the authors' MNIST notebook's sampler does to a network trained to output the score); "
                    "the model error is then observed for the rescaled score")
    scheduler_class: Literal["ddpm", "ddim"] | None = Field(None,
        description="kind scheduler: step with this scheduler class built from the model's scheduler config "
                    "(null: the model's own class)")
    eta: float | None = Field(None, ge=0,
        description="kind scheduler: DDIM's eta (0: deterministic; null: the step's default)")

    @model_validator(mode="after")
    def _scheduler_fields(self):
        if self.kind != "scheduler" and (self.scheduler_class is not None or self.eta is not None):
            raise ValueError("`scheduler_class` and `eta` belong to `kind: scheduler`")
        if self.kind == "marginal" and self.score_scale != "none":
            raise ValueError("`score_scale` applies to the sde and ode samplers; `kind: marginal` never evaluates the score")
        if self.kind == "scheduler" and self.score_scale != "none":
            raise ValueError("`score_scale` applies to the sde and ode samplers, not to `kind: scheduler` (which steps "
                             "the model's own prediction)")
        return self


class RidgeSpec(Spec):
    """Ridge projection settings (names as in :func:`ridgexr.project_to_ridge`)."""

    removed_fields: ClassVar[dict[str, str]] = {"top_k_bound": "drop_tol", "compare_d_star": "d_star_alt"}

    tol: float | None = Field(None, gt=0,
        description="SCMS tolerance on the normal step, data units (null: 1e-9 (1 + R))")
    max_iter: int = Field(200, ge=1, description="SCMS iteration cap")
    top_k: int | None = Field(None, ge=1,
        description="truncate the posterior to the k most responsible training points (null: none)")
    drop_tol: float = Field(1e-6, ge=0, le=1,
        description="use the truncation only where the dropped posterior mass is <= this")
    logits: Literal[LOGIT_DTYPES] = Field("float64",
        description="precision of the top-k pass over all N logits: float64, or float32 products with float64 "
                    "accumulation, certified by a rounding bound (the kept points' logits and moments stay float64; "
                    "queries whose bounded dropped mass exceeds drop_tol take the exact float64 path)")
    d_star_alt: list[Annotated[int, Field(ge=1)] | Literal["auto"]] = Field(default_factory=list,
        description="extra ridge dimensions (1..d-1) whose residual at the final state is stored; 'auto' adds the "
                    "dimension d_star: auto would choose (recorded in the attr d_star_info)")
    auto_t: float = Field(0.05, gt=0, description="probe time of d_star: auto")
    stop_degenerate: int | None = Field(None, ge=1,
        description="stop a projection after this many consecutive iterations with a degenerate frame (its steps "
                    "are arbitrary there; such states are masked in every summary anyway); null: iterate to tol")
    gap_floor: float | None = Field(None, gt=0, lt=1,
        description="relative floor c of the ridge frame's eigengap: a frame is degenerate (and a posterior "
                    "direction unresolved) where the gap, less its certified error, is <= c x the largest "
                    "eigenvalue; null: sqrt(eps) = 1.5e-8 in float64 (ours); 1e-13 is a float64-level floor (the "
                    "authors' notebook has none). frame_gap_relative stores the gap, for any other floor")
    resolved_projection: bool = Field(False,
        description="also project each state at its resolved dimension min(d_star, resolved_rank) "
                    "(ridge_distance_resolved; one more SCMS run per distinct smaller dimension)")
    observe: bool = Field(True,
        description="observe each recorded state (ridge projection, residuals, the authors' projected gradient, nearest "
                    "training point); false: store the states alone (trajectory, finite; every other per-step "
                    "variable at its fill value), for runs whose measures are those of the final samples "
                    "(coverage, novelty) at sample counts where the observation would be the cost")
    accelerate: bool = Field(False,
        description="extrapolate runs of slow SCMS steps (the same fixed points and stopping rule, fewer "
                    "iterations; projections move within the plain iteration's accuracy); false: the plain iteration")


SEED_MAX = 2**63 - 1


class SeedSpec(Spec):
    """Seeds (0 .. 2**63 - 1) of the random features, the training sample and the sampler."""

    features: int = Field(0, ge=0, le=SEED_MAX, description="seed of the random features")
    training: int = Field(0, ge=0, le=SEED_MAX, description="seed of the training sample (and of d_star: auto)")
    sampler: int = Field(0, ge=0, le=SEED_MAX, description="seed of the sampler's noise (shared by every cell)")
    init: int = Field(0, ge=0, le=SEED_MAX, description="seed of A(0) when model.init is 'normal'")


class ClaimSpec(Spec):
    """One claim the entry makes about its cells; its measure, reference, null and criterion are fixed by its kind
    (the registry :data:`ridgexr.claims.KINDS`, docs/claims.md), so committing the entry fixes the verdict's rule
    before the run.  The kind's name and the number of times it compares are checked against that registry when
    the entry runs (:func:`ridgexr.claims.check_claim_specs`) and when its claims are read.  Not in the config
    hash: claims read a store, they do not change it."""

    kind: str = Field(min_length=1, description="what is claimed: a kind of the claims registry (docs/claims.md)")
    models: list[str] | None = Field(None, min_length=1, description="the model names it is about (default: "
                                     "'exact' for memorizes, every other model otherwise)")
    t: list[float] | None = Field(None, description="the diffusion times it compares (reach-falls, slide-slower: [early, late]; "
                                  "reach-as-exact: [t]; align-tangent: one or more), each read at the nearest "
                                  "observed step")
    written: str = Field("", description="where and when the claim was written (a docs page and a date)")
    post_hoc: bool = Field(False, description="true when the claim was registered after the numbers it is read on "
                           "were seen: its rows say 'post hoc' in the criterion column")

    @field_validator("t")
    @classmethod
    def _finite_times(cls, t):
        if any(not (v > 0) or v != v or v == float("inf") for v in t or []):
            raise ValueError(f"t must hold finite diffusion times > 0; got {t}")
        return t


class TimescaleSpec(Spec):
    """How tau_gen is read from the entry's store (it sweeps training time and n_train): the sample quality, its
    rule and factor (:func:`ridgexr.analysis.training_timescales`), written before the run like a claim
    (docs/timescales.md).  The report (and the explorer, through it) and ``analyses/timescales.py`` read it
    (:func:`ridgexr.claims.timescale_rule`); tau_mem and the slope criteria are :mod:`ridgexr.defaults`'.  Not
    in the config hash: it reads a store, it does not change it."""

    quality: Literal[TIMESCALE_QUALITIES] = Field("quality_sliced_wasserstein",
        description="the per-cell sample quality: " + ", ".join(TIMESCALE_QUALITIES) + " (the axis distance is "
                    "computed from the stored samples, the others are stored)")
    quality_null: str | None = Field(None, description="rule null: the variable holding the quality's null "
                                     "(default: quality_frechet_floor for the Frechet distance, else <quality>_null)")
    rule: Literal[QUALITY_RULES] = Field(defaults.TIMESCALE_GEN_RULE, description="when the quality counts as good: "
                                         + ", ".join(QUALITY_RULES) + " (docs/timescales.md)")
    factor: float = Field(defaults.TIMESCALE_GEN_FACTOR, ge=1, description="the factor of rules best and null")
    written: str = Field("", description="where and when the rule was written (a docs page and a date)")
