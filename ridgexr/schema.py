"""The one table of a store's variables: name -> dims class, dtype, fill, long_name, units, the schema version
that added it, and the flag under which it is numerically undetermined.

Every other list of stored variables is read off :data:`VARIABLES`: the per-step tuples
(:data:`STEP_VECTOR`, :data:`STEP_SCALAR`, :data:`STEP_BOOL`, :data:`STEP_INT`, :data:`STEP_OPTIONAL`,
:data:`STEP_VARIABLES`), :data:`DEGENERATE_FLAGS`, :data:`SINCE`, :data:`VARIABLE_ATTRS`, the store's template
(:func:`ridgexr.store.layout.template`), the writer's shape checks (:mod:`ridgexr.store.write`), the empty block
that :func:`ridgexr.observe.step_quantities` fills (:func:`empty_step_values`) and the planner's store-size bound
(:func:`cell_chunks`).  Adding a stored variable is one :class:`Variable` here and the code that computes it.

The table is a schema: this module imports numpy and the package's lowest floor only (no torch, zarr, xarray or
dask), so the observation layer (:mod:`ridgexr.observe`) and the training diagnostics read it from below the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from fractions import Fraction

from . import units
from .choices import CELL_DIMS as _CELL_DIMS
from .defaults import MEMORIZED_RATIO

__all__ = ["DIAGNOSTIC_VARIABLES", "SCHEMA_VERSION", "FIRST_SCHEMA", "Variable", "DIMS", "VARIABLES", "COORDINATES", "VARIABLE_ATTRS",
           "COORD_ATTRS", "CF_ATTRS", "CELL_DIMS", "STEP_VECTOR", "STEP_SCALAR", "STEP_BOOL", "STEP_INT",
           "STEP_OPTIONAL", "STEP_VARIABLES", "DEGENERATE_FLAGS", "SINCE", "CELL_DIAGNOSTICS", "CELL_QUALITY",
           "QUALITY_VARIABLES", "ARRAYS_SCHEMA", "schema_older", "layout_variables", "step_variables", "attributes", "cell_value_shape", "empty_step_values",
           "cell_chunks"]

#: name -> long_name of every per-cell training diagnostic, as estimated by
#: :func:`ridgexr.training.fits_to_dataset` with ``heldout=True`` (the store's setting); units
#: :data:`ridgexr.units.LOSS`
DIAGNOSTIC_VARIABLES: dict[str, str] = {
    "loss": "weighted score-matching training loss L(A(tau)) (training sample)",
    "optimal_loss": "loss L* of the exact (memorizing) denoiser, held-out sample",
    "excess_loss": "L(A(tau)) - L*, held-out sample",
    "excess_loss_se": "Monte-Carlo standard error of the excess loss, held-out sample",
    "excess_loss_insample": "L(A(tau)) - L* on the training sample (biased low by the fit)",
    "excess_tangent": "tangent part of the excess loss (ridge frame at x_t), held-out sample",
    "excess_normal": "normal part of the excess loss (ridge frame at x_t), held-out sample",
}

SCHEMA_VERSION = "1.10"
#: the schema version of the arrays the first store already had (docs/schema.md, "Schema history")
FIRST_SCHEMA = "1.0"

#: every cell dimension a store can have, in store order (one table: :data:`ridgexr.choices.CELL_DIM_SOURCES`)
CELL_DIMS = _CELL_DIMS

#: dims class -> the dims after the cell dims, for the variables stored per cell; ``store``: a store-level array
#: (training data, dataset extras, the V-kernel) whose dims its writer gives
DIMS: dict[str, tuple[str, ...] | None] = {
    "step_vector": ("sample", "step", "dim"),  # per recorded step and sample, a point (n_samples, n_steps, d)
    "step": ("sample", "step"),  # per recorded step and sample, a number
    "sample": ("sample",),  # per sample, over the whole trajectory
    "sample_vector": ("sample", "dim"),  # per sample, a point
    "sample_alt": ("sample", "d_star_alt"),  # per sample and alternative ridge dimension
    "gate_vector": ("gate_draw", "dim"),  # per draw of the quality gate's own, a point
    "cell": (),  # one value per cell
    "store": None,
}


@dataclass(frozen=True)
class Variable:
    """One stored variable.

    Parameters
    ----------
    name : str
        The array's name in the store.
    dims : str
        Its dims class, a key of :data:`DIMS`.
    long_name, units : str
        Its attributes (``units`` None: a label, no units attribute).
    dtype : str
        numpy dtype of the array.
    fill : float, int or bool
        The value of what is not (or not yet) observed: the template's, and what a writer leaves.
    since : str
        The schema version that added it (:data:`FIRST_SCHEMA`: the first store had it).
    degenerate : str, optional
        The per-step flag under which its value is numerically undetermined (masked by every summary).
    optional : bool
        A per-step variable a block may leave out (it is written as ``fill``).
    when : str, optional
        The :class:`ridgexr.store.layout.StoreLayout` field that must be set for the store to have it
        (``d_star_alt``, ``denoised``, ``final_sample``, ``n_gate``).
    mark : bool
        Book-keeping the store writes itself (completion mark, digest, which cells apply), not a cell's result.
    """

    name: str
    dims: str
    long_name: str
    units: str | None
    dtype: str = "float64"
    fill: float | int | bool = math.nan
    since: str = FIRST_SCHEMA
    degenerate: str | None = None
    optional: bool = False
    when: str | None = None
    mark: bool = False

    def __post_init__(self):
        if self.dims not in DIMS:
            raise ValueError(f"`dims` must be one of {sorted(DIMS)}; got {self.dims!r}")

    @property
    def per_step(self) -> bool:
        return self.dims in ("step", "step_vector")

    @property
    def per_cell(self) -> bool:
        """Whether the store holds its own chunk(s) for each cell (every dims class but ``store``)."""
        return DIMS[self.dims] is not None


def _flag(name, long_name, since=FIRST_SCHEMA):
    return Variable(name, "step", long_name, "1", dtype="bool", fill=False, since=since)


#: the memorization criterion in words, d1/d2 < 1/3 (:data:`ridgexr.defaults.MEMORIZED_RATIO`), for the long names
_MEMORIZED = f"d1/d2 < {Fraction(MEMORIZED_RATIO).limit_denominator(1000)}"

#: per-cell sample quality (float, one value per cell; NaN where the cell's dataset allows no such measure):
#: ``quality_<key>`` for each key of ridgexr.quality.cells.cell_quality -> (long_name, units, schema version that
#: added it) (docs/quality.md).  Pixel Fashion-MNIST cells measure their own gate draws (``gate_sample``) against a
#: fixed test-split reference; the other datasets the observed trajectories' final samples
QUALITY_VARIABLES: dict[str, tuple[str, str, str]] = {
    "quality_nearest_ratio": ("median distance of the measured samples to the nearest training point over that of "
                              "held-out real points (1: as new real data)", units.DIMENSIONLESS, "1.7"),
    "quality_nearest_ratio_lower": ("lower end of the 95 % bootstrap interval of quality_nearest_ratio",
                                    units.DIMENSIONLESS, "1.7"),
    "quality_nearest_ratio_upper": ("upper end of the 95 % bootstrap interval of quality_nearest_ratio",
                                    units.DIMENSIONLESS, "1.7"),
    "quality_frechet": ("Frechet distance of the gate draws to a fixed reference of test-split images of the cell's "
                        "classes, in the features of the cached Fashion-MNIST classifier (not FID; schema 1.7: to "
                        "the training images)", units.FEATURE2, "1.7"),
    "quality_frechet_floor": ("the same for as many held-out real images outside the reference (what the law "
                              "scores)", units.FEATURE2, "1.7"),
    "quality_frechet_ceiling": ("the same for as many class-mean-plus-noise images", units.FEATURE2, "1.7"),
    "quality_class_share": ("share of the measured samples the classifier puts in the training classes (diverged "
                            "ones count as outside)", units.DIMENSIONLESS, "1.7"),
    "quality_class_share_lower": ("lower end of the 95 % Wilson interval of quality_class_share", units.DIMENSIONLESS,
                                  "1.7"),
    "quality_class_share_upper": ("upper end of the 95 % Wilson interval of quality_class_share", units.DIMENSIONLESS,
                                  "1.7"),
    "quality_class_share_heldout": ("the same share for held-out real images of the classes (the classifier's "
                                    "recall there; since 1.9 those outside the coverage's reference)",
                                    units.DIMENSIONLESS, "1.7"),
    "quality_n_heldout": ("held-out real images quality_class_share_heldout is measured on", units.DIMENSIONLESS,
                          "1.9"),
    "quality_class_share_offclass": ("largest share, over the other classes, of their held-out real images that the "
                                     "classifier puts in the cell's classes (NaN: the cell has every class)",
                                     units.DIMENSIONLESS, "1.9"),
    "quality_coverage": ("share of a fixed reference of held-out real images with a gate draw inside their "
                         "5-nearest-neighbour ball, in the classifier's features", units.DIMENSIONLESS, "1.9"),
    "quality_coverage_null": ("what as many fresh draws of the law cover in expectation (exact)",
                              units.DIMENSIONLESS, "1.9"),
    "quality_classifier_accuracy": ("the classifier's accuracy on the whole test split", units.DIMENSIONLESS, "1.7"),
    "quality_sliced_wasserstein": ("sliced 2-Wasserstein distance of the final samples to fresh draws of the law "
                                   "(manifolds)", units.DATA, "1.7"),
    "quality_sliced_wasserstein_null": ("the same for as many fresh draws (what a perfect sampler scores)",
                                        units.DATA, "1.7"),
    "quality_memorized_null_count": (f"fresh draws of the law (ridgexr.quality.reference_draws) with {_MEMORIZED} "
                                     "against the cell's training set (nearest over second-nearest training point): "
                                     "the memorized share's null, f_fresh = count / draws", units.DIMENSIONLESS,
                                     "1.10"),
    "quality_memorized_null_draws": ("finite fresh draws of the law quality_memorized_null_count is counted over "
                                     "(NaN: the dataset has no fresh draws)", units.DIMENSIONLESS, "1.10"),
    "quality_n_draws": ("samples the quality measures were taken on (the gate draws of pixel Fashion-MNIST cells, "
                        "else the observed final samples), diverged ones included", units.DIMENSIONLESS, "1.9"),
    "quality_n_finite": ("measured samples the measures used (the finite ones)", units.DIMENSIONLESS, "1.7"),
}

#: every stored variable, in the order of the store's template (coordinates: :data:`COORDINATES`)
VARIABLES: dict[str, Variable] = {v.name: v for v in (
    # per step, a point (n_samples, n_steps, d)
    Variable("trajectory", "step_vector", "sampler state x at each recorded step", units.DATA),
    Variable("ridge_projection", "step_vector", "SCMS projection of the state onto the log-density ridge R_t",
             units.DATA, degenerate="ridge_degenerate"),
    Variable("residual_normal", "step_vector", "normal part N N^T e of the model error e = denoise(x,t) - "
             "E[x0|x_t=x], frame at x", units.DATA, degenerate="frame_degenerate"),
    Variable("residual_tangent", "step_vector", "tangent part T T^T e of the model error, frame at x", units.DATA,
             degenerate="frame_degenerate"),
    # per step, a number (NaN: not observed)
    Variable("ridge_distance", "step", "|state - ridge_projection|", units.DATA, degenerate="ridge_degenerate"),
    Variable("ridge_residual", "step", "|E E^T grad log p_t| at the projection (0 on the ridge)", units.INV_DATA,
             degenerate="ridge_degenerate"),
    Variable("normal_curvature", "step", "largest normal Hessian eigenvalue of log p_t at the projection (< 0 on a "
             "ridge)", units.INV_DATA2, degenerate="ridge_degenerate"),
    Variable("residual_normal_rank", "step", "|N N^T e| with the tangent space of dimension resolved_rank at the "
             "state (d*(t))", units.DATA),
    Variable("residual_tangent_rank", "step", "|T T^T e| with the tangent space of dimension resolved_rank at the "
             "state (d*(t))", units.DATA),
    Variable("projected_gradient", "step", "the authors' ridge residual |E E^T grad log p_t| at the state itself "
             "(E: the d - d* most negative Hessian eigenvectors of log p_t at x), unmasked", units.INV_DATA,
             since="1.5"),
    Variable("projected_gradient_tmin", "step", "|E E^T grad log p_t_min| at the state, p and E at the sampler's "
             "last recorded time t_min = t[-1] (a scheduler's last timestep; the authors' notebook)", units.INV_DATA,
             since="1.5"),
    Variable("projected_gradient_scaled", "step", "projected_gradient divided by its maximum over the cell's "
             "samples at that step (the authors' normalisation)", units.DIMENSIONLESS, since="1.5"),
    Variable("projected_gradient_tmin_scaled", "step", "projected_gradient_tmin divided by its maximum over the "
             "cell's samples at that step (the authors' normalisation)", units.DIMENSIONLESS, since="1.5"),
    Variable("frame_gap_relative", "step", "tangent/normal eigengap of the posterior covariance at the state less "
             "its certified error, over its largest eigenvalue: frame_degenerate is frame_gap_relative <= attr "
             "gap_floor", units.DIMENSIONLESS, since="1.5"),
    Variable("ridge_distance_resolved", "step", "|state - SCMS projection| at the resolved dimension min(d*, "
             "resolved_rank) (ridge.resolved_projection; NaN without it)", units.DATA, since="1.5"),
    # per step, a number a writer may leave out (NaN): the nearest training point (ridgexr.nearest), the
    # scheduler's clipping of its step (ridgexr.sampling.scheduler_sampling; NaN for the other samplers)
    Variable("nearest_distance", "step", "distance min_i |state - alpha_t x_i| to the nearest scaled training "
             "point (NaN: not observed)", units.DATA, since="1.5", optional=True),
    Variable("nearest_ratio", "step", "d1 / d2: nearest over second-nearest distance to the scaled training points "
             "(< 1/3: memorized; NaN: not observed)", "1", since="1.5", optional=True),
    Variable("clip_shift", "step", "|x_{k+1}(clipped x0) - x_{k+1}(x0)|: how far the diffusers scheduler's "
             "clipping (clip_sample, thresholding; root attrs scheduler_*) of its predicted x0 moved its step from "
             "the state (0: nothing clipped; NaN: not a scheduler sampler)", units.DATA, since="1.7", optional=True),
    # per step, a flag
    _flag("ridge_converged", "SCMS converged for this state"),
    _flag("frame_degenerate", "the ridge frame at the state is numerically undetermined (eigengap at d* below its "
          "certified floor): residual_normal/residual_tangent are arbitrary there"),
    _flag("ridge_degenerate", "the ridge frame at the projection is numerically undetermined"),
    # per step, a count (-1: not observed: masked cell, diverged state)
    Variable("resolved_rank", "step", "number of resolved posterior-covariance directions at the state (the "
             "time-dependent ridge dimension d*(t)); -1 where not observed", "1", dtype="int16", fill=-1),
    # per sample
    Variable("diverged", "sample", "the trajectory left the finite numbers at some step", "1", dtype="bool",
             fill=False),
    # per cell: the training diagnostics (named once: DIAGNOSTIC_VARIABLES) and the sample quality
    *(Variable(name, "cell", long_name, units.LOSS) for name, long_name in DIAGNOSTIC_VARIABLES.items()),
    *(Variable(name, "cell", long_name, unit, since=since) for name, (long_name, unit, since)
      in QUALITY_VARIABLES.items()),
    Variable("cell_complete", "cell", "every variable of this cell is written", "1", dtype="bool", fill=False,
             mark=True),
    # int32: netCDF-3 can hold a slice
    Variable("cell_digest", "cell", "BLAKE2b-32 digest of every chunk's key and stored bytes of this cell, written "
             "just before cell_complete (ridgexr verify checks it)", units.LABEL, dtype="int32", fill=0, since="1.4",
             mark=True),
    Variable("cell_applies", "cell", "the cell is run: its model block uses every label of the cell (masked cells "
             "stay NaN)", "1", dtype="bool", fill=False, since="1.3", mark=True),
    Variable("max_dropped_mass", "cell", "largest posterior mass dropped by top-k truncation over the cell's "
             "projections (<= attr drop_tol)", "1"),
    Variable("final_ridge_residual_alt", "sample_alt", "|E E^T grad log p_t| at the final state for alternative "
             "ridge dimensions", units.INV_DATA, when="d_star_alt"),
    Variable("denoised", "sample_vector", "Tweedie's denoiser output E[x0 | x_s = final state] at s = denoise_t (a "
             "stopped score: s = t_stop, the state frozen below it)", units.DATA, since="1.5", when="denoised"),
    Variable("denoise_t", "cell", "time of the state that denoised is computed from: t_stop (sde, ode), or the "
             "sampler's last recorded time t[-1]", units.TIME, since="1.5", when="denoised"),
    Variable("final_sample", "sample_vector", "the diffusers scheduler's output after its last step (alpha_bar = 1, "
             "t = 0; no ridge there)", units.DATA, since="1.6", when="final_sample"),
    Variable("gate_sample", "gate_vector", "the quality gate's own final samples, drawn by the cell's sampler "
             "without ridge observation (what the quality_* measures of pixel Fashion-MNIST cells read)", units.DATA,
             since="1.9", when="n_gate"),
    # store level (written whole at creation)
    Variable("train_data", "store", "training points x_i", units.DATA),
    Variable("population_data", "store", "fresh sample of the training law (manifold datasets)", units.DATA),
    Variable("manifold_rotation", "store", "rotation R of the manifold: x = R (manifold point, 0, ..., 0)",
             units.DIMENSIONLESS),
    Variable("v_kernel", "store", "V-kernel estimate: variance over training-noise draws of each coordinate of the "
             "learned score on the grid v_kernel_x at the times v_kernel_t (training.draws > 1)", "data_unit-2",
             since="1.5"),
    Variable("v_kernel_x", "store", "grid points of v_kernel (on the line through the first two training points)",
             units.DATA, since="1.5"),
    Variable("v_kernel_t", "store", "probe times of v_kernel", units.TIME, since="1.5"),
)}

#: coordinate -> (long_name, units, schema version that added it); label and index coordinates (names, counts,
#: indices) have no units (:data:`ridgexr.units.LABEL`)
COORDINATES: dict[str, tuple[str, str | None, str]] = {
    "t": ("diffusion time of the recorded step", units.TIME, FIRST_SCHEMA),
    "alpha": ("alpha_t = exp(-t)", "1", FIRST_SCHEMA),
    "h": ("h_t = 1 - exp(-2t)", "1", FIRST_SCHEMA),
    "sampler_step": ("sampler step number of the recorded state (0 = start at T)", units.LABEL, FIRST_SCHEMA),
    "model": ("model block (catalog `models`): random features, mlp, a user's module or the exact denoiser",
              units.LABEL, "1.3"),
    "epoch": ("training epochs of a neural model (its weights after this many passes over the training set)",
              units.LABEL, "1.3"),
    "schedule": ("loss-weight schedule w(t) of the model ('exact': the exact, memorizing denoiser)", units.LABEL,
                 FIRST_SCHEMA),
    "width": ("number of random features p (random features) or hidden-layer width (mlp)", units.LABEL, FIRST_SCHEMA),
    "tau": ("training time of the gradient flow, paper units (root attr tau_units)", units.TAU, FIRST_SCHEMA),
    "target": ("fitted target: 'dsm' (alpha_t x0, noisy) or 'ideal' (its mean E[alpha_t x0 | x_t])",
               units.LABEL, FIRST_SCHEMA),
    "n_noise": ("noise draws per (training point, time node) of the fit", units.LABEL, FIRST_SCHEMA),
    "draw": ("independent draw of the training noise of the fit (training.draws; features fixed)",
             units.LABEL, "1.5"),
    "data_draw": ("independent training set of a manifold dataset (dataset.manifold.draws): train_data rows "
                  "data_draw n .. (data_draw + 1) n, n = dataset.manifold.n", units.LABEL, "1.6"),
    "n_train": ("training-set size: the cell was trained (and observed) on the first n_train points of its "
                "training set (train_data[:n_train], or of its data_draw's rows)", units.LABEL, FIRST_SCHEMA),
    "sample": ("trajectory index", units.LABEL, FIRST_SCHEMA),
    "step": ("index of the recorded step (sampling order: t decreases)", units.LABEL, FIRST_SCHEMA),
    "dim": ("data coordinate index", units.LABEL, FIRST_SCHEMA),
    "train": ("training point index", units.LABEL, FIRST_SCHEMA),
    "d_star_alt": ("alternative ridge dimension", units.LABEL, FIRST_SCHEMA),
    "gate_draw": ("index of the quality gate's own draws (gate_sample)", units.LABEL, "1.9"),
}

#: long_name and units of every variable, and of the step coordinates (``t``, ``alpha``, ``h``, ``sampler_step``)
VARIABLE_ATTRS: dict[str, tuple[str, str | None]] = (
    {v.name: (v.long_name, v.units) for v in VARIABLES.values()}
    | {name: (long_name, unit) for name, (long_name, unit, _) in COORDINATES.items()
       if name in ("t", "alpha", "h", "sampler_step")})
#: long_name and units of every other coordinate (dimension coordinates included)
COORD_ATTRS: dict[str, tuple[str, str | None]] = {name: (long_name, unit) for name, (long_name, unit, _)
                                                   in COORDINATES.items() if name not in VARIABLE_ATTRS}
#: CF attributes beyond long_name and units: ``t`` is the time axis (units "1": :mod:`ridgexr.units`)
CF_ATTRS: dict[str, dict[str, str]] = {"t": {"standard_name": "time", "axis": "T"}}


def _step(dims: str, dtype: str | None = None, optional: bool = False) -> tuple[str, ...]:
    return tuple(v.name for v in VARIABLES.values() if v.dims == dims and v.optional == optional
                 and (dtype is None or v.dtype == dtype))


STEP_VECTOR = _step("step_vector")
STEP_SCALAR = _step("step", "float64")
STEP_BOOL = _step("step", "bool")
STEP_INT = _step("step", "int16")
#: per-step scalars a writer may leave out (they stay NaN): the nearest training point (ridgexr.nearest), the
#: scheduler's clipping of its step (ridgexr.sampling.scheduler_sampling; NaN for the other samplers)
STEP_OPTIONAL = _step("step", optional=True)
STEP_VARIABLES = STEP_VECTOR + STEP_SCALAR + STEP_BOOL + STEP_INT + STEP_OPTIONAL
#: per-step variable -> the flag under which it is numerically undetermined (masked, not averaged,
#: by every summary: :func:`ridgexr.analysis.resolved`)
DEGENERATE_FLAGS = {v.name: v.degenerate for v in VARIABLES.values() if v.degenerate}
#: per-cell training diagnostics (float, one value per cell), named once in :data:`DIAGNOSTIC_VARIABLES`
CELL_DIAGNOSTICS = tuple(DIAGNOSTIC_VARIABLES)
CELL_QUALITY = tuple(QUALITY_VARIABLES)
#: arrays (variables and coordinates) added after the first schema, with the schema version that added them
SINCE = ({v.name: v.since for v in VARIABLES.values() if v.since != FIRST_SCHEMA}
         | {name: since for name, (_, _, since) in COORDINATES.items() if since != FIRST_SCHEMA})


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return (0,)


#: the newest schema that added arrays (1.8 added the record of a store's creation and no array): a store of this
#: schema or later has every array this ridgexr writes, so one with unfinished cells is resumed
ARRAYS_SCHEMA = max(SINCE.values(), key=_version, default=FIRST_SCHEMA)


def schema_older(version: str, than: str = SCHEMA_VERSION) -> bool:
    """Whether a store's ``schema_version`` is older than ``than`` (default :data:`SCHEMA_VERSION`: it may lack
    arrays of :data:`SINCE`: readable, but not resumable)."""
    return _version(str(version)) < _version(str(than))


def layout_variables(*, d_star_alt=(), denoised: bool = False, final_sample: bool = False,
                     n_gate: int = 0) -> Iterator[Variable]:
    """The per-cell variables a store of this layout has (the ``when`` fields of
    :class:`ridgexr.store.layout.StoreLayout`), in template order."""
    on = {"d_star_alt": bool(d_star_alt), "denoised": bool(denoised), "final_sample": bool(final_sample),
          "n_gate": n_gate > 0}
    for v in VARIABLES.values():
        if v.per_cell and (v.when is None or on[v.when]):
            yield v


def cell_value_shape(var: Variable, *, n_samples: int, d: int, n_alt: int = 0, n_steps: int | None = None,
                     n_gate: int = 0) -> tuple[int, ...]:
    """Shape of one cell's value of ``var``: (n_samples, n_steps[, d]) per step, (n_samples[, d | n_alt]) per
    sample, (n_gate, d) per gate draw, () per cell."""
    size = {"sample": n_samples, "step": n_steps, "dim": d, "d_star_alt": n_alt, "gate_draw": n_gate}
    return tuple(size[k] for k in DIMS[var.dims])


def step_variables() -> list[Variable]:
    """The per-step variables of the table, in template order (read when called: a variable added to
    :data:`VARIABLES` is seen)."""
    return [v for v in VARIABLES.values() if v.per_step]


def attributes() -> dict[str, tuple[str, str | None]]:
    """long_name and units of every variable of the table and every coordinate (read when called)."""
    return ({v.name: (v.long_name, v.units) for v in VARIABLES.values()}
            | {name: (long_name, unit) for name, (long_name, unit, _) in COORDINATES.items()})


def empty_step_values(B: int, n: int, d: int, *, optional: bool = False) -> dict[str, np.ndarray]:
    """A block of ``B`` recorded steps of ``n`` samples holding every per-step variable's fill: (B, n, d) for
    :data:`STEP_VECTOR`, (B, n) for the others (NaN, False, -1); the optional ones too with ``optional``.

    Examples
    --------
    >>> block = empty_step_values(2, 3, 4)
    >>> block["trajectory"].shape, block["resolved_rank"][0, 0], bool(block["ridge_converged"].any())
    ((2, 3, 4), np.int16(-1), False)
    """
    return {v.name: np.full((B, n, d) if v.dims == "step_vector" else (B, n), v.fill, dtype=v.dtype)
            for v in VARIABLES.values() if v.per_step and (optional or not v.optional)}


def cell_chunks(*, n_samples: int, n_steps: int, sample_chunk: int, block_steps: int, d: int, n_alt: int = 0,
                denoised: bool = False, final_sample: bool = False, n_gate: int = 0) -> list[tuple[str, float, int, int]]:
    """Every chunk file of one cell: ``(name, raw bytes of one chunk, chunk-key levels below the cell dims,
    chunks of the cell)`` for each per-cell array of such a layout (edge chunks padded to the full chunk, as
    zarr stores them).  The store-size bound (:func:`ridgexr.run.plan.estimate_resources`) sums them.
    """
    out = []
    for v in layout_variables(d_star_alt=(0,) * n_alt, denoised=denoised, final_sample=final_sample, n_gate=n_gate):
        tail = DIMS[v.dims]
        chunk = {"sample": sample_chunk if v.per_step else n_samples, "step": block_steps, "dim": d,
                 "d_star_alt": n_alt, "gate_draw": n_gate}
        n_chunks = math.ceil(n_samples / sample_chunk) * math.ceil(n_steps / block_steps) if v.per_step else 1
        raw = float(np.dtype(v.dtype).itemsize * math.prod(chunk[k] for k in tail))
        out.append((v.name, raw, len(tail), n_chunks))
    return out
