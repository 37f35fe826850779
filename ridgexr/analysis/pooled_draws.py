"""Ensembles over training-noise draws (``training.draws``, the ``draw`` cell dimension).

Vastola's claim concerns the ensemble of learned scores over the training noise: the samples
of all M draws pooled together.  These labelled functions pool the ``draw`` dimension into
the sample dimension and measure where the pooled samples go, with intervals over draws
(draws resampled, :func:`ridgexr.analysis.arrays.pooled_share_ci`).  Lazy where the inputs
are.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .._validation import check_float, check_int, check_option
from ..choices import DIVERGED_RULES
from . import arrays
from .selection import at_step, check_vars, step_index, with_attrs

__all__ = ["pool_draws", "gap_mass"]


def _check_draw(obj, draw_dim: str, dim: str) -> None:
    if not isinstance(draw_dim, str) or draw_dim not in obj.dims:
        raise ValueError(f"`draw_dim` must name a dimension of the data (an entry with training.draws > 1); "
                         f"got {draw_dim!r}, dims {tuple(obj.dims)}")
    if not isinstance(dim, str) or dim not in obj.dims:
        raise ValueError(f"`dim` must name the sample dimension of the data; got {dim!r}, dims {tuple(obj.dims)}")


def pool_draws(x: xr.DataArray | xr.Dataset, *, draw_dim: str = "draw", dim: str = "sample") -> xr.DataArray | xr.Dataset:
    """Pool the ensemble: the ``draw_dim`` x ``dim`` samples of every cell as one sample dimension ``dim``.

    Pooled sample j = m * n_sample + i holds sample i of draw m (draw-major); ``dim`` keeps its
    position, the other dimensions, their coordinates and the attrs are kept; variables without
    ``draw_dim`` are left as they are.  Lazy with dask inputs.

    Parameters
    ----------
    x : DataArray or Dataset with dims ``draw_dim`` and ``dim``
    draw_dim : str, the ensemble dimension (default ``"draw"``)
    dim : str, the sample dimension (default ``"sample"``)

    Returns
    -------
    The same kind, without ``draw_dim``; ``dim`` of size M x n_sample with labels 0 .. M n_sample - 1.

    Raises
    ------
    ValueError
        When ``draw_dim`` or ``dim`` is not a dimension of ``x``.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> x = xr.DataArray(np.arange(6.0).reshape(2, 3), dims=("draw", "sample"))
    >>> pool_draws(x).values.tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    """
    _check_draw(x, draw_dim, dim)
    n = x.sizes[draw_dim] * x.sizes[dim]
    pooled = x.stack({"__pooled__": (draw_dim, dim)}, create_index=False)
    pooled = pooled.drop_vars([v for v in (draw_dim, dim) if v in pooled.coords])
    order = [d for d in x.dims if d != draw_dim]  # ``dim`` where it was
    pooled = pooled.rename({"__pooled__": dim}).assign_coords({dim: np.arange(n)})
    return pooled.transpose(*order, missing_dims="ignore")


def gap_mass(ds: xr.Dataset, *, lower: float = -2.0, upper: float = 2.0, coordinate: int = 0, step: int = -1,
             t: float | None = None, ci: float = 0.95, n_boot: int = 2000, seed: int = 0, draw_dim: str = "draw",
             dim: str = "sample", diverged: str = "outside") -> xr.Dataset:
    """Share of the pooled ensemble's samples in the gap between training points, with intervals over draws.

    A sample is in the gap when ``alpha_t lower < x[coordinate] < alpha_t upper`` at ``step``
    (or the step nearest ``t``; the bounds are scaled with the training points, alpha_t x_i):
    for the two points (-3, 0), (3, 0) the default is the gap ``abs(x_1) < 2``.  A non-finite sample
    (diverged: the sampler's guard stops a state beyond :func:`ridgexr.sampling.divergence_bound`) counts
    as a sample outside the gap (``diverged="outside"``, the default: it is one of the model's samples, and
    it left the data) or is left out of numerator and denominator (``"drop"``, the rule before 2026-12-03,
    which raises the share of a target whose samples diverge).

    Returns a Dataset over the cell dims without ``draw_dim``:

    - ``gap_mass``: the pooled share sum_m k_m / sum_m n_m (k_m samples of draw m in the gap out
      of n_m valid), with ``gap_mass_low`` / ``gap_mass_high``, the percentile-bootstrap interval
      over draws (``n_boot`` replicates, ``seed``);
    - ``gap_mass_draw`` (..., draw): each draw's own share;
    - with a ``target`` dimension holding ``dsm`` and ``ideal``: ``gap_mass_diff`` = dsm minus ideal
      (paired: the same draws resampled for both), with ``gap_mass_diff_low`` / ``_high``; and its null,
      ``gap_mass_null`` (with ``_low`` / ``_high``): the same difference between two ensembles of *one*
      target on independent training noise, the ideal fit's even draws minus its odd draws (floor(M/2)
      pairs; the paired bootstrap over those pairs; absent with one draw).  What the difference scores
      when the targets do not differ; its interval is the resolution of half the draws.
    - ``diverged_count`` (..., draw): the diverged samples of each draw (whichever ``diverged`` rule).

    Raises
    ------
    ValueError
        For a store without ``draw_dim`` (an entry without training.draws > 1), bounds not in
        order, a bad ``coordinate``, ``ci``, ``n_boot`` or ``seed``.

    Examples
    --------
    See ``tests/test_ensembles.py``: on a run with ``training.draws: 3`` the pooled share equals
    the share counted by a loop over draws.
    """
    check_vars(ds, "trajectory", "alpha", dim=dim)
    _check_draw(ds["trajectory"], draw_dim, dim)
    lower = check_float(lower, "lower")
    upper = check_float(upper, "upper")
    if not lower < upper:
        raise ValueError(f"`lower` must be < `upper`; got {lower} and {upper}")
    coordinate = check_int(coordinate, "coordinate", min_val=0, max_val=ds.sizes["dim"] - 1)
    ci = check_float(ci, "ci", min_val=0, max_val=1, include_boundaries="neither")
    n_boot = check_int(n_boot, "n_boot", min_val=10)
    seed = check_int(seed, "seed", min_val=0)
    diverged = check_option(diverged, "diverged", DIVERGED_RULES)
    last = at_step(ds, step, t)
    a = float(last["alpha"])
    xc = last["trajectory"].isel(dim=coordinate, drop=True)
    finite = np.isfinite(xc)
    inside = ((xc > a * lower) & (xc < a * upper)).where(finite, False)
    k = inside.sum(dim).astype(float)
    n = (finite if diverged == "drop" else xr.ones_like(finite)).sum(dim).astype(float)

    def _pooled(kk, nn):
        return arrays.pooled_share_ci(kk, nn, n_boot=n_boot, ci=ci, seed=seed)

    def _paired(kk, nn, kr, nr):
        return arrays.pooled_share_ci(kk, nn, k_ref=kr, n_ref=nr, n_boot=n_boot, ci=ci, seed=seed)

    kw = dict(output_core_dims=[["stat"]], dask="parallelized", output_dtypes=[float],
              dask_gufunc_kwargs={"output_sizes": {"stat": 3}})
    k_c = k.chunk({draw_dim: -1}) if k.chunks else k
    n_c = n.chunk({draw_dim: -1}) if n.chunks else n
    stats = xr.apply_ufunc(_pooled, k_c, n_c, input_core_dims=[[draw_dim], [draw_dim]], **kw)
    out = xr.Dataset()
    what = f"share of pooled samples with {lower:g} alpha_t < x_{coordinate + 1} < {upper:g} alpha_t (the gap)"
    out["gap_mass"] = with_attrs(stats.isel(stat=0, drop=True), what, "1")
    out["gap_mass_low"] = with_attrs(stats.isel(stat=1, drop=True), f"lower end of the {ci:.0%} bootstrap "
                                     "interval over draws", "1")
    out["gap_mass_high"] = with_attrs(stats.isel(stat=2, drop=True), f"upper end of the {ci:.0%} bootstrap "
                                      "interval over draws", "1")
    with np.errstate(invalid="ignore", divide="ignore"):
        out["gap_mass_draw"] = with_attrs(k / n.where(n > 0), f"{what}, per draw", "1")
    if "target" in ds.dims and {"dsm", "ideal"} <= {str(v) for v in ds["target"].values}:
        pair = [v.sel(target=key, drop=True) for key in ("dsm", "ideal") for v in (k_c, n_c)]
        diff = xr.apply_ufunc(_paired, *pair, input_core_dims=[[draw_dim]] * 4, **kw)
        out["gap_mass_diff"] = with_attrs(diff.isel(stat=0, drop=True), "pooled gap mass, DSM minus ideal "
                                          "target", "1")
        out["gap_mass_diff_low"] = with_attrs(diff.isel(stat=1, drop=True), f"lower end of the {ci:.0%} bootstrap "
                                              "interval over draws (paired)", "1")
        out["gap_mass_diff_high"] = with_attrs(diff.isel(stat=2, drop=True), f"upper end of the {ci:.0%} "
                                               "bootstrap interval over draws (paired)", "1")
        if ds.sizes[draw_dim] >= 2:  # at least one pair of draws
            half = 2 * (ds.sizes[draw_dim] // 2)
            ki, ni = (v.sel(target="ideal", drop=True).isel({draw_dim: slice(0, half)}) for v in (k_c, n_c))
            # even draws against odd draws, paired by position (the draw labels dropped so they do not align)
            halves = [v.isel({draw_dim: slice(first, None, 2)}).drop_vars(draw_dim, errors="ignore")
                      for first in (0, 1) for v in (ki, ni)]
            null = xr.apply_ufunc(_paired, *halves, input_core_dims=[[draw_dim]] * 4, **kw)
            out["gap_mass_null"] = with_attrs(null.isel(stat=0, drop=True), "null of gap_mass_diff: pooled gap "
                                              "mass of the ideal target's even draws minus its odd draws (one "
                                              "target, independent training noise)", "1")
            out["gap_mass_null_low"] = with_attrs(null.isel(stat=1, drop=True), f"lower end of the {ci:.0%} "
                                                  "bootstrap interval over the draw pairs", "1")
            out["gap_mass_null_high"] = with_attrs(null.isel(stat=2, drop=True), f"upper end of the {ci:.0%} "
                                                   "bootstrap interval over the draw pairs", "1")
    out["diverged_count"] = with_attrs((~finite).sum(dim), "diverged (non-finite) samples per draw, counted "
                                       + ("outside the gap" if diverged == "outside" else "out of the share"), "1")
    out.attrs.update(lower=lower, upper=upper, coordinate=coordinate, ci=ci, n_boot=n_boot, diverged=diverged,
                     step=step_index(ds, step, t), n_draws=int(ds.sizes[draw_dim]))
    return out
