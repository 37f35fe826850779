"""Training dynamics on the quadratic form: closed-form gradient flow and gradient descent.

Both return a :class:`ReadoutPath` (the readouts A at each training time tau, and the
taus actually reached), so a caller treats the two methods alike.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
import torch

from .._validation import check_float, check_option
from ..choices import NULL_CUTOFFS

__all__ = ["ReadoutPath", "GradientFlow", "gradient_descent"]


class ReadoutPath(NamedTuple):
    """Readouts along training: ``A`` (n_tau, d, p) at training times ``taus`` (n_tau,)."""

    A: torch.Tensor
    taus: np.ndarray


class GradientFlow:
    """Closed-form gradient flow of L(A) = tr(A U A^T) - 2 tr(V A^T) + C (paper units).

    dA/dtau = -grad L = -2 (A U - V), so A(tau) = A_inf + (A(0) - A_inf) exp(-2 tau U).
    With U = Q diag(mu) Q^T, each column of B = A Q relaxes independently to Vt_j / mu_j at
    rate 2 mu_j; columns with mu_j <= rcond mu_max (the null space) keep B_j(0).  tau is the
    paper's training time: L is an integral over t summed over coordinates.

    Parameters
    ----------
    U : (p, p) symmetric PSD, V : (d, p), A0 : (d, p)
    rcond : float, optional
        Eigenvalues mu <= rcond * mu_max are treated as the null space (default p * eps).
    null_cutoff : {"relative", "absolute"}
        "relative" (default): the null space is mu <= rcond * mu_max; "absolute": mu <= 1 / (p 1e4) in
        the paper's units, the authors' cutoff (rf_diffusion_experiments, sampling_implementation_1126.py,
        ``compute_A_infty``). At p = 1000 on the two points one or two eigenvalues lie between the two.
    """

    def __init__(self, U: torch.Tensor, V: torch.Tensor, A0: torch.Tensor, rcond: float | None = None,
                 null_cutoff: str = "relative"):
        self.d, self.p = V.shape
        check_option(null_cutoff, "null_cutoff", NULL_CUTOFFS)
        mu, Q = torch.linalg.eigh(U)
        eps = torch.finfo(U.dtype).eps
        rcond = self.p * eps if rcond is None else rcond
        self.mu, self.Q = mu, Q
        if null_cutoff == "absolute":
            self.range = mu > 1.0 / (self.p * 1e4)
        else:
            self.range = mu > rcond * max(float(mu.max()), 0.0)
        self.Vt = V @ Q
        self.A0 = A0
        self.B0 = A0 @ Q
        mu_safe = torch.where(self.range, mu, torch.ones_like(mu))
        self.B_inf = torch.where(self.range, self.Vt / mu_safe, self.B0)

    def path(self, taus: Sequence[float]) -> ReadoutPath:
        """A(tau) for each tau (inf allowed), as a :class:`ReadoutPath`."""
        out = []
        for tau in taus:  # a handful of training times, each one closed-form matrix expression
            if tau == 0:
                out.append(self.A0)  # exactly A(0), not A(0) Q Q^T
                continue
            if math.isinf(tau):
                B = self.B_inf
            else:
                rate = 2.0 * self.mu.clamp_min(0) * tau
                B = torch.where(self.range, self.B0 * torch.exp(-rate) - self.B_inf * torch.expm1(-rate), self.B0)
            out.append(B @ self.Q.T)
        return ReadoutPath(torch.stack(out), np.asarray(taus, dtype=float))


def gradient_descent(U: torch.Tensor, V: torch.Tensor, A0: torch.Tensor, taus: Sequence[float],
                     lr: float) -> ReadoutPath:
    """Full-batch gradient descent A <- A - lr 2 (A U - V); A at tau = lr * round(tau / lr).

    Raises
    ------
    ValueError
        For a missing, non-positive or unstable ``lr`` (lr >= 1 / mu_max) or an infinite tau.
    """
    if lr is None:
        raise ValueError("`lr` must be given for method='gd'; got None")
    lr = check_float(lr, "lr", min_val=0, include_boundaries="neither")
    if any(math.isinf(t) for t in taus):
        raise ValueError("`taus` must be finite for method='gd' (tau = inf needs method='flow')")
    mu_max = float(torch.linalg.matrix_norm(U, ord=2)) if U.shape[0] <= 4096 else float(U.diagonal().sum())
    if lr * mu_max >= 1:
        raise ValueError(f"`lr` must be < 1 / mu_max = {1 / mu_max:.4g} for a stable descent; got {lr}")
    steps = [int(round(t / lr)) for t in taus]
    order = np.argsort(steps)
    A = A0.clone()
    out = [None] * len(taus)
    k = 0
    for idx in order:
        while k < steps[idx]:
            A = A - lr * 2.0 * (A @ U - V)
            k += 1
        out[idx] = A.clone()
    return ReadoutPath(torch.stack(out), np.asarray([s * lr for s in steps], dtype=float))
