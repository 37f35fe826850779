"""Training time as an axis: when a network starts to generate and when it starts to memorize.

Bonnaire, Urfin, Biroli & Mezard (2025) find an early time tau_gen at which a diffusion model's
samples become good, independent of the training-set size n, and a later tau_mem at which it starts
to reproduce training points, growing linearly with n.  On a store that sweeps a training-time
dimension (the ``epoch`` of a model trained by minibatch DSM, ``model.epochs`` a list) and ``n_train``:

- :func:`memorized_share`: f_mem, the share of final samples with d1/d2 < 1/3 (the stored
  ``nearest_ratio`` of the last recorded step), with a seeded percentile-bootstrap interval;
- :func:`memorized_excess`: f_mem - f_fresh, the final samples' memorized share less that of fresh draws of the
  law against the same training set (the store's ``quality_memorized_null_count`` / ``_draws``), with the
  memorization claims' interval (:func:`ridgexr.verdicts.share_difference_ci`);
- :func:`training_timescales`: tau_gen and tau_mem per cell with their intervals and censoring flags,
  and the slopes b of log tau = a + b log n with bootstrap intervals and the verdicts of the criteria
  fixed before a run (:mod:`ridgexr.defaults`, docs/timescales.md);
- :func:`loss_timescales`: the same two times read off loss curves along training time, for a model that
  does not sample (random features at one diffusion time, :func:`ridgexr.training.single_time.single_time_losses`).

Array kernels in :mod:`.arrays` (``memorized_share_ci``, ``quality_reached``, ``first_reached``,
``censored_slope_ci``); lazy where the inputs are.  The verdicts on the slopes are the claims registry's
(:mod:`ridgexr.claims`, kind ``timescale-slope``).
"""

from __future__ import annotations

import json
import math
from functools import partial

import numpy as np
import xarray as xr

from .. import defaults, units
from ..choices import QUALITY_NULLS, QUALITY_RULES
from .._validation import check_bool, check_float, check_int, check_option
from ..verdicts import share_difference_ci
from . import arrays, scaling
from .selection import (along_step, by_train, cell_train, check_vars, resolved, step_index, step_label,
                        stored_final_samples, with_attrs)
from .trajectories import nearest_ratio_at

__all__ = ["memorized_share", "memorized_excess", "MEMORIZED_NULL", "training_timescales", "loss_timescales",
           "training_window", "reference_observation", "WINDOWS", "WINDOW_MEASURES", "WINDOW_DISTANCES", "separation_timescales", "interval_law",
           "memorization_collapse", "memorizer_observation", "LOSS_SEPARATION"]


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
    r = _whole(nearest_ratio_at(ds, step=step, t=t, dim=dim), dim)
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


#: the store's memorized-share null per cell (schema 1.10; :func:`ridgexr.quality.cells.memorized_null`): the
#: count of fresh draws of the law with d1/d2 < :data:`ridgexr.defaults.MEMORIZED_RATIO` and the draws it is over
MEMORIZED_NULL = ("quality_memorized_null_count", "quality_memorized_null_draws")


def _excess_ci(k, n, k0, n0, ci) -> np.ndarray:
    """(f_fresh, excess, low, high) of one cell from its counts (NaN where a count is missing or a share empty)."""
    if not np.all(np.isfinite([k, n, k0, n0])) or n == 0 or n0 == 0:
        return np.full(4, np.nan)
    return np.array([k0 / n0, *share_difference_ci(int(k), int(n), int(k0), int(n0), ci)])


def memorized_excess(ds: xr.Dataset, *, ci: float = defaults.TIMESCALE_CI, dim: str = "sample") -> xr.Dataset:
    """f_mem - f_fresh per cell: the final samples' memorized share less that of fresh draws of the law, with the
    memorization claims' interval -- the one rule of ``does-not-memorize``, ``memorizes`` and tau_mem.

    The samples' share is k / n, k of the n finite final samples (:func:`ridgexr.analysis.selection.
    stored_final_samples`: ``final_sample``, else ``denoised``, else the last state over alpha -- what the claims
    read) with d1/d2 < :data:`ridgexr.defaults.MEMORIZED_RATIO` against the cell's training set
    (:func:`ridgexr.analysis.arrays.memorized`); f_fresh = k0 / n0 is the store's null per cell
    (``quality_memorized_null_count`` / ``quality_memorized_null_draws``, written by the run with the same
    criterion, :func:`ridgexr.quality.cells.memorized_null`).  Interval: each share's Clopper-Pearson interval at
    the Bonferroni level of two, combined (:func:`ridgexr.verdicts.share_difference_ci`; coverage >= ``ci``).

    Parameters
    ----------
    ds : xarray.Dataset
        A store (or a selection of its cells) with ``quality_memorized_null_count``, ``quality_memorized_null_draws``,
        ``train_data`` and its final samples.
    ci : float in (0, 1)
        Interval level (default :data:`ridgexr.defaults.TIMESCALE_CI`, the claims' 0.95).
    dim : str
        The sample dimension.

    Returns
    -------
    xarray.Dataset over the cell dimensions (computed: the counts are small): ``f_mem_excess``, ``f_mem_excess_low``,
    ``f_mem_excess_high``, ``f_fresh``, ``memorized_count`` (k) and ``memorized_draws`` (n); NaN where the null is
    missing (an unfinished cell, a dataset without fresh draws).

    Raises
    ------
    ValueError
        A store without the null (older than schema 1.10: :func:`ridgexr.run.fill_memorized_null` adds it) or
        without ``train_data``, an out-of-range ``ci``.

    Examples
    --------
    >>> ds = xr.Dataset({"final_sample": (("sample", "dim"), [[0.0, 0.01], [1.0, 0.0], [0.5, 0.5]]),
    ...                  "train_data": (("train", "dim"), [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),
    ...                  "quality_memorized_null_count": 100.0, "quality_memorized_null_draws": 1000.0})
    >>> out = memorized_excess(ds)
    >>> int(out["memorized_count"]), round(float(out["f_mem_excess"]), 4)
    (2, 0.5667)
    """
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    check_vars(ds, *MEMORIZED_NULL, "train_data")
    x = stored_final_samples(ds, dim)
    if x.chunks is not None:
        x = x.chunk({dim: -1, "dim": -1})

    f = xr.apply_ufunc(partial(by_train, arrays.memorized, core=2), x, cell_train(ds),
                       input_core_dims=[[dim, "dim"], ["train", "dim"]], output_core_dims=[[dim]],
                       dask="parallelized", output_dtypes=[float])
    n = f.notnull().sum(dim).astype(float).compute()
    k = f.sum(dim).compute().where(n > 0)  # no finite sample (a masked cell): no count
    k0, n0 = (ds[v].compute() for v in MEMORIZED_NULL)
    stats = xr.apply_ufunc(np.vectorize(partial(_excess_ci, ci=ci), signature="(),(),(),()->(s)"), k, n, k0, n0,
                           output_core_dims=[["stat"]])
    stats = stats.drop_vars([c for c in stats.coords if c not in stats.dims])
    level = f"{ci:.0%} interval (each share Clopper-Pearson at the Bonferroni level of two, combined)"
    crit = f"d1/d2 < {defaults.MEMORIZED_RATIO:.4g}"
    out = xr.Dataset({
        "f_mem_excess": with_attrs(stats.isel(stat=1), f"share of final samples with {crit} less that of fresh "
                                   "draws of the law against the same training set (f_mem - f_fresh)", "1"),
        "f_mem_excess_low": with_attrs(stats.isel(stat=2), f"lower end of the {level}", "1"),
        "f_mem_excess_high": with_attrs(stats.isel(stat=3), f"upper end of the {level}", "1"),
        "f_fresh": with_attrs(stats.isel(stat=0), f"share of fresh draws of the law with {crit} (the store's "
                              "null)", "1"),
        "memorized_count": with_attrs(k.drop_vars([c for c in k.coords if c not in k.dims]),
                                      f"final samples with {crit}", "1"),
        "memorized_draws": with_attrs(n.drop_vars([c for c in n.coords if c not in n.dims]),
                                      "finite final samples (the share's denominator)", "1"),
    })
    return out.assign_attrs(ratio=defaults.MEMORIZED_RATIO, ci=ci)


def _tau_mem_measure(ds: xr.Dataset, ratio: float) -> tuple[str, str]:
    """Which f_mem tau_mem reads on ``ds``, and why: ("f_mem - f_fresh", ...) where the store has the memorized
    null of :data:`MEMORIZED_NULL` for some cell and ``ratio`` is the one it was counted at; else ("f_mem", why)."""
    if not all(v in ds for v in MEMORIZED_NULL):
        return "f_mem", ("the store has no memorized-share null (quality_memorized_null_count, schema 1.10; "
                         "ridgexr.run.fill_memorized_null adds it to an older store)")
    if ratio != defaults.MEMORIZED_RATIO:
        return "f_mem", (f"ratio {ratio:.4g} is not the store null's d1/d2 < {defaults.MEMORIZED_RATIO:.4g} "
                         "(ridgexr.defaults.MEMORIZED_RATIO)")
    if not bool(np.isfinite(ds[MEMORIZED_NULL[1]].values).any()):
        return "f_mem", "the dataset has no fresh draws of its law (its null is NaN in every cell)"
    return "f_mem - f_fresh", ("the share of final samples with d1/d2 < ratio less that of the store's fresh "
                               "draws of the law against the same training set (memorized_excess), the "
                               "memorization claims' rule")


#: what tau_gen's rule asks of the quality, for the variable's description
_GEN_RULE_TEXT = {"best": "within a factor {f:g} of its best", "null": "within a factor {f:g} of its null",
                  "gap": "within {tol:g} of its best (gap share)"}


def _whole(x: xr.DataArray, dim: str) -> xr.DataArray:
    """``x`` in one chunk along ``dim`` when it is dask-backed (a core dimension of apply_ufunc), else as it is."""
    return x.chunk({dim: -1}) if x.chunks is not None else x


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
    # the verdict on b against ``expected`` is the claims registry's (ridgexr.claims: kind timescale-slope)
    return {
        f"{name}_intercept": with_attrs(stats.isel(stat=0), f"a of log {name} = a + b log n ({fit} fit)", "1"),
        f"{name}_slope": with_attrs(stats.isel(stat=1), f"b of log {name} = a + b log n ({fit} fit; expected "
                                    f"{expected:g})", "1"),
        f"{name}_slope_low": with_attrs(stats.isel(stat=2), f"lower end of b's {ci:.0%} pairs-bootstrap interval",
                                        "1"),
        f"{name}_slope_high": with_attrs(stats.isel(stat=3), f"upper end of b's {ci:.0%} pairs-bootstrap interval",
                                         "1"),
        f"{name}_slope_points": with_attrs(stats.isel(stat=4), "training runs (n, seed) with a finite time: the "
                                           "independent draws of the fit", "1"),
        f"{name}_slope_dropped": with_attrs(stats.isel(stat=5), "bootstrap replicates with fewer than two "
                                            "distinct uncensored n (no slope; left out of the interval)", "1"),
    }


def training_timescales(ds: xr.Dataset, *, quality: str = "quality_sliced_wasserstein",
                        higher_is_better: bool = False, rule: str = defaults.TIMESCALE_GEN_RULE,
                        quality_null: str | None = None,
                        factor: float = defaults.TIMESCALE_GEN_FACTOR, tol: float = defaults.TIMESCALE_QUALITY_TOL,
                        level: float = defaults.MEMORIZED_SHARE, ratio: float = defaults.MEMORIZED_RATIO,
                        time_dim: str = "epoch", size_dim: str = "n_train", censored_fit: str = "tobit",
                        n_boot: int = defaults.TIMESCALE_N_BOOT, ci: float = defaults.TIMESCALE_CI, seed: int = 0,
                        dim: str = "sample") -> xr.Dataset:
    """tau_gen and tau_mem along training time per cell, and the slopes of their laws in n.

    - **tau_gen**: the first checkpoint (label of ``time_dim``) whose sample quality ``quality`` is good by
      ``rule`` (:func:`ridgexr.analysis.arrays.quality_reached`; with the stored ``<quality>_lower``/``_upper``
      when the store has them, surely and possibly reached): ``"best"`` (the default) q <= ``factor`` x the
      best quality of that curve; ``"null"`` q <= ``factor`` x the store's ``<quality>_null`` (what as many
      fresh draws of the law score; with its stored interval ``<quality>_null_lower`` / ``_upper`` each end
      of a checkpoint's interval is compared with the same end of the null's); ``"gap"`` (q - best) /
      (worst - best) <= ``tol``, the rule written before ``timescales-gmm`` ran, which the untrained
      network's quality dominates (docs/timescales.md).
      One first reached at the last checkpoint is censored (the quality may still improve).
    - **tau_mem**: on a store with the memorized-share null (``quality_memorized_null_count`` / ``_draws``,
      schema 1.10), the first checkpoint whose f_mem - f_fresh interval (:func:`memorized_excess`: the final
      samples' share less that of fresh draws of the law against the same training set,
      :func:`ridgexr.verdicts.share_difference_ci`) reaches ``level`` -- the rule of the memorization claims
      (``does-not-memorize`` disagrees exactly where it is surely reached, agrees exactly where it is not
      possibly reached), so the two never contradict each other; possibly reached where the interval's upper end
      is above ``level``.  On a store without the null (older, or a dataset without fresh draws) or with a
      ``ratio`` other than the one it was counted at: the first checkpoint whose raw f_mem interval
      (:func:`memorized_share`) lies wholly above ``level``.  The result's attribute ``tau_mem_measure`` says
      which (``"f_mem - f_fresh"`` or ``"f_mem"``) and ``tau_mem_why`` why.  Not reached in the run: censored,
      tau_mem = the last checkpoint as a lower bound.

    Each tau's interval runs from the last checkpoint at which it surely had not happened to tau
    (:func:`ridgexr.analysis.arrays.first_reached`).  Along ``size_dim`` (n) the law
    log tau = a + b log n is fitted with censored points as censored (``censored_fit="tobit"``: a
    right-censored normal likelihood, :func:`ridgexr.analysis.arrays.censored_slope`; ``"drop"``: least
    squares on the uncensored points) and a pairs-bootstrap percentile interval on b; the verdicts on b
    against the expected slopes (tau_mem: 1, tau_gen: 0) are the claims registry's
    (:func:`ridgexr.claims.timescale_slope.slope_claims`).

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
    rule : one of :data:`ridgexr.choices.QUALITY_RULES` ("best", "null", "gap")
    quality_null : str, optional
        Rule ``"null"``: the variable holding the null of ``quality`` (default
        :data:`ridgexr.choices.QUALITY_NULLS`, else ``<quality>_null``: ``quality_frechet_floor`` for the Frechet
        distance), its interval read from ``<quality_null>_lower`` / ``_upper`` when the store has them.
        Ignored by the other rules.
    factor : float >= 1, the ratio rules' factor
    tol : float in [0, 1), the gap rule's share
    level : float in [0, 1): the level of tau_mem's share, f_mem - f_fresh or f_mem (default the one memorization
        threshold, :data:`ridgexr.defaults.MEMORIZED_SHARE`, also the claims')
    ratio, n_boot, ci, seed, dim : as for :func:`memorized_share` (``n_boot`` and ``seed`` also of the slope)
    time_dim, size_dim : str
    censored_fit : "tobit" or "drop"

    Returns
    -------
    xarray.Dataset: ``f_mem``, ``f_mem_low``, ``f_mem_high``, ``f_mem_n_valid`` and ``quality`` (the curves,
    over every cell dimension), with the null those of :func:`memorized_excess` too (``f_mem_excess`` with its
    ``_low`` / ``_high``, ``f_fresh``, ``memorized_count``, ``memorized_draws``); ``tau_gen``, ``tau_mem`` with
    ``_low``, ``_high``, ``_censored`` (over the cell dimensions but ``time_dim``); ``tau_gen_slope``,
    ``tau_mem_slope`` with ``_low``, ``_high``, ``_intercept``, ``_points``, ``_dropped``, ``_range_low`` /
    ``_range_high`` (the slopes the checkpoint intervals alone allow, :func:`ridgexr.analysis.arrays.slope_range`)
    and ``tau_order_verdict`` (tau_gen < tau_mem, :func:`ridgexr.analysis.arrays.order_verdict`) over the cell
    dimensions but ``time_dim`` and ``size_dim``.

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
    ...                  "quality_sliced_wasserstein": (("epoch", "n_train"), [[3.0, 3.0], [1.0, 3.0], [1.0, 1.0],
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
    check_option(rule, "rule", QUALITY_RULES)
    factor = check_float(factor, "factor", min_val=1)
    tol = check_float(tol, "tol", min_val=0, max_val=1, include_boundaries="left")
    level = check_float(level, "level", min_val=0, max_val=1, include_boundaries="left")
    check_option(censored_fit, "censored_fit", arrays.CENSORED_FITS)
    if quality_null is None:
        quality_null = QUALITY_NULLS.get(quality, f"{quality}_null")
    elif not isinstance(quality_null, str):
        raise TypeError(f"`quality_null` must be a variable name (str) or None; got {type(quality_null).__name__}")
    if rule == "null":
        check_vars(ds, quality_null, dim=dim)
    ratio, n_boot, ci, seed = _check_boot(ratio, n_boot, ci, seed)
    checkpoints = np.asarray(ds[time_dim].values, dtype=float)
    if not (np.all(np.diff(checkpoints) > 0) and checkpoints[0] > 0):
        raise ValueError(f"the labels of {time_dim!r} must be positive and increasing; got {checkpoints.tolist()}")
    sizes = np.asarray(ds[size_dim].values, dtype=float)
    if not np.all(sizes > 0):
        raise ValueError(f"the labels of {size_dim!r} must be positive; got {sizes.tolist()}")

    fm = memorized_share(ds, ratio=ratio, n_boot=n_boot, ci=ci, seed=seed, dim=dim)
    measure, why = _tau_mem_measure(ds, ratio)
    excess = memorized_excess(ds, ci=ci, dim=dim) if measure == "f_mem - f_fresh" else None
    q = ds[quality]
    q_low = ds[f"{quality}_lower"] if f"{quality}_lower" in ds else q
    q_high = ds[f"{quality}_upper"] if f"{quality}_upper" in ds else q
    # the null's quality per checkpoint and its interval (rule 'null'; the others ignore them: q stands in)
    q_null = ds[quality_null] if rule == "null" else q
    n_low = ds[f"{quality_null}_lower"] if rule == "null" and f"{quality_null}_lower" in ds else q_null
    n_high = ds[f"{quality_null}_upper"] if rule == "null" and f"{quality_null}_upper" in ds else q_null
    def gen(qq, lo, hi, nn, nlo, nhi):
        sure, possible = arrays.quality_reached(qq, lo, hi, tol=tol, higher_is_better=higher_is_better, rule=rule,
                                                factor=factor, null=nn, null_low=nlo, null_high=nhi)
        return arrays.first_reached(checkpoints, sure, possible, last_is_censored=True)

    def mem(low, high):
        # the excess: surely reached where does-not-memorize disagrees (its interval inside [level, inf))
        sure = low >= level if excess is not None else low > level
        return arrays.first_reached(checkpoints, sure, high > level)

    kwargs = dict(output_core_dims=[["stat"]], dask="parallelized", output_dtypes=[float],
                  dask_gufunc_kwargs={"output_sizes": {"stat": 4}})
    g = xr.apply_ufunc(gen, *(_whole(x, time_dim) for x in (q, q_low, q_high)),
                       *(_whole(x.broadcast_like(q), time_dim) for x in (q_null, n_low, n_high)),
                       input_core_dims=[[time_dim]] * 6, **kwargs)
    mem_low, mem_high = ((fm["f_mem_low"], fm["f_mem_high"]) if excess is None
                         else (excess["f_mem_excess_low"], excess["f_mem_excess_high"]))
    m = xr.apply_ufunc(mem, _whole(mem_low, time_dim), _whole(mem_high, time_dim),
                       input_core_dims=[[time_dim]] * 2,
                       **kwargs)
    good = _GEN_RULE_TEXT[rule].format(f=factor, tol=tol)
    reached = (f"f_mem interval lies above {level:g}" if excess is None
               else f"f_mem - f_fresh interval lies at or above {level:g}")
    taus = (_times(g, "tau_gen", f"first {time_dim} whose {quality} is {good}", time_dim)
            | _times(m, "tau_mem", f"first {time_dim} whose {reached}", time_dim))

    def slope(tau, cen):
        return arrays.censored_slope_ci(sizes, tau, cen, method=censored_fit, n_boot=n_boot, ci=ci, seed=seed)

    out = {}
    for name, expected in (("tau_gen", defaults.TIMESCALE_GEN_SLOPE), ("tau_mem", defaults.TIMESCALE_MEM_SLOPE)):
        tau, cen = _whole(taus[name], size_dim), _whole(taus[f"{name}_censored"], size_dim)
        stats = xr.apply_ufunc(np.vectorize(slope, signature="(n),(n)->(s)"), tau, cen,
                               input_core_dims=[[size_dim]] * 2, output_core_dims=[["stat"]], dask="parallelized",
                               output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 6}})
        out |= _slope(stats, name, expected, ci, censored_fit)
        bounds = [_whole(taus[f"{name}_{k}"], size_dim) for k in ("low", "high")]
        span = xr.apply_ufunc(np.vectorize(partial(arrays.slope_range, sizes), signature="(n),(n)->(s)"), *bounds,
                              input_core_dims=[[size_dim]] * 2, output_core_dims=[["stat"]], dask="parallelized",
                              output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 2}})
        what = (f"slope of every line log {name} = a + b log n through every {name}'s interval (the checkpoint "
                "spacing alone; NaN: no such line, or fewer than two n)")
        out[f"{name}_slope_range_low"] = with_attrs(span.isel(stat=0), f"least {what}", "1")
        out[f"{name}_slope_range_high"] = with_attrs(span.isel(stat=1), f"largest {what}", "1")
    ends = [_whole(taus[k], size_dim)
            for k in ("tau_gen_low", "tau_gen_high", "tau_mem_low", "tau_mem_high", "tau_mem_censored")]
    order = xr.apply_ufunc(np.vectorize(arrays.order_verdict, signature="(n),(n),(n),(n),(n)->()", otypes=[object]),
                           *ends, input_core_dims=[[size_dim]] * 5, dask="parallelized", output_dtypes=[object])
    out["tau_order_verdict"] = with_attrs(order, "verdict on tau_gen < tau_mem: agrees when every n with an uncensored "
                                          "tau_mem (at least one) has tau_gen's interval below tau_mem's; disagrees "
                                          "when some n has tau_mem's interval below tau_gen's; else inconclusive", "1")
    result = xr.Dataset({**fm.data_vars, **({} if excess is None else excess.data_vars), "quality": q, **taus,
                         **out})
    return result.assign_attrs(quality=quality, higher_is_better=int(higher_is_better), rule=rule, factor=factor,
                               tol=tol, level=level, ratio=ratio, ci=ci, n_boot=n_boot, seed=seed,
                               censored_fit=censored_fit, time_dim=time_dim, size_dim=size_dim,
                               tau_mem_measure=measure, tau_mem_why=why)


def loss_timescales(ds: xr.Dataset, *, tol: float = defaults.TIMESCALE_QUALITY_TOL, error: str = "score_error",
                    loss: str = "test_loss", time_dim: str = "tau", size_dim: str = "n_train",
                    censored_fit: str = "tobit", n_boot: int = defaults.TIMESCALE_N_BOOT,
                    ci: float = defaults.TIMESCALE_CI, seed: int = 0) -> xr.Dataset:
    """tau_gen and tau_mem read off loss curves along training time, and the slopes of their laws in n.

    - **tau_gen**: the first checkpoint at which ``error`` (default the error to the true score) has closed all
      but ``tol`` of its fall from the first checkpoint's value (the untrained model) to its minimum
      (:func:`ridgexr.analysis.arrays.loss_gen_time`).  The first checkpoint is the reference, not the worst
      one: after memorization the error rises above it.
    - **tau_mem**: where ``loss`` (default the test loss on fresh draws of the law) turns up: its minimum over
      the checkpoints, interval between the neighbouring checkpoints; censored when the minimum is the last
      checkpoint (:func:`ridgexr.analysis.arrays.loss_min_time`).

    The law log tau = a + b log n is fitted over every (other cells, ``size_dim``) point together, censored
    points as censored (``censored_fit``), with a pairs-bootstrap interval on b (judged against b = 0 for
    tau_gen and b = 1 for tau_mem by the claims registry, :func:`ridgexr.claims.timescale_slope.slope_claims`).

    Parameters
    ----------
    ds : xarray.Dataset
        Curves over ``time_dim`` (increasing, positive labels) and ``size_dim`` (positive labels), and any
        other dimensions (e.g. ``seed``: pooled in the fit).
    tol : float in [0, 1)
    error, loss : str
        The variables of tau_gen and tau_mem.
    time_dim, size_dim : str
    censored_fit : "tobit" or "drop"
    n_boot, ci, seed : the slope's bootstrap

    Returns
    -------
    xarray.Dataset: ``tau_gen``, ``tau_mem`` with ``_low``, ``_high``, ``_censored`` (over every dimension but
    ``time_dim``, in its units); ``tau_gen_slope``, ``tau_mem_slope`` with ``_low``, ``_high``, ``_intercept``,
    ``_points``, ``_dropped`` (scalars).

    Raises
    ------
    ValueError
        A missing variable or dimension, fewer than two checkpoints, an out-of-range argument.

    Examples
    --------
    >>> tau = np.logspace(0, 4, 9)
    >>> n = np.array([10.0, 100.0])
    >>> test = (np.log(tau)[None, :] - np.log(10 * n)[:, None]) ** 2  # lowest at tau = 10 n
    >>> ds = xr.Dataset({"test_loss": (("n_train", "tau"), test), "score_error": (("n_train", "tau"), test)},
    ...                 coords={"n_train": n, "tau": tau})
    >>> loss_timescales(ds, n_boot=20)["tau_mem"].values.tolist()
    [100.0, 1000.0]
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"`ds` must be an xarray.Dataset; got {type(ds).__name__}")
    check_vars(ds, error, loss)
    for name, value in (("time_dim", time_dim), ("size_dim", size_dim)):
        if not isinstance(value, str) or value not in ds[loss].dims or value not in ds[error].dims:
            raise ValueError(f"`{name}` must be a dimension of {error!r} and {loss!r}; got {value!r}")
    if ds.sizes[time_dim] < 2:
        raise ValueError(f"`ds` needs at least 2 checkpoints along {time_dim!r}; got {ds.sizes[time_dim]}")
    tol = check_float(tol, "tol", min_val=0, max_val=1, include_boundaries="left")
    check_option(censored_fit, "censored_fit", arrays.CENSORED_FITS)
    n_boot = check_int(n_boot, "n_boot", min_val=1)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    checkpoints = np.asarray(ds[time_dim].values, dtype=float)
    if not (np.all(np.diff(checkpoints) > 0) and checkpoints[0] > 0):
        raise ValueError(f"the labels of {time_dim!r} must be positive and increasing; got {checkpoints.tolist()}")
    if not np.all(np.asarray(ds[size_dim].values, dtype=float) > 0):
        raise ValueError(f"the labels of {size_dim!r} must be positive; got {ds[size_dim].values.tolist()}")
    kwargs = dict(input_core_dims=[[time_dim]], output_core_dims=[["stat"]], dask="parallelized",
                  output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 4}})
    g = xr.apply_ufunc(partial(arrays.loss_gen_time, checkpoints, tol=tol), ds[error].chunk({time_dim: -1})
                       if ds[error].chunks else ds[error], **kwargs)
    m = xr.apply_ufunc(partial(arrays.loss_min_time, checkpoints), ds[loss].chunk({time_dim: -1})
                       if ds[loss].chunks else ds[loss], **kwargs)
    taus = (_times(g, "tau_gen", f"first {time_dim} at which {error} has closed all but {tol:g} of its fall from "
                   f"the first {time_dim}", time_dim)
            | _times(m, "tau_mem", f"{time_dim} of the minimum of {loss} (where it turns up)", time_dim))
    taus = {k: v.compute() for k, v in taus.items()}
    out = {}
    for name, expected in (("tau_gen", defaults.TIMESCALE_GEN_SLOPE), ("tau_mem", defaults.TIMESCALE_MEM_SLOPE)):
        tau, cen = taus[name], taus[f"{name}_censored"]
        n_of = xr.broadcast(tau[size_dim].astype(float), tau)[0].transpose(*tau.dims)  # raveled as tau is
        stats = arrays.censored_slope_ci(n_of.values.ravel(), tau.values.ravel(), cen.values.ravel(),
                                         method=censored_fit, n_boot=n_boot, ci=ci, seed=seed)
        out |= _slope(xr.DataArray(stats, dims="stat"), name, expected, ci, censored_fit)
    result = xr.Dataset({**taus, **out})
    return result.assign_attrs(tol=tol, error=error, loss=loss, ci=ci, n_boot=n_boot, seed=seed,
                               censored_fit=censored_fit, time_dim=time_dim, size_dim=size_dim)


# --------------------------------------------------------------------------- loss curves: separation and spectrum
#: tau_mem on loss curves: the first training time at which the test loss exceeds the train loss by this much
#: (loss per coordinate, their normalisation: the untrained model's loss is 1); written in docs/timescales.md
#: before timescales-rf ran
LOSS_SEPARATION = 0.1


def _law(n: np.ndarray, low: np.ndarray, high: np.ndarray, name: str, ci: float,
         what: str) -> dict[str, xr.DataArray]:
    """The interval-censored law of one time (:func:`ridgexr.analysis.scaling.interval_slope`) as variables."""
    a, b, lo, hi, sigma, used = scaling.interval_slope(n, low, high, ci=ci)
    fit = f"interval-censored likelihood over {int(used)} points, seeds as replicates ({what})"
    return {
        f"{name}_intercept": xr.DataArray(a, attrs={"long_name": f"a of log {name} = a + b log n ({fit})",
                                                    "units": "1"}),
        f"{name}_slope": xr.DataArray(b, attrs={"long_name": f"b of log {name} = a + b log n ({fit})", "units": "1"}),
        f"{name}_slope_low": xr.DataArray(lo, attrs={"long_name": f"lower end of b's {ci:.0%} profile-likelihood "
                                                     "interval", "units": "1"}),
        f"{name}_slope_high": xr.DataArray(hi, attrs={"long_name": f"upper end of b's {ci:.0%} profile-likelihood "
                                                      "interval", "units": "1"}),
        f"{name}_sigma": xr.DataArray(sigma, attrs={"long_name": f"scatter of log {name} about the law (maximum "
                                                    "likelihood)", "units": "1"}),
        f"{name}_points": xr.DataArray(used, attrs={"long_name": "points in the fit", "units": "1"}),
    }


def interval_law(times: xr.Dataset, name: str, *, size_dim: str = "n_train",
                 ci: float = defaults.TIMESCALE_CI) -> xr.Dataset:
    """The law log tau = a + b log n of one time read off checkpoints, fitted to its intervals, seeds as replicates.

    ``times`` holds ``name`` with ``<name>_low`` and ``<name>_high`` (the output of :func:`training_timescales`,
    :func:`loss_timescales` or :func:`separation_timescales`) over ``size_dim`` and any replicate dimensions
    (``seed``); every (n, replicate) point enters the likelihood through its interval (a censored time through
    (low, inf)), :func:`ridgexr.analysis.scaling.interval_slope`, with b's profile-likelihood interval.  The
    verdict on b (tau_mem against 1, tau_gen against 0) is the claims registry's
    (:func:`ridgexr.claims.timescale_slope.law_claims`).

    Parameters
    ----------
    times : xarray.Dataset
    name : str, e.g. "tau_mem"
    size_dim : str
    ci : float in (0, 1)

    Returns
    -------
    xarray.Dataset of scalars: ``<name>_intercept``, ``_slope``, ``_slope_low``, ``_slope_high``, ``_sigma``,
    ``_points``.

    Examples
    --------
    >>> n = xr.DataArray([16.0, 64.0, 256.0], dims="n_train", coords={"n_train": [16.0, 64.0, 256.0]})
    >>> times = xr.Dataset({"tau_mem": 10 * n, "tau_mem_low": 10 * n / 1.1, "tau_mem_high": 10 * n * 1.1})
    >>> out = interval_law(times.expand_dims(seed=3), "tau_mem")
    >>> round(float(out["tau_mem_slope"]), 1), int(out["tau_mem_points"])
    (1.0, 9)
    """
    if not isinstance(times, xr.Dataset):
        raise TypeError(f"`times` must be an xarray.Dataset; got {type(times).__name__}")
    check_vars(times, name, f"{name}_low", f"{name}_high")
    if size_dim not in times[name].dims:
        raise ValueError(f"`size_dim` must be a dimension of {name!r} {times[name].dims}; got {size_dim!r}")
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    lo, hi = xr.broadcast(times[f"{name}_low"], times[f"{name}_high"])
    n = xr.broadcast(times[size_dim].astype(float), lo)[0].transpose(*lo.dims)
    return xr.Dataset(_law(n.values.ravel(), lo.values.ravel(), hi.transpose(*lo.dims).values.ravel(), name,
                           ci, "checkpoint intervals"))


def separation_timescales(ds: xr.Dataset, *, amount: float = LOSS_SEPARATION,
                          tol: float = defaults.TIMESCALE_QUALITY_TOL, error: str = "score_error",
                          train: str = "train_loss", test: str = "test_loss", time_dim: str = "tau",
                          size_dim: str = "n_train", ci: float = defaults.TIMESCALE_CI) -> xr.Dataset:
    """tau_gen and tau_mem read off loss curves along training time, the spectral times beside them, and their laws.

    - **tau_mem**: the first checkpoint at which ``test`` exceeds ``train`` by ``amount``
      (:func:`ridgexr.analysis.scaling.separation_time`): the train and test losses have separated, the
      training points' own modes being fitted.  Interval: between that checkpoint and the one before; censored
      when never reached.
    - **tau_gen**: the first checkpoint at which ``error`` (the error to the true score) has closed all but
      ``tol`` of its fall from the untrained model (:func:`ridgexr.analysis.arrays.loss_gen_time`).
    - the spectral times of the curves' own feature form (``tau_mem_spectral``, ``tau_gen_spectral``, and their
      Gaussian-equivalent counterparts when ``ds`` has them, :func:`ridgexr.training.single_time.spectral_times`),
      copied, with ``tau_mem_ratio`` = tau_mem / tau_mem_spectral.
    - the laws log tau = a + b log n of each, every other dimension (``seed``) as replicates, fitted to the
      checkpoint intervals by maximum likelihood (:func:`interval_law`; the spectral times are exact values),
      with b's profile-likelihood interval (judged against b = 1 for tau_mem, b = 0 for tau_gen by the claims
      registry, :func:`ridgexr.claims.timescale_slope.law_claims`).

    Parameters
    ----------
    ds : xarray.Dataset
        Curves over ``time_dim`` (positive increasing labels) and ``size_dim``, e.g. the output of
        :func:`ridgexr.training.single_time.single_time_losses` concatenated over ``seed``.
    amount : float > 0
        The separation that marks tau_mem (default :data:`LOSS_SEPARATION`).
    tol : float in [0, 1)
    error, train, test : str, the variables
    time_dim, size_dim : str
    ci : float in (0, 1), the slopes' interval level

    Returns
    -------
    xarray.Dataset: ``tau_gen``, ``tau_mem`` with ``_low``, ``_high``, ``_censored``, the spectral times and
    ``tau_mem_ratio`` over every dimension but ``time_dim``; per time the scalars of :func:`interval_law`
    (``tau_mem_slope``, ..., ``tau_mem_points``; likewise ``tau_gen_*``, ``tau_mem_spectral_*``, ...).

    Raises
    ------
    ValueError
        A missing variable or dimension, fewer than two checkpoints, an out-of-range argument.

    Examples
    --------
    >>> tau = np.logspace(0, 5, 51)
    >>> n = np.array([16.0, 64.0])
    >>> gap = tau[None, :] / (100.0 * n[:, None])  # reaches 0.1 at tau = 10 n
    >>> ds = xr.Dataset({"train_loss": (("n_train", "tau"), 1 - gap), "test_loss": (("n_train", "tau"), 1 + 0 * gap),
    ...                  "score_error": (("n_train", "tau"), 1 / (1 + tau[None, :] + 0 * n[:, None]))},
    ...                 coords={"n_train": n, "tau": tau})
    >>> separation_timescales(ds)["tau_mem"].values.round(0).tolist()
    [200.0, 794.0]
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"`ds` must be an xarray.Dataset; got {type(ds).__name__}")
    check_vars(ds, error, train, test)
    for name, value in (("time_dim", time_dim), ("size_dim", size_dim)):
        if not isinstance(value, str) or any(value not in ds[v].dims for v in (error, train, test)):
            raise ValueError(f"`{name}` must be a dimension of {error!r}, {train!r} and {test!r}; got {value!r}")
    if ds.sizes[time_dim] < 2:
        raise ValueError(f"`ds` needs at least 2 checkpoints along {time_dim!r}; got {ds.sizes[time_dim]}")
    amount = check_float(amount, "amount", min_val=0, include_boundaries="neither")
    tol = check_float(tol, "tol", min_val=0, max_val=1, include_boundaries="left")
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    checkpoints = np.asarray(ds[time_dim].values, dtype=float)
    if not (np.all(np.diff(checkpoints) > 0) and checkpoints[0] > 0):
        raise ValueError(f"the labels of {time_dim!r} must be positive and increasing; got {checkpoints.tolist()}")
    if not np.all(np.asarray(ds[size_dim].values, dtype=float) > 0):
        raise ValueError(f"the labels of {size_dim!r} must be positive; got {ds[size_dim].values.tolist()}")
    kwargs = dict(output_core_dims=[["stat"]], dask="parallelized", output_dtypes=[float],
                  dask_gufunc_kwargs={"output_sizes": {"stat": 4}})
    g = xr.apply_ufunc(partial(arrays.loss_gen_time, checkpoints, tol=tol), _whole(ds[error], time_dim),
                       input_core_dims=[[time_dim]], **kwargs)
    m = xr.apply_ufunc(partial(scaling.separation_time, checkpoints, amount=amount), _whole(ds[train], time_dim),
                       _whole(ds[test], time_dim), input_core_dims=[[time_dim], [time_dim]], **kwargs)
    taus = (_times(g, "tau_gen", f"first {time_dim} at which {error} has closed all but {tol:g} of its fall from "
                   f"the first {time_dim}", time_dim)
            | _times(m, "tau_mem", f"first {time_dim} at which {test} exceeds {train} by {amount:g}", time_dim))
    out = xr.Dataset({k: v.compute() for k, v in taus.items()})
    for name in ("tau_gen", "tau_mem"):
        out = out.merge(interval_law(out, name, size_dim=size_dim, ci=ci))
    for name in ("tau_mem_spectral", "tau_gen_spectral", "tau_mem_spectral_equivalent",
                 "tau_gen_spectral_equivalent"):
        if name in ds:
            spec = ds[name].broadcast_like(out["tau_mem"]).compute()
            out[name] = spec
            exact = out[[name]].assign({f"{name}_low": spec, f"{name}_high": spec})
            out = out.merge(interval_law(exact, name, size_dim=size_dim, ci=ci))
    if "tau_mem_spectral" in out:
        out["tau_mem_ratio"] = with_attrs(out["tau_mem"] / out["tau_mem_spectral"],
                                          "tau_mem (separation) / tau_mem_spectral", "1")
    return out.assign_attrs(amount=amount, tol=tol, error=error, train=train, test=test, ci=ci, time_dim=time_dim,
                            size_dim=size_dim)


def memorization_collapse(timescales: xr.Dataset, *, time_dim: str = "epoch", size_dim: str = "n_train",
                          bounds: tuple = (-1.0, 3.0), n_boot: int = 200, ci: float = defaults.TIMESCALE_CI,
                          seed: int = 0) -> xr.Dataset:
    """The exponent b at which f_mem(tau) measured at several n collapses onto one curve of tau / n^b.

    Reads ``f_mem`` and ``f_mem_n_valid`` (the output of :func:`training_timescales`, or of
    :func:`memorized_share` over checkpoints) along ``time_dim`` per ``size_dim`` and per any other dimension
    (``seed``: replicate curves), and estimates b by :func:`ridgexr.analysis.scaling.collapse_exponent` (the
    shares' own binomial variances; a parametric-bootstrap interval).  A curve missing throughout (an (n, seed) not
    measured, NaN) is left out.  Bonnaire et al.'s tau_mem proportional to n
    predicts b = 1; the verdict on b's interval is the claims registry's
    (:func:`ridgexr.claims.timescale_slope.law_claims`).

    Parameters
    ----------
    timescales : xarray.Dataset with ``f_mem`` and ``f_mem_n_valid``
    time_dim, size_dim : str
    bounds : (float, float), the b searched
    n_boot, ci, seed : the bootstrap

    Returns
    -------
    xarray.Dataset of scalars: ``f_mem_collapse``, ``_low``, ``_high``, ``_dropped``, and ``f_mem_collapse_runs``
    (the (n, seed) curves pooled).
    """
    if not isinstance(timescales, xr.Dataset):
        raise TypeError(f"`timescales` must be an xarray.Dataset; got {type(timescales).__name__}")
    check_vars(timescales, "f_mem", "f_mem_n_valid")
    for name, value in (("time_dim", time_dim), ("size_dim", size_dim)):
        if value not in timescales["f_mem"].dims:
            raise ValueError(f"`{name}` must be a dimension of f_mem {timescales['f_mem'].dims}; got {value!r}")
    f = timescales["f_mem"].compute()
    s = timescales["f_mem_n_valid"].broadcast_like(f).compute()
    others = [dim for dim in f.dims if dim not in (time_dim, size_dim)]
    f = f.transpose(size_dim, *others, time_dim)
    s = s.transpose(size_dim, *others, time_dim)
    tau = np.asarray(f[time_dim].values, dtype=float)
    curves, sizes, counts = [], [], []
    for i, n in enumerate(f[size_dim].values):
        for idx in np.ndindex(*f.shape[1:-1]):
            if np.isnan(f.values[(i, *idx)]).all():  # this (n, replicate) was not measured
                continue
            curves.append(f.values[(i, *idx)])
            counts.append(np.maximum(s.values[(i, *idx)], 1.0))
            sizes.append(float(n))
    out = scaling.collapse_exponent([tau] * len(curves), np.asarray(sizes), curves, counts, bounds=bounds,
                                    n_boot=n_boot, ci=ci, seed=seed)
    level = f"{ci:.0%} bootstrap interval over seeds and samples ({n_boot} replicates, seed {seed})"
    return xr.Dataset({
        "f_mem_collapse": xr.DataArray(out[0], attrs={"long_name": f"b at which f_mem({time_dim} / n^b) collapses "
                                                      "across n", "units": "1"}),
        "f_mem_collapse_low": xr.DataArray(out[1], attrs={"long_name": f"lower end of the {level}", "units": "1"}),
        "f_mem_collapse_high": xr.DataArray(out[2], attrs={"long_name": f"upper end of the {level}", "units": "1"}),
        "f_mem_collapse_dropped": xr.DataArray(out[3], attrs={"long_name": "replicates without an informative "
                                                              "overlap (left out)", "units": "1"}),
        "f_mem_collapse_runs": xr.DataArray(len(curves), attrs={"long_name": "the (n, seed) curves pooled",
                                                                "units": "1"}),
    })


# --------------------------------------------------------------------------- the ridge account of the window
#: the three windows of training time, in order (:func:`training_window`)
WINDOWS = ("before tau_gen", "generalizing", "memorizing")
#: the measures of :func:`training_window`, each computed by the analysis that names it, on the samples and on
#: the null alike: name -> (long name, units)
WINDOW_MEASURES = {
    "ridge_distance": ("median distance |x - P| of the final states to the ridge (resolved states)", units.DATA),
    "tangential_distance": ("median distance along the ridge from the projection to the nearest alpha_t x_i",
                            units.DATA),
    "nearest_distance": ("median distance d1 of the final states to the nearest alpha_t x_i", units.DATA),
    "near_mode": ("share of final states within 0.5 of some alpha_t x_i (the paper's count)", "1"),
    "memorized": ("share of final states with d1/d2 < 1/3 (f_mem)", "1"),
    "resolved_rank": ("median resolved ridge dimension d*(t) at the final states", "1"),
}
#: the measures of WINDOW_MEASURES that are medians of per-state distances: each gets a bootstrap interval and,
#: with a null, a sample-minus-null difference with its interval
WINDOW_DISTANCES = ("ridge_distance", "tangential_distance", "nearest_distance")


def reference_observation(ds: xr.Dataset, reference: xr.DataArray | None = None, *, step: int = -1,
                          n: int = 1000, seed: int = 0) -> xr.Dataset:
    """The null of the window: fresh draws of the law observed exactly as the store observed its samples.

    A perfect sampler's states at the recorded step's time t are x_t = alpha_t x0 + sqrt(h_t) z with x0 drawn
    from the law; ``n`` of the ``reference`` draws (default the store's ``population_data``: fresh draws of a
    manifold's or mixture's law) are taken there (z seeded by ``seed``) and observed by the store's own code,
    :func:`ridgexr.observe.step_quantities` and :func:`ridgexr.nearest.step_nearest`, with the store's ridge
    settings (``config["ridge"]``) and d*, once per distinct training set (per ``n_train`` label: its nested
    subset).  Eager: one SCMS projection of ``n`` states per training set.

    Parameters
    ----------
    ds : xarray.Dataset
        A store (``train_data``, ``t``, the ``config`` attribute), or a selection of its cells.
    reference : (population, dim) DataArray, optional
        Draws of the law in the training set's units; default ``ds["population_data"]``.
    step : int
        The recorded step whose time the null is taken at (default the last).
    n : int >= 2
        Reference states (the first ``n`` draws; all when there are fewer).
    seed : int >= 0

    Returns
    -------
    xarray.Dataset shaped like the store at that one step (dims ``[n_train,] sample, step, dim``): the
    variables of the observation (``trajectory``, ``ridge_projection``, ``ridge_distance``,
    ``ridge_degenerate``, ``frame_degenerate``, ``resolved_rank``, ``nearest_ratio``, ...), ``train_data``
    and the store's ``t``, ``alpha``, ``h`` and attributes, so that every analysis runs on it unchanged.

    Raises
    ------
    ValueError
        No reference draws (a store without ``population_data`` and no ``reference``), draws of another
        dimension, or an out-of-range argument.
    """
    ds = along_step(ds)
    check_vars(ds, "train_data", "t")
    n = check_int(n, "n", min_val=2)
    seed = check_int(seed, "seed", min_val=0)
    source = "the given reference draws of the law"
    if reference is None:
        if "population_data" not in ds:
            raise ValueError("`reference` must be given: the store has no population_data (fresh draws of its law)")
        reference, source = ds["population_data"], "fresh draws of the law (population_data)"
    ref = np.asarray(reference.values if isinstance(reference, xr.DataArray) else reference, dtype=np.float64)
    d = ds.sizes["dim"]
    if ref.ndim != 2 or ref.shape[1] != d or ref.shape[0] < 2:
        raise ValueError(f"`reference` must be (population >= 2, {d}) draws of the law; got shape {ref.shape}")
    at = ds.isel(step=[step_index(ds, step)])
    t = float(at["t"].values[0])
    x0 = ref[:n]
    out = _observe_states(ds, at, lambda size: x0, seed)
    out.attrs["null"] = (f"{x0.shape[0]} of {source} at t = {t:.4g} (x_t = alpha_t x0 + sqrt(h_t) z, "
                         f"z seeded {seed}), observed by the store's code")
    return out


def _observe_states(ds: xr.Dataset, at: xr.Dataset, starts, seed: int) -> xr.Dataset:
    """States x_t = alpha_t x0 + sqrt(h_t) z at the one step of ``at``, x0 = ``starts(size)`` per training set,
    observed by the store's own code with its ridge settings (the body of :func:`reference_observation`)."""
    import torch

    from ..empirical import SmoothedEmpirical
    from ..nearest import step_nearest
    from ..observe import step_quantities

    cfg = json.loads(ds.attrs.get("config", "{}"))
    ridge_cfg = cfg.get("ridge") or {}
    d_star = cfg.get("d_star")
    if not isinstance(d_star, int):
        raise ValueError(f"the store's d_star must be an integer for its null; got {d_star!r}")
    t = float(at["t"].values[0])
    train_all = np.asarray(ds["train_data"].values, dtype=np.float64)
    sizes = [int(v) for v in ds["n_train"].values] if "n_train" in ds.dims else [train_all.shape[0]]
    blocks, count = [], None
    for size in sizes:  # one observation per distinct training set (a handful)
        train = train_all[:size]
        x0 = np.asarray(starts(size), dtype=np.float64)
        count = x0.shape[0]
        z = np.random.default_rng(seed).standard_normal(x0.shape)
        xt = math.exp(-t) * x0 + math.sqrt(-math.expm1(-2 * t)) * z
        density = SmoothedEmpirical(train, 1.0, drop_tol=ridge_cfg.get("drop_tol", 1e-6),
                                    logits=ridge_cfg.get("logits", "float64"))
        x = torch.as_tensor(xt[None], dtype=torch.float64)
        q = step_quantities(density, x, np.array([t]), d_star, None, tol=ridge_cfg.get("tol"),
                            max_iter=ridge_cfg.get("max_iter", 200), top_k=ridge_cfg.get("top_k"),
                            stop_degenerate=ridge_cfg.get("stop_degenerate"),
                            accelerate=bool(ridge_cfg.get("accelerate", False)), t_min=t,
                            gap_floor=ridge_cfg.get("gap_floor"),
                            resolved=bool(ridge_cfg.get("resolved_projection", False)))
        q |= step_nearest(x, np.array([t]), torch.as_tensor(train), q["finite"])
        blocks.append(q)
    data = {}
    for name in blocks[0]:
        arr = np.stack([b[name] for b in blocks])  # (size, step=1, sample[, dim])
        if arr.ndim < 3:
            continue
        arr = np.moveaxis(arr, 1, 2)  # (size, sample, step[, dim])
        dims = ("n_train", "sample", "step") + (("dim",) if arr.ndim == 4 else ())
        data[name] = (dims, arr) if "n_train" in ds.dims else (dims[1:], arr[0])
    out = xr.Dataset(data, coords={"sample": np.arange(count), "step": at["step"].values,
                                   "t": ("step", at["t"].values)})
    for c in ("alpha", "h"):
        if c in at.coords:
            out = out.assign_coords({c: ("step", at[c].values)})
    if "n_train" in ds.dims:
        out = out.assign_coords(n_train=ds["n_train"].values)
    out["train_data"] = ds["train_data"]
    out.attrs.update(ds.attrs)
    return out


def memorizer_observation(ds: xr.Dataset, *, step: int = -1, n: int = 1000, seed: int = 0) -> xr.Dataset:
    """The memorizer's scale of the window: forward-noised training points observed as the store observed its samples.

    A sampler that has memorized its training set (the exact denoiser: the empirical score) ends at the recorded
    step's time t on the training points themselves, noised by the forward process: x_t = alpha_t x_i +
    sqrt(h_t) z with x_i drawn uniformly from the cell's training set (its first n_train points, per ``n_train``
    label; ``seed`` draws i and z).  These states are observed by the store's own code exactly as
    :func:`reference_observation` observes fresh draws of the law: the two references of the window, "fresh draws"
    and "memorizer".

    Parameters
    ----------
    ds : xarray.Dataset
        A store (``train_data``, ``t``, the ``config`` attribute), or a selection of its cells.
    step : int
        The recorded step whose time the reference is taken at (default the last).
    n : int >= 2
        States per training set.
    seed : int >= 0

    Returns
    -------
    xarray.Dataset shaped like :func:`reference_observation`'s.

    Raises
    ------
    ValueError
        A store without ``train_data`` or with a non-integer d_star, an out-of-range argument.
    """
    ds = along_step(ds)
    check_vars(ds, "train_data", "t")
    n = check_int(n, "n", min_val=2)
    seed = check_int(seed, "seed", min_val=0)
    at = ds.isel(step=[step_index(ds, step)])
    t = float(at["t"].values[0])
    train_all = np.asarray(ds["train_data"].values, dtype=np.float64)

    def starts(size):
        return train_all[:size][np.random.default_rng(seed + 1).integers(0, size, n)]

    out = _observe_states(ds, at, starts, seed)
    out.attrs["memorizer"] = (f"{n} training points per training set (drawn uniformly, seed {seed + 1}) noised to "
                              f"t = {t:.4g} (x_t = alpha_t x_i + sqrt(h_t) z, z seeded {seed}), observed by the "
                              "store's code")
    return out


def _window_measures(ds: xr.Dataset) -> xr.Dataset:
    """The measures of :data:`WINDOW_MEASURES` at the last recorded step of ``ds`` (samples or null)."""
    from .trajectories import memorization_fraction, near_mode_fraction, tangential_distance

    last = along_step(ds)
    last = last.isel(step=[-1])
    check_vars(last, "ridge_distance", "ridge_projection", "trajectory", "train_data", "nearest_distance")
    dist = resolved(last, "ridge_distance").isel(step=0)
    d1 = last["nearest_distance"].isel(step=0)
    # a store without resolved_rank (a Dataset built by hand): not observed, NaN
    rank = last["resolved_rank"].isel(step=0) if "resolved_rank" in last else xr.full_like(dist, -1.0)
    tang = tangential_distance(last)
    near, mem = near_mode_fraction(last), memorization_fraction(last)
    out = {
        "ridge_distance": dist.median("sample"),
        "tangential_distance": tang["tangential_distance_median"].isel(step=0),
        "nearest_distance": d1.median("sample"),
        "near_mode": near["near_mode"],
        "memorized": mem["memorized"],
        "resolved_rank": rank.where(rank >= 0).median("sample"),
    }
    drop = [c for c in ("step", "t", "alpha", "h", "sampler_step", "quantile") if c in dist.coords]
    res = xr.Dataset({k: with_attrs(v, *WINDOW_MEASURES[k]) for k, v in out.items()})
    for name, shares in (("near_mode", near), ("memorized", mem)):  # the shares' Wilson intervals
        for end in ("low", "high"):
            res[f"{name}_{end}"] = shares[f"{name}_{end}"]
    # per-state values of the distances, for their intervals (training_window)
    res["ridge_distance_states"] = dist
    res["tangential_distance_states"] = tang["tangential_distance"].isel(step=0)
    res["nearest_distance_states"] = d1
    return res.drop_vars(drop, errors="ignore")


def _with_intervals(out: xr.Dataset, samples: xr.Dataset, nulls: xr.Dataset | None, n_boot: int, ci: float,
                    seed: int) -> xr.Dataset:
    """The distances' bootstrap intervals, and with ``nulls`` the sample-minus-null differences with theirs
    (:func:`ridgexr.analysis.arrays.median_difference_ci`: the two sets resampled independently)."""
    for name in WINDOW_DISTANCES:
        a = samples[f"{name}_states"]
        b = (nulls[f"{name}_states"] if nulls is not None else xr.full_like(a.isel(sample=slice(0, 1)), np.nan))
        b = b.rename(sample="null_sample")
        stats = xr.apply_ufunc(partial(arrays.median_difference_ci, n_boot=n_boot, ci=ci, seed=seed), a, b,
                               input_core_dims=[["sample"], ["null_sample"]], output_core_dims=[["stat"]])
        drop = [c for c in stats.coords if c not in stats.dims]
        stats = stats.drop_vars(drop)
        long_name, unit = WINDOW_MEASURES[name]
        out[f"{name}_low"] = with_attrs(stats.isel(stat=1), f"lower end of the median's {ci:.0%} bootstrap "
                                        "interval", unit)
        out[f"{name}_high"] = with_attrs(stats.isel(stat=2), f"upper end of the median's {ci:.0%} bootstrap "
                                         "interval", unit)
        if nulls is not None:
            out[f"{name}_minus_null"] = with_attrs(stats.isel(stat=3), f"samples minus null: {long_name}", unit)
            out[f"{name}_minus_null_low"] = with_attrs(stats.isel(stat=4), f"lower end of the difference's {ci:.0%} "
                                                       "bootstrap interval (independent resamples)", unit)
            out[f"{name}_minus_null_high"] = with_attrs(stats.isel(stat=5), f"upper end of the difference's "
                                                        f"{ci:.0%} bootstrap interval", unit)
    return out


def _between_ci(a: np.ndarray, null: np.ndarray, mem: np.ndarray, n_boot: int, ci: float, seed: int) -> np.ndarray:
    """Where median(a) lies between median(mem) (0) and median(null) (1): (median(a) - median(mem)) /
    (median(null) - median(mem)), with a percentile-bootstrap interval (the three sets resampled independently);
    NaNs ignored.  Returns (..., 3): the position, its lower and upper ends (NaN where a set is empty)."""
    a, null, mem = (np.asarray(v, dtype=float) for v in (a, null, mem))
    lead = np.broadcast_shapes(a.shape[:-1], null.shape[:-1], mem.shape[:-1])
    flat = [np.broadcast_to(v, lead + v.shape[-1:]).reshape(-1, v.shape[-1]) for v in (a, null, mem)]
    out = np.full((flat[0].shape[0], 3), np.nan)
    q = [(1 - ci) / 2, 1 - (1 - ci) / 2]
    for i in range(out.shape[0]):  # loop over cells only (few), not samples
        sets = [v[i][np.isfinite(v[i])] for v in flat]
        if any(x.size == 0 for x in sets):
            continue
        rng = np.random.default_rng(seed)
        ma, mn, mm = (arrays.bootstrap_medians(x, n_boot, rng) for x in sets)
        with np.errstate(divide="ignore", invalid="ignore"):
            boot = (ma - mm) / (mn - mm)
            point = (np.median(sets[0]) - np.median(sets[2])) / (np.median(sets[1]) - np.median(sets[2]))
        out[i] = point, *np.nanquantile(boot, q)
    return out.reshape(lead + (3,))


def training_window(ds: xr.Dataset, timescales: xr.Dataset | None = None, *, reference: xr.DataArray | None = None,
                    null: bool = True, memorizer: bool = True, n_null: int = 1000, seed: int = 0,
                    time_dim: str = "epoch", n_boot: int = 1000, ci: float = 0.95, **timescale_args) -> xr.Dataset:
    """Where the samples sit on the ridge before tau_gen, between tau_gen and tau_mem, and after tau_mem.

    Each checkpoint of ``time_dim`` is put in one of :data:`WINDOWS` by its cell's tau_gen and tau_mem
    (``timescales``, default :func:`training_timescales` of ``ds`` with ``timescale_args``): before tau_gen;
    from tau_gen up to tau_mem ("generalizing"; to the end of the run where tau_mem is censored); from an
    uncensored tau_mem on ("memorizing").  At every checkpoint the final states get the measures of
    :data:`WINDOW_MEASURES`, each by the analysis that names it (:func:`~ridgexr.analysis.resolved`
    ridge distance, :func:`~ridgexr.analysis.tangential_distance`, the stored ``nearest_distance`` d1,
    :func:`~ridgexr.analysis.near_mode_fraction`, :func:`~ridgexr.analysis.memorization_fraction`, the stored
    ``resolved_rank``), and so does the null: fresh draws of the law (or held-out real images, given as
    ``reference``) observed the same way (:func:`reference_observation`), per training set; and the memorizer:
    the training points noised to the same time (:func:`memorizer_observation`), what the exact denoiser's
    samples are.  Each distance then reads on a scale from "memorizer" (0) to "fresh draws" (1):
    ``<distance>_between`` = (samples - memorizer) / (fresh draws - memorizer), medians, with a bootstrap
    interval.  The account "samples slide along the ridge in the window, collapse onto its nodes after tau_mem"
    predicts a ridge distance below the null's and a tangential distance near the null's in the generalizing
    window, and both near the memorizer's after tau_mem.

    Parameters
    ----------
    ds : xarray.Dataset
        A store sweeping ``time_dim`` (and ``n_train``), or a selection keeping ``time_dim``.
    timescales : xarray.Dataset, optional
        The output of :func:`training_timescales` for ``ds``.
    reference : DataArray, optional
        Draws of the law for the null (default the store's ``population_data``).
    null : bool
        Compute the null (``null_*`` variables); False leaves them out.
    memorizer : bool
        Compute the memorizer's reference (``memorizer_*`` and, with ``null``, ``<distance>_between``).
    n_null, seed : int
        Reference states (each reference) and the seed of their noise (``seed`` also of the bootstrap).
    time_dim : str
    n_boot, ci
        The intervals: percentile bootstrap of the distances' medians (:data:`WINDOW_DISTANCES`) and of their
        sample-minus-null differences (samples and null resampled independently), Wilson for the two shares.
    **timescale_args
        Passed to :func:`training_timescales` when ``timescales`` is not given.

    Returns
    -------
    xarray.Dataset: the measures of :data:`WINDOW_MEASURES` over the cell dimensions (``time_dim`` among
    them), ``window`` (the window of each checkpoint, a string), and with ``null`` the same measures of the
    null as ``null_<measure>`` (over ``n_train`` where the store sweeps it) and with ``memorizer`` those of the
    memorizer as ``memorizer_<measure>``; ``<measure>_low`` / ``_high`` for the distances and shares, with
    ``null`` ``<distance>_minus_null`` with its ``_low`` / ``_high``, and with both ``<distance>_between`` with its
    ``_low`` / ``_high``.  The measures are computed (eager).

    Raises
    ------
    ValueError
        A missing dimension or variable, or no reference draws for the null.
    """
    null = check_bool(null, "null")
    memorizer = check_bool(memorizer, "memorizer")
    n_boot = check_int(n_boot, "n_boot", min_val=1)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    if not isinstance(time_dim, str) or time_dim not in ds.dims:
        raise ValueError(f"`time_dim` must be a dimension of ds {tuple(ds.dims)}; got {time_dim!r}")
    if timescales is None:
        timescales = training_timescales(ds, time_dim=time_dim, **timescale_args)
    tt = timescales.compute()
    measures = _window_measures(ds).compute()
    checkpoint = measures[time_dim]
    gen, mem, censored = tt["tau_gen"], tt["tau_mem"], tt["tau_mem_censored"].astype(bool)
    window = xr.where(checkpoint < gen, WINDOWS[0], xr.where(~censored & (checkpoint >= mem), WINDOWS[2],
                                                             WINDOWS[1]))
    window = window.astype(object).transpose(*measures["ridge_distance"].dims)
    states = [f"{name}_states" for name in WINDOW_DISTANCES]
    out = measures.drop_vars(states).assign(window=with_attrs(window, "window of training time of the checkpoint: "
                                                              + ", ".join(WINDOWS), "1"))
    nulls = None
    if null:
        ref_obs = reference_observation(ds, reference, n=n_null, seed=seed)
        nulls = _window_measures(ref_obs).compute()
        for name in WINDOW_MEASURES:
            long_name, unit = WINDOW_MEASURES[name]
            out[f"null_{name}"] = with_attrs(nulls[name], f"null (fresh draws of the law): {long_name}", unit)
        out.attrs["null"] = ref_obs.attrs["null"]
    out = _with_intervals(out, measures, nulls, n_boot, ci, seed)
    if memorizer:
        mem_obs = memorizer_observation(ds, n=n_null, seed=seed)
        mems = _window_measures(mem_obs).compute()
        for name in WINDOW_MEASURES:
            long_name, unit = WINDOW_MEASURES[name]
            out[f"memorizer_{name}"] = with_attrs(mems[name], f"memorizer (training points noised to t): {long_name}",
                                                  unit)
        out.attrs["memorizer"] = mem_obs.attrs["memorizer"]
        if nulls is not None:
            for name in WINDOW_DISTANCES:
                a = measures[f"{name}_states"]
                b = nulls[f"{name}_states"].rename(sample="null_sample")
                c = mems[f"{name}_states"].rename(sample="memorizer_sample")
                stats = xr.apply_ufunc(partial(_between_ci, n_boot=n_boot, ci=ci, seed=seed), a, b, c,
                                       input_core_dims=[["sample"], ["null_sample"], ["memorizer_sample"]],
                                       output_core_dims=[["stat"]])
                stats = stats.drop_vars([v for v in stats.coords if v not in stats.dims])
                long_name, _ = WINDOW_MEASURES[name]
                out[f"{name}_between"] = with_attrs(stats.isel(stat=0), f"{long_name}: (samples - memorizer) / (fresh "
                                                    "draws - memorizer), medians (0: the memorizer, 1: fresh draws)",
                                                    "1")
                out[f"{name}_between_low"] = with_attrs(stats.isel(stat=1), f"lower end of its {ci:.0%} bootstrap "
                                                        "interval (three sets resampled independently)", "1")
                out[f"{name}_between_high"] = with_attrs(stats.isel(stat=2), f"upper end of its {ci:.0%} bootstrap "
                                                         "interval", "1")
    out.attrs.update(time_dim=time_dim, windows=list(WINDOWS), n_boot=n_boot, ci=ci)
    return out
