"""The loss as a quadratic form in the readout A: targets, U, V, C and L*.

In the paper's units (an integral over t, summed over coordinates):

    L(A) = sum_s c_s lambda_s |A psi_s - y_s|^2 = tr(A U A^T) - 2 tr(V A^T) + C,
    U = sum_s c_s lambda_s psi_s psi_s^T,  V = sum_s c_s lambda_s y_s psi_s^T,
    C = sum_s c_s lambda_s |y_s|^2,

over a :class:`TrainingSample` (c_s = w_j / (N n_noise), w_j the time-quadrature weight).
Because lambda depends on t only, the schedules differ only in how they weight the time
nodes: :func:`accumulate` computes each node's feature Gram matrix once and adds it to every
schedule's U with that schedule's lambda(t_j) (see :mod:`ridgexr.training`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..choices import TARGETS
from ..features import RandomFeatureDenoiser
from ..process import OU
from .sample import SampleBlock, TrainingSample, batches, block_posterior_mean
from .schedules import schedule_name, schedule_weight


__all__ = ["TARGETS", "targets", "exact_outputs", "outputs_from_mean", "accumulate_moments", "accumulate", "QuadraticLoss",
           "quadratic_loss"]


def loss_weight(schedule: str | Callable, t: np.ndarray, parametrization: str, process: OU) -> np.ndarray:
    """lambda(t): w / h_t^2 for ``posterior_mean`` (the denoising loss's weight), w for ``score``."""
    w = schedule_weight(schedule, t, process)
    return w / process.h(t) ** 2 if parametrization == "posterior_mean" else w


def targets(sample: TrainingSample | SampleBlock, parametrization: str, schedule: str | Callable,
            process: OU) -> tuple[np.ndarray, np.ndarray]:
    """Per-row loss weight lambda_s (S,) and DSM target y_s (S, d).

    ``posterior_mean``: lambda = w / h^2, y = alpha_t x0 (data units);
    ``score``: lambda = w, y = -z / sqrt(h_t) (1 / data units).
    """
    lam = loss_weight(schedule, sample.t, parametrization, process)
    if parametrization == "posterior_mean":
        return lam, process.alpha(sample.t)[:, None] * sample.x0
    return lam, -sample.z / np.sqrt(process.h(sample.t))[:, None]


def outputs_from_mean(m: np.ndarray, block, parametrization: str, process: OU) -> np.ndarray:
    """The exact denoiser's output (S, d) in a parametrization, from posterior means m (S, d) at ``block``'s rows."""
    a = process.alpha(block.t)[:, None]
    if parametrization == "posterior_mean":
        return a * m
    return (a * m - block.xt) / process.h(block.t)[:, None]


def exact_outputs(train: np.ndarray, sample: TrainingSample | SampleBlock, parametrization: str, process: OU,
                  owner: TrainingSample | None = None) -> np.ndarray:
    """Output f* (S, d) of the exact denoiser at every row, in the model's parametrization.

    For a whole :class:`TrainingSample` the posterior means are cached on the sample (this
    materialises it); for a :class:`SampleBlock` pass the sample it came from as ``owner``.
    """
    if isinstance(sample, TrainingSample):
        m = sample.posterior_mean()
    else:
        m = block_posterior_mean(owner, sample)
    return outputs_from_mean(m, sample, parametrization, process)


def accumulate_moments(model: RandomFeatureDenoiser, sample: TrainingSample, lam: np.ndarray, y: np.ndarray,
                       *, batch_size: int = 2048, normalized: bool = True):
    """U (p, p), V (d, p), C (scalar) for arbitrary per-row weights ``lam`` (S,) and targets ``y`` (S, d).

    The general (per-row) accumulation over the materialised sample; :func:`accumulate` is
    the streamed one used for fitting.  With ``normalized=False`` the features are the raw
    activations (no 1/sqrt(p)).
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
    C = float((cl * (yt * yt).sum(1)).sum())
    return 0.5 * (U + U.T), V, C


#: a quadratic-form loss below this many ulps of its largest terms is NaN (:meth:`QuadraticLoss.loss`)
LOSS_FLOOR_ULPS = 64


@dataclass
class QuadraticLoss:
    """The loss of one (schedule, width) cell as a quadratic form, with what defines it.

    Attributes
    ----------
    U : (p, p) tensor, V : (d, p) tensor, C : float
        Coefficients of L(A) = tr(A U A^T) - 2 tr(V A^T) + C (paper units).
    optimal_loss : float
        L* of the exact denoiser on the same sample (0 for ``target="ideal"``).
    sample : TrainingSample
    schedule : the schedule as given;  parametrization : the model's;  target : "dsm" or "ideal"
    """

    U: torch.Tensor
    V: torch.Tensor
    C: float
    optimal_loss: float
    sample: TrainingSample
    schedule: str | Callable
    parametrization: str
    target: str = "dsm"

    @property
    def d(self) -> int:
        return int(self.V.shape[0])

    def loss(self, A: torch.Tensor) -> float:
        """L(A) = tr(A U A^T) - 2 tr(V A^T) + C for one readout A (d, p); >= 0, or NaN where unresolved.

        The form subtracts terms that are much larger than L when the data are large or the fit is
        close: a value below its rounding floor ``LOSS_FLOOR_ULPS`` x eps x (|tr(A U A^T)| +
        2 |tr(V A^T)| + |C|) -- a negative one included -- cannot be told from 0 and is NaN.
        """
        quad = float(torch.trace(A @ self.U @ A.T))
        cross = 2 * float(torch.trace(self.V @ A.T))
        loss = float(torch.trace(A @ self.U @ A.T) - 2 * torch.trace(self.V @ A.T)) + self.C
        floor = LOSS_FLOOR_ULPS * torch.finfo(self.U.dtype).eps * (abs(quad) + abs(cross) + abs(self.C))
        return loss if loss >= floor else math.nan

    def width_block(self, p: int) -> "QuadraticLoss":
        """The form of the nested width-p model, from raw (unnormalised) moments: leading blocks / p."""
        return QuadraticLoss(U=self.U[:p, :p] / p, V=self.V[:, :p] / math.sqrt(p), C=self.C,
                             optimal_loss=self.optimal_loss, sample=self.sample, schedule=self.schedule,
                             parametrization=self.parametrization, target=self.target)

    # per-row quantities over the materialised sample (small samples; tests and inspection)
    @property
    def lam(self) -> np.ndarray:
        """(S,) loss weights lambda_s (materialises the sample)."""
        return loss_weight(self.schedule, self.sample.t, self.parametrization, self.sample.process)

    @property
    def f_star(self) -> np.ndarray:
        """(S, d) exact-denoiser outputs (materialises the sample)."""
        s = self.sample
        return exact_outputs(s.train, s, self.parametrization, s.process)

    @property
    def y(self) -> np.ndarray:
        """(S, d) targets (materialises the sample)."""
        if self.target == "ideal":
            return self.f_star
        return targets(self.sample, self.parametrization, self.schedule, self.sample.process)[1]


#: columns per strip of the upper-triangular Gram (:func:`_weighted_gram`): widths below 1.5x this take one GEMM
GRAM_STRIP = 512


def gram_strips(p: int, strip: int | None = None) -> list[tuple[int, int]]:
    """Column ranges [a, b) of the strips of :func:`_weighted_gram` for width ``p``: about ``p / strip``
    equal strips (one for p < 1.5 strip; default ``strip`` = :data:`GRAM_STRIP`)."""
    n = max(1, round(p / (GRAM_STRIP if strip is None else strip)))
    edges = [round(i * p / n) for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _weighted_gram(psi: torch.Tensor, c: torch.Tensor, out: torch.Tensor | None = None,
                   strip: int | None = None) -> torch.Tensor:
    """The upper triangle of psi^T diag(c) psi (c >= 0) by one GEMM per strip of rows; (p, p).

    Strip [a, b) of rows is ``psi[:, a:b]^T (c psi)[:, a:]``, so the blocks below the diagonal
    are never formed: with n strips the GEMMs do (n + 1) / (2n) of the full product's flops
    (62.5 % at p = 2000, n = 4: 0.61 -> 0.38 s per 4 000-row node, one thread).  Entries of
    the upper triangle equal the full GEMM's up to float64 reduction order (BLAS sums each
    entry's 4 000 products in an order that depends on the GEMM's shape: <= ~1e-16 of |G|,
    ``tests/test_training.py``); widths below 1.5 ``strip`` take the one full GEMM (the
    numbers of before).  Below the diagonal ``out`` keeps what it held (zeros when
    allocated here): callers read the upper triangle only.

    A BLAS ``dsyrk`` (half the flops) through scipy was measured 6x slower inside this loop on
    2 cores: scipy's OpenBLAS threads and torch's compute threads contend after every call
    (docs/performance.md).
    """
    p = psi.shape[1]
    strips = gram_strips(p, strip)
    pc = psi * c[:, None]
    if len(strips) == 1:
        return torch.mm(psi.T, pc, out=out) if out is not None else psi.T @ pc
    if out is None:
        out = torch.zeros(p, p, dtype=psi.dtype, device=psi.device)
    for a, b in strips:
        torch.mm(psi[:, a:b].T, pc[:, a:], out=out[a:b, a:])
    return out


def accumulate(model: RandomFeatureDenoiser, sample: TrainingSample, schedules: Sequence[str | Callable], *,
               target: str = "dsm", normalized: bool = True, batch_size: int = 8192,
               progress: Callable[[int, int], None] | None = None) -> dict[str, QuadraticLoss]:
    """The quadratic form of every schedule in one streamed pass over ``sample``.

    Per time node j (in blocks of at most ``batch_size`` rows): the weighted Gram matrix
    ``G_j = sum c_s psi_s psi_s^T``, ``H_j = sum c_s y_s psi_s^T`` and the scalars
    ``sum c_s |y_s|^2`` and ``sum c_s |f*_s - y_s|^2`` are computed once; each schedule adds
    them times lambda(t_j).
    Memory: O(p^2 n_schedules + batch_size p), independent of the sample size.

    Parameters
    ----------
    model : RandomFeatureDenoiser (its features; A is not used)
    sample : TrainingSample
    schedules : names or callables w(t)
    target : {"dsm", "ideal"}
        The DSM target, or its conditional expectation given x_t (the exact denoiser's output).
    normalized : bool
        False: raw activations (no 1/sqrt(p)), so nested widths' forms are leading blocks.
    batch_size : int
        Rows per block.
    progress : callable(done, total), optional
        Called after each time node.

    Returns
    -------
    dict schedule name -> QuadraticLoss
    """
    dev, dt = model.A.device, model.A.dtype
    p, d = model.width, model.d
    proc, par = sample.process, model.parametrization
    names = [schedule_name(s) for s in schedules]
    if len(set(names)) != len(names):
        raise ValueError(f"`schedules` must have distinct names; got {names}")
    lam_nodes = np.stack([loss_weight(s, sample.t_nodes, par, proc) for s in schedules])  # (n_sched, n_time)
    k = len(schedules)
    U = torch.zeros(k, p, p, dtype=dt, device=dev)
    V = torch.zeros(k, d, p, dtype=dt, device=dev)
    C = np.zeros(k)
    L_star = np.zeros(k)
    scale = 1.0 if normalized else math.sqrt(p)
    done = -1
    gram = None  # the Gram's buffer, reused by every node
    with torch.no_grad():
        for block in sample.blocks(batch_size, by_node=True):
            j = block.node
            tj = torch.tensor(float(sample.t_nodes[j]), dtype=dt, device=dev)
            psi = model.features(torch.as_tensor(block.xt, dtype=dt, device=dev), tj).mul_(scale)  # in place: no copy
            f_star = exact_outputs(sample.train, block, par, proc, owner=sample)
            y = f_star if target == "ideal" else targets(block, par, "1", proc)[1]
            c = torch.as_tensor(block.weight, dtype=dt, device=dev)
            G = gram = _weighted_gram(psi, c, out=gram)
            H = (torch.as_tensor(y, dtype=dt, device=dev) * c[:, None]).T @ psi
            cy = float(block.weight @ (y * y).sum(1))
            cs = float(block.weight @ ((f_star - y) ** 2).sum(1))
            for i in range(k):  # a handful of schedules: one scaled add of the shared Gram each
                U[i].add_(G, alpha=float(lam_nodes[i, j]))
                V[i].add_(H, alpha=float(lam_nodes[i, j]))
            C += lam_nodes[:, j] * cy
            L_star += lam_nodes[:, j] * cs
            if progress is not None and j != done:
                done = j
                progress(j + 1, sample.n_time)
    U = torch.triu(U) + torch.triu(U, 1).transpose(1, 2)  # exactly symmetric: the upper triangle mirrored
    return {name: QuadraticLoss(U=U[i], V=V[i], C=float(C[i]), optimal_loss=float(L_star[i]), sample=sample,
                                schedule=s, parametrization=par, target=target)
            for i, (name, s) in enumerate(zip(names, schedules))}


def quadratic_loss(model: RandomFeatureDenoiser, train: np.ndarray | None, sample: TrainingSample,
                   schedule: str | Callable, *, batch_size: int = 8192, normalized: bool = True,
                   target: str = "dsm") -> QuadraticLoss:
    """:class:`QuadraticLoss` of one schedule (``train`` is the sample's, kept for the 0.1 signature).

    ``target="dsm"`` fits the denoising score-matching target (alpha_t x0, or -z / sqrt(h_t));
    ``target="ideal"`` fits its conditional expectation given x_t, the exact denoiser's output f*
    on the same (x_t, t) sample: both targets have the same expectation, so any difference between
    the two fits comes from the finite number of noise draws (generalization through variance).
    """
    return next(iter(accumulate(model, sample, [schedule], target=target, normalized=normalized,
                                batch_size=batch_size).values()))
