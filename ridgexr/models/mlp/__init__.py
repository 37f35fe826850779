"""The paper's MLP score network ([x, GFP(t)] -> hidden -> hidden -> d), trained by minibatch DSM.

The spec is here (torch-free); the network is :class:`ridgexr.models.mlp.denoiser.MLPDenoiser`,
training :func:`ridgexr.fit_neural` through :func:`ridgexr.models.mlp.fit_adapter.fit`.
Defaults are the paper's (:mod:`ridgexr.defaults`).
"""

from __future__ import annotations

from typing import Annotated, Callable, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ... import defaults
from ...choices import OPTIMIZERS, TIME_PROPOSALS
from ...spec import as_list
from ..model_spec import EpochTrainedSpec, sorted_widths

__all__ = ["MLPSpec", "ACTIVATION_NAMES", "ARCHITECTURES"]

ACTIVATION_NAMES = ("relu", "silu", "tanh", "gelu")
#: the body of an mlp block: the paper's plain MLP, or Bonnaire et al.'s GMM network (residual blocks)
ARCHITECTURES = ("mlp", "residual")


class MLPSpec(EpochTrainedSpec):
    """The paper's MLP score network, trained by Adam on the DSM loss (Monte-Carlo t)."""

    default_parametrization: ClassVar[str] = defaults.MLP_PARAMETRIZATION
    summary: ClassVar[str] = "the paper's MLP score network (Gaussian Fourier time embedding), trained by minibatch DSM"

    trained_per_schedule: ClassVar[bool] = True
    always_labelled: ClassVar[bool] = False
    hash_neutral: ClassVar[dict[str, object]] = {"time_proposal": "uniform",  # 0.4
                                                 "architecture": "mlp"}
    run_tags: ClassVar[dict[str, str]] = {"schedule": "", "width": "w"}

    kind: Literal["mlp"] = "mlp"
    widths: list[int] | None = Field(None, description="hidden-layer widths swept (default [512])")
    depth: int = Field(defaults.MLP_DEPTH, ge=1, description="number of hidden layers (the paper's: 2)")
    embed_dim: int = Field(defaults.MLP_EMBED_DIM, ge=2,
                           description="Gaussian Fourier time-embedding size (even; the paper's: 128)")
    embed_scale: float = Field(defaults.MLP_EMBED_SCALE, gt=0,
                               description="std of the embedding's frequencies (the paper's: 30)")
    parametrization: Literal["posterior_mean", "score", "epsilon", "x0"] | None = Field(None,
        description="what the network outputs (default: the score)")
    activation: Literal[ACTIVATION_NAMES] | None = Field(None, description="nonlinearity (default relu)")
    epochs: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] = Field(defaults.MLP_EPOCHS,
        description="training epochs (the paper's: 150); a list trains once to the largest and makes an epoch "
                    "dimension from the weights after each listed epoch")
    batch_size: int = Field(defaults.MLP_BATCH_SIZE, ge=1,
                            description="training points per Adam step (ours: 128; the authors' MNIST notebook: 1024)")
    lr: float = Field(defaults.MLP_LR, gt=0, description="learning rate (ours: 1e-3; the authors' MNIST notebook: 1e-4 for the score network)")
    optimizer: Literal[OPTIMIZERS] = Field(defaults.MLP_OPTIMIZER, description="optimizer (the paper's: Adam)")
    ema: float | None = Field(None, ge=0, lt=1,
        description="largest decay of an exponential moving average of the weights, with diffusers' warm-up "
                    "(null: none; the paper: none stated)")
    architecture: Literal[ARCHITECTURES] = Field("mlp",
        description="'mlp': [x, GFP(t)] -> depth hidden layers -> d (the paper's); 'residual': Bonnaire et al.'s GMM "
                    "network (their TinyModels.SimpleTimeModel): x -> width, then depth residual blocks h <- "
                    "LayerNorm(h + W2 GELU(W1 (h + E(s)))) with E their sinusoidal encoding of s = embed_scale x t "
                    "(frequencies 1e-4^(2 (i // 2) / width); embed_scale stands for their timesteps per unit OU "
                    "time), -> d; activation must be gelu (their default) or unset")
    time_proposal: Literal[TIME_PROPOSALS] = Field("uniform",
        description="how a row's time is drawn: 'uniform' on [t_min, T] (ours and the authors'), or 'weight', "
                    "with density proportional to w(t) / h_t and importance weights (ridgexr.fit_neural)")

    @field_validator("widths")
    @classmethod
    def _widths(cls, v):
        return sorted_widths(v)

    @model_validator(mode="after")
    def _check(self):
        if self.embed_dim % 2:
            raise ValueError(f"embed_dim must be even; got {self.embed_dim}")
        if self.architecture == "residual" and self.activation not in (None, "gelu"):
            raise ValueError(f"architecture 'residual' uses gelu (their blocks'); got activation {self.activation!r}")
        if self.architecture == "residual" and any(w % 2 for w in self.hidden_widths):
            raise ValueError(f"architecture 'residual' needs even widths (the sinusoidal encoding's size); got "
                             f"{self.hidden_widths}")
        return self

    @property
    def nonlinearity(self) -> str:
        return self.activation or ("gelu" if self.architecture == "residual" else defaults.ACTIVATION)

    @property
    def hidden_widths(self) -> list[int]:
        """The hidden widths swept (default [512])."""
        return self.widths or [defaults.MLP_HIDDEN]

    @property
    def epoch_list(self) -> list[int]:
        return sorted(as_list(self.epochs))

    def values(self, dim: str) -> list:
        return {"width": self.hidden_widths, "epoch": self.epoch_list}.get(dim, [])

    def swept(self, dim: str) -> bool:
        return dim == "width" or (dim == "epoch" and isinstance(self.epochs, list))

    def applies(self, at: Callable[..., bool], schedules: list[str] | None, n_train: tuple | None) -> bool:
        return (at("schedule", schedules) and at("width", self.hidden_widths) and at("tau")
                and at("epoch", self.epoch_list) and at("target", ("dsm",)) and at("n_noise")
                and at("draw"))
