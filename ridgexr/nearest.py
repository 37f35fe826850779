"""Nearest training points of sampler states: the memorization side of every observed step.

For a state x at time t the training set sits at alpha_t x_i (the means of p_t's components),
so the distance to the nearest training image is

    d1(x, t) = min_i |x - alpha_t x_i|,   d2 = the second smallest,

and d1 / d2 < 1/3 is the memorization criterion of :func:`ridgexr.analysis.memorized`
(d1 / d2 -> 0 on top of one training point, ~1 between several).  The search is exact
(every training point), vectorized as matrix products |x|^2 - 2 alpha x.x_i + alpha^2 |x_i|^2
and chunked over queries and training points so that no more than ``budget`` bytes of
distances exist at once; the two winners' distances are then recomputed directly from
x - alpha_t x_i, so d1 has no cancellation error even where x sits on a training point.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["nearest_training", "step_nearest", "NEAREST_BUDGET"]

#: bytes of (queries x training points) squared distances held at once
NEAREST_BUDGET = 64 * 2**20


@torch.no_grad()
def nearest_training(x: torch.Tensor, train: torch.Tensor, alpha: torch.Tensor | float = 1.0, *,
                     budget: int = NEAREST_BUDGET) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distances to the nearest and second-nearest alpha x_i, and the nearest index.

    Parameters
    ----------
    x : (M, d) tensor
        Query states (data units at their time).
    train : (N, d) tensor, N >= 1
        Training points x_i (same dtype and device as ``x``).
    alpha : float or (M,) tensor
        alpha_t of each query (the training set is scaled by it); 1 compares with x_i itself.
    budget : int
        Bytes of squared distances held at once (sets the chunk sizes).

    Returns
    -------
    d1, d2 : (M,) tensors, data units (d2 = inf when N = 1)
    index : (M,) int64 tensor into ``train``

    Examples
    --------
    >>> d1, d2, i = nearest_training(torch.tensor([[0.9, 0.0]]), torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
    >>> round(float(d1[0]), 6), round(float(d2[0]), 6), int(i[0])
    (0.1, 1.9, 0)
    """
    M, d = x.shape
    N = train.shape[0]
    if N < 1 or train.shape[1] != d:
        raise ValueError(f"`train` must have shape (N >= 1, {d}); got {tuple(train.shape)}")
    a = torch.as_tensor(alpha, dtype=x.dtype, device=x.device).expand(M)
    tsq = (train * train).sum(1)
    per_row = max(1, budget // (x.element_size() * max(min(N, 1 << 16), 1)))
    q_chunk = max(1, min(M, per_row))
    t_chunk = max(2, budget // (x.element_size() * q_chunk))
    best = torch.full((M, 2), math.inf, dtype=x.dtype, device=x.device)
    best_i = torch.zeros((M, 2), dtype=torch.int64, device=x.device)
    for qs in range(0, M, q_chunk):  # query chunks x training chunks: a running top-2
        q, aq = x[qs:qs + q_chunk], a[qs:qs + q_chunk]
        qsq = (q * q).sum(1)
        for ts in range(0, N, t_chunk):
            tr = train[ts:ts + t_chunk]
            dist2 = qsq[:, None] - 2 * aq[:, None] * (q @ tr.T) + aq[:, None] ** 2 * tsq[ts:ts + t_chunk]
            k = min(2, tr.shape[0])
            val, idx = torch.topk(dist2, k, dim=1, largest=False)
            both = torch.cat([best[qs:qs + q_chunk], val], 1)
            both_i = torch.cat([best_i[qs:qs + q_chunk], idx + ts], 1)
            val2, pick = torch.topk(both, 2, dim=1, largest=False)
            best[qs:qs + q_chunk], best_i[qs:qs + q_chunk] = val2, torch.gather(both_i, 1, pick)
    # exact distances of the two winners (no |x|^2 - 2 x.y + |y|^2 cancellation)
    exact = (x[:, None, :] - a[:, None, None] * train[best_i]).norm(dim=-1)
    exact = torch.where(torch.isfinite(best), exact, torch.full_like(exact, math.inf))
    exact, order = torch.sort(exact, dim=1)
    return exact[:, 0], exact[:, 1], torch.gather(best_i, 1, order)[:, 0]


def step_nearest(x: torch.Tensor, t: np.ndarray, train: torch.Tensor, finite: np.ndarray, *,
                 budget: int = NEAREST_BUDGET) -> dict[str, np.ndarray]:
    """Per-step nearest-training quantities of a block of states, for the store.

    Parameters
    ----------
    x : (B, n, d) tensor of states; t : (B,) times; train : (N, d) tensor
    finite : (B, n) bool, the states that are observed (others get NaN)

    Returns
    -------
    dict with ``nearest_distance`` (B, n) = min_i |x - alpha_t x_i| (data units) and
    ``nearest_ratio`` (B, n) = d1 / d2 (0 when N = 1 has no second point: d2 = inf).
    """
    B, n, _ = x.shape
    out = {"nearest_distance": np.full((B, n), np.nan), "nearest_ratio": np.full((B, n), np.nan)}
    mask = np.asarray(finite, dtype=bool)
    if not mask.any():
        return out
    alpha = torch.exp(-torch.as_tensor(np.broadcast_to(np.asarray(t, dtype=np.float64)[:, None], (B, n))[mask],
                                       dtype=x.dtype, device=x.device))
    sel = torch.as_tensor(mask, device=x.device)
    d1, d2, _ = nearest_training(x[sel], train.to(x.dtype), alpha, budget=budget)
    out["nearest_distance"][mask] = d1.cpu().numpy()
    out["nearest_ratio"][mask] = (d1 / d2).cpu().numpy()
    return out
