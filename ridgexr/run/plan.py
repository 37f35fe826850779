"""Planning a run: the store layout, the fitted models, and one task per store cell."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..catalog import Experiment
from ..process import time_grid
from ..ridge import suggest_d_star
from ..sampling import recorded_steps
from ..store import CELL_DIAGNOSTICS, StoreLayout
from ..training import fit_sweep, fits_to_dataset

__all__ = ["CellTask", "plan_layout", "model_kwargs", "plan_tasks", "resolve_d_star"]


@dataclass
class CellTask:
    """Everything a worker needs to run one cell (small and picklable)."""

    index: tuple[int, ...]
    labels: dict
    A: np.ndarray | None  # readout (d, p); None for the exact denoiser
    diagnostics: dict


def plan_layout(exp: Experiment, train: np.ndarray) -> StoreLayout:
    """The store layout of an experiment (``exp.d_star`` already resolved)."""
    n_steps = exp.process.n_steps
    grid = time_grid(n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    steps = recorded_steps(n_steps, exp.sampler.record_every)
    return StoreLayout(
        schedules=tuple(exp.cell_schedules), widths=tuple(exp.model.widths),
        taus=tuple(exp.model.taus) if exp.model.tau_sweep else None, n_samples=exp.n_samples,
        t=grid[steps], sampler_step=steps, d=int(train.shape[1]), block_steps=exp.sampler.block_steps,
        sample_chunk=exp.n_samples if exp.n_samples <= 512 else 256,
        d_star_alt=tuple(exp.ridge.d_star_alt), sweeps=exp.sweeps(),
    )


def model_kwargs(exp: Experiment) -> dict:
    """Keyword arguments of :class:`ridgexr.RandomFeatureDenoiser` for the experiment's model block."""
    return dict(n_frequencies=exp.model.n_frequencies, feature_period=exp.feature_period,
                activation=exp.model.activation,
                parametrization=exp.model.parametrization, seed=exp.seeds.features)


def plan_tasks(exp: Experiment, train: np.ndarray, layout: StoreLayout,
               progress: Callable[[str], None] | None = None) -> list[CellTask]:
    """Fit every model cell and return one task per store cell, in the layout's order.

    One :func:`ridgexr.fit_sweep` (every schedule and width in one streamed pass) per
    combination of the swept settings (``target``, ``n_noise``, ``n_train``; the cell with
    ``n_train = n`` is trained on ``train[:n]``).
    """
    fits, diags = {}, {}
    combos = [(tg, nn, nt) for tg in exp.training.targets for nn in exp.training.n_noises
              for nt in exp.dataset.n_trains]
    for target, n_noise, n_train in combos:  # a few settings, each one streamed fit of every cell
        note = None if progress is None else (lambda msg, c=(target, n_noise, n_train): progress(
            f"target {c[0]}, n_noise {c[1]}, n_train {c[2]}: {msg}" if exp.sweeps() else msg))
        key = (target, n_noise, n_train)
        fits[key] = fit_sweep(
            train[:n_train], widths=exp.model.widths, schedules=exp.schedules, taus=exp.model.taus,
            model_kwargs=model_kwargs(exp), method=exp.training.method,
            t_min=exp.training.t_min or exp.process.t_min, T=exp.process.T,
            quadrature=exp.training.quadrature, n_time=exp.training.n_time, n_noise=n_noise,
            seed=exp.seeds.training, lr=exp.training.lr, init=exp.model.init, init_seed=exp.seeds.init,
            target=target, progress=note)
        diags[key] = fits_to_dataset(fits[key], d_star=exp.d_star)
    tasks = []
    for idx in layout.cells():
        labels = layout.cell_labels(idx)
        s, w = labels["schedule"], labels["width"]
        tau = labels.get("tau", exp.model.taus[0])
        key = (labels.get("target", exp.training.targets[0]), labels.get("n_noise", exp.training.n_noises[0]),
               labels.get("n_train", exp.dataset.n_trains[0]))
        diag = diags[key]
        if s == "exact":  # the exact denoiser is the optimum: its excess is zero by definition
            opt = float(diag["optimal_loss"].isel(schedule=0).sel(width=w))
            values = {name: 0.0 for name in CELL_DIAGNOSTICS} | dict(loss=opt, optimal_loss=opt)
            tasks.append(CellTask(idx, labels, None, values))
            continue
        fit = fits[key][(s, w)]
        i = fit.tau_index(tau)
        sel = diag.sel(schedule=s, width=w).isel(tau=i)
        tasks.append(CellTask(idx, labels, fit.A[i].detach().cpu().numpy(),
                              {name: float(sel[name]) for name in CELL_DIAGNOSTICS}))
    return tasks


def resolve_d_star(exp: Experiment, train: np.ndarray) -> tuple[Experiment, dict]:
    """The experiment with an integer d_star, and how it was chosen (for the store attrs)."""
    if exp.d_star != "auto":
        return exp, {"d_star": int(exp.d_star), "source": "catalog"}
    t = exp.ridge.auto_t
    d, spec = suggest_d_star(train, t, seed=exp.seeds.training)
    info = {"d_star": d, "source": f"auto: largest gap of the mean posterior-covariance spectrum at t={t}",
            "spectrum": [float(v) for v in spec]}
    return exp.model_copy(update={"d_star": d}), info


#: bytes of the imported libraries (torch, xarray, dask, zarr) before any work, measured ~0.4 GB
BASE_BYTES = 400 * 2**20


def estimate_resources(exp: Experiment, train: np.ndarray, memory_budget: int = 1 << 30) -> dict:
    """Rough peak memory of a run and the uncompressed size of its store, in bytes, from the config alone.

    Fitting streams the training sample (S = N n_time n_noise points) node by node and holds
    the (p x p) moments of every schedule at the largest width and one block's features;
    sampling holds the time grid and one block of ``block_steps x n_samples``
    states with their frames and the density's scratch memory (at most ``memory_budget``).
    Nothing is allocated here, so an absurd configuration is refused in milliseconds.  The
    estimate is meant to refuse impossible configurations before any work, not to predict
    within 10 %.
    """
    n, d = train.shape
    p = max(exp.model.widths)
    n_tau = len(exp.model.taus)
    n_sched = len(exp.schedules)
    batch = 8192  # rows per streamed block of the training sample (training.fit)
    # the training sample is streamed node by node: the moments of every schedule, one block's
    # features and exact posterior, and the readouts
    fit = 8.0 * p * p * (n_sched + 3) + 8.0 * batch * (4 * p + n * 2 + 8 * d) + 8.0 * n_sched * n_tau * p * d * 2
    q = float(exp.sampler.block_steps) * exp.n_samples
    n_rec = math.ceil(exp.process.n_steps / exp.sampler.record_every) + 1
    sampling = (q * 8 * (12 * d + 3 * d * d + 10) + min(float(memory_budget), q * n * 8 * 4 + q * d * d * 8 * 4)
                + 8.0 * 4 * (exp.process.n_steps + 1))
    n_cells = float(len(exp.cell_schedules) * len(exp.model.widths) * (n_tau if exp.model.tau_sweep else 1)
                    * len(exp.training.targets) * len(exp.training.n_noises) * len(exp.dataset.n_trains))
    store = n_cells * exp.n_samples * (n_rec * 8 * (4 * d + 4) + len(exp.ridge.d_star_alt) * 8 + 1)
    return {"peak_memory": BASE_BYTES + max(fit, sampling), "store_size": store + train.size * 8.0}
