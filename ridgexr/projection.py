"""Labelled (xarray) layer over the ridge geometry.

Each function takes DataArrays with a named feature dimension ``feature_dim`` (the
coordinate axis of a point; ``"dim"`` in ridgexr stores) and any number of batch
dimensions, calls the array layer (:mod:`ridgexr.ridge`) through
``xarray.apply_ufunc(..., dask="parallelized")`` and returns DataArrays/Datasets with the
batch coordinates kept and ``long_name``/``units`` attrs set.  Dask-backed input stays
lazy: nothing is computed until ``.compute()``.  Every argument is validated before the
graph is built, so a bad value fails at the call, not inside a worker at ``.compute()``.

Time: the density's own scalar ``t`` is used unless ``t=`` is given, which may be a
number or a DataArray that broadcasts against ``x`` (e.g. a ``t(step)`` coordinate).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from . import ridge
from . import units
from .empirical import SmoothedEmpirical

__all__ = ["project_to_ridge", "ridge_residual", "ridge_frame"]

_PROJECTION_VARS = {
    # name: (field, dtype, long_name, units)
    "ridge_projection": ("point", np.float64, "ridge projection (SCMS fixed point)", units.DATA),
    "ridge_converged": ("converged", bool, "SCMS converged within max_iter", "1"),
    "ridge_iterations": ("iterations", np.int64, "SCMS iterations used", "1"),
    "ridge_residual": ("residual", np.float64, "|E E^T grad log p_t| at the projection", units.INV_DATA),
    "normal_curvature": ("normal_curvature", np.float64,
                         "largest normal Hessian eigenvalue of log p_t at the projection", units.INV_DATA2),
    "eigengap": ("eigengap", np.float64, "Hessian eigengap between tangent and normal space",
                 units.INV_DATA2),
    "frame_degenerate": ("degenerate", bool, "tangent/normal split numerically undetermined", "1"),
    "on_ridge": ("on_ridge", bool, "converged and normal curvature < 0", "1"),
    "dropped_mass": ("dropped_mass", np.float64, "posterior mass dropped by top-k truncation", "1"),
}


def _check_inputs(density: Any, x: Any, feature_dim: str, t: Any, **ridge_args) -> tuple[Any, dict]:
    """Validate everything before a graph is built; returns (t, normalised ridge arguments)."""
    args = ridge.check_ridge_args(density, **ridge_args)
    if not isinstance(x, xr.DataArray):
        raise TypeError(f"`x` must be an xarray.DataArray; got {type(x).__name__}")
    if feature_dim not in x.dims:
        raise ValueError(f"`feature_dim` must be a dimension of x {x.dims}; got {feature_dim!r}")
    if x.sizes[feature_dim] != density.d:
        raise ValueError(f"`x` has {x.sizes[feature_dim]} entries along feature_dim={feature_dim!r} but the "
                         f"training set has d={density.d}")
    if t is None:
        if density.t.numel() != 1:
            raise ValueError("`t` must be given (a DataArray labelled like x) when density.t is an array")
        return float(density.t.reshape(())), args
    if isinstance(t, xr.DataArray):
        if feature_dim in t.dims:
            raise ValueError(f"`t` must not have the feature dim {feature_dim!r}; got dims {t.dims}")
        return t, args
    return float(t), args


def _dtype_of(x: xr.DataArray):
    return x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64


def project_to_ridge(density: SmoothedEmpirical, x: xr.DataArray, d_star: int, *, feature_dim: str = "dim",
                     t: Any = None, kind: str = "log", tol: float | None = None, max_iter: int = 500,
                     top_k: int | None = None, stop_degenerate: int | None = None,
                     accelerate: bool = False, frame: str = "auto") -> xr.Dataset:
    """Labelled :func:`ridgexr.project_to_ridge`.

    Parameters
    ----------
    density : SmoothedEmpirical
    x : DataArray with dimension ``feature_dim`` of size d (data units), any other dims.
    d_star : int
    feature_dim : str
        Name of the dimension that holds a point's coordinates.
    t : float or DataArray, optional
        Diffusion time(s), broadcast against ``x``; defaults to ``density.t`` (scalar).
    kind, tol, max_iter, top_k, stop_degenerate, accelerate, frame
        As in the array function.

    Returns
    -------
    Dataset with ``ridge_projection`` (x's dims) and per-point ``ridge_converged``,
    ``ridge_iterations``, ``ridge_residual``, ``normal_curvature``, ``eigengap``,
    ``frame_degenerate``, ``on_ridge``, ``dropped_mass`` (x's dims without ``feature_dim``).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> x = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "dim"))
    >>> project_to_ridge(p, x, 1).ridge_projection.values.round(6).tolist()
    [[1.0, 0.0]]
    """
    tt, args = _check_inputs(density, x, feature_dim, t, d_star=d_star, kind=kind, tol=tol, max_iter=max_iter,
                             top_k=top_k, stop_degenerate=stop_degenerate, accelerate=accelerate, frame=frame)
    d_star = args.pop("d_star")
    names = list(_PROJECTION_VARS)
    dtype = _dtype_of(x)

    def func(xb, tb):
        res = ridge.project_to_ridge(density.with_time(np.asarray(tb, dtype=np.float64)),
                                     np.asarray(xb, dtype=dtype), d_star, **args)
        return tuple(getattr(res, _PROJECTION_VARS[n][0]) for n in names)

    out_dtypes = [dtype if v[1] is np.float64 else v[1] for v in _PROJECTION_VARS.values()]
    outs = xr.apply_ufunc(
        func, x, tt,
        input_core_dims=[[feature_dim], []],
        output_core_dims=[[feature_dim]] + [[] for _ in names[1:]],
        dask="parallelized",
        output_dtypes=out_dtypes,
        keep_attrs=False,
    )
    ds = xr.Dataset({n: o for n, o in zip(names, outs)})
    for n, (_, _, long_name, unit) in _PROJECTION_VARS.items():
        ds[n].attrs.update(long_name=long_name, units=unit)
    ds.attrs.update(d_star=int(d_star), ridge_kind=kind)
    return ds


def ridge_residual(density: SmoothedEmpirical, x: xr.DataArray, d_star: int, *, feature_dim: str = "dim",
                   t: Any = None, kind: str = "log", top_k: int | None = None,
                   frame: str = "auto") -> xr.DataArray:
    """Labelled :func:`ridgexr.ridge_residual`: ``|E E^T grad log p_t(x)|`` over x's dims minus ``feature_dim``.

    Arguments as in :func:`project_to_ridge`; units 1 / data units.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> x = xr.DataArray(np.array([[1.0, 0.0]]), dims=("sample", "dim"))
    >>> float(ridge_residual(p, x, 1)[0]) < 1e-12
    True
    """
    tt, args = _check_inputs(density, x, feature_dim, t, d_star=d_star, kind=kind, top_k=top_k, frame=frame)
    d_star, kind, top_k, frame = args["d_star"], args["kind"], args["top_k"], args["frame"]
    dtype = _dtype_of(x)

    def func(xb, tb):
        return ridge.ridge_residual(density.with_time(np.asarray(tb, dtype=np.float64)),
                                    np.asarray(xb, dtype=dtype), d_star, kind=kind, top_k=top_k, frame=frame)

    out = xr.apply_ufunc(func, x, tt, input_core_dims=[[feature_dim], []], output_core_dims=[[]],
                         dask="parallelized", output_dtypes=[dtype])
    out.name = "ridge_residual"
    out.attrs.update(long_name="|E E^T grad log p_t(x)|", units=units.INV_DATA, d_star=int(d_star))
    return out


def ridge_frame(density: SmoothedEmpirical, x: xr.DataArray, d_star: int, *, feature_dim: str = "dim",
                t: Any = None, kind: str = "log", top_k: int | None = None) -> xr.Dataset:
    """Labelled :func:`ridgexr.ridge_frame`; arguments as in :func:`project_to_ridge`.

    Returns
    -------
    Dataset with ``tangent`` (..., feature_dim, tangent_axis), ``normal`` (..., feature_dim, normal_axis),
    ``eigenvalues`` (..., eigen), ``normal_curvature``, ``eigengap``, ``frame_degenerate``.
    """
    tt, args = _check_inputs(density, x, feature_dim, t, d_star=d_star, kind=kind, top_k=top_k)
    d_star, kind, top_k = args["d_star"], args["kind"], args["top_k"]
    d = density.d
    dtype = _dtype_of(x)

    def func(xb, tb):
        fr = ridge.ridge_frame(density.with_time(np.asarray(tb, dtype=np.float64)),
                               np.asarray(xb, dtype=dtype), d_star, kind=kind, top_k=top_k)
        return fr.tangent, fr.normal, fr.eigenvalues, fr.normal_curvature, fr.eigengap, fr.degenerate

    outs = xr.apply_ufunc(
        func, x, tt,
        input_core_dims=[[feature_dim], []],
        output_core_dims=[[feature_dim, "tangent_axis"], [feature_dim, "normal_axis"], ["eigen"], [], [], []],
        dask="parallelized",
        output_dtypes=[dtype, dtype, dtype, dtype, dtype, bool],
        dask_gufunc_kwargs={"output_sizes": {"tangent_axis": d_star, "normal_axis": d - d_star,
                                             "eigen": d}},
    )
    names = ["tangent", "normal", "eigenvalues", "normal_curvature", "eigengap", "frame_degenerate"]
    ds = xr.Dataset(dict(zip(names, outs)))
    ds["tangent"].attrs.update(long_name="tangent basis (top-d* Hessian eigenvectors)", units="1")
    ds["normal"].attrs.update(long_name="normal basis", units="1")
    ds["eigenvalues"].attrs.update(long_name="Hessian eigenvalues, descending", units=units.INV_DATA2)
    ds["normal_curvature"].attrs.update(long_name="largest normal Hessian eigenvalue",
                                        units=units.INV_DATA2)
    ds["eigengap"].attrs.update(long_name="tangent/normal Hessian eigengap", units=units.INV_DATA2)
    ds["frame_degenerate"].attrs.update(long_name="frame numerically undetermined", units="1")
    ds.attrs.update(d_star=d_star, ridge_kind=kind)
    return ds
