"""Planning a run: the store layout, the fitted models, and one task per store cell."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..catalog import Experiment, ModelSpec
from ..models import ExactDenoiser
from ..neural import MLPDenoiser
from ..process import time_grid
from ..ridge import suggest_d_star
from ..sampling import recorded_steps
from ..store import CELL_DIAGNOSTICS, StoreLayout
from ..training import draw_training_sample, evaluate_denoiser, fit_neural, fit_sweep, fits_to_dataset

__all__ = ["CellTask", "plan_layout", "model_kwargs", "mlp_kwargs", "build_module", "block_index", "cell_applies",
           "plan_tasks", "resolve_d_star"]


@dataclass
class CellTask:
    """Everything a worker needs to run one cell (small and picklable)."""

    index: tuple[int, ...]
    labels: dict
    A: np.ndarray | None  # random features: the readout (d, p); None for the other kinds
    diagnostics: dict
    block: int = 0  # position of the cell's model block in ``exp.blocks``
    state: dict | None = None  # mlp: the weights at the cell's epoch (CPU tensors)
    denoiser: object | None = None  # a model handed to run_experiment(model=...) (pickled to workers)
    # an earlier cell that samples the same thing (the same model, training set and seeds): this
    # cell's per-step variables are copied from it (store.copy_cell) instead of sampled again
    twin_of: tuple[int, ...] | None = None


def plan_layout(exp: Experiment, train: np.ndarray) -> StoreLayout:
    """The store layout of an experiment (``exp.d_star`` already resolved)."""
    n_steps = exp.process.n_steps
    grid = time_grid(n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    steps = recorded_steps(n_steps, exp.sampler.record_every)
    coords = exp.cell_coords()
    shape = tuple(len(v) for _, v in coords)
    applies = None
    if exp.model_dim:
        names = [n for n, _ in coords]
        applies = tuple(tuple(int(i) for i in idx) for idx in np.ndindex(*shape)
                        if cell_applies(exp, coords, {n: coords[k][1][i] for k, (n, i) in enumerate(zip(names, idx))}))
    return StoreLayout(
        coords=coords, n_samples=exp.n_samples,
        t=grid[steps], sampler_step=steps, d=int(train.shape[1]), block_steps=exp.sampler.block_steps,
        sample_chunk=exp.n_samples if exp.n_samples <= 512 else 256,
        d_star_alt=tuple(exp.ridge.d_star_alt), applies=applies,
    )


def block_index(exp: Experiment, labels: dict) -> int:
    """Position in ``exp.blocks`` of the model block of a cell."""
    if "model" not in labels:
        return 0
    return [b.label for b in exp.blocks].index(labels["model"])


def block_schedule(exp: Experiment, block: ModelSpec) -> str:
    """The schedule label (and diagnostic weight) of a module or exact block: the module's own
    ``schedule``, else the entry's first schedule, else '1'."""
    return block.schedule or (exp.schedules[0] if exp.schedules else "1")


def cell_applies(exp: Experiment, coords: tuple[tuple[str, tuple], ...], labels: dict) -> bool:
    """Whether the model block of a cell uses every label of the cell (docs/models.md, masked cells).

    A block is stored once at the first label of each dimension it does not use: the exact
    denoiser at the first schedule, width, tau, epoch, target and n_noise; a module also at
    the largest n_train (it was trained already); an mlp at the first tau and n_noise and
    target 'dsm'; random features at the first epoch.
    """
    b = exp.blocks[block_index(exp, labels)]
    first = {name: values[0] for name, values in coords}

    def at(dim, allowed=None):
        if dim not in labels:
            return True
        return labels[dim] == first[dim] if allowed is None else labels[dim] in allowed

    if b.kind == "random_features":
        return at("schedule", exp.schedules) and at("width", b.widths) and at("tau", b.taus) and at("epoch")
    if b.kind == "mlp":
        return (at("schedule", exp.schedules) and at("width", b.hidden_widths) and at("tau")
                and at("epoch", b.epoch_list) and at("target", ("dsm",)) and at("n_noise"))
    pinned = all(at(dim) for dim in ("width", "tau", "epoch", "target", "n_noise"))
    if b.kind == "exact":
        return pinned and at("schedule")
    n_train = dict(coords).get("n_train")
    return (pinned and at("schedule", (block_schedule(exp, b),))
            and (n_train is None or labels["n_train"] == n_train[-1]))


def model_kwargs(exp: Experiment, block: ModelSpec | None = None) -> dict:
    """Keyword arguments of :class:`ridgexr.RandomFeatureDenoiser` for a random-feature block (default: the first)."""
    block = block or next(b for b in exp.blocks if b.kind == "random_features")
    return dict(n_frequencies=block.n_frequencies, feature_period=exp.feature_period_of(block),
                activation=block.nonlinearity, parametrization=block.output, seed=exp.seeds.features)


def mlp_kwargs(exp: Experiment, block: ModelSpec, width: int) -> dict:
    """Keyword arguments of :class:`ridgexr.MLPDenoiser` for an mlp block at hidden width ``width``."""
    return dict(hidden=(int(width),) * block.depth, embed_dim=block.embed_dim, embed_scale=block.embed_scale,
                activation=block.nonlinearity, parametrization=block.output, seed=exp.seeds.init)


def build_module(exp: Experiment, block: ModelSpec, d: int, device: str = "cpu"):
    """The :class:`ridgexr.external.ModuleDenoiser` of a module block (imports and probes the user's code)."""
    from ..external import TimeConvention, module_from_spec

    time = TimeConvention(block.time, block.beta_min, block.beta_max)
    if exp.process.T > time.t_max:
        raise ValueError(f"`process.T` ({exp.process.T}) exceeds the largest OU time {time.t_max:.6g} of model "
                         f"{block.label!r}'s time convention {time.label()} (model time s <= 1)")
    return module_from_spec(block.module, d=d, parametrization=block.output, time=time, checkpoint=block.checkpoint,
                            base_dir=exp.base_dir, device=device)


def _heldout(exp: Experiment, train: np.ndarray, n_noise: int):
    """The held-out sample of the per-cell diagnostics (the random-feature fit's, seed + 1)."""
    return draw_training_sample(train, t_min=exp.loss_t_min, T=exp.process.T,
                                n_time=exp.training.n_time, n_noise=n_noise, seed=exp.seeds.training + 1,
                                quadrature=exp.training.quadrature)


def _direct_diagnostics(denoise, sample, schedule: str, d_star: int, loss: float = math.nan) -> dict:
    ev = evaluate_denoiser(denoise, sample, schedule=schedule, d_star=d_star)
    return {name: ev.get(name, math.nan) for name in CELL_DIAGNOSTICS} | {"loss": loss}


def plan_tasks(exp: Experiment, train: np.ndarray, layout: StoreLayout,
               progress: Callable[[str], None] | None = None, *, device: str = "cpu",
               checkpoint_root: Path | None = None, objects: dict | None = None) -> list[CellTask]:
    """Fit every model cell and return one task per run cell, in the layout's order.

    Random features: one :func:`ridgexr.fit_sweep` (every schedule and width in one streamed
    pass) per block and combination of the swept settings (``target``, ``n_noise``,
    ``n_train``; the cell with ``n_train = n`` is trained on ``train[:n]``).  mlp: one
    :func:`ridgexr.fit_neural` per (schedule, width, n_train) to the largest epoch, with
    checkpoints under ``checkpoint_root`` (a rerun resumes them).  Modules are imported and
    probed here, so a bad path fails before the store is created.  The diagnostics of mlp,
    module and exact cells are estimated directly on the held-out sample of the random-feature
    fit (:func:`ridgexr.training.evaluate_denoiser`).
    """
    cells = [(idx, layout.cell_labels(idx)) for idx in layout.cells()]
    tasks: dict[tuple, CellTask] = {}
    say = progress or (lambda msg: None)
    n_trains = exp.dataset.n_trains
    for bi, b in enumerate(exp.blocks):
        mine = [(idx, lab) for idx, lab in cells if block_index(exp, lab) == bi]
        if not mine:
            continue
        prefix = f"{b.label}: " if exp.model_dim else ""
        if b.kind == "random_features":
            def fit_key(lab):  # the fit a cell comes from: (target, n_noise, n_train)
                return (lab.get("target", exp.training.targets[0]), lab.get("n_noise", exp.training.n_noises[0]),
                        lab.get("n_train", n_trains[0]))

            combos = sorted({fit_key(lab) for _, lab in mine}, key=str)
            for combo in combos:
                target, n_noise, n_train = combo
                note = (lambda msg, c=combo: say(f"{prefix}target {c[0]}, n_noise {c[1]}, n_train {c[2]}: {msg}"
                                                 if exp.sweeps() else f"{prefix}{msg}"))
                fits = fit_sweep(
                    train[:n_train], widths=b.widths, schedules=exp.schedules, taus=b.taus,
                    model_kwargs=model_kwargs(exp, b), method=exp.training.method,
                    t_min=exp.loss_t_min, T=exp.process.T,
                    quadrature=exp.training.quadrature, n_time=exp.training.n_time, n_noise=n_noise,
                    seed=exp.seeds.training, lr=exp.training.lr, init=b.init, init_seed=exp.seeds.init,
                    target=target, progress=note)
                diag = fits_to_dataset(fits, d_star=exp.d_star)
                for idx, lab in mine:
                    if fit_key(lab) != combo:
                        continue
                    s, w = lab["schedule"], lab["width"]
                    if s == "exact":  # the exact denoiser is the optimum: its excess is zero by definition
                        opt = float(diag["optimal_loss"].isel(schedule=0).sel(width=w))
                        values = {name: 0.0 for name in CELL_DIAGNOSTICS} | dict(loss=opt, optimal_loss=opt)
                        tasks[idx] = CellTask(idx, lab, None, values, bi)
                        continue
                    fit = fits[(s, w)]
                    i = fit.tau_index(lab.get("tau", b.taus[0]))
                    sel = diag.sel(schedule=s, width=w).isel(tau=i)
                    tasks[idx] = CellTask(idx, lab, fit.A[i].detach().cpu().numpy(),
                                          {name: float(sel[name]) for name in CELL_DIAGNOSTICS}, bi)
            continue
        held = {}

        def heldout(n_train):
            if n_train not in held:
                held[n_train] = _heldout(exp, train[:n_train], exp.training.n_noises[0])
            return held[n_train]

        if b.kind == "exact":
            for idx, lab in mine:
                n_train = lab.get("n_train", n_trains[0])
                say(f"{prefix}held-out diagnostics")
                ex = ExactDenoiser(train[:n_train], top_k=exp.ridge.top_k, drop_tol=exp.ridge.drop_tol)
                values = _direct_diagnostics(ex.denoise, heldout(n_train), block_schedule(exp, b), exp.d_star)
                tasks[idx] = CellTask(idx, lab, None, values | {"loss": values["optimal_loss"]}, bi)
        elif b.kind == "module":
            obj = (objects or {}).get(b.label)
            den = obj if obj is not None else build_module(exp, b, train.shape[1], device)
            for idx, lab in mine:
                say(f"{prefix}held-out diagnostics")
                n_train = lab.get("n_train", n_trains[-1])
                values = _direct_diagnostics(den.denoise, heldout(n_train), block_schedule(exp, b), exp.d_star)
                tasks[idx] = CellTask(idx, lab, None, values, bi, denoiser=obj)
        else:  # mlp: one training run per (schedule, width, n_train), snapshots at the listed epochs
            runs = sorted({(lab["schedule"], lab["width"], lab.get("n_train", n_trains[0])) for _, lab in mine},
                          key=str)
            for s, w, n_train in runs:
                net = MLPDenoiser(train.shape[1], **mlp_kwargs(exp, b, w))
                ck = (None if checkpoint_root is None else
                      checkpoint_root / b.label / f"{s}-w{w}-n{'all' if n_train is None else n_train}")
                fit = fit_neural(
                    net, train[:n_train], schedule=s, epochs=max(b.epoch_list), batch_size=b.batch_size, lr=b.lr,
                    optimizer=b.optimizer, ema=b.ema, t_min=exp.loss_t_min, T=exp.process.T,
                    seed=exp.seeds.training, device=device, checkpoint_dir=ck, save_epochs=b.epoch_list,
                    progress=lambda e, n, loss, c=(s, w): say(f"{prefix}{c[0]}/{c[1]} epoch {e}/{n} loss {loss:.4g}"))
                for idx, lab in mine:
                    if (lab["schedule"], lab["width"], lab.get("n_train", n_trains[0])) != (s, w, n_train):
                        continue
                    epoch = lab.get("epoch", max(b.epoch_list))
                    model = fit.at_epoch(epoch)
                    say(f"{prefix}{s}/{w} epoch {epoch}: held-out diagnostics")
                    values = _direct_diagnostics(model.denoise, heldout(n_train), s, exp.d_star,
                                                 loss=float(fit.losses[epoch - 1]))
                    tasks[idx] = CellTask(idx, lab, None, values, bi, state=fit.snapshots[epoch])
    if exp.legacy_exact:
        # the exact denoiser as schedule 'exact' at every width (tau, target, n_noise) samples the same
        # trajectories for a given training set: sampled at the first such cell, copied to the others
        first: dict = {}
        for idx, lab in cells:
            if lab["schedule"] == "exact":
                key = lab.get("n_train")
                if key in first:
                    tasks[idx] = replace(tasks[idx], twin_of=first[key])
                else:
                    first[key] = idx
    return [tasks[idx] for idx, _ in cells]


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


#: bytes of the imported libraries (torch, xarray, dask, zarr) before any work, measured ~0.4 GB
BASE_BYTES = 400 * 2**20


def estimate_resources(exp: Experiment, train: np.ndarray, memory_budget: int = 1 << 30) -> dict:
    """Rough peak memory of a run and an upper bound of its store's disk use, in bytes, from the config alone.

    Fitting streams the training sample (S = N n_time n_noise points) node by node and holds
    the (p x p) moments of every schedule at the largest width and one block's features;
    sampling holds the time grid and one block of ``block_steps x n_samples``
    states with their frames and the density's scratch memory (at most ``memory_budget``).
    Nothing is allocated here, so an absurd configuration is refused in milliseconds.  The
    estimate is meant to refuse impossible configurations before any work, not to predict
    within 10 %; the store size counts every chunk file at its uncompressed size rounded up to
    whole 4 KiB blocks, plus a folder per file, so it is an upper bound (compression makes stores
    smaller): 1.4 to 3.8 times the disk use of the stores measured (docs/running.md).
    """
    n, d = train.shape
    rf = [b for b in exp.blocks if b.kind == "random_features"]
    p = max((w for b in rf for w in b.widths), default=0)
    n_tau = max((len(b.taus) for b in rf), default=1)
    n_sched = len(exp.schedules or ())
    batch = 8192  # rows per streamed block of the training sample (training.fit)
    # the training sample is streamed node by node: the moments of every schedule, one block's
    # features and exact posterior, and the readouts
    fit = 8.0 * p * p * (n_sched + 3) + 8.0 * batch * (4 * p + n * 2 + 8 * d) + 8.0 * n_sched * n_tau * p * d * 2
    q = float(exp.sampler.block_steps) * exp.n_samples
    n_rec = math.ceil(exp.process.n_steps / exp.sampler.record_every) + 1
    sampling = (q * 8 * (12 * d + 3 * d * d + 10) + min(float(memory_budget), q * n * 8 * 4 + q * d * d * 8 * 4)
                + 8.0 * 4 * (exp.process.n_steps + 1))
    n_cells = float(math.prod(len(v) for _, v in exp.cell_coords()))  # an upper bound: masked cells stay empty

    # the store: an upper bound of its disk use, chunk file by chunk file (padded edge chunks, zstd's worst
    # case raw + raw/256 + headers, the CRC32C, whole 4 KiB file-system blocks, and a 4 KiB folder of the
    # chunk key's hierarchy per file) for every array of the schema (docs/schema.md); compression only
    # makes it smaller
    def on_disk(raw: float) -> float:
        return 4096 * math.ceil((raw + raw / 256 + 128) / 4096) + 4096

    S, bs = exp.n_samples, exp.sampler.block_steps
    sc = S if S <= 512 else 256  # plan_layout's sample chunk
    per_chunk = (4 * on_disk(sc * bs * 8.0 * d)  # trajectory, ridge_projection, residual_normal, residual_tangent
                 + 5 * on_disk(sc * bs * 8.0)  # ridge_distance, ridge_residual, normal_curvature, two rank residuals
                 + 3 * on_disk(sc * bs * 1.0)  # ridge_converged, frame_degenerate, ridge_degenerate
                 + on_disk(sc * bs * 2.0))  # resolved_rank
    n_alt = len(exp.ridge.d_star_alt)
    per_cell = (math.ceil(S / sc) * math.ceil(n_rec / bs) * per_chunk + on_disk(S)
                + (on_disk(S * n_alt * 8.0) if n_alt else 0.0)
                + (len(CELL_DIAGNOSTICS) + 4) * on_disk(8.0))  # diagnostics, max_dropped_mass, marks, digest
    store_level = (64 * 4096 + 512 * 1024  # array metadata, consolidated root metadata
                   + 4 * on_disk(n_rec * 8.0) + on_disk(train.size * 8.0 * 2))  # step coordinates, training data
    return {"peak_memory": BASE_BYTES + max(fit, sampling), "store_size": n_cells * per_cell + store_level}
