"""Claims: a registry of claim kinds and the claims a store's entry makes (docs/claims.md).

- :data:`KINDS` (:mod:`.registry`): one module per kind -- its measure (a contrast), reference, null, criterion
  with its margin, statement, applicability, minimum of independent draws and controls -- and one registry line.
- :func:`store_claims`, :func:`claims_table`, :func:`claim_specs` (:mod:`.tables`): an entry's claims evaluated
  on its store; :func:`kinds_markdown`: the generated table of kinds.
- The verdict kernel (``Criterion``, ``Claim``, ``Null``, the intervals) is :mod:`ridgexr.verdicts`.
"""

from .claim_kind import ClaimKind, Control
from .evidence import StoreEvidence, forward_draws, observe_forward
from .registry import ENTRIES_SEEN, KINDS, register, unregister
from .tables import (check_claim_specs, claim_specs, claims_table, kinds_markdown, store_claims, timescale_rule,
                     with_timescale_quality)

__all__ = ["KINDS", "ENTRIES_SEEN", "register", "unregister", "ClaimKind", "Control", "StoreEvidence", "forward_draws",
           "observe_forward", "store_claims", "claims_table", "claim_specs", "check_claim_specs", "kinds_markdown",
           "timescale_rule", "with_timescale_quality", "CRITERIA"]


def __getattr__(name):
    if name == "CRITERIA":  # each cell kind's criterion, as the registry holds it now (a registered kind included)
        return {k: v.criterion() for k, v in KINDS.items() if v.scope == "cell"}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
