"""Training entry point of random-feature blocks: one streamed closed-form fit per swept setting."""

from __future__ import annotations

import numpy as np

from ...heap import release_free_heap
from ...training import draw_seed, fit_sweep, fits_to_dataset
from ...training.diagnostics import DIAGNOSTIC_VARIABLES
from ...training.fit import FitError
from ...training.heldout import heldout_sample
from ..kind import FittedCell
from .denoiser import model_kwargs

__all__ = ["fit", "check", "draw_seeds"]

#: the catalog fields that set the loss's quadratic form (named when a fit fails numerically)
LOSS_FIELDS = ("process.t_min", "training.t_min", "process.T", "training.quadrature", "training.n_time",
               "model.output", "model.n_frequencies", "schedules")


def _where(exp) -> str:
    return f"{exp.source}: entry {exp.name!r}" if exp.source else f"entry {exp.name!r}"


def check(exp, block, train) -> None:
    """Refuse, before anything is written, a block whose loss weights overflow float64 (or that method
    'gd' cannot fit: no ``training.lr``, an infinite tau).

    The loss's quadratic form sums c_j lambda(t_j) over the time nodes (lambda = w / h_t^2 for a
    ``posterior_mean`` output), times |y|^2 ~ |x|^2 for the targets: when one of these is not a
    finite float64 (a t_min so small that h_t^2 underflows), the fit cannot be computed.

    Raises
    ------
    ValueError
        Naming the entry's file, the schedule, the time and the fields that set them.
    """
    import math

    from ...process import OU
    from ...training import loss_weight, time_nodes

    if exp.training.method == "gd":  # what gradient_descent would refuse only after the lock
        if exp.training.lr is None:
            raise ValueError(f"{_where(exp)}: training.method 'gd' needs training.lr; got none")
        if any(math.isinf(t) for t in block.taus):
            raise ValueError(f"{_where(exp)}: training.method 'gd' needs finite model.taus (tau = inf needs "
                             f"method 'flow'); got {block.taus}")
    t, w = time_nodes(exp.training.quadrature, exp.training.n_time, exp.loss_t_min, exp.process.T)
    scale = max(1.0, float(np.abs(train).max()) ** 2) if np.size(train) else 1.0
    for s in exp.schedules or ():
        with np.errstate(all="ignore"):
            weight = w * loss_weight(s, t, block.output, OU()) * scale
        bad = ~np.isfinite(weight)
        if bad.any():
            t_min = "training.t_min" if exp.training.t_min else "process.t_min"
            raise ValueError(f"{_where(exp)}: the random-feature loss of schedule {s!r} with model.output "
                             f"{block.output!r} overflows float64 at t = {float(t[bad][0]):.3g} ({t_min} = "
                             f"{exp.loss_t_min:g}, training.quadrature {exp.training.quadrature!r}, "
                             f"training.n_time {exp.training.n_time}); raise {t_min}")


def draw_seeds(seed: int, draw: int, redraw: str = "noise") -> tuple[int, int | None]:
    """(sample seed, target seed) of training draw ``draw``: ``redraw='noise'`` redraws the sample's noise
    (:func:`ridgexr.training.draw_seed` (seed, draw), no target seed); ``'targets'`` keeps the rows of ``seed``
    and redraws each row's x0 from its posterior given x_t with target seed ``draw_seed(seed, draw)`` (every
    draw, draw 0 included: the rows' own x0 are not a posterior draw).

    Examples
    --------
    >>> draw_seeds(7, 0)
    (7, None)
    >>> draw_seeds(7, 3, "targets")[0]
    7
    """
    if redraw == "targets":
        return int(seed), draw_seed(seed, draw)
    return draw_seed(seed, draw), None


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Fit a random-feature block for its cells; ``{cell index: FittedCell}``.

    One :func:`ridgexr.fit_sweep` (every schedule and width in one streamed pass) per
    combination of the swept settings (``target``, ``n_noise``, ``draw``, ``data_draw``, ``n_train``; the
    cell with ``n_train = n`` is trained on ``train[:n]`` (of its ``data_draw``'s rows: ``DatasetSpec.rows``),
    the cell with ``draw = m`` on the training noise of :func:`draw_seeds` (seeds.training, m, training.redraw),
    features and A(0) unchanged).  A cell of schedule 'exact' (the single-block
    form) gets no readout: its diagnostics are those of the optimum (zero excess).
    """
    exp, train = ctx.exp, ctx.train
    n_trains = exp.dataset.n_trains
    prefix = ctx.prefix(block)

    def fit_key(lab):  # the fit a cell comes from: (target, n_noise, n_train, draw, data_draw)
        return (lab.get("target", exp.training.targets[0]), lab.get("n_noise", exp.training.n_noises[0]),
                lab.get("n_train", n_trains[0]), int(lab.get("draw", 0)), int(lab.get("data_draw", 0)))

    out = {}
    for combo in sorted({fit_key(lab) for _, lab in cells}, key=str):
        target, n_noise, n_train, draw, data_draw = combo
        rows = exp.dataset.rows({"n_train": n_train, "data_draw": data_draw})
        note = (lambda msg, c=combo: ctx.say(f"{prefix}target {c[0]}, n_noise {c[1]}, n_train {c[2]}, draw {c[3]}: "
                                             f"{msg}"
                                             if exp.sweeps() else f"{prefix}{msg}"))
        seed, target_seed = draw_seeds(exp.seeds.training, draw, exp.training.redraw)
        try:
            fits = fit_sweep(
                train[rows], widths=block.widths, schedules=exp.schedules, taus=block.taus,
                model_kwargs=model_kwargs(exp, block), method=exp.training.method,
                t_min=exp.loss_t_min, T=exp.process.T,
                quadrature=exp.training.quadrature, n_time=exp.training.n_time, n_noise=n_noise,
                seed=seed, lr=exp.training.lr, init=block.init, init_seed=exp.seeds.init,
                target=target, progress=note, null_cutoff=exp.training.null_cutoff, penalty=block.penalty,
                target_seed=target_seed)
        except FitError as exc:
            raise FitError(f"{_where(exp)}: {exc}; the form is set by {', '.join(LOSS_FIELDS)} (here t_min "
                           f"{exp.loss_t_min:g}, T {exp.process.T:g}, n_time {exp.training.n_time}, "
                           f"n_noise {n_noise})") from None
        hold = heldout_sample(ctx, rows, block.diagnostics, n_noise)  # default: the fit's own size
        diag = fits_to_dataset(fits, d_star=exp.d_star, sample=hold, progress=ctx.node_bar(
            f"{prefix}held-out diagnostics (time nodes)"))
        for idx, lab in cells:
            if fit_key(lab) != combo:
                continue
            s, w = lab["schedule"], lab["width"]
            if s == "exact":  # the exact denoiser is the optimum: its excess is zero by definition
                opt = float(diag["optimal_loss"].isel(schedule=0).sel(width=w))
                out[idx] = FittedCell(None, {name: 0.0 for name in DIAGNOSTIC_VARIABLES}
                                      | dict(loss=opt, optimal_loss=opt))
                continue
            fitted = fits[(s, w)]
            i = fitted.tau_index(lab.get("tau", block.taus[0]))
            sel = diag.sel(schedule=s, width=w).isel(tau=i)
            out[idx] = FittedCell(fitted.A[i].detach().cpu().numpy(),
                                  {name: float(sel[name]) for name in DIAGNOSTIC_VARIABLES})
        # the fit's Gram, features and held-out arrays are free now; without this the heap keeps them: the
        # readouts kept above pin its pages, and 3 072 cells of variance-ensemble held 1.07 GiB (ridgexr.heap)
        del fits, diag
        release_free_heap()
    return out
