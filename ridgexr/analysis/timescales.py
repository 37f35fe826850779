"""Training time as an axis: when a network starts to generate and when it starts to memorize.

Bonnaire, Urfin, Biroli & Mezard (2025) find an early time tau_gen at which a diffusion model's
samples become good, independent of the training-set size n, and a later tau_mem at which it starts
to reproduce training points, growing linearly with n.  On a store that sweeps a training-time
dimension (the ``epoch`` of a model trained by minibatch DSM, ``model.epochs`` a list) and ``n_train``:

- :func:`memorized_share`: f_mem, the share of final samples with d1/d2 < 1/3 (the stored
  ``nearest_ratio`` of the last recorded step), with a seeded percentile-bootstrap interval;
- :func:`training_timescales`: tau_gen and tau_mem per cell with their intervals and censoring flags,
  and the slopes b of log tau = a + b log n with bootstrap intervals and the verdicts of the criteria
  fixed before a run (:mod:`ridgexr.defaults`, docs/timescales.md).

Array kernels in :mod:`.arrays` (``memorized_share_ci``, ``quality_reached``, ``first_reached``,
``censored_slope_ci``, ``slope_verdict``); lazy where the inputs are.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import xarray as xr

from .. import defaults
from .._validation import check_bool, check_float, check_int, check_option
from . import arrays
from ._helpers import along_step, check_vars, step_label, with_attrs
from .labelled import nearest_ratio_at

__all__ = ["memorized_share", "training_timescales"]


def _check_boot(ratio, n_boot, ci, seed) -> tuple[float, int, float, int]:
    return (check_float(ratio, "ratio", min_val=0, max_val=1, include_boundaries="neither"),
            check_int(n_boot, "n_boot", min_val=1), check_float(ci, "ci", min_val=0, max_val=1,
                                                                include_boundaries="neither"),
            check_int(seed, "seed", min_val=0))


def memorized_share(ds: xr.Dataset, *, ratio: float = defaults.MEMORIZED_RATIO, step: int = -1,
                    t: float | None = None, n_boot: int = defaults.TIMESCALE_N_BOOT,
                    ci: float = defaults.TIMESCALE_CI, seed: int = 0, dim: str = "sample") -> xr.Dataset:
    """f_mem: the share of samples with d1/d2 < ``ratio`` at ``step``, with Bonnaire et al.'s bootstrap interval.

    d1/d2 comes from :func:`ridgexr.analysis.nearest_ratio_at` (the store's ``nearest_ratio``: nearest
    over second-nearest distance of the sampler state to the cell's scaled training points,
    :mod:`ridgexr.nearest`), the same input as :func:`ridgexr.analysis.memorization_fraction`, whose share
    this is; only the interval differs (theirs: a percentile bootstrap, which is [0, 0] at 0 / S; ours:
    Wilson's).  At the last recorded step (the default) it is the memorization measure of Bonnaire et
    al. on the final samples.  The interval is a percentile
    bootstrap over the samples (:func:`ridgexr.analysis.arrays.memorized_share_ci`, seeded); samples
    whose ratio is NaN (diverged, masked cell) are out of the share and counted by ``f_mem_n_valid``.

    Parameters
    ----------
    ds : xarray.Dataset
        A store or a selection of its cells (without ``nearest_ratio``, e.g. before schema 1.5: its
        ``trajectory``, ``train_data`` and ``alpha``).
    ratio : float in (0, 1)
        Memorization threshold (default :data:`ridgexr.defaults.MEMORIZED_RATIO`, 1/3).
    step : int
        Recorded step (default the last).
    t : float, optional
        Instead of ``step``, the recorded step nearest this time.
    n_boot, ci, seed : int, float, int
        Bootstrap replicates, interval level and seed.
    dim : str
        The sample dimension.

    Returns
    -------
    xarray.Dataset over the cell dimensions: ``f_mem``, ``f_mem_low``, ``f_mem_high``, ``f_mem_n_valid``
    (lazy with dask inputs).

    Raises
    ------
    ValueError
        For a Dataset with neither ``nearest_ratio`` nor the variables to compute it, a ``dim`` that is no dimension, or an out-of-range argument.

    Examples
    --------
    >>> ds = xr.Dataset({"nearest_ratio": (("sample", "step"), [[0.1], [0.2], [0.9], [0.5]])},
    ...                 coords={"step": [0], "t": ("step", [0.01])})
    >>> float(memorized_share(ds, n_boot=100)["f_mem"])
    0.5
    """
    ratio, n_boot, ci, seed = _check_boot(ratio, n_boot, ci, seed)
    r = nearest_ratio_at(ds, step=step, t=t, dim=dim)
    if r.chunks is not None:
        r = r.chunk({dim: -1})
    stats = xr.apply_ufunc(partial(arrays.memorized_share_ci, ratio=ratio, n_boot=n_boot, ci=ci, seed=seed), r,
                           input_core_dims=[[dim]], output_core_dims=[["stat"]], dask="parallelized",
                           output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 4}})
    level = f"{ci:.0%} percentile-bootstrap interval ({n_boot} replicates, seed {seed})"
    out = xr.Dataset({
        "f_mem": with_attrs(stats.isel(stat=0), f"share of samples with d1/d2 < {ratio:.3g}", "1"),
        "f_mem_low": with_attrs(stats.isel(stat=1), f"lower end of the {level}", "1"),
        "f_mem_high": with_attrs(stats.isel(stat=2), f"upper end of the {level}", "1"),
        "f_mem_n_valid": with_attrs(stats.isel(stat=3), "samples with a finite d1/d2 (the share's denominator)",
                                    "1"),
    })
    return out.assign_attrs(ratio=ratio, ci=ci, n_boot=n_boot, seed=seed, step=step_label(along_step(ds), step, t))


def _times(stats: xr.DataArray, name: str, what: str, units: str) -> dict[str, xr.DataArray]:
    return {
        name: with_attrs(stats.isel(stat=0), f"{what} (a lower bound where {name}_censored)", units),
        f"{name}_low": with_attrs(stats.isel(stat=1), f"lower end of {name}'s interval: the last checkpoint at "
                                  "which it surely had not happened (0: before the first)", units),
        f"{name}_high": with_attrs(stats.isel(stat=2), f"upper end of {name}'s interval (inf where censored)",
                                   units),
        f"{name}_censored": with_attrs(stats.isel(stat=3).astype(bool), f"{name} not reached within the run",
                                       "1"),
    }


def _slope(stats: xr.DataArray, name: str, expected: float, ci: float, fit: str) -> dict[str, xr.DataArray]:
    verdict = xr.apply_ufunc(
        np.vectorize(partial(arrays.slope_verdict, expected=expected, agree=defaults.TIMESCALE_SLOPE_AGREE,
                             disagree=defaults.TIMESCALE_SLOPE_DISAGREE), otypes=[object]),
        stats.isel(stat=2), stats.isel(stat=3), dask="parallelized", output_dtypes=[object])
    criterion = (f"interval within {expected:g} +- {defaults.TIMESCALE_SLOPE_AGREE:g}: agrees; wholly outside "
                 f"{expected:g} +- {defaults.TIMESCALE_SLOPE_DISAGREE:g}: disagrees; else inconclusive")
    return {
        f"{name}_intercept": with_attrs(stats.isel(stat=0), f"a of log {name} = a + b log n ({fit} fit)", "1"),
        f"{name}_slope": with_attrs(stats.isel(stat=1), f"b of log {name} = a + b log n ({fit} fit)", "1"),
        f"{name}_slope_low": with_attrs(stats.isel(stat=2), f"lower end of b's {ci:.0%} pairs-bootstrap interval",
                                        "1"),
        f"{name}_slope_high": with_attrs(stats.isel(stat=3), f"upper end of b's {ci:.0%} pairs-bootstrap interval",
                                         "1"),
        f"{name}_slope_dropped": with_attrs(stats.isel(stat=5), "bootstrap replicates with fewer than two "
                                            "distinct uncensored n (no slope; left out of the interval)", "1"),
        f"{name}_verdict": with_attrs(verdict, f"verdict on b against {expected:g}: {criterion}", "1"),
    }


def training_timescales(ds: xr.Dataset, *, quality: str = "quality_sliced_wasserstein",
                        higher_is_better: bool = False, tol: float = defaults.TIMESCALE_QUALITY_TOL,
                        level: float = defaults.TIMESCALE_MEM_LEVEL, ratio: float = defaults.MEMORIZED_RATIO,
                        time_dim: str = "epoch", size_dim: str = "n_train", censored_fit: str = "tobit",
                        n_boot: int = defaults.TIMESCALE_N_BOOT, ci: float = defaults.TIMESCALE_CI, seed: int = 0,
                        dim: str = "sample") -> xr.Dataset:
    """tau_gen and tau_mem along training time per cell, and the slopes of their laws in n.

    - **tau_gen**: the first checkpoint (label of ``time_dim``) whose sample quality ``quality`` has closed
      all but ``tol`` of the gap between the curve's worst and best checkpoint,
      (q - best) / (worst - best) <= ``tol`` (:func:`ridgexr.analysis.arrays.quality_reached`; with the
      stored ``<quality>_lower``/``_upper`` when the store has them, surely and possibly reached).  One
      first reached at the last checkpoint is censored (the quality may still improve).
    - **tau_mem**: the first checkpoint whose f_mem interval (:func:`memorized_share`) lies wholly above
      ``level``; possibly reached where the interval's upper end is above it.  Not reached in the run:
      censored, tau_mem = the last checkpoint as a lower bound.

    Each tau's interval runs from the last checkpoint at which it surely had not happened to tau
    (:func:`ridgexr.analysis.arrays.first_reached`).  Along ``size_dim`` (n) the law
    log tau = a + b log n is fitted with censored points as censored (``censored_fit="tobit"``: a
    right-censored normal likelihood, :func:`ridgexr.analysis.arrays.censored_slope`; ``"drop"``: least
    squares on the uncensored points) and a pairs-bootstrap percentile interval on b; the verdicts
    compare b's interval with the expected slopes (tau_mem: 1, tau_gen: 0) by the criteria of
    :mod:`ridgexr.defaults` (``TIMESCALE_SLOPE_AGREE``, ``TIMESCALE_SLOPE_DISAGREE``).

    The times are in units of ``time_dim``'s labels: for a block trained with ``batch_size`` >= every
    n_train, an epoch is one optimizer step.

    Parameters
    ----------
    ds : xarray.Dataset
        A store with dimensions ``time_dim`` and ``size_dim`` (or a selection keeping both), its
        ``nearest_ratio`` and the ``quality`` variable.
    quality : str
        The per-cell quality variable (default the sliced Wasserstein distance to fresh draws).
    higher_is_better : bool
        Direction of ``quality`` (False for a distance).
    tol : float in [0, 1)
    level : float in [0, 1): the f_mem level of tau_mem
    ratio, n_boot, ci, seed, dim : as for :func:`memorized_share` (``n_boot`` and ``seed`` also of the slope)
    time_dim, size_dim : str
    censored_fit : "tobit" or "drop"

    Returns
    -------
    xarray.Dataset: ``f_mem``, ``f_mem_low``, ``f_mem_high``, ``f_mem_n_valid`` and ``quality`` (the curves,
    over every cell dimension); ``tau_gen``, ``tau_mem`` with ``_low``, ``_high``, ``_censored`` (over the
    cell dimensions but ``time_dim``); ``tau_gen_slope``, ``tau_mem_slope`` with ``_low``, ``_high``,
    ``_intercept``, ``_dropped``, ``_verdict`` (over the cell dimensions but ``time_dim`` and ``size_dim``).

    Raises
    ------
    ValueError
        A missing variable or dimension, fewer than two checkpoints, an out-of-range argument.
    TypeError
        ``ds`` not a Dataset.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> epoch, n = [1, 10, 100, 1000], [64, 128]
    >>> r = np.where(np.array(epoch)[:, None, None] >= 10 * np.array(n)[None, :, None] / 64, 0.1, 0.9)
    >>> ds = xr.Dataset({"nearest_ratio": (("epoch", "n_train", "sample", "step"), np.repeat(r, 50, 2)[..., None]),
    ...                  "quality_sliced_wasserstein": (("epoch", "n_train"), [[3.0, 3.0], [1.0, 2.0], [1.0, 1.0],
    ...                                                                        [1.0, 1.0]])},
    ...                 coords={"epoch": epoch, "n_train": n, "step": [0], "t": ("step", [0.01])})
    >>> out = training_timescales(ds, n_boot=50)
    >>> out["tau_mem"].values.tolist(), out["tau_gen"].values.tolist()
    ([10.0, 100.0], [10.0, 100.0])
    """
    check_vars(ds, quality, dim=dim)  # d1/d2: stored or computed (nearest_ratio_at)
    for name, value in (("time_dim", time_dim), ("size_dim", size_dim)):
        if not isinstance(value, str) or value not in ds.dims:
            raise ValueError(f"`{name}` must be a dimension of ds {tuple(ds.dims)}; got {value!r}")
    if ds.sizes[time_dim] < 2:
        raise ValueError(f"`ds` needs at least 2 checkpoints along {time_dim!r}; got {ds.sizes[time_dim]}")
    higher_is_better = check_bool(higher_is_better, "higher_is_better")
    tol = check_float(tol, "tol", min_val=0, max_val=1, include_boundaries="left")
    level = check_float(level, "level", min_val=0, max_val=1, include_boundaries="left")
    check_option(censored_fit, "censored_fit", arrays.CENSORED_FITS)
    ratio, n_boot, ci, seed = _check_boot(ratio, n_boot, ci, seed)
    checkpoints = np.asarray(ds[time_dim].values, dtype=float)
    if not (np.all(np.diff(checkpoints) > 0) and checkpoints[0] > 0):
        raise ValueError(f"the labels of {time_dim!r} must be positive and increasing; got {checkpoints.tolist()}")
    sizes = np.asarray(ds[size_dim].values, dtype=float)
    if not np.all(sizes > 0):
        raise ValueError(f"the labels of {size_dim!r} must be positive; got {sizes.tolist()}")

    fm = memorized_share(ds, ratio=ratio, n_boot=n_boot, ci=ci, seed=seed, dim=dim)
    q = ds[quality]
    q_low = ds[f"{quality}_lower"] if f"{quality}_lower" in ds else q
    q_high = ds[f"{quality}_upper"] if f"{quality}_upper" in ds else q
    one = {time_dim: -1}

    def gen(qq, lo, hi):
        sure, possible = arrays.quality_reached(qq, lo, hi, tol=tol, higher_is_better=higher_is_better)
        return arrays.first_reached(checkpoints, sure, possible, last_is_censored=True)

    def mem(low, high):
        return arrays.first_reached(checkpoints, low > level, high > level)

    def rechunk(x):
        return x.chunk(one) if x.chunks is not None else x

    kwargs = dict(output_core_dims=[["stat"]], dask="parallelized", output_dtypes=[float],
                  dask_gufunc_kwargs={"output_sizes": {"stat": 4}})
    g = xr.apply_ufunc(gen, rechunk(q), rechunk(q_low), rechunk(q_high), input_core_dims=[[time_dim]] * 3, **kwargs)
    m = xr.apply_ufunc(mem, rechunk(fm["f_mem_low"]), rechunk(fm["f_mem_high"]), input_core_dims=[[time_dim]] * 2,
                       **kwargs)
    taus = _times(g, "tau_gen", f"first {time_dim} whose {quality} is within {tol:g} of its best (gap share)",
                  time_dim) | _times(m, "tau_mem", f"first {time_dim} whose f_mem interval lies above {level:g}",
                                     time_dim)

    def slope(tau, cen):
        return arrays.censored_slope_ci(sizes, tau, cen, method=censored_fit, n_boot=n_boot, ci=ci, seed=seed)

    out = {}
    for name, expected in (("tau_gen", defaults.TIMESCALE_GEN_SLOPE), ("tau_mem", defaults.TIMESCALE_MEM_SLOPE)):
        tau, cen = taus[name], taus[f"{name}_censored"]
        if tau.chunks is not None:
            tau, cen = tau.chunk({size_dim: -1}), cen.chunk({size_dim: -1})
        stats = xr.apply_ufunc(np.vectorize(slope, signature="(n),(n)->(s)"), tau, cen,
                               input_core_dims=[[size_dim]] * 2, output_core_dims=[["stat"]], dask="parallelized",
                               output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 6}})
        out |= _slope(stats, name, expected, ci, censored_fit)
    result = xr.Dataset({**fm.data_vars, "quality": q, **taus, **out})
    return result.assign_attrs(quality=quality, higher_is_better=int(higher_is_better), tol=tol, level=level,
                               ratio=ratio, ci=ci, n_boot=n_boot, seed=seed, censored_fit=censored_fit,
                               time_dim=time_dim, size_dim=size_dim)
