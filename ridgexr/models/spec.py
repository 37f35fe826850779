"""What every model block of a catalog entry has: ``kind``, ``name``, and how it sits in the store.

Each kind's spec (``ridgexr.models.<kind>``) subclasses :class:`ModelSpec` with its own fields
and defaults; pydantic refuses a field that is not the kind's.  The methods below say which
cell dimensions a block puts labels on and which cells it applies to (masked cells); the
defaults are those of a block that is trained on nothing the cell dimensions sweep (the exact
denoiser).  Torch-free.
"""

from __future__ import annotations

from typing import Callable, ClassVar

from pydantic import Field

from ..spec import Spec

__all__ = ["ModelSpec", "MODEL_CELL_DIMS", "sorted_widths"]

#: the cell dimensions that model blocks label (store order)
MODEL_CELL_DIMS = ("width", "tau", "epoch")


def sorted_widths(v: list[int] | None) -> list[int] | None:
    """A ``widths`` field checked (non-empty, distinct, >= 1) and sorted; None stays None."""
    if v is not None and (not v or any(w < 1 for w in v) or len(set(v)) != len(v)):
        raise ValueError("widths must be distinct integers >= 1")
    return None if v is None else sorted(v)


class ModelSpec(Spec):
    """Base of a model block (subclassed once per kind)."""

    #: what the kind's network outputs when ``parametrization`` is not given
    default_parametrization: ClassVar[str] = "x0"
    #: one line for the docs' table of kinds (docs/models.md)
    summary: ClassVar[str] = ""
    #: trained once per loss-weight schedule (the entry must list ``schedules``)
    trained_per_schedule: ClassVar[bool] = False
    #: labelled along a ``model`` dimension even when it is the entry's only block
    always_labelled: ClassVar[bool] = True

    kind: str
    name: str | None = Field(None, description="label of the block in the model dimension (default: the kind)")

    @property
    def label(self) -> str:
        """The block's label in the ``model`` dimension."""
        return self.name or self.kind

    @property
    def output(self) -> str:
        """The parametrization of the block's output, with the kind's default resolved."""
        return getattr(self, "parametrization", None) or self.default_parametrization

    def values(self, dim: str) -> list:
        """The labels this block has along a model cell dimension (``MODEL_CELL_DIMS``); [] if none."""
        return []

    def swept(self, dim: str) -> bool:
        """Whether this block asks for ``dim`` as a cell dimension (a listed sweep)."""
        return False

    def adds_exact_schedule(self) -> bool:
        """Whether this block, alone in its entry, also runs the exact denoiser as schedule 'exact'."""
        return False

    def store_attrs(self, exp) -> dict:
        """Root attributes of a store whose first such block this is (e.g. the features' period)."""
        return {}

    def check_entry(self, exp) -> None:
        """Raise ValueError when the block does not fit the rest of its entry (``exp``: the Experiment)."""

    def diagnostic_schedule(self, schedules: list[str] | None) -> str:
        """The schedule label of a block that is not trained per schedule (module, exact): its
        weight in the held-out diagnostics."""
        return schedules[0] if schedules else "1"

    def applies(self, at: Callable[..., bool], schedules: list[str] | None, n_train: tuple | None) -> bool:
        """Whether this block uses every label of a cell (else the cell is masked: stored once).

        ``at(dim, allowed=None)`` is true when the cell's label along ``dim`` is in ``allowed``
        (default: the dimension's first label), or the store has no such dimension; ``n_train``
        is the n_train dimension's labels (None without one).  The default: stored once, at the
        first label of every dimension.
        """
        return all(at(dim) for dim in ("schedule", "width", "tau", "epoch", "target", "n_noise", "draw"))
