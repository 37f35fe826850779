"""A user's own diffusers ``UNet2DModel`` + scheduler, loaded from local folders, read in the OU convention.

The spec is here (torch-free); the wrapper is
:class:`ridgexr.models.diffusers.denoiser.DiffusersDenoiser` (OU time t <-> scheduler timestep
through alpha_bar = e^{-2t}, every ``prediction_type``, image shape), its entry point
:func:`ridgexr.models.diffusers.fit_adapter.fit` (held-out diagnostics only: the model was trained
elsewhere).  Folders are read with ``local_files_only=True``: nothing is ever downloaded.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Literal

from pydantic import Field, model_validator

from ...choices import SCHEDULE_NAMES
from ..model_spec import IMAGE_DIAGNOSTICS_HELP, DiagnosticsSpec, ModelSpec

__all__ = ["DiffusersSpec", "TIMESTEP_MODES"]

#: how OU time reaches the UNet (docs/models.md): a float timestep, or two integer timesteps interpolated
TIMESTEP_MODES = ("continuous", "interpolate")


class DiffusersSpec(ModelSpec):
    """A trained diffusers ``UNet2DModel`` and its scheduler, from local folders (``save_pretrained``)."""

    default_parametrization: ClassVar[str] = "x0"  # the wrapper's denoise() reads every prediction_type
    summary: ClassVar[str] = ("a diffusers UNet2DModel + scheduler trained elsewhere, loaded from local "
                              "save_pretrained folders")

    kind: Literal["diffusers"] = "diffusers"
    path: str = Field(description="folder of the UNet (save_pretrained; a pipeline folder with `subfolder: unet`); "
                                  "relative to the catalog file")
    subfolder: str | None = Field(None, description="subfolder of `path` holding the UNet (a pipeline's 'unet')")
    scheduler: str | None = Field(None,
        description="folder of the scheduler config (default: `path`/scheduler when it exists, else `path`)")
    class_labels: int | None = Field(None, ge=0,
        description="class label given to a class-conditional UNet for every sample (null: unconditional)")
    timestep: Literal[TIMESTEP_MODES] | None = Field(None,
        description="'continuous' (a float timestep; default for positional time embeddings) or 'interpolate' "
                    "(the denoised estimates at the two neighbouring integer timesteps, interpolated; default for "
                    "a learned time embedding)")
    data_range: list[float] | None = Field(None,
        description="[low, high] of the model's pixel coordinates (e.g. [-1, 1]); the training set must lie in it "
                    "(map it there with the dataset's `scale`); null: not checked")
    diagnostics: DiagnosticsSpec | None = Field(None, description=IMAGE_DIAGNOSTICS_HELP)
    schedule: str | None = Field(None,
        description="the loss-weight schedule it was trained with -- its label on the schedule dimension and the "
                    "weight of its held-out diagnostics (default: the entry's first schedule, or '1')")

    @model_validator(mode="after")
    def _check(self):
        if not self.path:
            raise ValueError("path must name a folder")
        if self.data_range is not None and not (len(self.data_range) == 2 and self.data_range[0] < self.data_range[1]):
            raise ValueError(f"data_range must be [low, high] with low < high; got {list(self.data_range)}")
        if self.schedule is not None and self.schedule not in SCHEDULE_NAMES:
            raise ValueError(f"schedule must be one of {list(SCHEDULE_NAMES)}; got {self.schedule!r}")
        return self

    def check_entry(self, exp) -> None:
        if self.schedule and exp.schedules and self.schedule not in exp.schedules:
            raise ValueError("a diffusers block's `schedule` must be one of the entry's schedules")

    def diagnostic_schedule(self, schedules: list[str] | None) -> str:
        return self.schedule or super().diagnostic_schedule(schedules)

    def applies(self, at: Callable[..., bool], schedules: list[str] | None, n_train: tuple | None) -> bool:
        # trained already: stored at its own schedule and the largest n_train, as a module is
        pinned = all(at(dim) for dim in ("width", "tau", "epoch", "target", "n_noise"))
        return (pinned and at("schedule", (self.diagnostic_schedule(schedules),))
                and (n_train is None or at("n_train", (n_train[-1],))))
