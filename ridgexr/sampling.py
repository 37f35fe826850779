"""Samplers as torch generators that yield blocks of consecutive recorded steps.

Reverse-time SDE (Euler-Maruyama) for the OU forward process, on a decreasing grid
t_0 = T > t_1 > ... > t_n = t_min with steps dt_k = t_k - t_{k+1} > 0:

    x <- x + (x + 2 score(x, t_k)) dt_k + sqrt(2 dt_k) xi,      xi ~ N(0, I)

Probability-flow ODE (Heun): dx/ds = x + score(x, t) in reverse time s, i.e.
predictor x' = x + dt (x + score(x, t_k)), corrector
x <- x + dt/2 [(x + score(x, t_k)) + (x' + score(x', t_{k+1}))].

The initial state is x_T ~ N(0, I) (the OU stationary law).  Every random number comes
from one ``torch.Generator`` seeded with ``seed`` on the sampling device: the same seed
gives the same trajectory on the same device.  The consumer receives :class:`StepBlock`
objects holding ``block_steps`` recorded states at a time, so the whole trajectory is
never held on the device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

__all__ = ["StepBlock", "recorded_steps", "reverse_sde", "probability_flow", "sample", "SAMPLERS"]

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
    """

    index: np.ndarray
    step: np.ndarray
    t: np.ndarray
    x: torch.Tensor


def recorded_steps(n_steps: int, record_every: int = 1) -> np.ndarray:
    """Step numbers that are recorded: 0, k, 2k, ... and always the last step ``n_steps``."""
    if isinstance(record_every, bool) or not isinstance(record_every, (int, np.integer)) or record_every < 1:
        raise ValueError(f"record_every must be an integer >= 1, got {record_every!r}")
    steps = np.arange(0, n_steps + 1, record_every)
    if steps[-1] != n_steps:
        steps = np.append(steps, n_steps)
    return steps


def _validate(grid, n_samples, dim, block_steps):
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size < 2 or not np.all(np.diff(grid) < 0) or grid[-1] <= 0:
        raise ValueError("grid must be a strictly decreasing 1-D array of times > 0 with >= 2 entries")
    for name, v in (("n_samples", n_samples), ("dim", dim), ("block_steps", block_steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return grid


def _run(step_fn, score: ScoreFn, n_samples: int, dim: int, grid, *, seed: int, block_steps: int,
         record_every: int, device, dtype) -> Iterator[StepBlock]:
    grid = _validate(grid, n_samples, dim, block_steps)
    n_steps = grid.size - 1
    rec = recorded_steps(n_steps, record_every)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    x = torch.randn(n_samples, dim, generator=gen, device=device, dtype=dtype)
    buf, buf_steps = [], []
    next_index = 0
    rec_set = set(rec.tolist())
    for k in range(n_steps + 1):
        if k in rec_set:
            buf.append(x)
            buf_steps.append(k)
            if len(buf) == block_steps or k == n_steps:
                steps = np.asarray(buf_steps)
                yield StepBlock(index=np.arange(next_index, next_index + len(buf)), step=steps, t=grid[steps],
                                x=torch.stack(buf))
                next_index += len(buf)
                buf, buf_steps = [], []
        if k < n_steps:
            with torch.no_grad():  # samplers never need gradients; keeps memory flat
                x = step_fn(score, x, float(grid[k]), float(grid[k + 1]), gen)


def _em_step(score, x, t0, t1, gen):
    dt = t0 - t1
    noise = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
    return x + (x + 2.0 * score(x, t0)) * dt + math.sqrt(2.0 * dt) * noise


def _heun_step(score, x, t0, t1, gen):
    dt = t0 - t1
    v0 = x + score(x, t0)
    xp = x + dt * v0
    v1 = xp + score(xp, t1)
    return x + 0.5 * dt * (v0 + v1)


def reverse_sde(score: ScoreFn, n_samples: int, dim: int, grid, *, seed: int, block_steps: int = 64,
                record_every: int = 1, device="cpu", dtype=torch.float64) -> Iterator[StepBlock]:
    """Euler-Maruyama for the reverse-time SDE; yields :class:`StepBlock` s.

    Parameters
    ----------
    score : callable (x (n, d) tensor, t float) -> (n, d) tensor
    n_samples, dim : int
    grid : (n_steps + 1,) decreasing times (see :func:`ridgexr.time_grid`)
    seed : int
    block_steps : int
        Recorded states per block.
    record_every : int
        Record every k-th step (the last step is always recorded).

    Examples
    --------
    >>> import torch
    >>> from ridgexr import time_grid
    >>> blocks = list(reverse_sde(lambda x, t: -x, 4, 2, time_grid(10, 1.0, 0.01), seed=0, block_steps=5))
    >>> [b.x.shape[0] for b in blocks], int(blocks[-1].step[-1])
    ([5, 5, 1], 10)
    """
    return _run(_em_step, score, n_samples, dim, grid, seed=seed, block_steps=block_steps,
                record_every=record_every, device=device, dtype=dtype)


def probability_flow(score: ScoreFn, n_samples: int, dim: int, grid, *, seed: int, block_steps: int = 64,
                     record_every: int = 1, device="cpu", dtype=torch.float64) -> Iterator[StepBlock]:
    """Heun's method for the probability-flow ODE; same interface as :func:`reverse_sde`."""
    return _run(_heun_step, score, n_samples, dim, grid, seed=seed, block_steps=block_steps,
                record_every=record_every, device=device, dtype=dtype)


SAMPLERS = {"sde": reverse_sde, "ode": probability_flow}


def sample(kind: str, *args, **kwargs) -> Iterator[StepBlock]:
    """Dispatch to :data:`SAMPLERS` by name ("sde" or "ode")."""
    if kind not in SAMPLERS:
        raise ValueError(f"sampler must be one of {tuple(SAMPLERS)}, got {kind!r}")
    return SAMPLERS[kind](*args, **kwargs)
