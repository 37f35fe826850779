"""The planner's cost of an exact-denoiser block (the registry's ``cost`` hook of kind ``exact``)."""

from __future__ import annotations

from ..cost import KindCost, moments_seconds

__all__ = ["ExactCost", "COST"]


class ExactCost(KindCost):
    """The exact denoiser: a call is the exact posterior mean over the cell's training set
    (:func:`ridgexr.models.cost.moments_seconds`, without a frame); nothing is trained."""

    def call_seconds(self, block, d: int, n: int, queries: int = 1, width: int | None = None) -> float:
        """The posterior mean over the n training points at one state of a call of ``queries`` states."""
        return moments_seconds(n, d, queries=queries)


#: the hook named by the registry
COST = ExactCost()
