"""What a labelled analysis selects from a store, and the checks and attributes it shares: the step selection
(:func:`along_step`, :func:`at_step`, :func:`step_index`, :func:`step_label`), the per-cell training sets
(:func:`cell_train`, :func:`by_train`), the resolved values (:func:`resolved`, :func:`degenerate_share`), input
checks (:func:`check_vars`, :func:`check_radius`) and attributes (:func:`with_attrs`).

Public, so that the other labelled layers (:mod:`ridgexr.quality.store_quality`) and the claims
(:mod:`ridgexr.claims.evidence`) import it instead of reaching into the analysis package."""

from __future__ import annotations

import numpy as np
import xarray as xr

from .._validation import check_float, check_int
from ..schema import COORD_ATTRS, DEGENERATE_FLAGS, STEP_VARIABLES
from ..store.opening import EAGER_COORDS, json_attr

__all__ = ["along_step", "check_vars", "check_radius", "with_attrs", "step_index", "step_label", "cell_train", "stored_final_samples", "by_train", "at_step", "resolved",
           "degenerate_share"]


def along_step(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with ``step`` as its time dimension, however it was selected by time.

    - a store's Dataset, or one sliced along ``step`` or ``t`` (``ds.sel(t=slice(0.5, 0.01))``):
      returned as it is;
    - after ``ds.swap_dims(step="t")`` (``t`` the dimension, ``step`` a coordinate along it or
      dropped): the dimension is ``step`` again, ``t`` a coordinate indexed along it;
    - selected at one time (``ds.sel(t=0.1, method="nearest")``, ``ds.isel(step=-1)``: ``t`` a
      scalar coordinate, with or without ``step``): the step variables get back a ``step``
      dimension of length one, so "the last step" is that time.

    Every analysis calls this first, so each of them accepts all of these.  Raises
    ``ValueError`` for a Dataset with neither a ``step`` / ``t`` dimension nor a scalar ``t``.
    """
    if not isinstance(ds, xr.Dataset) or "step" in ds.dims:
        return ds
    if "t" in ds.dims:  # swap_dims(step="t"); the t index kept by xarray's swap_dims still names "step": dropped
        ds = ds.drop_indexes("t") if "t" in ds.xindexes else ds
        if "step" not in ds.variables or ds["step"].dims != ("t",):
            ds = ds.drop_vars("step", errors="ignore").assign_coords(
                step=("t", np.arange(ds.sizes["t"]), {"long_name": COORD_ATTRS["step"][0]}))
        return ds.swap_dims(t="step").set_xindex("t")
    if "t" in ds.coords and ds["t"].ndim == 0:  # selected at one time
        names = [n for n in (*STEP_VARIABLES, *EAGER_COORDS, "step") if n in ds.variables and "step" not in ds[n].dims]
        if "step" not in ds.variables:
            ds = ds.assign_coords(step=((), -1, {"long_name": COORD_ATTRS["step"][0]}))  # which step: unknown here
        grown = {}
        for name in [*names, "step"] if "step" not in names else names:
            var = ds[name]
            axis = var.dims.index("dim") if var.dims[-1:] == ("dim",) else var.ndim  # store order: (..., step, dim)
            grown[name] = var.expand_dims("step", axis=axis)
        coords = [n for n in grown if n in ds.coords]
        out = ds.drop_vars(list(grown)).assign({n: v for n, v in grown.items() if n not in coords})
        out = out.assign_coords({n: grown[n] for n in coords})
        return out.set_xindex("t") if "t" in out.coords and "t" not in out.xindexes else out
    raise ValueError("`ds` has no step dimension and no scalar t coordinate: pass a store's Dataset, a selection of "
                     f"it by step or t, or one after swap_dims(step='t'); got dims {tuple(ds.dims)}")


def check_vars(ds: xr.Dataset, *names: str, dim: str | None = None) -> None:
    """``ds`` is a Dataset holding ``names``, and ``dim`` (the dimension reduced over) is one of its dims."""
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"`ds` must be an xarray.Dataset (from ridgexr.open_dataset); got {type(ds).__name__}")
    missing = [n for n in names if n not in ds.variables]
    if missing:
        raise ValueError(f"`ds` lacks variable(s) {missing} needed here")
    if dim is not None and dim not in ds.dims:
        raise ValueError(f"`dim` must be a dimension of ds {tuple(ds.dims)}; got {dim!r}")


def check_radius(r) -> float:
    return check_float(r, "r", min_val=0, include_boundaries="neither")


def with_attrs(da: xr.DataArray, long_name: str, units: str, **extra) -> xr.DataArray:
    da.attrs.update(long_name=long_name, units=units, **extra)
    return da


def step_index(ds: xr.Dataset, step: int = -1, t: float | None = None) -> int:
    """Index of the recorded step ``step`` (negative counts from the end), or of the step nearest to time ``t``."""
    n = ds.sizes["step"]
    if t is not None:
        t = check_float(t, "t", min_val=0, include_boundaries="neither")
        return int(np.argmin(np.abs(np.asarray(ds["t"].values) - t)))
    return check_int(step, "step", min_val=-n, max_val=n - 1) % n


def step_label(ds: xr.Dataset, step: int = -1, t: float | None = None) -> int:
    """The ``step`` label (recorded step number of the store) of :func:`step_index`'s step: an analysis's
    ``step`` attribute, the same whether ``ds`` is the whole store or a selection of it (-1 when a
    selection at one time dropped the ``step`` coordinate)."""
    return int(ds["step"].values[step_index(ds, step, t)])


def cell_train(ds: xr.Dataset) -> xr.DataArray:
    """The training set of every cell: ``train_data`` (train, dim), and for a store that sweeps
    ``n_train`` the nested subsets, NaN beyond ``n_train`` (dims n_train, train, dim; a selection at one
    ``n_train``, where it is a scalar coordinate, gets that one subset); with ``data_draw`` (M independent
    sets of n = train / M rows each) the rows of the cell's draw, NaN elsewhere (dims data_draw, [n_train,]
    train, dim); lazy, in one chunk along ``train`` and ``dim``."""
    train = ds["train_data"]
    if train.chunks:  # a core dimension of the analyses' apply_ufunc: one chunk (a large set is stored in several)
        train = train.chunk({"train": -1, "dim": -1})
    row = ds["train"]
    if "data_draw" in ds.coords:  # a dimension, or a scalar coordinate after ds.sel(data_draw=j)
        n = _draw_rows(ds)
        start = ds["data_draw"] * n
        train = train.where((row >= start) & (row < start + n))
        row = row - start
    if "n_train" in ds.coords:  # a dimension, or a scalar coordinate after ds.sel(n_train=n)
        train = train.where(row < ds["n_train"])
    return train


def _draw_rows(ds: xr.Dataset) -> int:
    """The rows of one training draw in ``train_data``: the configuration's ``dataset.manifold.n`` (a store's), else
    the rows over the draws (a Dataset built in memory with every draw along ``data_draw``)."""
    n = ((json_attr(ds, "config").get("dataset") or {}).get("manifold") or {}).get("n")
    if n is not None:
        return int(n)
    if "data_draw" not in ds.dims:
        raise ValueError("`ds` is selected at one data_draw and has no configuration (attrs['config']) saying how "
                         "many rows a draw has; pass every draw and select the cell after the analysis")
    return ds.sizes["train"] // ds.sizes["data_draw"]


def stored_final_samples(ds: xr.Dataset, dim: str = "sample") -> xr.DataArray:
    """The final samples of a store's cells (cells..., ``dim``, "dim"), lazily, as the run's
    :func:`ridgexr.quality.final_samples` chose them: ``final_sample`` (a scheduler's output at t = 0), else
    ``denoised`` (Tweedie's denoiser at the final state), else the last recorded state over alpha there.  What a
    cell's quality and its claims are measured on."""
    if "final_sample" in ds:
        return ds["final_sample"]
    if "denoised" in ds:
        return ds["denoised"]
    check_vars(ds, "trajectory", "alpha", dim=dim)
    last = ds.isel(step=-1)
    return last["trajectory"] / last["alpha"]


def by_train(fn, x: np.ndarray, tr: np.ndarray, *, core: int) -> np.ndarray:
    """``fn(x, train)`` for each distinct training set: x (..., core dims) and tr (..., N, d), as
    ``apply_ufunc`` passes them: tr's leading dims (size 1 where tr does not vary, i.e. everywhere but
    ``n_train`` and ``data_draw``) line up with the *last* of x's ``x.ndim - core`` broadcast dims, as in numpy
    broadcasting (apply_ufunc leaves out tr's missing leading dims).  One call per training set, each
    vectorised over the cells and samples.

    ``core``: the number of x's core dims (1 for ``["dim"]``, 2 for ``[sample, "dim"]``).  A block that holds
    cells of several training sets (a chunk across ``n_train``, or data loaded into memory) is split by set.
    """
    lead = tr.shape[:-2]
    if all(n == 1 for n in lead):
        return fn(x, tr.reshape(tr.shape[-2:]))
    n_lead = x.ndim - core
    if len(lead) > n_lead:
        raise ValueError(f"the training sets' leading dims {lead} outnumber the samples' {x.shape[:n_lead]}")
    tr = tr.reshape((1,) * (n_lead - len(lead)) + tr.shape)  # right-aligned, as numpy broadcasts
    lead = tr.shape[:-2]
    out = None
    for idx in np.ndindex(*lead):  # one training subset per n_train label (a handful)
        sel = tuple(i if n > 1 else slice(None) for i, n in zip(idx, lead))
        part = fn(x[sel], tr[idx])
        if out is None:
            out = np.empty(x.shape[:n_lead] + part.shape[n_lead - sum(n > 1 for n in lead):])
        out[sel] = part
    return out


def at_step(ds: xr.Dataset, step: int = -1, t: float | None = None) -> xr.Dataset:
    return ds.isel(step=step_index(ds, step, t))


def resolved(ds: xr.Dataset, name: str) -> xr.DataArray:
    """``ds[name]`` with the states whose ridge frame is numerically undetermined masked (NaN).

    The flag of each variable is :data:`ridgexr.schema.DEGENERATE_FLAGS` (``ridge_degenerate``
    for the projection and its distance, ``frame_degenerate`` for the residual split).
    Stores written before these flags existed are returned unchanged.
    """
    flag = DEGENERATE_FLAGS.get(name)
    if flag is None or flag not in ds.variables:
        return ds[name]
    return ds[name].where(~ds[flag])


def degenerate_share(ds: xr.Dataset, flag: str = "ridge_degenerate", dim: str = "sample") -> xr.DataArray:
    """Share of the observed states (finite ridge distance) whose frame is degenerate, over ``dim`` (lazy)."""
    observed = ds["ridge_distance"].notnull()
    share = (ds[flag] & observed).sum(dim) / observed.sum(dim)
    return with_attrs(share, f"share of observed states with {flag.replace('_', ' ')} (masked in the summaries)",
                      "1")
