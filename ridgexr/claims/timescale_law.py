"""``timescale-law``: a training time scale grows with the training-set size n as the theory says, read from
times known only within checkpoint intervals -- tau_mem in proportion to n (slope 1), tau_gen independent of n
(slope 0) (Bonnaire et al. 2025).

Measure: the slope b of log tau = a + b log n + sigma e over the (n, seed) training runs, every run's time
entering through its checkpoint interval (an interval-censored normal likelihood, a censored time through
(low, inf), seeds as replicates; :func:`ridgexr.analysis.scaling.interval_slope`), with b's 95 %
profile-likelihood interval (threshold from Student's t with N - 2 degrees of freedom).  Reference and criterion:
:mod:`ridgexr.claims.timescale_slope`'s (the expected slope, equivalence margins of :mod:`ridgexr.defaults`).

Minimum: :data:`TIMESCALE_LAW_RUNS` runs.  Unlike the pairs bootstrap of ``timescale-slope`` (which under-covers
below 60 runs), the profile interval keeps its coverage on few runs: by simulation at 15 runs (five n over 16x,
three seeds, scatter 0.15 in log tau, 8 checkpoints per decade) it holds the true slope in at least 90 % of the
data sets (tests/test_scaling.py, 200 sets; docs/timescales.md gives the measured rate).  The size is the
``timescales-unet`` design's, fixed before its first run.
"""

from __future__ import annotations

import math

import numpy as np

from .claim_kind import Control
from .timescale_slope import TimescaleSlope

__all__ = ["TimescaleLaw", "KIND", "TIMESCALE_LAW_RUNS"]

#: the fewest (n, seed) training runs the interval-censored law's profile interval may rest on (coverage >= 90 %
#: there by simulation)
TIMESCALE_LAW_RUNS = 15


class TimescaleLaw(TimescaleSlope):
    name = "timescale-law"
    measure = ("slope b of log tau = a + b log n, each run's time within its checkpoint interval (interval-censored "
               "likelihood, seeds as replicates), 95 % profile-likelihood interval")
    applies = ("a time scale known within checkpoint intervals per (n, seed) run (analysis.interval_law; "
               "timescales-unet, timescales-rf)")
    min_draws = TIMESCALE_LAW_RUNS
    written = "ridgexr.claims, before timescales-unet's first run"

    def controls(self) -> list[Control]:
        from ..analysis.scaling import interval_slope, simulate_interval_times

        n = np.repeat([16.0, 32.0, 64.0, 128.0, 256.0], 3)  # the minimum: 5 n over 16x, 3 seeds

        def build(power):
            def run():
                checkpoints = np.logspace(1, 7, 49)  # 8 per decade, past 10 n^2 at n = 256
                low, high = simulate_interval_times(n, checkpoints, a=math.log(10.0), b=power, sigma=0.15, seed=3)
                _, b, lo, hi, _, used = interval_slope(n, low, high)
                return [self.claim(b, lo, hi, int(used), statement=self.statement.format(name="tau_mem", expected=1),
                                   expected=1.0)]
            return run

        return [Control("tau_mem growing as n^2 (15 runs, checkpoint intervals)", "disagrees", build(2.0)),
                Control("tau_mem proportional to n (15 runs, checkpoint intervals)", "agrees", build(1.0))]


KIND = TimescaleLaw()
