"""One cell across a cluster: the observation of a block of states split by blocks of samples.

Observing a recorded block (ridge projection by SCMS, frames, residuals, nearest training
point) is independent from one trajectory to the next, and at image scale it is the cost of
a cell.  :func:`observe_split` cuts the samples into consecutive blocks of ``sample_block``
and observes each block with :func:`observe_part`, in this process or as dask.distributed
tasks.  The training set travels to each worker once (``client.scatter(train,
broadcast=True)``, a future every task refers to), not once per task.

The same sample blocks give bit-identical results in this process and on workers (each part
is the same function of the same inputs); against one unsplit call they agree to ~1e-12
(matrix products change in the last bits with the batch size).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from ..empirical import SmoothedEmpirical
from ..nearest import step_nearest
from ..observe import batch_scaled, step_quantities

__all__ = ["observe_part", "observe_split", "scatter_training_set", "sample_blocks", "split_settings",
           "DENSITY_SETTINGS", "OBSERVATION_SETTINGS", "density_settings", "observation_settings"]

#: the entry's ridge settings (``ridge.<field>``) that the smoothed density reads, by its keyword
DENSITY_SETTINGS = {"drop_tol": "drop_tol", "logits": "logits"}
#: ... and those :func:`ridgexr.observe.step_quantities` reads, by its keyword
OBSERVATION_SETTINGS = {"tol": "tol", "max_iter": "max_iter", "top_k": "top_k", "stop_degenerate": "stop_degenerate",
                        "accelerate": "accelerate", "gap_floor": "gap_floor", "resolved": "resolved_projection"}


def density_settings(exp: Any) -> dict:
    """The keywords of :class:`ridgexr.empirical.SmoothedEmpirical` from the entry's ridge block
    (:data:`DENSITY_SETTINGS`)."""
    return {key: getattr(exp.ridge, name) for key, name in DENSITY_SETTINGS.items()}


def observation_settings(exp: Any, bound: float = math.inf, *, t_min: float | None = None) -> dict:
    """The keywords of :func:`ridgexr.observe.step_quantities` from the entry's ridge block
    (:data:`OBSERVATION_SETTINGS`), with ``bound`` the divergence bound (data units) and ``t_min`` the
    sampler's last time (for ``projected_gradient_tmin``)."""
    return {key: getattr(exp.ridge, name) for key, name in OBSERVATION_SETTINGS.items()} | dict(bound=bound,
                                                                                                t_min=t_min)


def sample_blocks(n_samples: int, sample_block: int | None) -> list[slice]:
    """Consecutive slices of ``sample_block`` samples covering ``range(n_samples)`` (one slice when None)."""
    if sample_block is None or sample_block >= n_samples:
        return [slice(0, n_samples)]
    if sample_block < 1:
        raise ValueError(f"`sample_block` must be >= 1; got {sample_block}")
    return [slice(s, min(s + sample_block, n_samples)) for s in range(0, n_samples, sample_block)]


@torch.no_grad()
def observe_part(train: np.ndarray, x: np.ndarray, t: np.ndarray, d_star: int, settings: dict,
                 denoise: Callable | None = None, score: np.ndarray | None = None) -> dict:
    """Every per-step quantity of one block of states: :func:`ridgexr.observe.step_quantities`
    and :func:`ridgexr.nearest.step_nearest`.

    Parameters
    ----------
    train : (N, d) training set (float64)
    x : (B, n, d) states; t : (B,) times
    d_star : int
    settings : dict
        ``drop_tol``, ``logits`` (optional, default float64), ``tol``, ``max_iter``, ``top_k``, ``bound``,
        ``stop_degenerate``, ``accelerate``.
    denoise : callable or None (exact denoiser)
    score : (B, n, d), optional, the sampler's score at x

    Returns
    -------
    dict of numpy arrays, (B, n[, d]) each.
    """
    settings = dict(settings)
    density = SmoothedEmpirical(train, 1.0, **{key: settings.pop(key) for key in DENSITY_SETTINGS if key in settings})
    xt = torch.as_tensor(x, dtype=torch.float64)
    sc = None if score is None else torch.as_tensor(score, dtype=torch.float64)
    q = step_quantities(density, xt, t, d_star, denoise, score=sc, **settings)
    return q | step_nearest(xt, t, torch.as_tensor(train, dtype=torch.float64), q["finite"])


def scatter_training_set(client: Any, train: np.ndarray):
    """The training set on every worker of ``client``, once: a future for the tasks to refer to."""
    # hash=False: a fresh key per cell (a content key released by one cell and scattered by the next races)
    return client.scatter(np.ascontiguousarray(train, dtype=np.float64), broadcast=True, hash=False)


def observe_split(train: np.ndarray | Any, x: torch.Tensor | np.ndarray, t: np.ndarray, d_star: int,
                  settings: dict, *, sample_block: int | None, denoise: Callable | None = None,
                  score: torch.Tensor | np.ndarray | None = None, client: Any = None) -> dict:
    """The per-step quantities of a block of states, observed in blocks of samples.

    Parameters
    ----------
    train : (N, d) array, or its future from :func:`scatter_training_set` (with ``client``)
    x : (B, n, d) states; t : (B,) times
    d_star, settings, denoise : as for :func:`observe_part`
    sample_block : int or None
        Samples per part (None: one part).
    score : (B, n, d), optional
    client : dask.distributed.Client, optional
        Observe the parts as tasks on its workers (else one after another here).

    Returns
    -------
    dict of numpy arrays (B, n[, d]), the parts joined along the sample axis.

    Examples
    --------
    >>> train = np.array([[-1.0, 0.0], [1.0, 0.0]])
    >>> x = np.zeros((1, 3, 2)) + [0.2, 0.1]
    >>> s = dict(drop_tol=1e-12, tol=1e-8, max_iter=50, top_k=None, bound=math.inf, stop_degenerate=None,
    ...          accelerate=False)
    >>> out = observe_split(train, x, np.array([0.5]), 1, s, sample_block=2)
    >>> out["ridge_distance"].shape, bool(np.allclose(out["ridge_distance"], 0.1))
    ((1, 3), True)
    """
    xn = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    sn = score.detach().cpu().numpy() if isinstance(score, torch.Tensor) else score
    parts = sample_blocks(xn.shape[1], sample_block)
    args = [(xn[:, p], None if sn is None else sn[:, p]) for p in parts]
    if client is None:
        if not isinstance(train, np.ndarray):
            raise TypeError("`train` must be an array when no `client` is given")
        results = [observe_part(train, xp, t, d_star, settings, denoise, sp) for xp, sp in args]
    else:
        if isinstance(train, np.ndarray):
            train = scatter_training_set(client, train)
        if callable(denoise):  # the model, like the training set, once per worker (not pickled into every task)
            denoise = client.scatter(denoise, broadcast=True, hash=False)
        futures = [client.submit(observe_part, train, xp, t, d_star, settings, denoise, sp, pure=False)
                   for xp, sp in args]
        results = client.gather(futures)
    out = {name: np.concatenate([r[name] for r in results], axis=1) for name in results[0]}
    # the authors' normalisation divides by the maximum over *all* samples of a step, not a part's
    for name in ("projected_gradient", "projected_gradient_tmin"):
        if name in out:
            out[f"{name}_scaled"] = batch_scaled(out[name])
    return out


def split_settings(exp: Any, bound: float = math.inf, *, t_min: float | None = None) -> dict:
    """The observation settings of an experiment (``observe_part``'s ``settings``): :func:`density_settings`
    and :func:`observation_settings` in one mapping; ``bound``: the divergence bound (data units); ``t_min``:
    the sampler's last time (for ``projected_gradient_tmin``)."""
    return density_settings(exp) | observation_settings(exp, bound, t_min=t_min)
