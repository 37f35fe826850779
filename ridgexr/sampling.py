"""Samplers as torch generators that yield blocks of consecutive recorded steps.

Reverse-time SDE (Euler-Maruyama) for the forward process dX = f(X) dt + g dW (the OU
process f(x) = -x, g^2 = 2, see :class:`ridgexr.OU`), on a decreasing grid
t_0 = T > t_1 > ... > t_n = t_min with steps dt_k = t_k - t_{k+1} > 0:

    x <- x + (-f(x) + g^2 score(x, t_k)) dt_k + sqrt(g^2 dt_k) xi     (= (x + 2 score) dt + sqrt(2 dt) xi)

Probability-flow ODE (Heun): dx/ds = v(x, t) = -f(x) + g^2/2 score(x, t) (= x + score) in
reverse time s, i.e. predictor x' = x + dt v(x, t_k), corrector
x <- x + dt/2 [v(x, t_k) + v(x', t_{k+1})].  The drift terms come from
:meth:`ridgexr.OU.reverse_drift` and :meth:`ridgexr.OU.flow_velocity`.

The initial state is x_T ~ N(0, I) (the OU stationary law).  Every random number comes
from one ``torch.Generator`` seeded with ``seed`` on the sampling device: the same seed
gives the same trajectory on the same device.  The consumer receives :class:`StepBlock`
objects holding ``block_steps`` recorded states at a time, so the whole trajectory is
never held on the device.

:func:`scheduler_sampling` steps a diffusers scheduler instead (DDPM, DDIM), as its pipeline
does, recording each state at the OU time of its timestep (alpha_bar = e^{-2t}).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

from ._validation import check_float, check_int, check_option
from .choices import SCORE_SCALES
from .process import OU

__all__ = ["StepBlock", "recorded_steps", "reverse_sde", "probability_flow", "marginal", "sample", "SAMPLERS",
           "guard_divergence", "within_bound", "divergence_bound", "DIVERGENCE_FACTOR", "scheduler_sampling",
           "scheduler_grid", "clips_sample", "unclipped_scheduler", "scheduler_clipping", "CLIP_FIELDS", "scale_score",
           "implied_denoiser", "SCORE_SCALES"]

#: a state farther than this many data scales from the origin has diverged
DIVERGENCE_FACTOR = 1e6


def divergence_bound(train: np.ndarray) -> float:
    """|x| beyond which a sampler state counts as diverged: 1e6 x max(1, max_i |x_i|), data units."""
    scale = float(np.sqrt((np.asarray(train, dtype=np.float64) ** 2).sum(-1).max())) if len(train) else 1.0
    return DIVERGENCE_FACTOR * max(1.0, scale)


def within_bound(x: torch.Tensor, bound: float) -> torch.Tensor:
    """The states of ``x`` (..., d) that have not diverged: finite with |x| <= ``bound``; bool (...)."""
    with torch.no_grad():
        if bound > torch.finfo(x.dtype).max:  # no bound in this dtype (e.g. inf): finiteness alone
            return torch.isfinite(x).all(-1)
        # a NaN or infinite entry makes the norm NaN or inf, and the comparison False
        return torch.linalg.vector_norm(x, dim=-1) <= bound

ScoreFn = Callable[[torch.Tensor, float], torch.Tensor]


@dataclass
class StepBlock:
    """Recorded states of consecutive steps.

    Attributes
    ----------
    index : (B,) position of each state among the recorded steps (0-based, consecutive)
    step : (B,) sampler step number of each state (0 = initial state at t = T)
    t : (B,) diffusion time of each state
    x : (B, n_samples, d) states (torch tensor on the sampling device)
    score : (B, n_samples, d) the score the sampler evaluated at each state, score(x, t) (1 / data
        units), NaN for the last step (never stepped from) and wherever the divergence guard
        withheld the model; observers reuse it instead of evaluating the model twice
    clip_shift : (B, n_samples) float64 array, optional
        :func:`scheduler_sampling` only: |x_{k+1}(clipped x0) - x_{k+1}(unclipped x0)| of the scheduler's step
        from each state (data units; 0 where nothing was clipped).  None for the other samplers.
    """

    index: np.ndarray
    step: np.ndarray
    t: np.ndarray
    x: torch.Tensor
    score: torch.Tensor | None = None
    clip_shift: np.ndarray | None = None


def recorded_steps(n_steps: int, record_every: int = 1) -> np.ndarray:
    """Step numbers that are recorded: 0, k, 2k, ... and always the last step ``n_steps``."""
    n_steps = check_int(n_steps, "n_steps", min_val=1)
    record_every = check_int(record_every, "record_every", min_val=1)
    steps = np.arange(0, n_steps + 1, record_every)
    if steps[-1] != n_steps:
        steps = np.append(steps, n_steps)
    return steps


def _validate(grid, n_samples, d, block_steps, seed):
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size < 2 or not np.all(np.diff(grid) < 0) or grid[-1] <= 0:
        raise ValueError("`grid` must be a strictly decreasing 1-D array of times > 0 with >= 2 entries; "
                         f"got shape {grid.shape}")
    check_int(n_samples, "n_samples", min_val=1)
    check_int(d, "d", min_val=1)
    check_int(block_steps, "block_steps", min_val=1)
    check_int(seed, "seed", min_val=0, max_val=2**63 - 1)
    return grid


def _run(step_fn, score: ScoreFn, n_samples: int, d: int, grid, *, seed: int, block_steps: int,
         record_every: int, device, dtype, process: OU | None, t_stop: float | None = None) -> Iterator[StepBlock]:
    grid = _validate(grid, n_samples, d, block_steps, seed)
    if t_stop is not None:
        t_stop = check_float(t_stop, "t_stop", min_val=0, include_boundaries="neither")
    process = process if process is not None else OU()
    n_steps = grid.size - 1
    rec = recorded_steps(n_steps, record_every)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    x = torch.randn(n_samples, d, generator=gen, device=device, dtype=dtype)
    buf, buf_scores, buf_steps = [], [], []
    next_index = 0
    rec_set = set(rec.tolist())
    for k in range(n_steps + 1):
        if k < n_steps and t_stop is not None and grid[k] <= t_stop:  # stopped: the state is frozen
            x_next = x
            with torch.no_grad():
                s = score(x, t_stop) if k in rec_set else torch.full_like(x, math.nan)
        elif k < n_steps:
            t1 = float(grid[k + 1]) if t_stop is None else max(float(grid[k + 1]), t_stop)  # land on t_stop
            with torch.no_grad():  # samplers never need gradients; keeps memory flat
                x_next, s = step_fn(process, score, x, float(grid[k]), t1, gen)
        else:
            x_next, s = None, torch.full_like(x, math.nan)
        if k in rec_set:
            buf.append(x)
            buf_scores.append(s)
            buf_steps.append(k)
            if len(buf) == block_steps or k == n_steps:
                steps = np.asarray(buf_steps)
                yield StepBlock(index=np.arange(next_index, next_index + len(buf)), step=steps, t=grid[steps],
                                x=torch.stack(buf), score=torch.stack(buf_scores))
                next_index += len(buf)
                buf, buf_scores, buf_steps = [], [], []
        x = x_next


def guard_divergence(score: ScoreFn, bound: float) -> ScoreFn:
    """``score`` evaluated only on states that are finite with |x| <= ``bound``; NaN for the others.

    A diverged trajectory then stays NaN (and is flagged by the observer) instead of
    aborting the run inside a denoiser that refuses non-finite input.  Where every state is
    within the bound, ``score`` is called exactly as without the guard.
    """

    def guarded(x: torch.Tensor, t: float) -> torch.Tensor:
        ok = within_bound(x, bound)
        if bool(ok.all()):
            return score(x, t)
        out = torch.full_like(x, float("nan"))
        if bool(ok.any()):
            out[ok] = score(x[ok], t)
        return out

    return guarded


def scale_score(score: ScoreFn, score_scale: str = "none", process: OU | None = None) -> ScoreFn:
    """The score a sampler steps with: ``score`` itself, or ``score / sigma_t``.

    ``"inverse_sigma"`` divides by sigma_t = sqrt(h_t) (1 / data units -> 1 / data units^2 for a true
    score): what the authors' MNIST notebook does in its Euler-Maruyama sampler
    (``score = score_model(x, t) / std``) although its network is trained to output the score itself
    (its loss is |s sigma_t + z|^2 / h_t).  ``"none"`` returns ``score`` unchanged (the correct score).

    Parameters
    ----------
    score : callable (x (n, d) tensor, t float or (n,) tensor) -> (n, d) tensor
    score_scale : {"none", "inverse_sigma"}
    process : OU, optional
        Whose h_t is used (default ``OU()``).

    Examples
    --------
    >>> import torch
    >>> s = scale_score(lambda x, t: -x, "inverse_sigma")
    >>> round(float(s(torch.ones(1, 1), 0.5)[0, 0]), 6)  # -1 / sqrt(1 - e^-1)
    -1.257767
    """
    check_option(score_scale, "score_scale", SCORE_SCALES)
    if score_scale == "none":
        return score
    process = process if process is not None else OU()

    def rescaled(x: torch.Tensor, t) -> torch.Tensor:
        sigma = torch.sqrt(torch.as_tensor(process.h(t), dtype=x.dtype, device=x.device))
        return score(x, t) / (sigma[..., None] if sigma.ndim else sigma)

    return rescaled


def implied_denoiser(score: ScoreFn, process: OU | None = None) -> Callable:
    """The denoiser E[x0 | x_t = x] a score function stands for: (x + h_t score(x, t)) / alpha_t.

    Used to observe a sampler that steps with a rescaled score (:func:`scale_score`): its model error
    is that of the score it actually steps with.  ``t`` is an (M,) tensor (the observer's form).
    """
    process = process if process is not None else OU()

    def denoise(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (x + process.h(t)[:, None] * score(x, t)) / process.alpha(t)[:, None]

    return denoise


def _em_step(process, score, x, t0, t1, gen):
    """One Euler-Maruyama step; returns the new state and the score at (x, t0)."""
    dt = t0 - t1
    noise = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
    s0 = score(x, t0)
    return x + process.reverse_drift(x, s0) * dt + math.sqrt(process.diffusion_squared * dt) * noise, s0


def _heun_step(process, score, x, t0, t1, gen):
    """One Heun step of the probability flow; returns the new state and the score at (x, t0)."""
    dt = t0 - t1
    s0 = score(x, t0)
    v0 = process.flow_velocity(x, s0)
    xp = x + dt * v0
    v1 = process.flow_velocity(xp, score(xp, t1))
    return x + 0.5 * dt * (v0 + v1), s0


def reverse_sde(score: ScoreFn, n_samples: int, d: int, grid, *, seed: int, block_steps: int = 64,
                record_every: int = 1, device="cpu", dtype=torch.float64,
                process: OU | None = None, t_stop: float | None = None) -> Iterator[StepBlock]:
    """Euler-Maruyama for the reverse-time SDE; yields :class:`StepBlock` s.

    Parameters
    ----------
    score : callable (x (n, d) tensor, t float) -> (n, d) tensor
    n_samples, d : int
        Number of trajectories and data dimension.
    grid : (n_steps + 1,) decreasing times (see :func:`ridgexr.time_grid`)
    seed : int
    block_steps : int
        Recorded states per block.
    record_every : int
        Record every k-th step (the last step is always recorded).
    process : OU, optional
        The forward process whose reverse is sampled (default ``OU()``).
    t_stop : float > 0, optional
        Stop at this time (a coarse score): the step that crosses it ends at t_stop, and the state
        stays there for the remaining grid times (recorded with score(x, t_stop)).  None: run to
        the grid's end.

    Examples
    --------
    >>> import torch
    >>> from ridgexr import time_grid
    >>> blocks = list(reverse_sde(lambda x, t: -x, 4, 2, time_grid(10, 1.0, 0.01), seed=0, block_steps=5))
    >>> [b.x.shape[0] for b in blocks], int(blocks[-1].step[-1])
    ([5, 5, 1], 10)
    """
    return _run(_em_step, score, n_samples, d, grid, seed=seed, block_steps=block_steps,
                record_every=record_every, device=device, dtype=dtype, process=process, t_stop=t_stop)


def probability_flow(score: ScoreFn, n_samples: int, d: int, grid, *, seed: int, block_steps: int = 64,
                     record_every: int = 1, device="cpu", dtype=torch.float64,
                     process: OU | None = None, t_stop: float | None = None) -> Iterator[StepBlock]:
    """Heun's method for the probability-flow ODE; same interface as :func:`reverse_sde`."""
    return _run(_heun_step, score, n_samples, d, grid, seed=seed, block_steps=block_steps,
                record_every=record_every, device=device, dtype=dtype, process=process, t_stop=t_stop)


def marginal(train, n_samples: int, grid, *, seed: int, block_steps: int = 64, record_every: int = 1,
             device="cpu", dtype=torch.float64, process: OU | None = None,
             t_stop: float | None = None) -> Iterator[StepBlock]:
    """The exact score's own marginals, drawn directly; same blocks as :func:`reverse_sde`.

    The exact (empirical) score of ``train`` is the score of p_t = (1/N) sum_i N(alpha_t x_i, h_t I), so a
    perfect integrator of its reverse process, started from p_T, holds a draw of p_t at every t.  Each sample
    draws one training index I (uniform) and one xi ~ N(0, I_d); its state at a recorded time t is
    alpha_t x_I + sqrt(h_t) xi (at max(t, ``t_stop``) for a stopped score: frozen below it, as the other
    samplers freeze it).  Every recorded state has exactly the law p_t; the states of one sample at
    different times are the forward process's path, not the reverse process's (a trajectory analysis of
    such a store reads that path).  The score is never evaluated (``StepBlock.score`` is NaN); with no
    integration there is no discretization error and no divergence.

    Parameters
    ----------
    train : (N, d) array or tensor, the training set (data units)
    n_samples, grid, seed, block_steps, record_every, device, dtype, process, t_stop
        As for :func:`reverse_sde` (the grid only names the recorded times).

    Examples
    --------
    >>> import torch
    >>> from ridgexr import time_grid
    >>> blocks = list(marginal(torch.tensor([[1.0, 0.0]]), 3, time_grid(4, 1.0, 0.01), seed=0, block_steps=5))
    >>> blocks[0].x.shape, bool(torch.isnan(blocks[0].score).all())
    (torch.Size([5, 3, 2]), True)
    """
    tr = torch.as_tensor(train, dtype=dtype, device=device)
    if tr.ndim != 2 or tr.shape[0] < 1:
        raise ValueError(f"`train` must be a non-empty (N, d) array; got shape {tuple(tr.shape)}")
    if not bool(torch.isfinite(tr).all()):
        raise ValueError("`train` must be finite")
    grid = _validate(grid, n_samples, tr.shape[1], block_steps, seed)
    if t_stop is not None:
        t_stop = check_float(t_stop, "t_stop", min_val=0, include_boundaries="neither")
    process = process if process is not None else OU()
    rec = recorded_steps(grid.size - 1, record_every)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    idx = torch.randint(tr.shape[0], (n_samples,), generator=gen, device=device)
    xi = torch.randn(n_samples, tr.shape[1], generator=gen, device=device, dtype=dtype)
    x0 = tr[idx]
    for start in range(0, rec.size, block_steps):
        steps = rec[start:start + block_steps]
        t = grid[steps] if t_stop is None else np.maximum(grid[steps], t_stop)
        a = torch.as_tensor(process.alpha(t), dtype=dtype, device=device)[:, None, None]
        s = torch.sqrt(torch.as_tensor(process.h(t), dtype=dtype, device=device))[:, None, None]
        x = a * x0 + s * xi
        yield StepBlock(index=np.arange(start, start + steps.size), step=steps, t=grid[steps], x=x,
                        score=torch.full_like(x, math.nan))


SAMPLERS = {"sde": reverse_sde, "ode": probability_flow}


def sample(kind: str, *args, **kwargs) -> Iterator[StepBlock]:
    """Dispatch to :data:`SAMPLERS` by name ("sde" or "ode")."""
    return SAMPLERS[check_option(kind, "kind", SAMPLERS)](*args, **kwargs)


def scheduler_sampling(predict: Callable, scheduler, n_samples: int, shape: tuple[int, ...], n_steps: int, *,
                       seed: int, block_steps: int = 64, record_every: int = 1, device="cpu",
                       dtype=torch.float32, eta: float | None = None,
                       final: Callable[[torch.Tensor], None] | None = None) -> Iterator[StepBlock]:
    """Step a diffusers scheduler (``DDPMScheduler``, ``DDIMScheduler``, ...) as its pipeline does; yields
    :class:`StepBlock` s at the OU times of its timesteps.

    The initial state is ``torch.randn((n_samples, *shape), generator=g)`` with g a generator seeded
    with ``seed`` on ``device`` (what ``DDPMPipeline`` / ``DDIMPipeline`` draw with that generator),
    then for each timestep k of ``scheduler.set_timesteps(n_steps)``::

        x <- scheduler.step(predict(x, k)[0], k, x, generator=g[, eta=eta]).prev_sample

    in ``dtype`` (the pipelines' float32).  State i (step i, i = 0 .. n_steps - 1) is recorded at
    OU time t_i = -log(alphas_cumprod[k_i]) / 2 > 0 (alpha_bar = e^{-2t}); the scheduler's output
    after its last step is the sample at alpha_bar = 1 (t = 0), where p_t has no ridge: it is not
    recorded but handed to ``final`` (the pipelines' image before ``(x / 2 + 0.5).clamp(0, 1)``).

    A scheduler whose config sets ``clip_sample`` (DDPM's and DDIM's default, range
    ``clip_sample_range``) or ``thresholding`` clips its predicted x0 before the update, which is
    linear in it.  Each block's ``clip_shift`` (B, n) is what that did to the step from each recorded
    state::

        clip_shift = |x_{k+1}(clipped x0) - x_{k+1}(x0)|       (data units)

    the step taken minus the same step of :func:`unclipped_scheduler` (the same model output, state and
    random numbers: the generator is rewound between the two); exactly 0 where nothing was clipped,
    and 0 everywhere when the scheduler clips nothing.  For DDPM it equals
    sqrt(alpha_bar_prev) beta_k / (1 - alpha_bar_k) |clip(x0) - x0|, for DDIM sqrt(alpha_bar_prev)
    |clip(x0) - x0|.

    Parameters
    ----------
    predict : callable (x (n, d) tensor in ``dtype``, timestep, t float) -> (output, score)
        The model's output (n, d) in the scheduler's ``prediction_type`` (``dtype``) and the score
        grad log p_t (n, d) the observer reuses (float64; NaN where not evaluated).
    scheduler : diffusers scheduler
    n_samples : int
    shape : tuple of int
        Image shape (C, H, W) of a state; d = prod(shape).
    n_steps : int
        Inference steps (``num_inference_steps``).
    seed, block_steps, record_every, device
        As in :func:`reverse_sde` (the last state t > 0 is always recorded).
    eta : float, optional
        DDIM's eta (only passed to the step when given).
    final : callable, optional
        Receives the final output (n_samples, d) in ``dtype``.

    Examples
    --------
    >>> from diffusers import DDPMScheduler
    >>> sched = DDPMScheduler(num_train_timesteps=100)
    >>> pred = lambda x, k, t: (torch.zeros_like(x), torch.zeros(x.shape, dtype=torch.float64))
    >>> blocks = list(scheduler_sampling(pred, sched, 2, (1, 2, 2), 10, seed=0, block_steps=4))
    >>> [b.x.shape[0] for b in blocks], float(blocks[-1].t[-1]) > 0
    ([4, 4, 2], True)
    """
    check_int(n_samples, "n_samples", min_val=1)
    check_int(n_steps, "n_steps", min_val=1)
    check_int(block_steps, "block_steps", min_val=1)
    check_int(seed, "seed", min_val=0, max_val=2**63 - 1)
    scheduler.set_timesteps(n_steps, device=device)
    timesteps = scheduler.timesteps
    acp = torch.as_tensor(scheduler.alphas_cumprod).to(torch.float64).cpu()
    times = (-0.5 * torch.log(acp[timesteps.cpu().long()])).numpy()
    n = len(timesteps)
    rec = set(recorded_steps(n - 1, record_every).tolist()) if n > 1 else {0}
    free = unclipped_scheduler(scheduler) if clips_sample(scheduler) else None  # the same step, x0 not clipped
    if free is not None:
        free.set_timesteps(n_steps, device=device)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    d = math.prod(shape)
    x = torch.randn((n_samples, *shape), generator=gen, device=device, dtype=dtype)
    kwargs = {} if eta is None else {"eta": float(eta)}
    buf, buf_scores, buf_steps, buf_shift = [], [], [], []
    next_index = 0
    for i, k in enumerate(timesteps):
        flat = x.reshape(n_samples, d)
        with torch.no_grad():
            out, s = predict(flat, k, float(times[i]))
            out = out.to(dtype).reshape(x.shape)
            before = gen.get_state() if free is not None else None
            new = scheduler.step(out, k, x, generator=gen, **kwargs).prev_sample
            if free is not None:  # stepped in lockstep (a scheduler may keep state), from the same random numbers
                after = gen.get_state()
                gen.set_state(before)
                other = free.step(out, k, x, generator=gen, **kwargs).prev_sample
                gen.set_state(after)
                shift = torch.linalg.vector_norm((new - other).reshape(n_samples, d).to(torch.float64), dim=-1)
            x = new
        if i in rec:
            buf.append(flat)
            buf_scores.append(s)
            buf_steps.append(i)
            buf_shift.append(shift.cpu().numpy() if free is not None else np.zeros(n_samples))
            if len(buf) == block_steps or i == n - 1:
                steps = np.asarray(buf_steps)
                yield StepBlock(index=np.arange(next_index, next_index + len(buf)), step=steps, t=times[steps],
                                x=torch.stack(buf), score=torch.stack(buf_scores), clip_shift=np.stack(buf_shift))
                next_index += len(buf)
                buf, buf_scores, buf_steps, buf_shift = [], [], [], []
    if final is not None:
        final(x.reshape(n_samples, d))


#: the config fields of a diffusers scheduler that change its predicted x0 before the update
CLIP_FIELDS = ("clip_sample", "thresholding")


def clips_sample(scheduler) -> bool:
    """Whether a diffusers scheduler clips (``clip_sample``) or thresholds (``thresholding``) its predicted x0."""
    return any(bool(scheduler.config.get(name, False)) for name in CLIP_FIELDS)


def unclipped_scheduler(scheduler):
    """A new scheduler of ``scheduler``'s class and config with ``clip_sample`` and ``thresholding`` off
    (those of the fields its config has): its step uses the predicted x0 as the model gives it.

    Examples
    --------
    >>> from diffusers import DDPMScheduler
    >>> sched = DDPMScheduler()
    >>> bool(sched.config.clip_sample), bool(unclipped_scheduler(sched).config.clip_sample)
    (True, False)
    """
    off = {name: False for name in CLIP_FIELDS if name in scheduler.config}
    return type(scheduler).from_config(scheduler.config, **off)


def scheduler_clipping(scheduler) -> dict:
    """What a diffusers scheduler does to its predicted x0, as the root attributes of a store of
    ``sampler: {kind: scheduler}`` (docs/schema.md): ``scheduler_class``, ``scheduler_clip_sample`` (bool),
    ``scheduler_clip_sample_range`` (float), ``scheduler_thresholding`` (bool) and, when thresholding,
    ``scheduler_dynamic_thresholding_ratio`` and ``scheduler_sample_max_value`` (those its config has).

    Examples
    --------
    >>> from diffusers import DDIMScheduler
    >>> scheduler_clipping(DDIMScheduler(clip_sample_range=2.0))  # doctest: +NORMALIZE_WHITESPACE
    {'scheduler_class': 'DDIMScheduler', 'scheduler_clip_sample': True, 'scheduler_clip_sample_range': 2.0,
     'scheduler_thresholding': False}
    """
    cfg = scheduler.config
    out = {"scheduler_class": type(scheduler).__name__, "scheduler_clip_sample": bool(cfg.get("clip_sample", False))}
    if "clip_sample_range" in cfg:
        out["scheduler_clip_sample_range"] = float(cfg["clip_sample_range"])
    out["scheduler_thresholding"] = bool(cfg.get("thresholding", False))
    if out["scheduler_thresholding"]:
        out |= {f"scheduler_{name}": float(cfg[name]) for name in ("dynamic_thresholding_ratio", "sample_max_value")
                if name in cfg}
    return out


def scheduler_grid(scheduler, n_steps: int) -> np.ndarray:
    """OU times (n_steps,) of the timesteps ``scheduler.set_timesteps(n_steps)`` steps through (decreasing)."""
    scheduler.set_timesteps(check_int(n_steps, "n_steps", min_val=1))
    acp = torch.as_tensor(scheduler.alphas_cumprod).to(torch.float64).cpu()
    return (-0.5 * torch.log(acp[scheduler.timesteps.cpu().long()])).numpy()
