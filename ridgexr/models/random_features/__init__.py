"""Random-feature denoisers f(x, t) = A act(W_x x + W_t phi(t) + b) / sqrt(p): the paper's model.

Only the readout A is trained, in closed form (:func:`ridgexr.fit_sweep`: the gradient flow
A(tau) of the paper, or gradient descent).  This module is the kind's spec (torch-free);
the network is :class:`ridgexr.features.RandomFeatureDenoiser` (below :mod:`ridgexr.training`, which fits
its readout), the builder :func:`ridgexr.models.random_features.denoiser.build`, the fit adapter
:func:`ridgexr.models.random_features.fit_adapter.fit`.  Defaults are the
paper's (:mod:`ridgexr.defaults`).
"""

from __future__ import annotations

import math
from typing import Callable, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ... import defaults
from ...choices import RF_ACTIVATIONS as ACTIVATION_NAMES, RF_PARAMETRIZATIONS as PARAMETRIZATIONS
from ...spec import as_list
from ..model_spec import DIAGNOSTICS_HELP, DiagnosticsSpec, ModelSpec, sorted_widths

__all__ = ["RandomFeaturesSpec", "ACTIVATION_NAMES", "PARAMETRIZATIONS"]


class RandomFeaturesSpec(ModelSpec):
    """Random features (the default kind): widths p, K time frequencies of period P, readout A(tau)."""

    default_parametrization: ClassVar[str] = defaults.RF_PARAMETRIZATION
    summary: ClassVar[str] = ("random-feature network, only A trained, closed-form gradient flow A(tau); "
                              "the paper's model")

    hash_neutral: ClassVar[dict[str, object]] = {
        "penalty": 0.0,  # 0.5: no penalty, the numbers of before
    }

    trained_per_schedule: ClassVar[bool] = True
    always_labelled: ClassVar[bool] = False

    kind: Literal["random_features"] = "random_features"
    widths: list[int] = Field(description="widths p (each a cell)")
    n_frequencies: int = Field(defaults.N_FREQUENCIES, ge=0,
        description="K, Fourier time frequencies (phi has 2K+1 entries); the paper's: 128")
    parametrization: Literal[PARAMETRIZATIONS] | None = Field(None,
        description="what the network outputs: alpha_t E[x0|x_t] ('posterior_mean', the default) or the score")
    activation: Literal[ACTIVATION_NAMES] | None = Field(None,
        description="nonlinearity (default relu, the paper's)")
    tau: float | list[float] = Field(math.inf,
        description="training time(s) of the gradient flow in the paper's units (dA/dtau = -grad L, L the time "
                    "integral summed over coordinates); a list makes a tau dimension; .inf = converged")
    feature_period: float | None = Field(defaults.FEATURE_PERIOD,
        description="period of the Fourier time features (OU time); null: the sampler's T (the paper's: "
                    "phi(T) = phi(0)); ridgexr 0.1 used 2 T")
    init: Literal["normal", "zeros"] = Field(defaults.INIT,
        description="A(0): iid N(0, 1) entries from seeds.init (the paper's), or zeros")
    penalty: float = Field(0.0, ge=0,
        description="relative L2 penalty on the readout: the fit minimises L(A) + penalty (tr U / p) tr(A A^T) (U the "
                    "loss form's quadratic part, tr U / p its mean eigenvalue); 0 = none (the paper's)")
    include_exact: bool | None = Field(None,
        description="single block only: also run the exact denoiser as schedule 'exact' (default true); with "
                    "several blocks add a block of kind 'exact' instead")
    diagnostics: DiagnosticsSpec = Field(default_factory=DiagnosticsSpec,
        description=DIAGNOSTICS_HELP + "; default: the training sample's size (the paper's held-out sample, "
                                       "evaluated once per fit for all its schedules, widths and taus)")

    @field_validator("widths")
    @classmethod
    def _widths(cls, v):
        return sorted_widths(v)

    @field_validator("feature_period", mode="before")
    @classmethod
    def _period(cls, v):
        if v == "T":
            raise ValueError("'T' was removed in 0.4: leave feature_period out (null) for the sampler's T")
        return v

    @field_validator("tau")
    @classmethod
    def _tau(cls, v):
        vals = as_list(v)
        if not vals or any(not (t >= 0) for t in vals):
            raise ValueError("tau must be >= 0 (inf allowed)")
        return v

    @model_validator(mode="after")
    def _period_positive(self):
        if self.feature_period is not None and not self.feature_period > 0:
            raise ValueError("feature_period must be a number > 0, or null for the sampler's T")
        return self

    def adds_exact_schedule(self) -> bool:
        return self.include_exact is not False

    def store_attrs(self, exp) -> dict:
        return {"feature_period": self.period(exp.process.T), "init": self.init}

    def check_entry(self, exp) -> None:
        if exp.models is not None and self.include_exact:
            raise ValueError("with several model blocks add `{kind: exact}` instead of include_exact")

    @property
    def nonlinearity(self) -> str:
        """The activation with the default resolved."""
        return self.activation or defaults.ACTIVATION

    @property
    def taus(self) -> list[float]:
        return as_list(self.tau)

    def period(self, T: float) -> float:
        """The time-feature period in OU time, ``feature_period`` or the sampler's ``T``."""
        return float(T) if self.feature_period is None else float(self.feature_period)

    def values(self, dim: str) -> list:
        return {"width": list(self.widths), "tau": self.taus}.get(dim, [])

    def swept(self, dim: str) -> bool:
        return dim == "width" or (dim == "tau" and isinstance(self.tau, list))

    def applies(self, at: Callable[..., bool], schedules: list[str] | None, n_train: tuple | None) -> bool:
        return at("schedule", schedules) and at("width", self.widths) and at("tau", self.taus) and at("epoch")
