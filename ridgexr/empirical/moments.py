"""Posterior moments of p_t: the :class:`Moments` result and the shifted, scaled covariance formula.

:func:`scaled_form` is the cancellation-free form of the posterior mean and covariance relative
to the most responsible training point; the kernels of :mod:`ridgexr.empirical.kernels` apply it
to all N points (small training sets), to the k kept by top-k truncation, and to concentrated
posteriors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Moments", "scaled_form"]


@dataclass
class Moments:
    """Posterior moments at a batch of queries (torch tensors, leading shape ``batch``).

    Attributes
    ----------
    log_prob : (*batch,) log p_t(x), natural log of a density in 1 / data units^d
    mean : (*batch, d) E[x0 | x_t = x]
    cov : (*batch, d, d) Cov[x0 | x_t = x] (None when not requested), a property formed from
        ``cov_unit`` on each access; may underflow to 0 when the posterior is concentrated on
        one training point
    cov_unit : (*batch, d, d) the same covariance divided by exp(log_cov_scale); O(1) in
        size, so its eigenvectors are resolved even where ``cov`` underflows
    log_cov_scale : (*batch,) cov = exp(log_cov_scale) * cov_unit
    alpha, h : (*batch,) alpha_t and h_t at each query
    dropped_mass : (*batch,) posterior mass left out by top-k truncation (zeros without it)
    cov_error : (*batch,) estimated bound on the absolute error of each entry of ``cov_unit``
        (rounding in the second-moment subtraction, plus dropped mass times the squared
        data diameter under truncation); used to decide when an eigengap is resolved

    Examples
    --------
    >>> import torch
    >>> m = Moments(log_prob=torch.zeros(1), mean=torch.zeros(1, 2), alpha=torch.ones(1), h=torch.ones(1),
    ...             dropped_mass=torch.zeros(1), cov_unit=torch.eye(2)[None], log_cov_scale=torch.zeros(1))
    >>> m.hessian().tolist()  # (1 * I - 1 * I) / 1
    [[[0.0, 0.0], [0.0, 0.0]]]
    """

    log_prob: torch.Tensor
    mean: torch.Tensor
    alpha: torch.Tensor
    h: torch.Tensor
    dropped_mass: torch.Tensor
    cov_unit: torch.Tensor | None = None
    log_cov_scale: torch.Tensor | None = None
    cov_error: torch.Tensor | None = None

    @property
    def cov(self) -> torch.Tensor | None:
        """Cov[x0 | x_t = x] = exp(log_cov_scale) cov_unit, (*batch, d, d), squared data units.

        Formed on each access (the log ridge needs only ``cov_unit``, so SCMS never holds a
        second (Q, d, d) array); None when the covariance was not computed.
        """
        if self.cov_unit is None:
            return None
        return torch.exp(self.log_cov_scale)[..., None, None] * self.cov_unit

    def hessian(self) -> torch.Tensor:
        """Hessian of log p_t: (alpha^2 C - h I) / h^2, shape (*batch, d, d)."""
        cov = self.cov  # a property that forms the array: once
        if cov is None:
            raise ValueError("covariance was not computed")
        a2 = (self.alpha**2)[..., None, None]
        hh = self.h[..., None, None]
        eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
        return (a2 * cov - hh * eye) / hh**2


def scaled_form(x1: torch.Tensor, delta: torch.Tensor, v: torch.Tensor, gap: torch.Tensor, cov: bool):
    """Posterior mean and covariance relative to the most responsible point x_1, without cancellation.

    With logits l_1 >= l_2 >= ... (l_1 at x_1), the other points' weights v_i = exp(l_i - l_2)
    and Delta_i = x_i - x_1:

        w = sum v_i Delta_i,   log s = gap - log1p(exp(gap) sum v_i),   mean = x_1 + s w,
        C = s [sum v_i Delta_i Delta_i^T - s w w^T].

    The bracket (``cu``, symmetrised) is O(1) even where C underflows.

    Parameters
    ----------
    x1 : tensor (q, d)
        The most responsible point of each query, data units.
    delta : tensor (q, k, d)
        x_i - x_1 of the other points, data units.
    v : tensor (q, k)
        exp(l_i - l_2), in [0, 1] (0 where a point is x_1 itself).
    gap : tensor (q,)
        l_2 - l_1 <= 0.
    cov : bool
        Also form the covariance.

    Returns
    -------
    mean : tensor (q, d)
    log_s : tensor (q,)
        Log of the covariance scale s (C = s cu).
    cu : tensor (q, d, d) or None
        The O(1) bracket, symmetrised (None without ``cov``).
    sec : tensor (q, d, d) or None
        The second moment about x_1 it was formed from, sum v_i Delta_i Delta_i^T (None without
        ``cov``).

    Examples
    --------
    Two equally responsible points at 0 and 2 (gap 0): mean 1, variance 1.

    >>> import torch
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> mean, log_s, cu, sec = scaled_form(0 * one, 2 * one[:, :, None], one, torch.zeros(1, dtype=torch.float64), True)
    >>> round(mean.item(), 12), round((torch.exp(log_s) * cu[0, 0, 0]).item(), 12)
    (1.0, 1.0)
    """
    log_s = gap - torch.log1p(torch.exp(gap) * v.sum(1))
    s = torch.exp(log_s)
    w = torch.einsum("qk,qkd->qd", v, delta)
    mean = x1 + s[:, None] * w
    if not cov:
        return mean, log_s, None, None
    sec = torch.einsum("qkd,qke->qde", v[:, :, None] * delta, delta)
    cu = sec - s[:, None, None] * w[:, :, None] * w[:, None, :]
    return mean, log_s, 0.5 * (cu + cu.transpose(1, 2)), sec
