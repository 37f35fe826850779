"""Training entry point of random-feature blocks: one streamed closed-form fit per swept setting."""

from __future__ import annotations

from ...training import fit_sweep, fits_to_dataset
from ...training.diagnostics import DIAGNOSTIC_VARIABLES
from ..kind import FittedCell
from .denoiser import model_kwargs

__all__ = ["fit"]


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Fit a random-feature block for its cells; ``{cell index: FittedCell}``.

    One :func:`ridgexr.fit_sweep` (every schedule and width in one streamed pass) per
    combination of the swept settings (``target``, ``n_noise``, ``n_train``; the cell with
    ``n_train = n`` is trained on ``train[:n]``).  A cell of schedule 'exact' (the single-block
    form) gets no readout: its diagnostics are those of the optimum (zero excess).
    """
    exp, train = ctx.exp, ctx.train
    n_trains = exp.dataset.n_trains
    prefix = ctx.prefix(block)

    def fit_key(lab):  # the fit a cell comes from: (target, n_noise, n_train)
        return (lab.get("target", exp.training.targets[0]), lab.get("n_noise", exp.training.n_noises[0]),
                lab.get("n_train", n_trains[0]))

    out = {}
    for combo in sorted({fit_key(lab) for _, lab in cells}, key=str):
        target, n_noise, n_train = combo
        note = (lambda msg, c=combo: ctx.say(f"{prefix}target {c[0]}, n_noise {c[1]}, n_train {c[2]}: {msg}"
                                             if exp.sweeps() else f"{prefix}{msg}"))
        fits = fit_sweep(
            train[:n_train], widths=block.widths, schedules=exp.schedules, taus=block.taus,
            model_kwargs=model_kwargs(exp, block), method=exp.training.method,
            t_min=exp.loss_t_min, T=exp.process.T,
            quadrature=exp.training.quadrature, n_time=exp.training.n_time, n_noise=n_noise,
            seed=exp.seeds.training, lr=exp.training.lr, init=block.init, init_seed=exp.seeds.init,
            target=target, progress=note)
        diag = fits_to_dataset(fits, d_star=exp.d_star)
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
    return out
