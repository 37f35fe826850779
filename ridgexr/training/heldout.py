"""Held-out diagnostics of a model that is not fitted in closed form (mlp, module, exact).

The diagnostics of every cell are estimated on a held-out sample of its training set: the
training sample's rule (quadrature, nodes on [t_min, T]) with noise seed ``seeds.training + 1``,
sized by the block's ``diagnostics: {n_time, n_noise, n_points}`` (each at most the training sample's;
:class:`ridgexr.models.model_spec.DiagnosticsSpec`).  Random features keep the training sample's size
by default, so their held-out sample is the fit's own with new noise
(:meth:`ridgexr.training.RandomFeatureFit.heldout_sample`); mlp, module and exact blocks use
at most 65 nodes x 64 draws (:data:`ridgexr.defaults.HELDOUT_N_TIME`, ``HELDOUT_N_NOISE``).
"""

from __future__ import annotations

import math
from typing import Callable

from .diagnostics import DIAGNOSTIC_VARIABLES
from .fit import evaluate_denoiser
from .sample import TrainingSample, draw_training_sample

__all__ = ["heldout_per_cell", "heldout_sample", "heldout_diagnostics", "no_diagnostics"]


def heldout_sample(ctx, n_train: int | slice | None, diagnostics=None, n_noise: int | None = None) -> TrainingSample:
    """The held-out sample of the first ``n_train`` training points, or of the rows ``n_train`` (a slice:
    :meth:`ridgexr.catalog.DatasetSpec.rows`), cached on ``ctx.heldout``.

    Parameters
    ----------
    ctx : :class:`ridgexr.models.FitContext`
    n_train : int, slice or None (every training point)
    diagnostics : :class:`ridgexr.models.model_spec.DiagnosticsSpec`, optional
        The block's sizes (default: the training sample's).
    n_noise : int, optional
        The fit's noise draws per (point, node) (default: the entry's first ``training.n_noise``).

    Returns
    -------
    TrainingSample of n_train x n_time x n_noise rows, ``n_time`` and ``n_noise`` as resolved by
    ``diagnostics.sizes``; with ``diagnostics.n_points`` below n_train, the x0 of a seeded subset of
    n_points training points (``diagnostics.point_subset``), the density still all n_train.
    """
    exp = ctx.exp
    n_time, n_draws = exp.training.n_time, exp.training.n_noises[0] if n_noise is None else int(n_noise)
    if diagnostics is not None:
        n_time, n_draws = diagnostics.sizes(n_time, n_draws)
    rows = n_train if isinstance(n_train, slice) else slice(None, n_train)
    train = ctx.train[rows]
    seed = exp.seeds.training + 1
    points = None if diagnostics is None else diagnostics.point_subset(train.shape[0], seed)
    key = (rows.start, rows.stop, n_time, n_draws, None if points is None else len(points))
    if key not in ctx.heldout:
        ctx.heldout[key] = draw_training_sample(
            train, t_min=exp.loss_t_min, T=exp.process.T, n_time=n_time, n_noise=n_draws,
            seed=seed, quadrature=exp.training.quadrature, points=points)
    return ctx.heldout[key]


def no_diagnostics(loss: float = math.nan) -> dict:
    """The per-cell diagnostics of a block that asks for none (``diagnostics: null``, the default of the image-scale
    kinds): NaN, with the training ``loss`` where there is one."""
    return {name: math.nan for name in DIAGNOSTIC_VARIABLES} | {"loss": loss}


def heldout_diagnostics(denoise: Callable, sample: TrainingSample, schedule: str, d_star: int,
                        loss: float = math.nan, progress: Callable[[int, int], None] | None = None) -> dict:
    """Every per-cell diagnostic of ``denoise`` on ``sample`` (NaN where not estimated), with ``loss``.

    ``progress(done, total)`` is called after each time node of the sample.
    """
    ev = evaluate_denoiser(denoise, sample, schedule=schedule, d_star=d_star, progress=progress)
    return {name: ev.get(name, math.nan) for name in DIAGNOSTIC_VARIABLES} | {"loss": loss}


def heldout_per_cell(ctx, block, denoise: Callable, cells: list[tuple[tuple, dict]]) -> dict:
    """Held-out diagnostics of a model trained elsewhere (one denoiser for every cell of ``block``):
    ``{cell index: diagnostics}``, each on the held-out sample of the cell's ``n_train`` (default the
    largest), sized by ``block.diagnostics``, under ``block.diagnostic_schedule``'s weight; NaN
    (:func:`no_diagnostics`) when ``block.diagnostics`` is None."""
    exp = ctx.exp
    out = {}
    for idx, lab in cells:
        if block.diagnostics is None:  # not asked for (the image-scale kinds' default)
            out[idx] = no_diagnostics()
            continue
        ctx.say(f"{ctx.prefix(block)}held-out diagnostics")
        rows = exp.dataset.rows({"n_train": exp.dataset.n_trains[-1]} | lab)
        out[idx] = heldout_diagnostics(denoise, heldout_sample(ctx, rows, block.diagnostics),
                                       block.diagnostic_schedule(exp.schedules), exp.d_star,
                                       progress=ctx.node_bar(f"{ctx.prefix(block)}held-out diagnostics (time nodes)"))
    return out
