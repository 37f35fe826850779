"""The ``.ridge`` accessor namespace on xarray objects (third layer).

Importing :mod:`ridgexr` registers it.  Every method forwards to the labelled function of
the same name in :mod:`ridgexr.labelled`, with the DataArray as ``x``.

Examples
--------
>>> import numpy as np, xarray as xr, ridgexr
>>> p = ridgexr.SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
>>> x = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "dim"))
>>> x.ridge.project(p, 1).ridge_projection.values.round(6).tolist()
[[1.0, 0.0]]
"""

from __future__ import annotations

import xarray as xr

from . import analysis, labelled

__all__ = ["RidgeDataArrayAccessor", "RidgeDatasetAccessor"]


@xr.register_dataarray_accessor("ridge")
class RidgeDataArrayAccessor:
    """``da.ridge``: ridge geometry of the points held in a DataArray."""

    def __init__(self, obj: xr.DataArray):
        self._obj = obj

    def project(self, density, d_star, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.labelled.project_to_ridge`."""
        return labelled.project_to_ridge(density, self._obj, d_star, **kwargs)

    def residual(self, density, d_star, **kwargs) -> xr.DataArray:
        """See :func:`ridgexr.labelled.ridge_residual`."""
        return labelled.ridge_residual(density, self._obj, d_star, **kwargs)

    def frame(self, density, d_star, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.labelled.ridge_frame`."""
        return labelled.ridge_frame(density, self._obj, d_star, **kwargs)


@xr.register_dataset_accessor("ridge")
class RidgeDatasetAccessor:
    """``ds.ridge``: the analyses of :mod:`ridgexr.analysis` on a store's Dataset (lazy)."""

    def __init__(self, obj: xr.Dataset):
        self._obj = obj

    def distance_curves(self, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.analysis.distance_curves`."""
        return analysis.distance_curves(self._obj, **kwargs)

    def phase_times(self, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.analysis.phase_times`."""
        return analysis.phase_times(self._obj, **kwargs)

    def spread_curves(self, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.analysis.spread_curves`."""
        return analysis.spread_curves(self._obj, **kwargs)

    def position(self) -> xr.DataArray:
        """See :func:`ridgexr.analysis.ridge_position`."""
        return analysis.ridge_position(self._obj)

    def mode_counts(self, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.analysis.mode_counts`."""
        return analysis.mode_counts(self._obj, **kwargs)

    def memorization(self, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.analysis.memorization_fraction`."""
        return analysis.memorization_fraction(self._obj, **kwargs)

    def theory_check(self, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.analysis.theory_check`."""
        return analysis.theory_check(self._obj, **kwargs)

    def summary(self, **kwargs) -> xr.Dataset:
        """See :func:`ridgexr.analysis.summary_table`."""
        return analysis.summary_table(self._obj, **kwargs)
