"""``align-tangent``: at each of the claim's times the model's error is more tangent than normal per dimension --
by more than an isotropic error is, by its actual law.

Per trajectory, rho = (|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)), e_T and e_N the tangent and normal parts of
the model's error at its state (the store's ``residual_tangent`` / ``residual_normal``, resolved frames only).
For an isotropic Gaussian error rho^2 ~ F(d*, d - d*), whose median is not 1 (0.967 at d* = 10, d = 784; 1.036 at
d* = 25, d = 32).  Measure, one claim per time (trajectories are the independent draws, never trajectory x
time): the median of rho over the trajectories, over sqrt(median F(d*, d - d*)) (computed by scipy).  Interval:
the median's exact order-statistic interval over the null's constant.  Criterion (margin 0.5): the interval above
1.5 agrees, below 1.5 disagrees -- an isotropic error scores 1 and disagrees.  Untestable where the model's
normal error is zero at rounding level (the median |e_N| at most 1e-9 x the median |e_T|: rho is then a ratio
of rounding errors; two points on a line, every model predicting the normal coordinate exactly).
"""

from __future__ import annotations

import math

import numpy as np

from ..verdicts import Claim, Criterion, Null, median_ci
from .claim_kind import ClaimKind, Control

__all__ = ["AlignTangent", "KIND", "align_ratio", "isotropic_median", "ALIGN_MARGIN"]

#: the margin over the isotropic error's median ratio
ALIGN_MARGIN = 0.5
WRITTEN = "ridgexr.claims, before the runs it is read on"


def align_ratio(tangent: np.ndarray, normal: np.ndarray, d_star: int) -> np.ndarray:
    """(|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)) per state: ``tangent`` and ``normal`` (..., d), NaN where either
    is not finite.

    >>> e = np.array([[3.0, 0.0, 4.0]])  # tangent: the first coordinate (d* = 1), normal: the other two
    >>> round(float(align_ratio(e * [1, 0, 0], e * [0, 1, 1], 1)[0]), 6)  # (3 / 1) / (4 / sqrt(2))
    1.06066
    """
    d = np.shape(tangent)[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.linalg.norm(tangent, axis=-1) / math.sqrt(d_star)) / (np.linalg.norm(normal, axis=-1)
                                                                         / math.sqrt(d - d_star))


def isotropic_median(d_star: int, d: int) -> float:
    """The median of ``align_ratio`` for an isotropic Gaussian error: sqrt(median F(d*, d - d*)).

    >>> round(isotropic_median(25, 32), 3), round(isotropic_median(10, 784), 3)
    (1.036, 0.967)
    """
    from scipy import stats

    return math.sqrt(float(stats.f.median(d_star, d - d_star)))


def align_claim(kind: ClaimKind, ratio: np.ndarray, d_star: int, d: int, *, evidence=None, spec=None,
                label: dict | None = None, times: dict | None = None, **claim_args) -> Claim:
    """The align claim of per-trajectory ratios ``ratio`` (NaN: not resolved); about the cell ``label`` of
    ``evidence`` (:meth:`ridgexr.claims.claim_kind.ClaimKind.cell_claim`) when it is given."""
    null = isotropic_median(d_star, d)
    ratio = np.asarray(ratio, dtype=np.float64).ravel()
    med, lo, hi, n = median_ci(ratio)
    numbers = (med / null, lo / null, hi / null, n)
    claim_args |= {"excluded": int(ratio.size - n),
                   "null": Null(null, how=f"an isotropic error: sqrt(median F({d_star}, {d - d_star})), scipy")}
    if evidence is None:
        return kind.claim(*numbers, **claim_args)
    return kind.cell_claim(evidence, spec, label, *numbers, times=times, **claim_args)


class AlignTangent(ClaimKind):
    name = "align-tangent"
    times = None
    statement = "align: at t = {t:.3g} the {model}'s error is more tangent than normal per dimension"
    measure = ("median over trajectories of (|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)), over an isotropic "
               "error's median sqrt(median F(d*, d - d*)) (exact median interval); one claim per time")
    reference = "an isotropic error, by its actual law: rho^2 ~ F(d*, d - d*)"
    null = "an isotropic error: 1"
    margin = f"{ALIGN_MARGIN:g}"
    applies = ("every cell but the exact denoiser's; untestable where the model's normal error is zero at rounding "
               "level (the ratio is one of rounding errors)")
    written = WRITTEN

    def criterion(self, **context) -> Criterion:
        level = 1 + ALIGN_MARGIN
        return Criterion.above(level, text=f"median ratio over the isotropic error's: interval above {level:g} "
                               f"agrees; below {level:g} disagrees", written=self.written)

    def evaluate(self, evidence, spec, label: dict) -> list[Claim]:
        out = []
        for t in spec.t:
            s, t_obs = evidence.step(t)
            ratio = align_ratio(evidence.resolved_at(label, s, "residual_tangent"),
                                evidence.resolved_at(label, s, "residual_normal"), evidence.d_star)
            why = ("the model's normal error is zero at rounding level here: the ratio is one of rounding errors"
                   if evidence.normal_error_zero(label, s) else "")
            out.append(align_claim(self, ratio, evidence.d_star, evidence.d, evidence=evidence, spec=spec,
                                   label=label, times={"t": t_obs}, labels={**label, "t": round(t_obs, 4)},
                                   why_untestable=why))
        return out

    def controls(self) -> list[Control]:
        def build(tangent_scale, d_star=25, d=32, n=10_000):
            def run():
                e = np.random.default_rng(0).standard_normal((n, d))
                tangent = np.concatenate([tangent_scale * e[:, :d_star], np.zeros((n, d - d_star))], axis=1)
                normal = np.concatenate([np.zeros((n, d_star)), e[:, d_star:]], axis=1)
                return [align_claim(self, align_ratio(tangent, normal, d_star), d_star, d)]
            return run

        return [Control("an isotropic error (d* = 25, d = 32, 10 000 draws)", "disagrees", build(1.0)),
                Control("an error three times larger along the tangent space", "agrees", build(3.0))]


KIND = AlignTangent()
