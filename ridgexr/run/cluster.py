"""dask.distributed clients for runs and analyses: one way to get one for 'local' or an address."""

from __future__ import annotations

import os
from contextlib import contextmanager

__all__ = ["dask_client", "resolve_scheduler"]


def resolve_scheduler(scheduler: str | None) -> str | None:
    """``None``/""/"none" -> ``$DASK_SCHEDULER_ADDRESS`` or None (in-process); anything else unchanged."""
    if scheduler in (None, "", "none"):
        return os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    return scheduler


@contextmanager
def dask_client(scheduler: str, n_workers: int = 2):
    """A dask.distributed Client: "local" starts (and afterwards closes) a LocalCluster of
    ``n_workers`` single-threaded processes; anything else is a scheduler address."""
    from dask.distributed import Client, LocalCluster

    if scheduler == "local":
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield client
    else:
        with Client(scheduler) as client:
            yield client
