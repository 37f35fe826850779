"""A user's own trained model (``package.module:factory``) read in the OU convention.

The spec is here (torch-free); the wrapper is
:class:`ridgexr.models.module.denoiser.ModuleDenoiser` (time conventions OU / VP / VE, every
parametrization), its entry point :func:`ridgexr.models.module.fit_adapter.fit` (held-out
diagnostics only: the model was trained elsewhere).
"""

from __future__ import annotations

from typing import Callable, ClassVar, Literal

from pydantic import Field, model_validator

from ...choices import SCHEDULE_NAMES
from ..model_spec import ModelSpec

__all__ = ["ModuleSpec", "TIME_CONVENTIONS", "PYTHON_OBJECT"]

TIME_CONVENTIONS = ("ou", "vp", "ve")
#: the package part of a module block's path when the model was handed to ``run_experiment(model=...)``
PYTHON_OBJECT = "<python-object>"


class ModuleSpec(ModelSpec):
    """Your own trained model: an import path to a factory, its output and time convention."""

    default_parametrization: ClassVar[str] = "score"
    summary: ClassVar[str] = "your own trained torch model or callable, through a 'package.module:factory' path"

    kind: Literal["module"] = "module"
    module: str = Field(description="'package.module:factory' returning an nn.Module or a callable (y, s) -> output "
                                    "(runs your code: use only modules you trust)")
    parametrization: Literal["posterior_mean", "score", "epsilon", "x0"] | None = Field(None,
        description="what the model outputs in its own frame (default: the score)")
    checkpoint: str | None = Field(None,
        description="state-dict file loaded into the factory's nn.Module (relative to the catalog file)")
    time: Literal[TIME_CONVENTIONS] = Field("ou",
        description="the model's time convention (docs/models.md): 'ou', 'vp' (linear beta) or 've' (sigma)")
    beta_min: float = Field(0.1, gt=0, description="time vp: beta at s = 0")
    beta_max: float = Field(20.0, gt=0, description="time vp: beta at s = 1")
    schedule: str | None = Field(None,
        description="the loss-weight schedule it was trained with -- its label on the schedule dimension and the "
                    "weight of its held-out diagnostics (default: the entry's first schedule, or '1')")

    @model_validator(mode="after")
    def _check(self):
        if self.module.count(":") != 1 or not all(self.module.split(":")):
            raise ValueError(f"module must look like 'package.module:factory'; got {self.module!r}")
        if self.beta_max < self.beta_min:
            raise ValueError("beta_max must be >= beta_min")
        if self.schedule is not None and self.schedule not in SCHEDULE_NAMES:
            raise ValueError(f"schedule must be one of {list(SCHEDULE_NAMES)}; got {self.schedule!r}")
        return self

    def check_entry(self, exp) -> None:
        if self.schedule and exp.schedules and self.schedule not in exp.schedules:
            raise ValueError("a module's `schedule` must be one of the entry's schedules")

    @property
    def label(self) -> str:
        return self.name or self.module.split(":")[1]

    def diagnostic_schedule(self, schedules: list[str] | None) -> str:
        return self.schedule or super().diagnostic_schedule(schedules)

    def applies(self, at: Callable[..., bool], schedules: list[str] | None, n_train: tuple | None) -> bool:
        # stored at the largest n_train (it was trained already) and at its own schedule
        pinned = all(at(dim) for dim in ("width", "tau", "epoch", "target", "n_noise", "draw"))
        return (pinned and at("schedule", (self.diagnostic_schedule(schedules),))
                and (n_train is None or at("n_train", (n_train[-1],))))
