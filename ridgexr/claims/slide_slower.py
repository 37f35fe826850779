"""``slide-slower``: between the claim's two times the model's states slide along the ridge towards the training
points more slowly than the memorizer's -- the exact denoiser's, whose states at each time are the forward
process's own.

Per set of states, S = log(T_late / T_early) - log(R_late / R_early): T the median distance along the ridge to
the nearest training point (:func:`ridgexr.analysis.tangential_distance`), R the median ridge distance; S > 0
when the tangential distance falls by a smaller factor than the ridge distance.  Measure: S of the model (its
trajectories resolved at both times) less S of the forward process's own states at the two times (the exact
denoiser's law, observed by the store's code).  Interval: a percentile bootstrap, model trajectories resampled in
pairs across the two times, the reference draws of each time resampled independently (coverage checked by
simulation at the minimum).  Criterion (margin 0.25): the interval above 0.25 agrees, below 0.25 disagrees --
the memorizer itself scores 0 and disagrees.
"""

from __future__ import annotations

import math

import numpy as np

from ..verdicts import CI, Claim, Criterion, Null
from .claim_kind import ClaimKind, Control

__all__ = ["SlideSlower", "KIND", "slide_contrast", "SLIDE_MARGIN", "N_BOOT"]

#: the margin of the contrast (log units: the tangential fall at least exp(0.25) = 1.28 x slower than the memorizer's)
SLIDE_MARGIN = 0.25
#: bootstrap replicates of the interval
N_BOOT = 2000
WRITTEN = "ridgexr.claims, before the runs it is read on"


def _s(t0, t1, r0, r1, axis=-1):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.log(np.median(t1, axis=axis) / np.median(t0, axis=axis))
                - np.log(np.median(r1, axis=axis) / np.median(r0, axis=axis)))


def slide_contrast(model: tuple, reference: tuple, *, ci: float = CI, n_boot: int = N_BOOT, seed: int = 0
                   ) -> tuple[float, float, float, int, int, float]:
    """S(model) - S(reference) with its percentile-bootstrap interval.

    Parameters
    ----------
    model : (T_early, T_late, R_early, R_late), each (n,)
        Per trajectory; those with all four finite are used (resampled jointly).
    reference : (T_early, T_late, R_early, R_late)
        The reference's states at each time (finite values of each resampled independently).

    Returns
    -------
    (estimate, low, high, n trajectories used, excluded, S of the reference); NaN where a median is not positive.
    """
    x = np.stack([np.asarray(a, dtype=np.float64).ravel() for a in model])
    ok = np.isfinite(x).all(0)
    n = int(ok.sum())
    ref = [np.asarray(a, dtype=np.float64).ravel() for a in reference]
    ref = [a[np.isfinite(a)] for a in ref]
    s_ref = float(_s(*ref))
    if n < 2 or not all(a.size >= 2 for a in ref) or not math.isfinite(s_ref):
        return math.nan, math.nan, math.nan, n, int(x.shape[1] - n), s_ref
    x = x[:, ok]
    est = float(_s(*x)) - s_ref
    rng = np.random.default_rng(seed)
    boot = _s(*x[:, rng.integers(0, n, size=(n_boot, n))])
    boot = boot - _s(*[a[rng.integers(0, a.size, size=(n_boot, a.size))] for a in ref])
    boot = boot[np.isfinite(boot)]
    if not math.isfinite(est) or boot.size == 0:
        return math.nan, math.nan, math.nan, n, int(x.shape[1] - n), s_ref
    lo, hi = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2])
    return est, float(lo), float(hi), n, int(ok.size - n), s_ref


class SlideSlower(ClaimKind):
    name = "slide-slower"
    times = 2
    statement = ("slide: from t = {t0:.3g} to t = {t1:.3g} the {model}'s distance along the ridge to the nearest "
                 "training point falls more slowly, against its ridge distance, than the memorizer's")
    measure = ("S = log(T_late / T_early) - log(R_late / R_early) of the model less that of the forward process "
               "(T: median distance along the ridge to the nearest training point, R: median ridge distance; "
               "percentile bootstrap, trajectories paired across the times)")
    reference = ("the memorizer: the forward process's own states at both times (the exact denoiser's law), "
                 "observed by the store's code")
    null = "the memorizer: 0"
    margin = f"{SLIDE_MARGIN:g} (log units)"
    applies = "every cell but the exact denoiser's"
    written = WRITTEN

    def criterion(self, **context) -> Criterion:
        return Criterion.above(SLIDE_MARGIN, text=f"S less the memorizer's: interval above {SLIDE_MARGIN:g} agrees; "
                               f"below {SLIDE_MARGIN:g} disagrees", written=self.written)

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        (s0, t0), (s1, t1) = (evidence.step(t) for t in spec.t)
        tang = evidence.tangential_at(label, [s0, s1])
        model = (tang[0], tang[1], evidence.resolved_at(label, s0, "ridge_distance"),
                 evidence.resolved_at(label, s1, "ridge_distance"))
        r0, r1 = evidence.forward(label, s0, tangential=True), evidence.forward(label, s1, tangential=True)
        reference = (r0["tangential_distance"], r1["tangential_distance"], r0["ridge_distance"], r1["ridge_distance"])
        est, lo, hi, n, excl, s_ref = slide_contrast(model, reference)
        null = Null(s_ref, how=f"S of the forward process (the memorizer): {r0['how']} and at t = {t1:.3g}")
        return [self.cell_claim(evidence, spec, label, est, lo, hi, n, times={"t0": t0, "t1": t1}, excluded=excl,
                                null=null)]

    def controls(self) -> list[Control]:
        from .evidence import observe_forward
        from .reach_falls import THREE_POINTS

        def build(which):
            def run():
                obs = {(t, seed): observe_forward(THREE_POINTS, t, 1, 2000, seed=seed)
                       for t in (0.1, 0.01) for seed in (0, 1)}
                ref = (obs[0.1, 0]["tangential_distance"], obs[0.01, 0]["tangential_distance"],
                       obs[0.1, 0]["ridge_distance"], obs[0.01, 0]["ridge_distance"])
                t_early = obs[0.1, 1]["tangential_distance"]
                t_late = t_early if which == "stops" else obs[0.01, 1]["tangential_distance"]
                model = (t_early, t_late, obs[0.1, 1]["ridge_distance"], obs[0.01, 1]["ridge_distance"])
                est, lo, hi, n, excl, _ = slide_contrast(model, ref)
                return [self.claim(est, lo, hi, n, excluded=excl)]
            return run

        return [Control("the memorizer (the exact denoiser's states: the forward process's)", "disagrees",
                        build("memorizer")),
                Control("a sampler that reaches the ridge and stops sliding along it", "agrees", build("stops"))]


KIND = SlideSlower()
