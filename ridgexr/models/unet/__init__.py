"""A diffusers ``UNet2DModel`` trained here by the package's minibatch DSM loss, on image datasets.

The spec is here (torch-free); the network is :class:`ridgexr.models.unet.denoiser.UNetDenoiser`
(a ``UNet2DModel`` + the ``DDPMScheduler`` that fixes its timestep convention), training
:func:`ridgexr.fit_neural` through :func:`ridgexr.models.unet.fit_adapter.fit` (the loss and weight
schedules w(t) of every kind, in OU time or, with ``time_convention: scheduler``, at the
scheduler's integer timesteps drawn uniformly; ``mixed_precision`` under torch.autocast), checkpoints as ``save_pretrained`` folders beside the
resumable side file.  A trained cell is an ordinary diffusers model: ``kind: diffusers`` and
diffusers' own pipelines load its folders.
"""

from __future__ import annotations

from typing import Annotated, Callable, ClassVar, Literal

from pydantic import Field, model_validator

from ... import defaults
from ...choices import MIXED_PRECISIONS, OPTIMIZERS, TIME_CONVENTIONS, TIME_PROPOSALS
from ...spec import as_list
from ..model_spec import IMAGE_DIAGNOSTICS_HELP, DiagnosticsSpec, EpochTrainedSpec

__all__ = ["UNetSpec", "BETA_SCHEDULES", "UNET_PARAMETRIZATIONS"]

#: beta schedules of the DDPMScheduler that fixes a trained U-Net's timestep convention
BETA_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")
#: what a trained U-Net outputs: the noise (diffusers' 'epsilon') or the clean image ('sample')
UNET_PARAMETRIZATIONS = ("epsilon", "x0")


class UNetSpec(EpochTrainedSpec):
    """A ``UNet2DModel`` (default ~0.27 M parameters at 28 x 28 x 1) trained by Adam on the DSM loss."""

    default_parametrization: ClassVar[str] = "epsilon"
    summary: ClassVar[str] = "a diffusers UNet2DModel trained here by minibatch DSM (image datasets)"

    trained_per_schedule: ClassVar[bool] = True
    #: the standard epsilon loss: w = h makes the score loss the epsilon MSE
    default_schedules: ClassVar[tuple[str, ...]] = ("h",)
    always_labelled: ClassVar[bool] = False
    #: 0.4 (neutral: the value of the releases before each field; time_proposal's is not the unet default)
    hash_neutral: ClassVar[dict[str, object]] = {"time_proposal": "uniform", "time_convention": "ou",
                                                 "mixed_precision": "none"}

    kind: Literal["unet"] = "unet"
    sample_size: list[int] = Field(description="[height, width] of the images (their d = in_channels x height x width)")
    in_channels: int = Field(defaults.UNET_IN_CHANNELS, ge=1, description="image channels")
    block_out_channels: list[Annotated[int, Field(ge=1)]] = Field(list(defaults.UNET_BLOCK_OUT_CHANNELS), min_length=1,
        description="channels of each resolution level (one DownBlock2D / UpBlock2D per level)")
    layers_per_block: int = Field(defaults.UNET_LAYERS_PER_BLOCK, ge=1, description="ResNet layers per down block (up blocks: one more)")
    attention: bool = Field(True, description="self-attention in the middle block")
    norm_num_groups: int = Field(defaults.UNET_NORM_GROUPS, ge=1, description="GroupNorm groups (must divide every channel count)")
    parametrization: Literal[UNET_PARAMETRIZATIONS] | None = Field(None,
        description="what the U-Net outputs: 'epsilon' (the noise, default) or 'x0' (diffusers' 'sample')")
    beta_schedule: Literal[BETA_SCHEDULES] = Field("linear",
        description="beta schedule of the DDPMScheduler saved with the U-Net (its timestep <-> OU time map)")
    num_train_timesteps: int = Field(defaults.UNET_TIMESTEPS, ge=2, description="timesteps of that scheduler")
    epochs: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] = Field(defaults.UNET_EPOCHS,
        description="training epochs; a list trains once to the largest and makes an epoch dimension from the "
                    "weights after each listed epoch")
    batch_size: int = Field(defaults.UNET_BATCH_SIZE, ge=1, description="images per Adam step")
    lr: float = Field(defaults.UNET_LR, gt=0, description="learning rate")
    optimizer: Literal[OPTIMIZERS] = Field(defaults.MLP_OPTIMIZER, description="optimizer")
    ema: float | None = Field(defaults.UNET_EMA, ge=0, lt=1,
        description="largest decay of the exponential moving average of the weights, with diffusers' warm-up "
                    "(decay min(ema, k / (9 + k)) at step k; null: none); `weights` says which ones cells sample with")
    time_proposal: Literal[TIME_PROPOSALS] = Field("weight",
        description="how a row's time is drawn: 'weight' (default), with density proportional to w(t) / h_t and "
                    "importance weights, so every schedule's estimate has rows of equal weight (w = 1 would "
                    "otherwise weigh the epsilon error by 1 / h_t, ~500 at t_min = 1e-3); or 'uniform' "
                    "(ridgexr.fit_neural)")
    time_convention: Literal[TIME_CONVENTIONS] = Field("ou",
        description="how training draws a row's time: 'ou', t ~ U(t_min, T) in OU time, the loss integrated over "
                    "[t_min, T]; 'scheduler', an integer timestep k of the U-Net's DDPMScheduler uniformly (diffusers' "
                    "training loop) at its OU time t_k (alpha_bar_k = e^{-2 t_k}), the same row term and weight w(t_k), "
                    "the loss averaged over timesteps (ridgexr.fit_neural)")
    diagnostics: DiagnosticsSpec | None = Field(None, description=IMAGE_DIAGNOSTICS_HELP)
    mixed_precision: Literal[MIXED_PRECISIONS] = Field("none",
        description="training's forward pass under torch.autocast: 'fp16' (with a GradScaler; CUDA only), 'bf16' "
                    "(CPU or CUDA), or 'none' (float32)")

    @model_validator(mode="after")
    def _check(self):
        if len(self.sample_size) != 2 or min(self.sample_size) < 1:
            raise ValueError(f"sample_size must be [height, width] >= 1; got {self.sample_size}")
        bad = [c for c in self.block_out_channels if c % self.norm_num_groups]
        if bad:
            raise ValueError(f"norm_num_groups ({self.norm_num_groups}) must divide every block_out_channels "
                             f"entry; it does not divide {bad}")
        return self

    @property
    def d(self) -> int:
        """in_channels x height x width."""
        return self.in_channels * self.sample_size[0] * self.sample_size[1]

    @property
    def epoch_list(self) -> list[int]:
        return sorted(as_list(self.epochs))

    def values(self, dim: str) -> list:
        return {"epoch": self.epoch_list}.get(dim, [])

    def swept(self, dim: str) -> bool:
        return dim == "epoch" and isinstance(self.epochs, list)

    def applies(self, at: Callable[..., bool], schedules: list[str] | None, n_train: tuple | None) -> bool:
        return (at("schedule", schedules) and at("width") and at("tau") and at("epoch", self.epoch_list)
                and at("target", ("dsm",)) and at("n_noise"))
