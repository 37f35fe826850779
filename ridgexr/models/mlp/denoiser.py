"""The paper's MLP score network (torch) and its Gaussian Fourier time embedding."""

from __future__ import annotations

import math
from typing import Any

import torch

from ... import defaults
from ..._backend import as_tensor, broadcast_time, check_positive_time, to_like
from ..._validation import check_float, check_int, check_option
from ...process import OU
from ...parametrization import PARAMETRIZATIONS, denoised_from_output
from . import ACTIVATION_NAMES

__all__ = ["ACTIVATIONS", "GaussianFourierEmbedding", "SinusoidalEmbedding", "ResidualBlock", "MLPDenoiser",
           "mlp_kwargs", "build"]

ACTIVATIONS = {"relu": torch.nn.ReLU, "silu": torch.nn.SiLU, "tanh": torch.nn.Tanh, "gelu": torch.nn.GELU}
assert tuple(ACTIVATIONS) == ACTIVATION_NAMES  # the spec's list (torch-free) names these layers


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

    def __init__(self, dim: int = defaults.MLP_EMBED_DIM, scale: float = defaults.MLP_EMBED_SCALE, seed: int = 0):
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


class SinusoidalEmbedding(torch.nn.Module):
    """Their sinusoidal encoding of a (scaled) time s: E_i = cos(s f_i) for even i, sin(s f_i) for odd i,
    f_i = min_freq^(2 (i // 2) / dim) (Bonnaire et al.'s ``PositionalEncoding`` at a continuous position).

    Examples
    --------
    >>> e = SinusoidalEmbedding(4)(torch.tensor([0.0, 2.0], dtype=torch.float64))
    >>> e[0].tolist(), round(float(e[1, 1]), 6) == round(math.sin(2.0), 6)
    ([1.0, 0.0, 1.0, 0.0], True)
    """

    def __init__(self, dim: int, min_freq: float = 1e-4):
        super().__init__()
        dim = check_int(dim, "dim", min_val=2)
        i = torch.arange(dim, dtype=torch.float64)
        self.register_buffer("freqs", min_freq ** (2 * torch.div(i, 2, rounding_mode="floor") / dim))

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        """s (...) -> (..., dim)."""
        arg = s[..., None] * self.freqs.to(s.dtype)
        even = (torch.arange(arg.shape[-1], device=arg.device) % 2 == 0)
        return torch.where(even, torch.cos(arg), torch.sin(arg))


class ResidualBlock(torch.nn.Module):
    """One of their GMM network's blocks: h -> LayerNorm(h + W2 GELU(W1 (h + e))), e the time's encoding."""

    def __init__(self, width: int):
        super().__init__()
        self.linear1 = torch.nn.Linear(width, width)
        self.linear2 = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.act = torch.nn.GELU()

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return self.norm(h + self.linear2(self.act(self.linear1(h + e))))


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
    architecture : {"mlp", "residual"}
        "residual": Bonnaire et al.'s GMM network -- x -> hidden[0], len(hidden) :class:`ResidualBlock` s fed
        the :class:`SinusoidalEmbedding` of s = embed_scale x t, -> d (widths all equal; ``embed_dim`` unused;
        ``activation`` gelu).

    Examples
    --------
    >>> import torch
    >>> m = MLPDenoiser(2, hidden=(16, 16), embed_dim=8, seed=0)
    >>> m.denoise(torch.zeros(5, 2), 0.3).shape
    torch.Size([5, 2])
    """

    def __init__(self, d: int, *, hidden: tuple[int, ...] = (defaults.MLP_HIDDEN,) * defaults.MLP_DEPTH,
                 embed_dim: int = defaults.MLP_EMBED_DIM, embed_scale: float = defaults.MLP_EMBED_SCALE,
                 activation: str = defaults.ACTIVATION, parametrization: str = defaults.MLP_PARAMETRIZATION,
                 seed: int = 0,
                 dtype: torch.dtype = torch.float32, device: Any = None, process: OU | None = None,
                 architecture: str = "mlp"):
        super().__init__()
        self.d = check_int(d, "d", min_val=1)
        hidden = tuple(check_int(h, "hidden[i]", min_val=1) for h in hidden)
        check_option(activation, "activation", ACTIVATIONS)
        check_option(parametrization, "parametrization", PARAMETRIZATIONS)
        check_option(architecture, "architecture", ("mlp", "residual"))
        self.parametrization, self.activation, self.architecture = parametrization, activation, architecture
        self.process = process if process is not None else OU()
        seed = check_int(seed, "seed", min_val=0)
        with torch.random.fork_rng(devices=[]):  # seeded initialisation that leaves the global generator as it was
            torch.manual_seed(seed)
            if architecture == "residual":
                if len(set(hidden)) != 1 or activation != "gelu" or hidden[0] % 2:
                    raise ValueError(f"architecture 'residual' needs equal even widths and activation 'gelu'; got "
                                     f"hidden {hidden}, activation {activation!r}")
                self.embed_scale = check_float(embed_scale, "embed_scale", min_val=0, include_boundaries="neither")
                self.embed = SinusoidalEmbedding(hidden[0])
                self.net = torch.nn.ModuleList([torch.nn.Linear(self.d, hidden[0])]
                                               + [ResidualBlock(hidden[0]) for _ in hidden]
                                               + [torch.nn.Linear(hidden[0], self.d)])
            else:
                self.embed = GaussianFourierEmbedding(embed_dim, embed_scale, seed)
                widths = (self.d + embed_dim,) + hidden
                layers: list[torch.nn.Module] = []
                for a, b in zip(widths[:-1], widths[1:]):
                    layers += [torch.nn.Linear(a, b), ACTIVATIONS[activation]()]
                layers.append(torch.nn.Linear(widths[-1], self.d))
                self.net = torch.nn.Sequential(*layers)
        self.to(dtype=dtype, device=device)

    @property
    def _dtype(self) -> torch.dtype:
        return self.net[0].weight.dtype

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Network output f(x, t) (..., d) in the model's parametrization and dtype."""
        if self.architecture == "residual":
            e = self.embed(self.embed_scale * t.to(torch.float64)).to(self._dtype)
            h = self.net[0](x.to(self._dtype))
            e = e.expand(h.shape)
            for block in self.net[1:-1]:
                h = block(h, e)
            return self.net[-1](h)
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


def mlp_kwargs(exp, block, width: int) -> dict:
    """Keyword arguments of :class:`MLPDenoiser` for an mlp block at hidden width ``width``."""
    return dict(hidden=(int(width),) * block.depth, embed_dim=block.embed_dim, embed_scale=block.embed_scale,
                activation=block.nonlinearity, parametrization=block.output, seed=exp.seeds.init,
                architecture=block.architecture)


def build(exp, block, task, train, device: str = "cpu") -> MLPDenoiser:
    """The MLP of one cell with the weights its trainer left (``task.state``), in eval mode."""
    model = MLPDenoiser(train.shape[1], device=torch.device(device), **mlp_kwargs(exp, block, task.labels["width"]))
    model.load_state_dict(task.state)
    model.eval()
    return model
