"""Sample quality on a store: the stored measures per cell, the gate's verdict, gated claims, and the
Wasserstein distance along the law's first principal axis computed from the stored final samples.

:func:`axis_quality` measures, per cell, how far the final samples lie from fresh draws of the law along the
axis in which a two-mode law differs most from one blob (docs/timescales.md, ``timescales-gmm-long``).
:func:`sample_quality` reads the ``quality_*`` cell variables (written by the run,
:func:`ridgexr.quality.cells.cell_quality`) and adds ``gate``, the verdict of
:func:`ridgexr.quality.gate_verdict` per cell with its decision size.  :func:`gated_verdict` is the one rule that
turns a claim about a cell that does not generate into "untestable": the analyses, the report and the docs'
tables all call it.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import xarray as xr

from .. import defaults, units
from .._validation import check_float, check_int
from ..analysis.selection import check_vars, stored_final_samples, with_attrs
from ..verdicts import UNTESTABLE
from .cells import QUALITY_KEYS
from .gate import GATE_KEYS, decision_size, gate_design, gate_verdict
from .measures import axis_wasserstein, principal_axis

__all__ = ["sample_quality", "gated_verdict", "UNTESTABLE", "quality_variable", "axis_quality", "AXIS_QUALITY",
           "stored_final_samples"]

#: the variable :func:`axis_quality` returns (``_lower``, ``_upper``, ``_null``... beside it)
AXIS_QUALITY = "quality_axis_wasserstein"



def quality_variable(key: str) -> str:
    """The store variable of a quality measure (``quality_<key>``)."""
    return f"quality_{key}"


def sample_quality(ds: xr.Dataset) -> xr.Dataset:
    """The stored sample-quality measures of every cell, the gate's verdict on each and its decision size.

    Parameters
    ----------
    ds : xarray.Dataset
        A store (schema 1.7 or later) or any selection of its cells.

    Returns
    -------
    xarray.Dataset over the cell dimensions: the ``quality_*`` variables that the store has (NaN where
    a cell's dataset allows no such measure, docs/quality.md); ``gate`` (str): "generates",
    "does not generate", "not assessed", or "not run" for a masked or unfinished cell
    (:func:`ridgexr.quality.gate_verdict` of the stored measures); ``gate_size``: the decision size
    (:func:`ridgexr.quality.decision_size`; NaN without a class share); ``class_share_min``: the class share's
    bound (:func:`ridgexr.quality.gate_design`; NaN where the cell has no off-class law).  A store written
    before the gate drew its own samples (schema 1.7) has no ``quality_n_draws``: its image cells read
    "not assessed".

    Raises
    ------
    ValueError
        For a store written before the quality variables existed (schema < 1.7).
    """
    names = [quality_variable(k) for k in QUALITY_KEYS if quality_variable(k) in ds.data_vars]
    if not names:
        raise ValueError("`ds` has no quality_* variables: a store of schema 1.7 or later is needed (rerun the "
                         "entry with --overwrite, docs/schema.md)")
    q = ds[names + [n for n in ("cell_applies", "cell_complete") if n in ds]].compute()
    nan = xr.full_like(q[names[0]], np.nan, dtype=float)
    measures = {k: q.get(quality_variable(k), nan).astype(float) for k in GATE_KEYS}
    stacked = xr.concat([measures[k] for k in GATE_KEYS], dim="_measure").transpose("_measure", ...)
    flat = stacked.values.reshape(len(GATE_KEYS), -1)
    cells = [dict(zip(GATE_KEYS, (None if np.isnan(v) else float(v) for v in col))) for col in flat.T]
    verdict = np.array([gate_verdict(**c) for c in cells], dtype=object)  # one per cell (a few hundred at most)
    designs = [gate_design(c["class_share_heldout"], c["class_share_offclass"], int(c["n_heldout"]))
               if None not in (c["class_share_heldout"], c["class_share_offclass"], c["n_heldout"]) else None
               for c in cells]
    size = np.array([np.nan if c["class_share"] is None
                     else decision_size(c["class_share_heldout"], c["class_share_offclass"], c["n_heldout"]) or np.nan
                     for c in cells], dtype=float)
    bound = np.array([np.nan if d is None else d.share_min for d in designs])
    shape = nan.shape
    gate = nan.copy(data=verdict.reshape(shape))
    run = q["cell_complete"] if "cell_complete" in q else xr.ones_like(nan, dtype=bool)
    if "cell_applies" in q:
        run = run & q["cell_applies"]
    gate = gate.where(run, "not run").astype(str)
    gate.attrs.update(long_name="the quality gate's verdict (docs/quality.md)", units="1")
    gate_size = nan.copy(data=size.reshape(shape)).where(run).assign_attrs(
        long_name="the gate's decision size: draws at which it separates a perfect sampler from one with 20 % "
                  "off-class draws at 96 / 95 % (docs/quality.md)", units="1")
    share_min = nan.copy(data=bound.reshape(shape)).where(run).assign_attrs(
        long_name="the gate's bound on quality_class_share (docs/quality.md)", units="1")
    return q[names].assign(gate=gate, gate_size=gate_size, class_share_min=share_min)


def gated_verdict(verdict: str, gate: str) -> str:
    """``verdict`` of a claim about a cell, or :data:`UNTESTABLE` when the cell's samples fail the gate.

    >>> gated_verdict("agrees", "generates"), gated_verdict("agrees", "does not generate")
    ('agrees', 'untestable: the network does not generate')
    """
    return UNTESTABLE if gate == "does not generate" else verdict


def axis_quality(ds: xr.Dataset, *, n_boot: int = defaults.TIMESCALE_N_BOOT, ci: float = defaults.TIMESCALE_CI,
                 seed: int = 0, dim: str = "sample") -> xr.Dataset:
    """Per cell, the 1-Wasserstein distance along the law's first principal axis between the final samples and
    fresh draws of the law, with its bootstrap interval and its null (what a perfect sampler scores).

    - the axis u: :func:`ridgexr.quality.principal_axis` of the store's ``population_data`` (fresh draws of the
      law); for a two-component mixture the axis of its means, where one blob between the modes and the
      mixture differ most;
    - per cell: :func:`ridgexr.quality.axis_wasserstein` of the final samples (``final_sample``, else
      ``denoised``, else the last state over alpha; non-finite ones left out and counted) against
      ``population_data``;
    - the null: the same for as many fresh draws of the law as a cell has samples
      (:func:`ridgexr.datasets.fresh_law_draws`: independent of the training set and of ``population_data``).

    Pass the result, merged into the store, to :func:`ridgexr.analysis.training_timescales` with
    ``quality="quality_axis_wasserstein"``: its ``_lower`` / ``_upper`` give the sure / possible split and its
    ``_null`` the ``rule="null"`` (docs/timescales.md).

    Parameters
    ----------
    ds : xarray.Dataset
        A store of a Gaussian mixture or a manifold (``population_data`` and the configuration in
        ``attrs["config"]``), or any selection of its cells.
    n_boot, ci, seed : int >= 1, float in (0, 1), int >= 0
        Bootstrap replicates, interval level and seed (the null's too).
    dim : str
        The sample dimension.

    Returns
    -------
    xarray.Dataset: ``quality_axis_wasserstein``, ``_lower``, ``_upper`` and ``_n_finite`` over the cell
    dimensions (lazy with dask inputs); ``_null``, ``_null_lower``, ``_null_upper`` (scalars); data units. The
    axis is the attribute ``axis``.

    Raises
    ------
    ValueError
        A store without ``population_data``, without a configuration, of a dataset without a law to draw from,
        or an out-of-range argument.

    Examples
    --------
    >>> import ridgexr  # doctest: +SKIP
    >>> ds = ridgexr.open_dataset("timescales-gmm-long")  # doctest: +SKIP
    >>> q = ridgexr.quality.axis_quality(ds)  # doctest: +SKIP
    >>> ridgexr.analysis.training_timescales(ds.merge(q), quality="quality_axis_wasserstein", rule="null")  # doctest: +SKIP
    """
    from ..catalog import Experiment
    from ..datasets import fresh_law_draws

    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"`ds` must be an xarray.Dataset; got {type(ds).__name__}")
    check_vars(ds, "population_data", dim=dim)
    n_boot = check_int(n_boot, "n_boot", min_val=1)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    seed = check_int(seed, "seed", min_val=0)
    if "config" not in ds.attrs:
        raise ValueError("`ds` has no attribute 'config' (the entry's configuration): open a store with "
                         "ridgexr.open_dataset, whose fresh draws of the law the null needs")
    dataset = Experiment.model_validate_json(ds.attrs["config"]).dataset
    samples = stored_final_samples(ds, dim)
    n_samples = samples.sizes[dim]
    fresh = fresh_law_draws(dataset, n_samples)
    if fresh is None:
        raise ValueError("the store's dataset has no law to draw from (a Gaussian mixture or a manifold has): "
                         "the null of axis_quality needs fresh draws")
    population = np.asarray(ds["population_data"].values, dtype=np.float64)
    u = principal_axis(population)
    kernel = partial(axis_wasserstein, reference=population, axis=u, n_boot=n_boot, ci=ci, seed=seed)
    null = kernel(fresh)
    if samples.chunks is not None:
        samples = samples.chunk({dim: -1, "dim": -1})
    stats = xr.apply_ufunc(np.vectorize(lambda x: np.asarray(kernel(x), dtype=float), signature="(s,d)->(k)"),
                           samples, input_core_dims=[[dim, "dim"]], output_core_dims=[["stat"]], dask="parallelized",
                           output_dtypes=[float], dask_gufunc_kwargs={"output_sizes": {"stat": 4}})
    stats = stats.reset_coords(drop=True)  # the last step's scalar coordinates: merged back into ds, they would clash
    level = f"{ci:.0%} percentile-bootstrap interval ({n_boot} replicates, seed {seed}; samples and draws resampled)"
    what = "W1 along the law's first principal axis between the final samples and population_data"
    base = AXIS_QUALITY
    out = xr.Dataset({
        base: with_attrs(stats.isel(stat=0), what, units.DATA),
        f"{base}_lower": with_attrs(stats.isel(stat=1), f"lower end of the {level}", units.DATA),
        f"{base}_upper": with_attrs(stats.isel(stat=2), f"upper end of the {level}", units.DATA),
        f"{base}_n_finite": with_attrs(stats.isel(stat=3), "finite final samples (the others are left out)", "1"),
        f"{base}_null": with_attrs(xr.DataArray(null[0]), f"the same for {n_samples} fresh draws of the law "
                                   "(a perfect sampler)", units.DATA),
        f"{base}_null_lower": with_attrs(xr.DataArray(null[1]), f"lower end of the null's {level}", units.DATA),
        f"{base}_null_upper": with_attrs(xr.DataArray(null[2]), f"upper end of the null's {level}", units.DATA),
    })
    return out.assign_attrs(axis=u.tolist(), n_boot=n_boot, ci=ci, seed=seed)
