"""The one conversion between a network's output and the package's denoiser convention.

The package's convention is ``denoise(x, t)`` = an estimate of E[x0 | x_t = x] under the OU
process x_t = alpha_t x0 + sqrt(h_t) z.  A network output f is read in one of three
parametrizations, always through :func:`denoised_from_output` (and back through
:func:`output_from_denoised`):

============== ============================== ======================================
parametrization f approximates                 E[x0 | x_t = x]
============== ============================== ======================================
posterior_mean alpha_t E[x0 | x_t]             f / alpha_t
x0             E[x0 | x_t]                     f
score          grad log p_t(x)                 (x + h_t f) / alpha_t
epsilon        E[z | x_t]                      (x - sqrt(h_t) f) / alpha_t
============== ============================== ======================================

(Tweedie: grad log p_t(x) = (alpha_t E[x0 | x_t] - x) / h_t = -E[z | x_t] / sqrt(h_t).)  The
score follows from the denoised estimate m as (alpha_t m - x) / h_t.

The same table for any process y = a x0 + b z (a user's VP or VE model,
:mod:`ridgexr.models.module`) is :func:`denoised_from_frame`; the OU case is a = alpha_t,
b = sqrt(h_t).  :func:`dsm_row_loss` is the training loss of every parametrization in one
definition (that of :mod:`ridgexr.training`), used by every kind trained by minibatches
(:func:`ridgexr.fit_neural`).
"""

from __future__ import annotations


import torch

from ._validation import check_option
from .process import OU

__all__ = ["PARAMETRIZATIONS", "denoised_from_output", "output_from_denoised", "denoised_from_frame",
           "frame_from_denoised", "dsm_row_loss"]

#: every way a network's output can be read (the table above)
PARAMETRIZATIONS = ("posterior_mean", "score", "epsilon", "x0")


def denoised_from_frame(f: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                        parametrization: str) -> torch.Tensor:
    """E[x0 | y] (..., d) from an output f (..., d) of a process y = a x0 + b z (the general table).

    ``a`` and ``b`` are (..., 1) (or broadcastable).  With E[x0 | y] = m:
    ``x0``: f = m; ``posterior_mean``: f = a m; ``score``: f = (a m - y) / b^2 (Tweedie);
    ``epsilon``: f = E[z | y] = (y - a m) / b.  The OU case is a = alpha_t, b = sqrt(h_t), y = x.
    """
    check_option(parametrization, "parametrization", PARAMETRIZATIONS)
    if parametrization == "x0":
        return f
    if parametrization == "posterior_mean":
        return f / a
    if parametrization == "score":
        return (y + b * b * f) / a
    return (y - b * f) / a


def frame_from_denoised(m: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                        parametrization: str) -> torch.Tensor:
    """The output (..., d) that :func:`denoised_from_frame` reads as E[x0 | y] = m (its inverse)."""
    check_option(parametrization, "parametrization", PARAMETRIZATIONS)
    if parametrization == "x0":
        return m
    if parametrization == "posterior_mean":
        return a * m
    if parametrization == "score":
        return (a * m - y) / (b * b)
    return (y - a * m) / b


def denoised_from_output(f: torch.Tensor, x: torch.Tensor, t: torch.Tensor, parametrization: str,
                         process: OU | None = None) -> torch.Tensor:
    """E[x0 | x_t = x] (..., d) from a network output f (..., d) in ``parametrization`` (table above).

    ``t`` broadcasts against the batch dims of ``x`` (a scalar or (...,)).
    """
    process = process or OU()
    a, h = process.alpha(t)[..., None], process.h(t)[..., None]
    return denoised_from_frame(f, x, a, torch.sqrt(h), parametrization)


def output_from_denoised(m: torch.Tensor, x: torch.Tensor, t: torch.Tensor, parametrization: str,
                         process: OU | None = None) -> torch.Tensor:
    """The network output (..., d) that ``parametrization`` reads as E[x0 | x_t = x] = m: the
    inverse of :func:`denoised_from_output` (e.g. the exact denoiser's target in that parametrization)."""
    process = process or OU()
    a, h = process.alpha(t)[..., None], process.h(t)[..., None]
    return frame_from_denoised(m, x, a, torch.sqrt(h), parametrization)


def dsm_row_loss(f: torch.Tensor, x0: torch.Tensor, z: torch.Tensor, t: torch.Tensor, w: torch.Tensor,
                 parametrization: str, process: OU | None = None) -> torch.Tensor:
    """Per-row weighted DSM loss ``w(t) norm(s_f(x_t, t) + z / sqrt(h_t))^2``, (...,), of outputs f (..., d).

    The package's one loss (:mod:`ridgexr.training`): with m = E[x0|x_t] read from f, this is
    ``lambda(t) norm(alpha_t m - alpha_t x0)^2`` with lambda = w / h_t^2, written per
    parametrization without the cancellation of forming x_t and the score (so it stays
    accurate in float32): ``posterior_mean`` ``(w / h^2) norm(f - alpha x0)^2``; ``x0``
    ``(w alpha^2 / h^2) norm(f - x0)^2``; ``score`` ``w norm(f + z / sqrt(h))^2``; ``epsilon``
    ``(w / h) norm(f - z)^2``.  ``x0`` (..., d), ``z`` (..., d), ``t`` and ``w`` (...,) in f's dtype.
    """
    check_option(parametrization, "parametrization", PARAMETRIZATIONS)
    process = process or OU()
    a, h = process.alpha(t), process.h(t)
    if parametrization == "posterior_mean":
        return w / h**2 * ((f - a[..., None] * x0) ** 2).sum(-1)
    if parametrization == "x0":
        return w * a**2 / h**2 * ((f - x0) ** 2).sum(-1)
    if parametrization == "score":
        return w * ((f + z / torch.sqrt(h)[..., None]) ** 2).sum(-1)
    return w / h * ((f - z) ** 2).sum(-1)
