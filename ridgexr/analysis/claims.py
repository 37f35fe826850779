"""The verdict kernel's names, importable from the analysis layer too, and the bootstrap interval of a median.

The kernel itself -- :class:`Criterion`, :class:`Null`, :class:`Claim`, :func:`interval_verdict`, the intervals
whose coverage is checked at the minimum evidence -- is :mod:`ridgexr.verdicts`, the package's lowest floor, which
the quality gate, the analyses and the claims registry (:mod:`ridgexr.claims`) all read; its names are
re-exported here unchanged.  :func:`median_interval` (a percentile bootstrap of a median, large samples) stays
here: it draws its resamples through :func:`ridgexr.analysis.arrays.bootstrap_medians`.
"""

from __future__ import annotations

import math

import numpy as np

from ..verdicts import (CI, EXCLUDED_LIMIT, MIN_DRAWS, NO_STATE, SETTLE_LIMIT, UNTESTABLE, VERDICTS, Claim, Criterion,
                        Null, claims_frame, claims_markdown, draws_to_resolve, interval_verdict, median_ci, share_ci,
                        too_few, untestable)
from . import arrays

__all__ = ["Criterion", "Null", "Claim", "interval_verdict", "draws_to_resolve", "claims_frame", "claims_markdown",
           "median_interval", "median_ci", "share_ci", "too_few", "untestable", "UNTESTABLE", "NO_STATE", "VERDICTS",
           "EXCLUDED_LIMIT", "SETTLE_LIMIT", "MIN_DRAWS", "CI"]


def median_interval(values: np.ndarray, *, n_boot: int = 2000, ci: float = 0.95, seed: int = 0
                    ) -> tuple[float, float, float, int]:
    """Median of the finite ``values`` with a seeded percentile-bootstrap interval, and the number of finite
    values: (median, low, high, n).  NaN and 0 when none is finite.

    The bootstrap medians come from :func:`ridgexr.analysis.arrays.bootstrap_medians` (resampled, or above
    its ``RESAMPLE_LIMIT`` values drawn from the same law through order statistics).
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan, math.nan, 0
    rng = np.random.default_rng(seed)
    meds = arrays.bootstrap_medians(v, n_boot, rng)
    a = (1 - ci) / 2
    return float(np.median(v)), float(np.quantile(meds, a)), float(np.quantile(meds, 1 - a)), int(v.size)
