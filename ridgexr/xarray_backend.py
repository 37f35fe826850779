"""xarray backend ``engine="ridgexr"``: ``xr.open_dataset(path, engine="ridgexr")`` opens a store as
:func:`ridgexr.open_dataset` does.

Registered as the entry point ``xarray.backends: ridgexr`` (pyproject.toml).  A ridgexr store
(its root ``zarr.json`` has a ``schema_version``) is opened by :func:`ridgexr.store.open_store`:
the step coordinates loaded, ``t`` indexed along ``step``, complete cells that miss a chunk
shown as incomplete with a warning (:func:`ridgexr.reader.check_complete_cells`).  A netCDF
copy of a store (``ds.to_netcdf(...)``) opens with xarray's netCDF engine and gets its ``t``
index back (xarray writes no index of a non-dimension coordinate).  ``chunks={}`` gives the
store's dask chunks -- the Dataset of :func:`ridgexr.open_dataset`, except that the few small
arrays it loads on opening (``alpha``, ``h``, ``sampler_step``, ``cell_complete``) are dask arrays
of one chunk --; xarray's default ``chunks=None`` gives lazily indexed arrays, read on access.
``complete_only`` is not an option here: ``ridgexr.reader.mask_incomplete(ds)`` masks afterwards.

This module imports only xarray's backend base class: xarray imports every installed backend
when it opens any file.

Examples
--------
>>> import xarray as xr
>>> "ridgexr" in xr.backends.list_engines()
True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from xarray.backends import BackendEntrypoint

__all__ = ["RidgexrBackendEntrypoint", "with_time_index"]


def with_time_index(ds):
    """``ds`` with its ``t`` coordinate (dims ``step``) indexed, as a store opens (a no-op when it is, or
    when ``ds`` has no such coordinate)."""
    if "t" in ds.coords and ds["t"].dims == ("step",) and "t" not in ds.xindexes:
        return ds.set_xindex("t")
    return ds


class RidgexrBackendEntrypoint(BackendEntrypoint):
    """``engine="ridgexr"``: a ridgexr store (or a netCDF copy of one) with ``t`` indexed along ``step``."""

    description = "ridgexr stores (Zarr v3) and their netCDF copies, with the diffusion time t indexed"
    url = "https://github.com/ridgexr/ridgexr/blob/main/docs/schema.md"
    open_dataset_parameters = ("filename_or_obj", "drop_variables")

    def open_dataset(self, filename_or_obj: str | os.PathLike[Any], *, drop_variables: Iterable[str] | None = None):
        import xarray as xr

        path = Path(os.fspath(filename_or_obj))
        if path.is_dir():
            from .reader import check_complete_cells
            from .catalog.folders import is_store
            from .store.opening import open_store

            if not is_store(path):
                raise ValueError(f"engine='ridgexr': {str(path)!r} is not a ridgexr store (its zarr.json has no "
                                 "schema_version)")
            # chunks=None: xarray's open_dataset applies the caller's chunks afterwards
            return check_complete_cells(open_store(path, chunks=None, drop_variables=drop_variables), path)
        if not path.is_file():
            raise FileNotFoundError(f"engine='ridgexr': no store or netCDF file at {str(path)!r}")
        engine = xr.backends.plugins.guess_engine(str(path))  # a netCDF copy: xarray's netCDF engines
        ds = xr.backends.plugins.get_backend(engine).open_dataset(str(path), drop_variables=drop_variables)
        return with_time_index(ds)

    def guess_can_open(self, filename_or_obj) -> bool:
        """Only a folder whose root ``zarr.json`` has a ``schema_version`` (a netCDF copy needs
        ``engine="ridgexr"`` to get its index back)."""
        try:
            path = Path(os.fspath(filename_or_obj))
        except TypeError:
            return False
        if not (path / "zarr.json").is_file():
            return False
        from .catalog.folders import is_store

        return is_store(path)
