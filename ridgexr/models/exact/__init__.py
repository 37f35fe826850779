"""The exact denoiser: E[x0 | x_t = x] under p_t of the training set (the memorizing optimum).

Not trained; its held-out diagnostics are its own loss.  The spec is here (torch-free);
the denoiser is :class:`ridgexr.models.exact.denoiser.ExactDenoiser`.

A *stopped* (coarse) exact score (``t_stop``, or ``sigma_stop: {c, gamma}`` for
sigma_N = c N^-gamma and t_stop = sigma_N^2 / 2) is the empirical score learned only down to a
noise level: the sampler's state is frozen below t_stop (one time grid for the store), and the
output is Tweedie's denoiser E[x0 | x_{t_stop}] (the store variable ``denoised``): the setting of
Shen, Hsieh & He's "manifold generalization precedes memorization" (docs/manifold.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ...spec import Spec
from ..model_spec import ModelSpec

__all__ = ["ExactSpec", "SigmaStop"]


class SigmaStop(Spec):
    """A stopping noise level that shrinks with the training-set size: sigma_N = c N^-gamma."""

    c: float = Field(gt=0, description="sigma_N at N = 1 (data units)")
    gamma: float = Field(ge=0, description="rate of sigma_N = c N^-gamma in the training-set size N (0: fixed)")


class ExactSpec(ModelSpec):
    """The exact (memorizing) denoiser, optionally stopped at a noise level (a coarse score); fields ``name``,
    ``diagnostics``, ``t_stop`` / ``sigma_stop``."""

    default_parametrization: ClassVar[str] = "x0"  # its denoise() is E[x0 | x_t] itself
    summary: ClassVar[str] = "the exact denoiser of the training set: the memorizing reference"
    hash_neutral: ClassVar[dict[str, object]] = {"t_stop": None, "sigma_stop": None}  # 0.4

    kind: Literal["exact"] = "exact"
    t_stop: float | None = Field(None, gt=0,
        description="stop the score at this OU time: the sampler's state is frozen below it and the store's "
                    "`denoised` holds Tweedie's denoiser E[x0 | x_t_stop] (null: not stopped)")
    sigma_stop: SigmaStop | None = Field(None,
        description="stop at sigma_N = c N^-gamma (N the cell's training-set size), t_stop = sigma_N^2 / 2; "
                    "exclusive with t_stop")

    @model_validator(mode="after")
    def _one_stop(self):
        if self.t_stop is not None and self.sigma_stop is not None:
            raise ValueError("give t_stop or sigma_stop, not both")
        return self

    @property
    def stopped(self) -> bool:
        """Whether the block is a stopped (coarse) score."""
        return self.t_stop is not None or self.sigma_stop is not None

    def stop_time(self, n_train: int) -> float | None:
        """t_stop (OU time) of a cell trained on ``n_train`` points; None when not stopped.

        >>> round(ExactSpec(sigma_stop={"c": 0.5, "gamma": 0.5}).stop_time(100), 10)
        0.00125
        """
        if self.t_stop is not None:
            return float(self.t_stop)
        if self.sigma_stop is None:
            return None
        sigma = self.sigma_stop.c * float(n_train) ** -self.sigma_stop.gamma
        return sigma * sigma / 2
