"""The loss as a quadratic form in the readout A: targets, U, V, C and L*.

L(A) = tr(A U A^T)/d - 2 tr(V A^T)/d + C over a fixed :class:`TrainingSample`, with
U = sum_s c_s lambda_s psi_s psi_s^T, V = sum_s c_s lambda_s y_s psi_s^T and
C = sum_s c_s lambda_s |y_s|^2 / d (see :mod:`ridgexr.training`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..models import RandomFeatureDenoiser
from ..process import OU
from .sample import TrainingSample, batches
from .schedules import schedule_weight

TARGETS = ("dsm", "ideal")

__all__ = ["TARGETS", "targets", "exact_outputs", "accumulate_moments", "QuadraticLoss", "quadratic_loss"]


def targets(sample: TrainingSample, parametrization: str, schedule: str | Callable,
            process: OU) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample loss weight lambda_s (S,) and target y_s (S, d).

    ``posterior_mean``: lambda = w / h^2, y = alpha_t x0 (data units);
    ``score``: lambda = w, y = -z / sqrt(h_t) (1 / data units).
    """
    w = schedule_weight(schedule, sample.t, process)
    h = process.h(sample.t)
    if parametrization == "posterior_mean":
        return w / h**2, process.alpha(sample.t)[:, None] * sample.x0
    return w, -sample.z / np.sqrt(h)[:, None]


def exact_outputs(train: np.ndarray, sample: TrainingSample, parametrization: str, process: OU) -> np.ndarray:
    """Output f* (S, d) of the exact denoiser at every sample point, in the model's parametrization."""
    m = sample.posterior_mean(train, process)
    a = process.alpha(sample.t)[:, None]
    if parametrization == "posterior_mean":
        return a * m
    return (a * m - sample.xt) / process.h(sample.t)[:, None]


def accumulate_moments(model: RandomFeatureDenoiser, sample: TrainingSample, lam: np.ndarray, y: np.ndarray,
                       *, batch_size: int = 2048, normalized: bool = True):
    """U (p, p), V (d, p), C (scalar) of the quadratic loss, accumulated in batches.

    With ``normalized=False`` the features are the raw activations (no 1/sqrt(p)), which
    lets a sweep derive every nested width's moments from the largest width's.
    """
    dev, dt = model.A.device, model.A.dtype
    p, d = model.width, model.d
    U = torch.zeros(p, p, dtype=dt, device=dev)
    V = torch.zeros(d, p, dtype=dt, device=dev)
    cl = torch.as_tensor(sample.weight * lam, dtype=dt, device=dev)
    yt = torch.as_tensor(y, dtype=dt, device=dev)
    scale = 1.0 if normalized else math.sqrt(p)
    with torch.no_grad():
        for sl in batches(sample.size, batch_size):
            psi = model.features(torch.as_tensor(sample.xt[sl], dtype=dt, device=dev),
                                 torch.as_tensor(sample.t[sl], dtype=dt, device=dev)) * scale
            wpsi = psi * cl[sl, None]
            U.addmm_(psi.T, wpsi)
            V.addmm_(yt[sl].T, wpsi)
    C = float((cl * (yt * yt).sum(1)).sum()) / d
    return 0.5 * (U + U.T), V, C


@dataclass
class QuadraticLoss:
    """The loss of one (schedule, width) cell as a quadratic form, with what defines it.

    Attributes
    ----------
    U : (p, p) tensor, V : (d, p) tensor, C : float
        Coefficients of L(A) = tr(A U A^T)/d - 2 tr(V A^T)/d + C.
    sample : TrainingSample
    lam : (S,) loss weights lambda_s;  y : (S, d) targets y_s
    f_star : (S, d) exact-denoiser outputs on the sample
    """

    U: torch.Tensor
    V: torch.Tensor
    C: float
    sample: TrainingSample
    lam: np.ndarray
    y: np.ndarray
    f_star: np.ndarray

    @property
    def d(self) -> int:
        return int(self.V.shape[0])

    @property
    def optimal_loss(self) -> float:
        """L* of the exact denoiser on the same sample."""
        s = self.sample
        return float(np.sum(s.weight * self.lam * ((self.f_star - self.y) ** 2).sum(1)) / self.d)

    def loss(self, A: torch.Tensor) -> float:
        """L(A) for one readout A (d, p)."""
        d = self.d
        return float(torch.trace(A @ self.U @ A.T) / d - 2 * torch.trace(self.V @ A.T) / d) + self.C

    def width_block(self, p: int) -> "QuadraticLoss":
        """The form of the nested width-p model, from raw (unnormalised) moments: leading blocks / p."""
        return QuadraticLoss(U=self.U[:p, :p] / p, V=self.V[:, :p] / math.sqrt(p), C=self.C, sample=self.sample,
                             lam=self.lam, y=self.y, f_star=self.f_star)


def quadratic_loss(model: RandomFeatureDenoiser, train: np.ndarray, sample: TrainingSample,
                   schedule: str | Callable, *, batch_size: int = 2048, normalized: bool = True,
                   f_star: np.ndarray | None = None, target: str = "dsm") -> QuadraticLoss:
    """Assemble :class:`QuadraticLoss` for ``model`` and ``schedule`` on ``sample``.

    ``target="dsm"`` fits the denoising score-matching target (alpha_t x0, or -z / sqrt(h_t));
    ``target="ideal"`` fits its conditional expectation given x_t, the exact denoiser's output f*
    (E[alpha_t x0 | x_t], or the exact score) on the same (x_t, t) sample: both targets have the
    same expectation, so any difference between the two fits comes from the finite number of
    noise draws (generalization through variance, issue 15).
    """
    lam, y = targets(sample, model.parametrization, schedule, model.process)
    if f_star is None:
        f_star = exact_outputs(train, sample, model.parametrization, model.process)
    if target == "ideal":
        y = f_star
    U, V, C = accumulate_moments(model, sample, lam, y, batch_size=batch_size, normalized=normalized)
    return QuadraticLoss(U=U, V=V, C=C, sample=sample, lam=lam, y=y, f_star=f_star)
