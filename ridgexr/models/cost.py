"""The planner's cost model: machine rates, the exact posterior's cost, and :class:`KindCost`, a kind's cost hook.

:func:`ridgexr.run.plan.estimate_stage_seconds` and :func:`ridgexr.run.plan.estimate_resources` price a run
from its configuration alone.  What a model block costs depends on its kind, so each registry entry
(:class:`ridgexr.models.ModelKind`) names a :class:`KindCost` by import path (``cost=``); the planner
asks it and names no kind.  A kind that names none is costed by :class:`KindCost` itself: a small
network (64 wide, depth 2) per call, nothing to train here, no memory of its own.

Every time is in seconds on 2 idle CPU cores, every memory in bytes.  The rates below were set from
the issue-30 profile of two-points-paper (fit 18 min, 7 of them the Gram at the GEMM rate) and the
posterior-moment and eigh timings of docs/performance.md (one thread, halved for 2 cores).  This
module is imported only when a run is planned (it loads torch through :mod:`ridgexr.empirical`).
"""

from __future__ import annotations

import math
from typing import Mapping

from ..empirical import DEFAULT_MEMORY_BUDGET, support_path, upper_pair_count
from ..scms import frame_width, use_lowrank
from ..training.sample import keeps_moments

__all__ = ["KindCost", "EpochTrainedCost", "TRAINING_RUNTIME_BYTES", "moments_seconds", "GEMM_FLOPS", "ELEMENT_SECONDS", "BLOCK_SECONDS",
           "CALL_SECONDS", "STEP_SECONDS", "OPTIMIZER_STEP_SECONDS", "EPOCH_SECONDS", "CONV_FLOPS",
           "HELDOUT_BLOCK", "MEAN_PASSES", "TOPK_PASSES", "EIGH_PASSES", "EIGH_FLOPS", "LOWRANK_APPLICATIONS",
           "UNET_CALL_BYTES", "UNET_TRAIN_BYTES"]

#: rates of the stage-time estimate (2 CPU cores, float64): dense GEMM flops, one memory-bound
#: pass over an element of a (rows x width) feature array (an activation, a weighting, a copy, an
#: exponential), and the fixed cost of a streamed
#: block (one time node of a fit), of one call of a denoiser, or of one sampler step / SCMS
#: iteration over a block of states
GEMM_FLOPS = 100e9
ELEMENT_SECONDS = 2e-9
BLOCK_SECONDS = 3e-3
CALL_SECONDS = 2e-4
STEP_SECONDS = 5e-4
#: fixed cost of one optimizer step and of one epoch (its permutation, times, noise and loss) of an mlp's
#: training, one torch thread (small networks do not use the second core).  Measured 2026-12-03 (width 128,
#: d = 8): 1.75 ms per step and 1.65 ms per epoch, from 3.6 ms per one-step epoch at n = 64 and 61 ms per
#: 32-step epoch at n = 1 024 (tests/test_estimate.py); EPOCH_SECONDS was 0.05 s, set when the resumable
#: checkpoint was written after every epoch, which put timescales-gmm (10 000 one-step epochs x 5 n) at 46 min
#: against 7-13 min measured
OPTIMIZER_STEP_SECONDS = 2e-3
EPOCH_SECONDS = 2e-3
#: float32 rate of a U-Net's convolutions on 2 idle cores, forward and backward (flop/s, counted by
#: :func:`ridgexr.models.unet.denoiser.forward_flops`): the default block trains at ~610 images/s
#: (docs/images.md), 3 x 9.3e7 flops per image
CONV_FLOPS = 170e9
#: rows per block of a held-out evaluation (``evaluate_denoiser`` merges small time nodes up to it)
HELDOUT_BLOCK = 8192
#: memory passes per (query, training point) pair of the posterior mean (logits' maximum, exponential,
#: sum), and the extra passes of a top-k selection (measured: 3.6-3.8 at N = 1 000 and 6 000, d = 32)
MEAN_PASSES = 3
TOPK_PASSES = 4
#: a dense d x d eigh at one query: EIGH_PASSES d^2 element passes + EIGH_FLOPS d^3 flops at the GEMM rate
#: (measured 14 us at d = 16, 56 us at 32, 0.98 ms at 128, 78 ms at 784, one thread)
EIGH_PASSES = 14
EIGH_FLOPS = 4.5
#: covariance applications per query of a randomized low-rank frame (subspace iteration, warm started;
#: d > ``lowrank.RANDOMIZED_MIN_D`` only: below it spread posteriors take the support path)
LOWRANK_APPLICATIONS = 4
#: bytes per float of a U-Net's activations (:func:`ridgexr.models.unet.cost.unet_activations`) per image: a
#: no-grad call holds ~6-7.4 x them, a training step (forward and backward) ~21.5 x (measured, float32,
#: 28 x 28, channels (8, 16) and (16, 32, 32); with a margin)
UNET_CALL_BYTES = 4.0 * 10
UNET_TRAIN_BYTES = 4.0 * 28


def moments_seconds(n: int, d: int, *, d_star: int | None = None, top_k: int | None = None, frame: str = "auto",
                    queries: int = 1, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> float:
    """Seconds (2 idle cores) of the exact posterior moments at one query of a call of ``queries`` queries.

    The cost model of :meth:`ridgexr.empirical.SmoothedEmpirical.moments_flat` and of a ridge frame:

    - the mean: the logits and the mean as GEMMs (2 N (d + 2) + 2 N d flops) and
      :data:`MEAN_PASSES` element passes over the N responsibilities, plus :data:`TOPK_PASSES`
      passes with ``top_k < N`` (the selection; the covariance is counted over all N points, the
      exact path a spread posterior falls back to);
    - with ``d_star``, a frame: dense (:func:`ridgexr.scms.use_lowrank` false), the second moment
      as one GEMM over the N precomputed outer products (2 N d^2 flops; where those do not fit a
      quarter of ``memory_budget`` they are formed again for every chunk of queries, N d^2 element
      passes shared by the chunk) and a d x d eigh; low-rank up to d = ``RANDOMIZED_MIN_D``, the support
      path over all N points (the spread posterior's bound): with N <= d the N x N Gram matrix of the
      centred, weighted points (2 N^2 d flops), its eigh and the d* + 1 eigenvectors mapped back
      (2 N d (d* + 1) flops), with N > d 2 N d^2 flops of GEMMs over the gathered support and a d x d eigh,
      and in both 2 N d element passes to gather the support; low-rank above it,
      :data:`LOWRANK_APPLICATIONS` applications of the covariance to a (d x width) block (4 N d width
      flops each).  (At d = 784 and N = 128 the d x d form priced a frame at 41 ms where it takes 1.1-1.9
      ms on 2 cores: ``timescales-fashion``'s plan was 10x its measured sampling stage.)

    Parameters
    ----------
    n, d : int
        Training points and dimension.
    d_star : int, optional
        Ridge dimension: also the frame (covariance and eigenvectors).
    top_k, frame : as ``ridge.top_k`` and the frame method (``"auto"``, ``"dense"``, ``"lowrank"``)
    queries : int
        Queries per call (held-out block, or states of a sampled block): shares the outer products.
    memory_budget : int
        Bytes of the density's scratch space.

    Returns
    -------
    float, seconds per query

    Examples
    --------
    >>> moments_seconds(1000, 2) == 2.0 * 1000 * 6 / GEMM_FLOPS + MEAN_PASSES * 1000 * ELEMENT_SECONDS
    True
    """
    s = 2.0 * n * (2 * d + 2) / GEMM_FLOPS + MEAN_PASSES * n * ELEMENT_SECONDS
    if top_k is not None and top_k < n:
        s += TOPK_PASSES * n * ELEMENT_SECONDS
    if d_star is None:
        return s
    eigh = EIGH_PASSES * d * d * ELEMENT_SECONDS + EIGH_FLOPS * d**3 / GEMM_FLOPS
    if use_lowrank(frame, "log", d, d_star):
        if support_path(d) and n <= d:  # a support of at most d points: the n x n Gram matrix of its rows
            gram = EIGH_PASSES * n * n * ELEMENT_SECONDS + EIGH_FLOPS * n**3 / GEMM_FLOPS
            return s + (2.0 * n * n * d + 2.0 * n * d * (d_star + 1)) / GEMM_FLOPS + 2.0 * n * d * ELEMENT_SECONDS + gram
        if support_path(d):
            return s + 2.0 * n * d * d / GEMM_FLOPS + 2.0 * n * d * ELEMENT_SECONDS + eigh
        return s + LOWRANK_APPLICATIONS * 4.0 * n * d * frame_width(d, d_star) / GEMM_FLOPS
    pairs = upper_pair_count(d)  # the second-moment product forms each distinct entry once
    s += 2.0 * n * pairs / GEMM_FLOPS + eigh
    if n * pairs * 8 > memory_budget // 4:  # no cached outer products: formed per chunk of queries
        chunk = max(1, min(queries, (memory_budget // 8) // (2 * d * d)))
        s += n * pairs * ELEMENT_SECONDS / chunk
    return s


class KindCost:
    """A kind's cost hook: what the planner asks about a model block of the kind (time and memory).

    Subclass it in the kind's package (``ridgexr/models/<kind>/cost.py``), override what differs, and
    name an instance in the kind's registry line (``ModelKind(..., cost="package.module:COST")``).  The
    defaults are those of a small network trained elsewhere (a module, a user's diffusers model): one
    call costs a 64-wide MLP of depth 2, nothing is trained here, the held-out diagnostics cost one call
    per row and one exact posterior per row of each distinct held-out sample, and the block holds no memory the
    planner counts.

    The arguments the methods share: ``exp`` the catalog entry (:class:`ridgexr.catalog.Experiment`),
    ``block`` one model block of the kind (its spec), ``blocks`` every block of the kind in the entry,
    ``cells`` the labels (dict dim -> label) of the block's run cells, ``n`` and ``d`` the training set's
    size and dimension, ``n_trains`` the training-set size of each ``n_train`` label (the whole set's
    size when there is no such dimension), ``d_frame`` the ridge dimension the diagnostics' frames use.
    """

    #: what the activations of one call are named in the memory estimate's drivers ("n_samples x <this>")
    activations_label: str = "network activations"
    #: whether a run with this kind imports the image stack (diffusers, the quality classifier, the VAE):
    #: ``IMAGE_BASE_BYTES`` more memory before any work
    image_libraries: bool = False
    #: memory a run with this kind holds whatever its sizes (bytes, added once to the base): the runtime of
    #: training here, for kinds trained by minibatch DSM (:data:`TRAINING_RUNTIME_BYTES`)
    runtime_bytes: float = 0.0

    def call_seconds(self, block, d: int, n: int, queries: int = 1, width: int | None = None) -> float:
        """Seconds of one evaluation of the block's denoiser at one state, in a call of ``queries`` states
        (``width``: the cell's width label, where the kind has one).  Default: a small MLP (width 64, depth 2,
        time embedding 1), 2 (depth w^2 + (1 + 2 d) w) flops at :data:`GEMM_FLOPS` and 2 depth w element passes.
        """
        w, depth, embed = 64, 2, 1
        return 2.0 * (depth * w * w + (embed + 2 * d) * w) / GEMM_FLOPS + 2 * depth * w * ELEMENT_SECONDS

    def fit_seconds(self, exp, block, cells: list[dict], d: int, n_trains: list[int]) -> list[float]:
        """Seconds of each fit of the block done by the run (one entry per fit; the planner sums them).
        Default: none (the model was trained elsewhere)."""
        return []

    def fit_seconds_left(self, exp, block, cells: list[dict], d: int, n_trains: list[int],
                         reached: Mapping[str, int]) -> list[float]:
        """:meth:`fit_seconds` of a rerun that resumes training runs from their checkpoints: ``reached`` maps a run's
        checkpoint folder (``<block label>/<run folder>`` under the store's checkpoint root) to the epoch its
        checkpoint holds.  Default: :meth:`fit_seconds` (a kind whose fits do not resume)."""
        return self.fit_seconds(exp, block, cells, d, n_trains)

    def diagnostics_seconds(self, exp, block, cells: list[dict], d: int, n_trains: list[int],
                            d_frame: int) -> list[float]:
        """Seconds of each held-out evaluation of the block (one per run cell by default), without the exact
        posterior means and frames (:meth:`heldout_moments`): per row of the held-out sample
        (``diagnostics: {n_time, n_noise, n_points}``) one model call, in merged blocks of :data:`HELDOUT_BLOCK`
        rows (:data:`BLOCK_SECONDS` each), one call of the denoiser per time node (:data:`CALL_SECONDS`); none
        for a block without diagnostics (``diagnostics: null``)."""
        out = []
        if block.diagnostics is None:  # none asked for (the image-scale kinds' default)
            return []
        for lab in cells:
            m = lab.get("n_train", n_trains[0])
            h_time, h_rows = self._heldout_rows(exp, block, m)
            out.append(h_rows * self.call_seconds(block, d, m, min(h_rows, HELDOUT_BLOCK))
                       # merged blocks of 8192 rows, one call of the denoiser per node
                       + math.ceil(h_rows / 8192) * BLOCK_SECONDS + h_time * CALL_SECONDS)
        return out

    def heldout_moments(self, exp, block, lab: dict, d: int, n_trains: list[int],
                        d_frame: int) -> tuple[tuple, float, float] | None:
        """The held-out sample a run cell's diagnostics read, as a key, the seconds of its exact posterior means
        and ridge frames (:func:`moments_seconds` per row) and the bytes the sample keeps of them: the planner
        counts each key once, since every block evaluated on one sample shares them
        (:meth:`ridgexr.training.TrainingSample.block_moments`, where they fit its cache, and kept until the
        models are fitted; a sample too large for it is keyed by its block, paid by each, keeps nothing).  None
        for a block without diagnostics."""
        if block.diagnostics is None:
            return None
        m = lab.get("n_train", n_trains[0])
        h_time, h_rows = self._heldout_rows(exp, block, m)
        key, kept = (m, lab.get("data_draw"), h_rows, h_time), h_rows * d * (1 + d_frame) * 8.0
        if not keeps_moments(int(h_rows), d, d_frame):
            key, kept = key + (id(block),), 0.0
        return key, h_rows * moments_seconds(m, d, d_star=d_frame, frame="auto", queries=min(h_rows, HELDOUT_BLOCK)), kept

    @staticmethod
    def _heldout_rows(exp, block, m: int) -> tuple[int, float]:
        """(time nodes, rows) of the block's held-out sample of a cell with ``m`` training points."""
        h_time, h_noise = block.diagnostics.sizes(exp.training.n_time, exp.training.n_noises[0])
        return h_time, float(min(m, block.diagnostics.n_points or m)) * h_time * h_noise

    def fit_bytes(self, exp, blocks: list, n: int, d: int, memory_budget: int) -> dict[str, float]:
        """Bytes held while the kind's blocks are fitted, by the group of fields that drives each term
        (the names appear in the planner's ``memory_drivers``).  Default: none."""
        return {}

    def sampling_bytes(self, exp, blocks: list, n: int, d: int) -> float:
        """Bytes the kind's blocks hold while a block of states is sampled (weights, fixed features).
        Default: 0."""
        return 0.0

    def call_bytes(self, block, base_dir) -> float:
        """Bytes per state of one no-grad call of the block's network (its activations; ``base_dir`` the
        catalog's folder, for a model read from disk).  Default: 0 (small next to the states' own)."""
        return 0.0


#: the memory of training here by minibatch DSM beyond the counted weights, optimizer state and batches
#: (torch's autograd and allocator caches, the checkpoints' writes), a fixed 192 MiB: timescales-gmm-quick
#: (a width-128 mlp, 10 checkpoints) peaked at 503 MiB and timescales-gmm at 640 MiB against estimates of 441 and
#: 478 MiB without it (2026-12-03, docs/performance.md)
TRAINING_RUNTIME_BYTES = 192 * 2**20


class EpochTrainedCost(KindCost):
    """The cost of a kind trained here by minibatch DSM over ``epochs`` (mlp, unet): one training per
    (schedule, width, n_train) of its cells to the largest epoch, each epoch N samples forward and backward
    (3 calls at ``batch_size`` states), plus :data:`OPTIMIZER_STEP_SECONDS` per optimizer step and
    :data:`EPOCH_SECONDS` per epoch; :data:`TRAINING_RUNTIME_BYTES` of memory besides what its terms count."""

    runtime_bytes = TRAINING_RUNTIME_BYTES

    def fit_seconds(self, exp, block, cells: list[dict], d: int, n_trains: list[int]) -> list[float]:
        return self.fit_seconds_left(exp, block, cells, d, n_trains, {})

    def fit_seconds_left(self, exp, block, cells: list[dict], d: int, n_trains: list[int],
                         reached: Mapping[str, int]) -> list[float]:
        """One entry per training run of the cells (``block.training_runs``, as
        :func:`ridgexr.models.trained.fit_epoch_block` trains them): its epochs from the one ``reached`` gives for
        its folder, or from 0, to the largest listed."""
        epochs, out = max(block.epoch_list), []
        sizes = dict(zip(exp.dataset.n_trains, n_trains))  # n_train label -> training-set size
        for folder, labels in block.training_runs(cells, exp.dataset.n_trains[0]).items():
            m = sizes.get(labels["n_train"], labels["n_train"])
            start = min(epochs, reached.get(f"{block.label}/{folder}", 0))
            steps = math.ceil(m / block.batch_size)
            out.append((epochs - start) * (float(m) * 3.0 * self.call_seconds(block, d, m, block.batch_size)
                                           + steps * OPTIMIZER_STEP_SECONDS + EPOCH_SECONDS))
        return out
