"""Run one cell: sample its trajectories, observe every block, write it, mark the cell complete."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..catalog import Experiment
from ..datasets import load_training_set
from ..empirical import SmoothedEmpirical
from ..models import model_kind
from ..nearest import step_nearest
from ..observe import step_quantities, unobserved_step
from ..process import OU, time_grid
from ..quality.cells import cell_quality, final_samples, gate_batch
from ..quality.gate import gate_seed
from ..ridge import ridge_residual
from ..sampling import (divergence_bound, guard_divergence, implied_denoiser, marginal, sample, scale_score,
                        scheduler_grid, scheduler_sampling)
from ..store.write import CellWriter, write_cell_end
from ..store.layout import StoreLayout
from .plan import CellTask
from .split import density_settings, observation_settings, observe_split, scatter_training_set, split_settings

__all__ = ["run_cell"]


def _final_residual_alt(density: SmoothedEmpirical, layout: StoreLayout, x_last: torch.Tensor, t_last: float,
                        ok: torch.Tensor, top_k: int | None) -> np.ndarray:
    """|E E^T grad log p_t| at the final states ``ok`` (not diverged) for each alternative ridge
    dimension, (n_samples, n_alt); NaN elsewhere."""
    d = x_last.shape[-1]
    out = np.full((x_last.shape[0], len(layout.d_star_alt)), np.nan)
    for j, d_alt in enumerate(layout.d_star_alt):  # a few alternative dimensions
        if 0 <= d_alt < d and bool(ok.any()):
            out[ok.cpu().numpy(), j] = ridge_residual(density.with_time(t_last), x_last[ok], d_alt,
                                                      top_k=top_k).cpu().numpy()
    return out


def _gate_samples(exp: Experiment, layout: StoreLayout, model, score, train: np.ndarray, grid: np.ndarray, dev,
                  den_t: float | None, t_stop: float | None, scheduler=None) -> np.ndarray | None:
    """The quality gate's own final samples of a cell, (layout.n_gate, d) float64, or None when it takes none.

    Drawn by the cell's sampler like its trajectories, in batches of :func:`ridgexr.quality.cells.gate_batch`
    (batch j seeded with :func:`ridgexr.quality.gate_seed` (``seeds.sampler``, j)), recording only the first and
    the last state and observing nothing; the final sample of each is what the cell's quality measures read of
    a trajectory (:func:`ridgexr.quality.final_samples`: the scheduler's output at t = 0, else Tweedie's denoiser
    at ``den_t`` where the store keeps it, else the last state over alpha)."""
    n = layout.n_gate
    if not n:
        return None
    batch, d, n_steps = gate_batch(n), train.shape[1], exp.process.n_steps
    out = []
    for j, start in enumerate(range(0, n, batch)):  # a few batches, each vectorised over its draws
        m, seed, final = min(batch, n - start), gate_seed(exp.seeds.sampler, j), {}
        if scheduler is not None:
            from ..models.diffusers.denoiser import scheduler_predict

            sched, shape = scheduler
            blocks = scheduler_sampling(scheduler_predict(model, sched), sched, m, shape, n_steps, seed=seed,
                                        eta=exp.sampler.eta, block_steps=2, record_every=max(1, n_steps - 1),
                                        device=dev, final=lambda x: final.setdefault("x", x))
        elif exp.sampler.kind == "marginal":
            blocks = marginal(train, m, grid, seed=seed, block_steps=2, record_every=len(grid) - 1, device=dev,
                              t_stop=t_stop)
        else:
            blocks = sample(exp.sampler.kind, score, m, d, grid, seed=seed, block_steps=2,
                            record_every=len(grid) - 1, device=dev, t_stop=t_stop)
        for block in blocks:
            last = (block.x[-1], float(block.t[-1]))
        den = None
        if "x" not in final and den_t is not None:
            den = np.asarray(torch.as_tensor(model.denoise(last[0], den_t)).cpu().numpy(), dtype=np.float64)
        out.append(final_samples(final["x"].cpu().numpy() if "x" in final else None, den, last[0].cpu().numpy(),
                                 float(OU().alpha(last[1]))))
    return np.concatenate(out)


def run_cell(exp_json: str, store: str, layout: StoreLayout, task: CellTask, device: str = "cpu",
             n_threads: int | None = None, on_block: Callable[[int], None] | None = None, *,
             sample_block: int | None = None, client=None) -> dict:
    """Sample, observe and write one cell; returns a small summary. Runs in a dask worker too.

    Parameters
    ----------
    exp_json : the experiment as JSON (``Experiment.model_dump_json()``, d_star resolved)
    store : path of the created store
    layout : its StoreLayout
    task : the cell (index, labels, diagnostics, what its kind's builder reads in ``state``)
    device : torch device of the sampler and the observation
    n_threads : torch threads in this process (workers: 1)
    on_block : called with 1 after each written block (progress)
    sample_block : int, optional
        Observe each block in parts of this many samples (:func:`ridgexr.run.split.observe_split`):
        on ``client``'s workers when given (the training set scattered to each once), else here.
        The same parts give bit-identical stores here and on workers; the unsplit observation
        agrees to ~1e-12.
    client : dask.distributed.Client, optional
    """
    if n_threads:
        torch.set_num_threads(n_threads)
    exp = Experiment.model_validate_json(exp_json)
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)[exp.dataset.rows(task.labels)]
    d = train.shape[1]
    dev = torch.device(device)
    spec = exp.blocks[task.block]  # the cell's model block
    model = model_kind(spec.kind).builder()(exp, spec, task, train, device)
    score = lambda x, t: model.score(x, t)  # noqa: E731
    # the exact denoiser's error is zero by definition: no residuals to observe
    denoise = None if getattr(model, "is_exact", False) else (lambda x, t: model.denoise(x, t))
    if exp.sampler.score_scale != "none":  # the sampler steps with a rescaled score: observe that one's error
        score = scale_score(score, exp.sampler.score_scale)
        denoise = implied_denoiser(score)
    bound = divergence_bound(train)
    score = guard_divergence(score, bound)
    density = SmoothedEmpirical(train, 1.0, **density_settings(exp))
    if exp.sampler.kind == "scheduler":  # the diffusers scheduler (docs/models.md): the OU times of its timesteps
        from ..models.diffusers.denoiser import entry_scheduler, scheduler_predict

        sched, shape = entry_scheduler(exp)
        grid = scheduler_grid(sched, exp.process.n_steps)
    else:
        grid = time_grid(exp.process.n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    # the sampler's last observed time (projected_gradient_tmin, denoised): t_min, or the scheduler's last timestep's
    t_last = float(grid[-1])
    train_t = torch.as_tensor(train, dtype=torch.float64, device=dev)  # the nearest-training search
    split = sample_block is not None or client is not None
    if split:  # the observation in parts of samples, here or on workers (CPU)
        settings = split_settings(exp, bound, t_min=t_last)
        shared = scatter_training_set(client, train) if client is not None else train
        if client is not None and denoise is not None:  # the model once per worker and cell, like the data
            denoise = client.scatter(denoise, broadcast=True, hash=False)
    diverged = np.zeros(exp.n_samples, dtype=bool)
    dropped = 0.0
    last = None
    # the writer closes (every queued block on disk, errors raised) before the completion mark
    t_stop = getattr(model, "t_stop", None)  # a stopped (coarse) exact score: frozen below t_stop
    final = {}  # the scheduler's output at t = 0 (stored without ridge geometry)
    with torch.no_grad(), CellWriter(store, layout, task.index) as writer:  # writes overlap the next block
        if exp.sampler.kind == "scheduler":
            blocks = scheduler_sampling(scheduler_predict(model, sched), sched, exp.n_samples, shape,
                                        exp.process.n_steps, seed=exp.seeds.sampler, eta=exp.sampler.eta,
                                        block_steps=exp.sampler.block_steps, record_every=exp.sampler.record_every,
                                        device=dev, final=lambda x: final.setdefault("x", x))
        elif exp.sampler.kind == "marginal":  # the exact score's marginals, drawn (exact blocks only)
            blocks = marginal(train, exp.n_samples, grid, seed=exp.seeds.sampler, block_steps=exp.sampler.block_steps,
                              record_every=exp.sampler.record_every, device=dev, t_stop=t_stop)
        else:
            blocks = sample(exp.sampler.kind, score, exp.n_samples, d, grid, seed=exp.seeds.sampler,
                            block_steps=exp.sampler.block_steps, record_every=exp.sampler.record_every, device=dev,
                            t_stop=t_stop)
        for block in blocks:
            # the geometry in float64 whatever the model's dtype (a U-Net's states are float32): the density
            # computes in its queries' dtype
            x = block.x.to(torch.float64)
            block_score = block.score.to(torch.float64) if isinstance(block.score, torch.Tensor) else block.score
            if not exp.ridge.observe:  # the states alone (ridge.observe: false)
                q = unobserved_step(x, bound)
            elif split:
                q = observe_split(shared, x, block.t, exp.d_star, settings, sample_block=sample_block,
                                  denoise=denoise, score=block_score, client=client)
            else:
                q = step_quantities(density, x, block.t, exp.d_star, denoise, score=block_score,
                                    **observation_settings(exp, bound, t_min=t_last))
                q |= step_nearest(x, block.t, train_t, q["finite"])
            if block.clip_shift is not None:  # the scheduler's x0 clipping (the other samplers: NaN)
                q["clip_shift"] = block.clip_shift
            writer.write(int(block.index[0]), q)
            diverged |= ~q["finite"].all(0)
            if np.isfinite(q["dropped_mass"]).any():
                dropped = max(dropped, float(np.nanmax(q["dropped_mass"])))
            last = (x[-1], float(block.t[-1]), torch.as_tensor(q["finite"][-1], device=x.device))
            if on_block is not None:
                on_block(1)
    alt = _final_residual_alt(density, layout, *last, exp.ridge.top_k) if layout.d_star_alt else None
    den = den_t = None
    if layout.denoised:  # Tweedie's denoiser at the time the final state has (t_stop when stopped before t_min;
        # the scheduler does not stop: its last state is at its own last time)
        den_t = t_last if t_stop is None or exp.sampler.kind == "scheduler" else max(float(t_stop), t_last)
        with torch.no_grad():
            den = np.asarray(torch.as_tensor(model.denoise(last[0], den_t)).cpu().numpy(), dtype=np.float64)
    final_x = final["x"].cpu().numpy() if "x" in final else None
    # the quality gate's own draws (none for datasets whose measures read the observed final samples)
    with torch.no_grad():
        gate = _gate_samples(exp, layout, model, score, train, grid, dev, den_t, t_stop,
                             (sched, shape) if exp.sampler.kind == "scheduler" else None)
    # the sample quality of the cell (ridgexr.quality; NaN where its dataset allows no measure)
    samples = gate if gate is not None else final_samples(final_x, den, last[0].cpu().numpy(),
                                                          float(OU().alpha(last[1])))
    quality = {f"quality_{k}": v for k, v in cell_quality(exp.dataset, train, samples, base_dir=exp.base_dir,
                                                          seed=exp.seeds.sampler).items()}
    write_cell_end(store, layout, task.index, diverged, task.diagnostics, max_dropped_mass=dropped,
                   final_ridge_residual_alt=alt, denoised=den, denoise_t=np.nan if den_t is None else den_t,
                   final_sample=final_x, gate_sample=gate, quality=quality)
    return {**task.labels, "diverged": int(diverged.sum())}
