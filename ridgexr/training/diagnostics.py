"""Per-cell training diagnostics: the one list of their names and meanings, and their Dataset.

:data:`DIAGNOSTIC_VARIABLES` is the single place these variables are named; the store
schema (:mod:`ridgexr.store`) and the run planner (:mod:`ridgexr.run`) read it.
"""

from __future__ import annotations

import numpy as np

from .. import units
from .fit import evaluate_fits

__all__ = ["DIAGNOSTIC_VARIABLES", "LOSS_UNITS", "fits_to_dataset"]

LOSS_UNITS = units.LOSS

#: name -> long_name of every per-cell diagnostic, as estimated by :func:`fits_to_dataset`
#: with ``heldout=True`` (the store's setting)
DIAGNOSTIC_VARIABLES: dict[str, str] = {
    "loss": "weighted score-matching training loss L(A(tau)) (training sample)",
    "optimal_loss": "loss L* of the exact (memorizing) denoiser, held-out sample",
    "excess_loss": "L(A(tau)) - L*, held-out sample",
    "excess_loss_se": "Monte-Carlo standard error of the excess loss, held-out sample",
    "excess_loss_insample": "L(A(tau)) - L* on the training sample (biased low by the fit)",
    "excess_tangent": "tangent part of the excess loss (ridge frame at x_t), held-out sample",
    "excess_normal": "normal part of the excess loss (ridge frame at x_t), held-out sample",
}


def fits_to_dataset(fits: dict, *, d_star: int | None = None, heldout: bool = True, sample=None,
                    progress=None):
    """Labelled training diagnostics over (schedule, width, tau) as an xarray Dataset.

    ``loss`` is the in-sample training loss.  With ``heldout=True`` (default) the excess
    loss, its SE and its tangent/normal split are estimated on a fresh held-out sample (one
    shared by every cell), so they are not biased downward by fitting the training sample;
    ``excess_loss_insample`` keeps L(A) - L* on the training sample.  The variables are
    those of :data:`DIAGNOSTIC_VARIABLES` (the split only with ``d_star``).  ``sample`` replaces
    the held-out sample (a :class:`ridgexr.training.TrainingSample` of the same training set, e.g.
    a smaller one); ``progress(done, total)`` is called after each of its time nodes.
    """
    import xarray as xr

    keys = list(fits)
    schedules = list(dict.fromkeys(k[0] for k in keys))
    widths = sorted({k[1] for k in keys})
    first = next(iter(fits.values()))
    taus = first.taus
    shape = (len(schedules), len(widths), len(taus))
    hold = (sample if sample is not None else first.heldout_sample()) if heldout else None
    stats = evaluate_fits(fits, hold, d_star, progress=progress)  # one streamed pass over the sample for every cell
    names = [n for n in DIAGNOSTIC_VARIABLES if n != "optimal_loss"
             and (d_star is not None or n not in ("excess_tangent", "excess_normal"))]
    data = {n: np.full(shape, np.nan) for n in names}
    optimal = np.full((len(schedules), len(widths)), np.nan)
    for (s, w), fit in fits.items():
        i, j = schedules.index(s), widths.index(w)
        ev = stats[(s, w)]
        optimal[i, j] = ev["optimal_loss"]
        data["loss"][i, j] = [fit.loss(tau) for tau in fit.taus]
        data["excess_loss_insample"][i, j] = [fit.excess_loss(tau) for tau in fit.taus]
        for n in ("excess_loss", "excess_loss_se", "excess_tangent", "excess_normal"):
            if n in data:
                data[n][i, j] = ev[n]
    dims = ("schedule", "width", "tau")
    ds = xr.Dataset({n: (dims, v) for n, v in data.items()},
                    coords={"schedule": schedules, "width": widths, "tau": taus})
    ds["optimal_loss"] = (("schedule", "width"), optimal)
    for n, long_name in DIAGNOSTIC_VARIABLES.items():
        if n in ds:
            text = long_name if heldout else long_name.replace("held-out sample", "training sample")
            ds[n].attrs.update(long_name=text, units=LOSS_UNITS)
    ds["tau"].attrs.update(long_name="training time (gradient-flow time of L)", units=units.TAU)
    if d_star is not None:
        ds.attrs["d_star"] = int(d_star)
    return ds
