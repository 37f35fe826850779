"""The registry of claim kinds: one line per kind, in the order docs/claims.md lists them.

A kind is one module of :mod:`ridgexr.claims` (:class:`ridgexr.claims.claim_kind.ClaimKind`: its measure,
reference, null, criterion with its margin, statement, where it applies, its minimum of independent draws and its
controls) and one :func:`register` line here.  The catalog's ``claims:`` blocks, ``ridgexr claims``, the
analyses and the generated table of kinds read :data:`KINDS`; nothing else names a kind.
"""

from __future__ import annotations

from . import (align_tangent, coverage_faster, coverage_resolved, distance_falls, does_not_memorize, excess_fills_gap,
               gap_mass_correlates, gap_mass_grows, gap_mass_vanishes, gaussian_reproduces, generates, memorizer_rate,
               memorizes, outputs_novel, reach_as_exact, reach_falls, slide_slower, target_rate, targets_gap_grows,
               timescale_law, timescale_slope, vkernel_fills_gap, vkernel_predicts)
from .claim_kind import SCOPES, ClaimKind

__all__ = ["KINDS", "register", "unregister", "ENTRIES_SEEN"]

#: kind name -> the kind (registry order)
KINDS: dict[str, ClaimKind] = {}
#: the catalog entries whose numbers were seen before the registry's criteria and margins were written: every claim
#: read on their stores is post hoc (its rows say so), whatever their catalog entries say
ENTRIES_SEEN = frozenset({"two-points-paper", "fashion-unet-16", "mnist-authors", "mnist-authors-score",
                          "manifold-coverage", "manifold-coverage-circle", "manifold-coverage-marginal",
                          "manifold-coverage-circle-marginal", "variance-ensemble"})


def register(kind: ClaimKind) -> ClaimKind:
    """Add ``kind`` to :data:`KINDS` under its name and return it.

    Raises
    ------
    TypeError
        For anything but a :class:`ClaimKind`.
    ValueError
        For a kind without a name or scope, or a name already registered.
    """
    if not isinstance(kind, ClaimKind):
        raise TypeError(f"`kind` must be a ClaimKind; got {type(kind).__name__}")
    if not kind.name or kind.scope not in SCOPES:
        raise ValueError(f"`kind` must have a name and a scope in {SCOPES}; got {kind.name!r}, {kind.scope!r}")
    if kind.name in KINDS:
        raise ValueError(f"claim kind {kind.name!r} is already registered")
    KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind ``name`` from :data:`KINDS` (a kind registered for a test or a session)."""
    KINDS.pop(name)


register(generates.KIND)
register(memorizes.KIND)
register(does_not_memorize.KIND)
register(reach_falls.KIND)
register(reach_as_exact.KIND)
register(slide_slower.KIND)
register(align_tangent.KIND)
register(gap_mass_grows.KIND)
register(gap_mass_correlates.KIND)
register(gap_mass_vanishes.KIND)
register(gaussian_reproduces.KIND)
register(excess_fills_gap.KIND)
register(vkernel_predicts.KIND)
register(vkernel_fills_gap.KIND)
register(targets_gap_grows.KIND)
register(coverage_faster.KIND)
register(coverage_resolved.KIND)
register(outputs_novel.KIND)
register(distance_falls.KIND)
register(target_rate.KIND)
register(memorizer_rate.KIND)
register(timescale_slope.KIND)
register(timescale_law.KIND)
