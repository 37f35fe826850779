"""``timescale-slope``: a training time scale grows with the training-set size n as the theory says -- tau_mem in
proportion to n (slope 1), tau_gen independent of n (slope 0) (Bonnaire et al. 2025).

Measure: the slope b of log tau = a + b log n over the (n, seed) training runs of a curve family
(:func:`ridgexr.analysis.training_timescales`: censored times fitted as censored), with its pairs-bootstrap
percentile interval over the runs.  Reference: the expected slope.  Criterion (equivalence, margins of
:mod:`ridgexr.defaults`): the interval within expected +- ``TIMESCALE_SLOPE_AGREE`` agrees, wholly outside
expected +- ``TIMESCALE_SLOPE_DISAGREE`` disagrees.  The pairs bootstrap of a slope under-covers on few runs
(by simulation of the uncensored fit with five sizes: 88 % at 8 runs, 91 % at 16-24, 92.6 % at 40, 93.7 % at
60): fewer than :data:`TIMESCALE_RUNS` runs read "untestable: too few resolved draws".
"""

from __future__ import annotations

import numpy as np

from .. import defaults
from ..verdicts import Criterion
from .claim_kind import ClaimKind, Control

__all__ = ["TimescaleSlope", "KIND", "TIMESCALE_RUNS", "slope_claims", "law_claims"]

#: the fewest (n, seed) training runs the slope's pairs-bootstrap interval may rest on (coverage >= 93 % there)
TIMESCALE_RUNS = 60
#: the expected slope of each time scale
EXPECTED = {"tau_mem": defaults.TIMESCALE_MEM_SLOPE, "tau_gen": defaults.TIMESCALE_GEN_SLOPE}


class TimescaleSlope(ClaimKind):
    name = "timescale-slope"
    scope = "table"
    statement = "{name} grows as n^{expected:g}"
    measure = "slope b of log tau = a + b log n over the training runs, pairs-bootstrap 95 % interval"
    reference = "the expected slope: tau_mem 1 (proportional to n), tau_gen 0 (independent of n)"
    null = "a time scale with another law in n (e.g. tau_mem independent of n: slope 0)"
    margin = (f"+-{defaults.TIMESCALE_SLOPE_AGREE:g} agrees, outside +-{defaults.TIMESCALE_SLOPE_DISAGREE:g} "
              "disagrees (equivalence)")
    applies = "a store sweeping training time and n_train (analysis.training_timescales; docs/timescales.md)"
    min_draws = TIMESCALE_RUNS
    unit = "runs"
    docs_words = {"name": "tau_mem (tau_gen)", "expected": "1 (0)"}
    written = "docs/timescales.md, before the timescales runs"

    def criterion(self, expected: float = 1.0, **context) -> Criterion:
        return Criterion.equivalent(expected, defaults.TIMESCALE_SLOPE_AGREE, defaults.TIMESCALE_SLOPE_DISAGREE,
                                    written=self.written)

    def criterion_text(self) -> str:
        return (f"interval within expected +- {defaults.TIMESCALE_SLOPE_AGREE:g} agrees; wholly outside expected +- "
                f"{defaults.TIMESCALE_SLOPE_DISAGREE:g} disagrees")

    def controls(self) -> list[Control]:
        from ..analysis import arrays

        def build(power):
            def run():
                rng = np.random.default_rng(0)
                n = np.repeat([64.0, 128.0, 256.0, 512.0, 1024.0], 14)  # 5 sizes x 14 seeds
                tau = n ** power * np.exp(0.2 * rng.standard_normal(n.size))
                _, b, lo, hi, pts, _ = arrays.censored_slope_ci(n, tau, np.zeros(n.size, bool), method="drop",
                                                                n_boot=500)
                return [self.claim(b, lo, hi, int(pts), statement=self.statement.format(name="tau_mem", expected=1),
                                   expected=1.0)]
            return run

        return [Control("tau_mem growing as n^2 (70 runs)", "disagrees", build(2.0)),
                Control("tau_mem proportional to n (70 runs)", "agrees", build(1.0))]


def slope_claims(tt, labels: dict | None = None) -> list:
    """The claims of :func:`ridgexr.analysis.training_timescales`'s slopes (a Dataset of one curve family):
    tau_mem against slope 1, tau_gen against slope 0; ``n`` the runs with a time (``<name>_slope_points``)."""
    out = []
    for name, expected in EXPECTED.items():
        if f"{name}_slope" not in tt:
            continue
        runs = int(np.asarray(tt[f"{name}_slope_points"]).squeeze()) if f"{name}_slope_points" in tt else 0
        out.append(KIND.claim(float(tt[f"{name}_slope"].squeeze()), float(tt[f"{name}_slope_low"].squeeze()),
                              float(tt[f"{name}_slope_high"].squeeze()), runs,
                              statement=KIND.statement.format(name=name, expected=expected), expected=expected,
                              labels={**(labels or {}), "time scale": name}))
    return out


def law_claims(laws, names: dict[str, str], labels: dict | None = None) -> list:
    """The claims of interval-censored laws (:func:`ridgexr.analysis.interval_law`, ``separation_timescales``)
    or of the f_mem collapse (:func:`ridgexr.analysis.memorization_collapse`): ``names`` maps each variable
    (``tau_mem``, ``tau_mem_spectral``, ``f_mem_collapse``, ...) to the measure's words; the expected slope is 1
    for a name holding "mem", else 0.  The runs counted are ``<name>_points`` (``f_mem_collapse_runs``).  A law's
    profile-likelihood interval is judged by the kind ``timescale-law`` (:mod:`ridgexr.claims.timescale_law`, its
    minimum of runs), the collapse's bootstrap interval by this kind (its minimum, as :func:`slope_claims`'s).

    >>> import xarray as xr
    >>> laws = xr.Dataset({"tau_mem_slope": 1.02, "tau_mem_slope_low": 0.9, "tau_mem_slope_high": 1.1,
    ...                    "tau_mem_points": 60})
    >>> [c.verdict for c in law_claims(laws, {"tau_mem": "separation of the losses"})]
    ['agrees']
    """
    from .timescale_law import KIND as LAW

    out = []
    for name, what in names.items():
        collapse = name == "f_mem_collapse"
        key = "f_mem_collapse" if collapse else f"{name}_slope"
        runs = f"{name}_runs" if collapse else f"{name}_points"
        expected = EXPECTED["tau_mem"] if "mem" in name else EXPECTED["tau_gen"]
        kind = KIND if collapse else LAW
        out.append(kind.claim(float(laws[key]), float(laws[f"{key}_low"]), float(laws[f"{key}_high"]),
                              int(laws[runs]), statement=KIND.statement.format(name=name, expected=expected),
                              measure=what, expected=expected, labels={**(labels or {}), "time scale": name}))
    return out


KIND = TimescaleSlope()
