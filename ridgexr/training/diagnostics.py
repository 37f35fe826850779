"""Per-cell training diagnostics: their Dataset.

Their names and meanings are :data:`ridgexr.schema.DIAGNOSTIC_VARIABLES` (the store's table, torch-free), which
the run planner (:mod:`ridgexr.run`) reads too.
"""

from __future__ import annotations

import numpy as np

from .. import units
from ..schema import DIAGNOSTIC_VARIABLES
from .fit import evaluate_fits

__all__ = ["DIAGNOSTIC_VARIABLES", "LOSS_UNITS", "fits_to_dataset"]

LOSS_UNITS = units.LOSS


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
