"""Neural denoisers: the paper's MLP score network and the one conversion between parametrizations.

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
:mod:`ridgexr.external`) is :func:`denoised_from_frame`; the OU case is a = alpha_t,
b = sqrt(h_t).  :func:`dsm_row_loss` is the training loss of every parametrization in one
definition (that of :mod:`ridgexr.training`).  Training: :func:`ridgexr.fit_neural`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._backend import as_tensor, broadcast_time, check_positive_time, to_like
from ._validation import check_float, check_int, check_option
from .process import OU

__all__ = ["NEURAL_PARAMETRIZATIONS", "NEURAL_ACTIVATIONS", "denoised_from_output", "output_from_denoised",
           "denoised_from_frame", "frame_from_denoised", "dsm_row_loss",
           "GaussianFourierEmbedding", "MLPDenoiser"]

NEURAL_PARAMETRIZATIONS = ("posterior_mean", "score", "epsilon", "x0")
NEURAL_ACTIVATIONS = {"relu": torch.nn.ReLU, "silu": torch.nn.SiLU, "tanh": torch.nn.Tanh, "gelu": torch.nn.GELU}


def denoised_from_frame(f: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                        parametrization: str) -> torch.Tensor:
    """E[x0 | y] (..., d) from an output f (..., d) of a process y = a x0 + b z (the general table).

    ``a`` and ``b`` are (..., 1) (or broadcastable).  With E[x0 | y] = m:
    ``x0``: f = m; ``posterior_mean``: f = a m; ``score``: f = (a m - y) / b^2 (Tweedie);
    ``epsilon``: f = E[z | y] = (y - a m) / b.  The OU case is a = alpha_t, b = sqrt(h_t), y = x.
    """
    check_option(parametrization, "parametrization", NEURAL_PARAMETRIZATIONS)
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
    check_option(parametrization, "parametrization", NEURAL_PARAMETRIZATIONS)
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
    check_option(parametrization, "parametrization", NEURAL_PARAMETRIZATIONS)
    process = process or OU()
    a, h = process.alpha(t), process.h(t)
    if parametrization == "posterior_mean":
        return w / h**2 * ((f - a[..., None] * x0) ** 2).sum(-1)
    if parametrization == "x0":
        return w * a**2 / h**2 * ((f - x0) ** 2).sum(-1)
    if parametrization == "score":
        return w * ((f + z / torch.sqrt(h)[..., None]) ** 2).sum(-1)
    return w / h * ((f - z) ** 2).sum(-1)


class GaussianFourierEmbedding(torch.nn.Module):
    """Fixed random Fourier features of time: [sin(2 pi W t), cos(2 pi W t)], W ~ N(0, scale^2).

    Parameters
    ----------
    dim : int
        Embedding size (even; the paper's: 128).
    scale : float
        Standard deviation of the frequencies W (the paper's: 30).
    seed : int
        Seed of W (a buffer, not trained).
    """

    def __init__(self, dim: int = 128, scale: float = 30.0, seed: int = 0):
        super().__init__()
        dim = check_int(dim, "embed_dim", min_val=2)
        if dim % 2:
            raise ValueError(f"`embed_dim` must be even; got {dim}")
        scale = check_float(scale, "embed_scale", min_val=0, include_boundaries="neither")
        g = torch.Generator().manual_seed(check_int(seed, "seed", min_val=0))
        self.register_buffer("W", torch.randn(dim // 2, generator=g, dtype=torch.float64) * scale)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """t (...) -> (..., dim)."""
        proj = 2 * math.pi * t[..., None] * self.W.to(t.dtype)
        return torch.cat([torch.sin(proj), torch.cos(proj)], -1)


class MLPDenoiser(torch.nn.Module):
    """The paper's MLP score network: [x, GFP(t)] -> hidden -> hidden -> d.

    Defaults are the paper's MNIST network: a 128-d Gaussian Fourier time embedding with
    scale 30, two hidden layers of 512 units, output read as a score.

    Parameters
    ----------
    d : int
        Data dimension.
    hidden : sequence of int
        Hidden layer widths (default (512, 512)).
    embed_dim, embed_scale : int, float
        Gaussian Fourier time embedding (:class:`GaussianFourierEmbedding`).
    activation : {"relu", "silu", "tanh", "gelu"}
    parametrization : {"score", "posterior_mean", "epsilon", "x0"}
        How the output is read (:func:`denoised_from_output`).
    seed : int
        Seed of the embedding's frequencies and of the layers' initial weights.
    dtype, device
        Of the parameters (default float32: networks train in float32; geometry is float64).
    process : OU, optional

    Examples
    --------
    >>> import torch
    >>> m = MLPDenoiser(2, hidden=(16, 16), embed_dim=8, seed=0)
    >>> m.denoise(torch.zeros(5, 2), 0.3).shape
    torch.Size([5, 2])
    """

    def __init__(self, d: int, *, hidden: tuple[int, ...] = (512, 512), embed_dim: int = 128,
                 embed_scale: float = 30.0, activation: str = "relu", parametrization: str = "score", seed: int = 0,
                 dtype: torch.dtype = torch.float32, device: Any = None, process: OU | None = None):
        super().__init__()
        self.d = check_int(d, "d", min_val=1)
        hidden = tuple(check_int(h, "hidden[i]", min_val=1) for h in hidden)
        check_option(activation, "activation", NEURAL_ACTIVATIONS)
        check_option(parametrization, "parametrization", NEURAL_PARAMETRIZATIONS)
        self.parametrization, self.activation = parametrization, activation
        self.process = process if process is not None else OU()
        seed = check_int(seed, "seed", min_val=0)
        self.embed = GaussianFourierEmbedding(embed_dim, embed_scale, seed)
        widths = (self.d + embed_dim,) + hidden
        layers: list[torch.nn.Module] = []
        with torch.random.fork_rng(devices=[]):  # seeded initialisation that leaves the global generator as it was
            torch.manual_seed(seed)
            for a, b in zip(widths[:-1], widths[1:]):
                layers += [torch.nn.Linear(a, b), NEURAL_ACTIVATIONS[activation]()]
            layers.append(torch.nn.Linear(widths[-1], self.d))
        self.net = torch.nn.Sequential(*layers)
        self.to(dtype=dtype, device=device)

    @property
    def _dtype(self) -> torch.dtype:
        return self.net[0].weight.dtype

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Network output f(x, t) (..., d) in the model's parametrization and dtype."""
        emb = self.embed(t.to(self._dtype)).expand(x.shape[:-1] + (-1,))
        return self.net(torch.cat([x.to(self._dtype), emb], -1))

    def _prep(self, x: Any, t: Any) -> tuple[torch.Tensor, torch.Tensor]:
        dev = self.net[0].weight.device
        xt = as_tensor(x, name="x", dtype=torch.float64, device=dev)
        if xt.shape[-1] != self.d:
            raise ValueError(f"`x` must have shape (..., {self.d}); got {tuple(xt.shape)}")
        tt = as_tensor(t, name="t", dtype=torch.float64, device=dev)
        check_positive_time(tt, "t")
        return xt, broadcast_time(tt, xt.shape[:-1], "x")

    def denoise(self, x: Any, t: Any) -> Any:
        """E[x0 | x_t = x] (..., d) in float64; numpy or torch in, the same kind out."""
        xt, tt = self._prep(x, t)
        f = self.forward(xt, tt).to(torch.float64)
        return to_like(denoised_from_output(f, xt, tt, self.parametrization, self.process), x)

    def score(self, x: Any, t: Any) -> Any:
        """grad log p_t(x) = (alpha_t E[x0 | x_t] - x) / h_t, (..., d) in float64."""
        xt, tt = self._prep(x, t)
        m = denoised_from_output(self.forward(xt, tt).to(torch.float64), xt, tt, self.parametrization, self.process)
        return to_like((self.process.alpha(tt)[..., None] * m - xt) / self.process.h(tt)[..., None], x)
