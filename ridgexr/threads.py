"""The CPU threads of a run: an explicit count, ``$RIDGEXR_THREADS``, or a default from the machine's load.

On a machine whose cores other processes keep busy, OpenMP threads that wait for one another at
every parallel region lose far more than they gain: ``ridgexr run two-points`` took 144.7 s with
the default two threads against 24.0 s with one at a load of ~5 on 2 cores (issue 42; the table
measured here is in docs/performance.md).  The default therefore gives a run the cores that are
free when it starts, and at least one:

    threads = clip(cores - floor(1-minute load average), 1, cores)

``--threads N`` (``ridgexr run``) or ``RIDGEXR_THREADS=N`` fix the count.  In the tested entry the count
changes no number a run writes (the stores of one and two threads are bit-identical, tests/test_cli.py), but
it can change rounding, and an ill-conditioned fit amplifies rounding: in variance-ensemble's most divergent
cell, torch at 2 threads instead of 1 moves the final states by up to 0.9 % (docs/variance.md).  A store
records the count in its ``provenance`` attribute (``threads``, ``threads_source``).  This module imports neither numpy nor torch:
the command line sets the libraries' environment variables before they are loaded.
"""

from __future__ import annotations

import math
import os

__all__ = ["THREADS_ENV", "THREAD_VARIABLES", "THREADS_PER_CORE", "max_threads", "default_threads", "resolve_threads",
           "limit_library_threads"]

#: the environment variable that fixes the thread count of ``ridgexr run``
THREADS_ENV = "RIDGEXR_THREADS"
#: the variables the numerical libraries read when they load (torch's OpenMP, MKL, numpy's OpenBLAS)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


#: the most threads a run may ask for, per core of the machine: more only oversubscribes the cores (and a count in
#: the tens of thousands made OpenBLAS crash when it loaded, exit status 139)
THREADS_PER_CORE = 4


def max_threads(cores: int | None = None) -> int:
    """The largest thread count accepted: :data:`THREADS_PER_CORE` x the cores this process may use.

    >>> max_threads(cores=2)
    8
    """
    return THREADS_PER_CORE * (_cores() if cores is None else cores)


def _bounded(n: int, source: str) -> int:
    top = max_threads()
    if not 1 <= n <= top:
        raise ValueError(f"{source} must be between 1 and {top} ({THREADS_PER_CORE} x the {_cores()} cores this "
                         f"process may use); got {n}")
    return n


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads(cores: int | None = None, load: float | None = None) -> int:
    """The cores not busy with other processes: clip(cores - floor(load), 1, cores).

    Parameters
    ----------
    cores : int, optional
        CPU cores this process may use (default: its affinity mask).
    load : float, optional
        Runnable processes (default: the 1-minute load average, ``os.getloadavg()[0]``).

    Examples
    --------
    >>> default_threads(cores=2, load=0.3), default_threads(cores=2, load=1.2), default_threads(cores=2, load=5.0)
    (2, 1, 1)
    """
    cores = _cores() if cores is None else cores
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform: every core
            load = 0.0
    return max(1, min(cores, cores - math.floor(load)))


def resolve_threads(threads: int | None = None) -> tuple[int, str]:
    """The thread count of a run and where it came from: ``threads`` when given, else ``$RIDGEXR_THREADS``, else
    ``$OMP_NUM_THREADS``, else :func:`default_threads`.  Raises ``ValueError`` for a count outside 1 ..
    :func:`max_threads` or an environment value that is not one."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int):
            raise TypeError(f"`threads` must be an int; got {type(threads).__name__}")
        return _bounded(threads, "`threads` (--threads)"), "--threads"
    env = os.environ.get(THREADS_ENV, "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"${THREADS_ENV} must be an integer >= 1; got {env!r}")
        return _bounded(int(env), f"${THREADS_ENV}"), f"${THREADS_ENV}"
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) >= 1:  # the user's own OpenMP setting wins over the default
        return _bounded(int(omp), "$OMP_NUM_THREADS"), "$OMP_NUM_THREADS"
    cores = _cores()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return default_threads(cores, load), f"default: {cores} cores, load {load:.2f}"


def limit_library_threads(n: int) -> None:
    """Set :data:`THREAD_VARIABLES` to ``n`` for the libraries not loaded yet (numpy's OpenBLAS reads them only
    when it loads); a variable the user set is kept.  torch's own count is set by
    :func:`ridgexr.run.run_experiment` (``n_threads``)."""
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(n))
