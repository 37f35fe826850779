"""The exact denoiser: E[x0 | x_t = x] under p_t of the training set (the memorizing optimum).

Not trained; its held-out diagnostics are its own loss.  The spec is here (torch-free);
the denoiser is :class:`ridgexr.models.exact.denoiser.ExactDenoiser`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from ..spec import ModelSpec

__all__ = ["ExactSpec"]


class ExactSpec(ModelSpec):
    """The exact (memorizing) denoiser; no fields but ``name`` and ``diagnostics``."""

    default_parametrization: ClassVar[str] = "x0"  # its denoise() is E[x0 | x_t] itself
    summary: ClassVar[str] = "the exact denoiser of the training set: the memorizing reference"

    kind: Literal["exact"] = "exact"
