"""Returning the heap's free pages to the operating system between the fits of a run.

glibc's ``free`` keeps the memory it takes back inside the process: it returns pages only from the top of
the heap, so a few small blocks that outlive a step (a fit's readout, its diagnostics) pin every page
below them.  A run that fits many models one after another then holds far more than it uses: planning
variance-ensemble's random-feature fits (:func:`ridgexr.run.plan.plan_tasks`) with 4 draws (384 cells, 32
streamed fits) left 308 MiB more resident than before the fits, for 2 MiB of readouts; with its 32 draws
(3 072 cells) the process held 1.07 GiB after the fits against 0.30 GiB before them, for 16 MiB of pickled
tasks (docs/performance.md).  ``malloc_trim(0)`` hands the free pages of every arena back (``madvise``,
not only the top), so the process holds what it uses; it changes no number, only the resident size.
Other C libraries (macOS, musl) have no ``malloc_trim``; there this does nothing.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["release_free_heap"]

_libc = None


def _malloc_trim():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None) if sys.platform.startswith("linux") else False
    return getattr(_libc, "malloc_trim", None) if _libc else None


def release_free_heap() -> bool:
    """Give the heap pages that the C allocator holds free back to the operating system (glibc's ``malloc_trim(0)``).

    Call it after a step that freed much more than it keeps (one fit of many): the resident size drops to what
    is in use.  It costs a walk over the free blocks (median 6 ms, at most 19 ms, over the 257 calls of planning
    variance-ensemble) and moves no live memory.

    Returns
    -------
    bool
        True where the C library has ``malloc_trim`` (glibc) and it released memory; False otherwise
        (nothing to release, or another C library: nothing is done).

    Examples
    --------
    >>> isinstance(release_free_heap(), bool)
    True
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
