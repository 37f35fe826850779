"""The V-kernel of an ensemble over training-noise draws (``training.draws``), stored with the run.

Vastola's "generalization through variance": the DSM target makes the learned score a random
function of the training noise; its covariance over that noise (the V-kernel) is what fills the
gaps between training points.  With ``training.draws: M`` every cell is fitted M times (features,
A(0) and time nodes fixed) in one of two designs, ``training.redraw``:

- ``noise`` (default): the (x_t, t) sample's noise is redrawn, so the rows and their targets change
  together; the ensemble's covariance is the mean over designs of the target's kernel plus the
  covariance over designs of the mean fit;
- ``targets``: the rows of ``seeds.training`` stay and each row's x0 is redrawn from its posterior
  given x_t, so only the DSM target's noise changes: the readouts' mean is the ideal fit on those
  rows and their covariance the closed form of :mod:`ridgexr.training.vkernel`.

This module estimates the V-kernel as the ensemble variance over the M fitted scores on a grid,
per remaining cell, and hands it to :func:`ridgexr.store.lifecycle.create_store` as store variables
(docs/schema.md):

- ``v_kernel`` (cell dims without ``draw``, v_time, v_point, dim): the unbiased variance over
  draws (ddof = 1) of each score coordinate, 1 / data^2;
- ``v_kernel_x`` (v_point, dim): the grid, :data:`V_KERNEL_POINTS` points on the line through
  the first two training points, from 0.5 before the first to 0.5 after the second (in units of
  their distance): x_1 in [-6, 6] at x_2 = 0 for the two-point set;
- ``v_kernel_t`` (v_time): the probe times :data:`V_KERNEL_TIMES` (OU time) clipped to the
  sampler's [t_min, T].
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..models import model_kind

__all__ = ["V_KERNEL_TIMES", "V_KERNEL_POINTS", "ensemble_variance", "v_kernel_grid", "v_kernel_variables"]

#: probe times of the stored V-kernel (OU time), clipped to the sampler's [t_min, T]
V_KERNEL_TIMES = (0.01, 0.1, 1.0)
#: grid points of the stored V-kernel
V_KERNEL_POINTS = 49


def ensemble_variance(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Unbiased variance over an ensemble axis: sum_m (v_m - mean)^2 / (M - 1).

    Parameters
    ----------
    values : array (..., M, ...) with M >= 2 along ``axis``
    axis : int, the ensemble axis

    Returns
    -------
    array, ``values`` without ``axis``

    Raises
    ------
    ValueError
        When the ensemble has fewer than 2 members.

    Examples
    --------
    >>> ensemble_variance(np.array([[1.0, 0.0], [3.0, 0.0]])).tolist()
    [2.0, 0.0]
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape[axis] < 2:
        raise ValueError(f"`values` must hold >= 2 ensemble members along axis {axis}; got {values.shape[axis]}")
    return values.var(axis=axis, ddof=1)


def v_kernel_grid(train: np.ndarray, n_points: int = V_KERNEL_POINTS) -> np.ndarray:
    """The V-kernel's grid (n_points, d): the line x_a + s (x_b - x_a), s in [-0.5, 1.5], through the
    first two training points (one training point: the first axis, s in [-3, 3] around it)."""
    train = np.asarray(train, dtype=np.float64)
    s = np.linspace(-0.5, 1.5, n_points)
    if len(train) >= 2 and np.any(train[1] != train[0]):
        return train[0] + s[:, None] * (train[1] - train[0])
    e = np.zeros(train.shape[1])
    e[0] = 3.0
    return train[0] + (2 * s[:, None] - 1) * e


def v_kernel_variables(exp, train: np.ndarray, layout, tasks, device: str = "cpu") -> dict:
    """The store variables of the V-kernel (module docstring) for a run with a ``draw`` dimension; {} without.

    ``tasks`` are :func:`ridgexr.run.plan.plan_tasks`' tasks of every cell (the fitted readouts).
    A group of cells (the same labels but the draw) that is not run (masked) is NaN.
    """
    names = [n for n, _ in layout.coords]
    if "draw" not in names or not tasks:
        return {}
    grid = v_kernel_grid(train)
    times = np.unique(np.clip(np.asarray(V_KERNEL_TIMES, dtype=np.float64), exp.process.t_min, exp.process.T))
    keep = [k for k, n in enumerate(names) if n != "draw"]
    shape = tuple(len(layout.coords[k][1]) for k in keep)
    out = np.full(shape + (len(times), len(grid), grid.shape[1]), np.nan)
    groups = defaultdict(list)
    for task in tasks:
        groups[tuple(task.index[k] for k in keep)].append(task)
    for key, members in groups.items():
        if len(members) < 2:
            continue
        scores = []
        for task in members:
            block = exp.blocks[task.block]
            cell_train = train[exp.dataset.rows(task.labels)]
            model = model_kind(block.kind).builder()(exp, block, task, cell_train, device)
            scores.append(np.stack([np.asarray(model.score(grid, float(t)), dtype=np.float64) for t in times]))
        out[key] = ensemble_variance(np.stack(scores), axis=0)
    dims = tuple(names[k] for k in keep) + ("v_time", "v_point", "dim")
    return {"v_kernel": (dims, out), "v_kernel_x": (("v_point", "dim"), grid), "v_kernel_t": (("v_time",), times)}
