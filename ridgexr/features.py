"""The random-feature map and network (torch): f(x, t) = A act(W_x x + W_t phi(t) + b) / sqrt(p).

    phi(t)  = [1, sin(2 pi k t / P), cos(2 pi k t / P)]_{k = 1..K},

with W_x ~ N(0, 1/d) (p x d), W_t ~ N(0, 1/(2K+1)) (p x (2K+1)), b ~ N(0, 1) (p) fixed
and only A (d x p) trained.  P = ``feature_period`` is the period of the time features.
The authors' code uses P = T, the sampler's start time (so phi(T) = phi(0)); the API and the
catalogs default to that (``feature_period=None``: the sampler's T in a catalog entry, the
paper's T = 10 for a model built by hand; :mod:`ridgexr.defaults`).  A period of 2T (ridgexr
0.1's choice) avoids the wrap-around and changes the results: see docs/findings.md.

Parametrizations (``denoise`` = estimate of E[x0 | x_t = x], ``score``):

- ``"posterior_mean"``: f approximates alpha_t E[x0 | x_t]; denoise = f / alpha_t,
  score = (f - x) / h_t.
- ``"score"``: f approximates grad log p_t; score = f, denoise = (x + h_t f) / alpha_t.

Nested features: the feature rows are drawn from three independent numpy streams
(one each for W_x, W_t, b) filled row by row, so a model of width p uses exactly the first
p rows of the same seed's model of any larger width.  Widths are therefore compared on
the same features, and the training moments of every width are leading blocks of the
largest width's moments (see :mod:`ridgexr.training`).

The map and its readout sit below both :mod:`ridgexr.training`, which fits the readout A in closed form, and
:mod:`ridgexr.models.random_features`, the kind whose builder puts a fitted readout on the network
(:meth:`RandomFeatureDenoiser.with_A`).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

import numpy as np
import torch

from . import defaults
from ._backend import as_tensor, broadcast_time, check_positive_time, to_like
from ._validation import check_float, check_int, check_option
from .choices import RF_ACTIVATIONS, RF_PARAMETRIZATIONS as PARAMETRIZATIONS
from .process import OU

__all__ = ["RandomFeatureDenoiser", "ACTIVATIONS", "PARAMETRIZATIONS", "draw_features"]

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}
#: the same functions applied in place (on a fresh pre-activation array: one pass less)
INPLACE_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu_,
    "tanh": torch.tanh_,
    "sigmoid": torch.sigmoid_,
}
assert tuple(ACTIVATIONS) == RF_ACTIVATIONS  # the catalog's list (torch-free) names these functions


def draw_features(d: int, width: int, n_frequencies: int, seed: int) -> tuple[np.ndarray, ...]:
    """The fixed random features (W_x, W_t, b) in float64, nested in ``width``.

    Returns W_x (width, d) ~ N(0, 1/d), W_t (width, 2K+1) ~ N(0, 1/(2K+1)), b (width,) ~ N(0, 1).
    """
    ss = np.random.SeedSequence(seed)
    gx, gt, gb = (np.random.Generator(np.random.PCG64(s)) for s in ss.spawn(3))
    n_time = 2 * n_frequencies + 1
    w_x = gx.standard_normal((width, d)) / math.sqrt(d)
    w_t = gt.standard_normal((width, n_time)) / math.sqrt(n_time)
    b = gb.standard_normal(width)
    return w_x, w_t, b


#: features per chunk of rows in :meth:`RandomFeatureDenoiser.forward` (2^20 float64 = 8 MB)
FORWARD_ELEMENTS = 1 << 20


class RandomFeatureDenoiser(torch.nn.Module):
    """Random-feature denoiser f(x, t) = A act(W_x x + W_t phi(t) + b) / sqrt(p).

    Parameters
    ----------
    d : int
        Data dimension.
    width : int
        Number of random features p (>= 1).
    n_frequencies : int
        K, the number of Fourier time frequencies (phi has 2K + 1 entries).
    feature_period : float, optional
        Period P of the time features (> 0), OU time units.  The paper's model uses the
        sampler's start time T; None (the default) means the paper's T = 10
        (``ridgexr.defaults.T``).  Pass the T you sample from when it is another.
    activation : {"relu", "tanh", "sigmoid"}
    parametrization : {"posterior_mean", "score"}
    seed : int
        Seed of the fixed features; the same seed gives the same features on every device.
    dtype, device
        Of the parameters (default float64, CPU).
    process : OU, optional

    Examples
    --------
    >>> import torch
    >>> m = RandomFeatureDenoiser(2, 16, n_frequencies=4, feature_period=2.0, seed=0)
    >>> m(torch.zeros(5, 2), 0.5).shape  # A starts at zero
    torch.Size([5, 2])
    >>> RandomFeatureDenoiser(2, 16).feature_period  # the paper's period, T = 10
    10.0
    """

    def __init__(self, d: int, width: int, *, n_frequencies: int = defaults.N_FREQUENCIES,
                 feature_period: float | None = defaults.FEATURE_PERIOD, activation: str = defaults.ACTIVATION,
                 parametrization: str = defaults.RF_PARAMETRIZATION, seed: int = 0,
                 dtype: torch.dtype = torch.float64, device: Any = None, process: OU | None = None):
        super().__init__()
        d = check_int(d, "d", min_val=1)
        width = check_int(width, "width", min_val=1)
        n_frequencies = check_int(n_frequencies, "n_frequencies", min_val=0)
        seed = check_int(seed, "seed", min_val=0)
        if feature_period is None:
            feature_period = defaults.T
        feature_period = check_float(feature_period, "feature_period", min_val=0, include_boundaries="neither")
        check_option(activation, "activation", ACTIVATIONS)
        check_option(parametrization, "parametrization", PARAMETRIZATIONS)
        self.d, self.width, self.n_frequencies = d, width, n_frequencies
        self.feature_period = feature_period
        self.activation, self.parametrization, self.seed = activation, parametrization, seed
        self.process = process if process is not None else OU()
        w_x, w_t, b = draw_features(d, width, n_frequencies, seed)
        kw = dict(dtype=dtype, device=device)
        self.register_buffer("w_x", torch.tensor(w_x, **kw))
        self.register_buffer("w_t", torch.tensor(w_t, **kw))
        self.register_buffer("b", torch.tensor(b, **kw))
        self.register_buffer("freqs", torch.arange(1, n_frequencies + 1, **kw))
        self.A = torch.nn.Parameter(torch.zeros(d, width, **kw))
        self._scratch: dict = {}  # thread id -> forward's reused (chunk, p) array (not state: with_A starts afresh)

    # ------------------------------------------------------------------ features
    def time_features(self, t: torch.Tensor) -> torch.Tensor:
        """phi(t) = [1, sin(2 pi k t/P), cos(2 pi k t/P)]_k (P the feature period); t (...) -> (..., 2K+1)."""
        ang = (2 * math.pi / self.feature_period) * t[..., None] * self.freqs
        return torch.cat([torch.ones_like(t)[..., None], torch.sin(ang), torch.cos(ang)], -1)

    def _prep(self, x: Any, t: Any, broadcast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        xt = as_tensor(x, name="x", dtype=self.A.dtype, device=self.A.device)
        if xt.shape[-1] != self.d:
            raise ValueError(f"`x` must have shape (..., {self.d}); got {tuple(xt.shape)}")
        tt = as_tensor(t, name="t", dtype=self.A.dtype, device=self.A.device)
        check_positive_time(tt, "t")
        if not broadcast and tt.numel() == 1:
            return xt, tt.reshape(())
        return xt, broadcast_time(tt, xt.shape[:-1], "x")

    def features(self, x: Any, t: Any) -> torch.Tensor:
        """act(W_x x + W_t phi(t) + b) / sqrt(p); x (..., d), t broadcastable -> (..., p).

        A single time (a scalar t, as in a sampler step or a quadrature node) computes the
        time term W_t phi(t) + b once for all rows.
        """
        xt, tt = self._prep(x, t, broadcast=False)
        return self._activations(xt, self.time_features(tt) @ self.w_t.T + self.b)

    def _activations(self, xt: torch.Tensor, time_term: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The features of prepared rows ``xt`` given the time term ((p,) for one time: one fused addmm with it
        as the bias, written into ``out`` (rows, p) when given; else (..., p))."""
        if time_term.ndim == 1:
            flat = xt.reshape(-1, self.d)
            pre = (torch.addmm(time_term, flat, self.w_x.T) if out is None else
                   torch.addmm(time_term, flat, self.w_x.T, out=out)).reshape(xt.shape[:-1] + (self.width,))
        else:
            pre = xt @ self.w_x.T + time_term
        return INPLACE_ACTIVATIONS[self.activation](pre).mul_(1.0 / math.sqrt(self.width))

    def forward(self, x: Any, t: Any) -> torch.Tensor:
        """Network output f(x, t) (..., d) (torch tensor).

        With one time for all rows (a sampler step) and no gradient recorded, the rows go through in
        equal chunks of at most :data:`FORWARD_ELEMENTS` features, each written into one reused
        (chunk, p) buffer: no fresh, page-faulted (rows, p) array per call (2 000 x 2 000 = 32 MB; a
        sampler step of two-points-paper 8.4-15 -> 4.0-4.2 ms, one thread).  Each row's output is
        that of one unchunked call up to float64 reduction order (BLAS picks its kernels by the number
        of rows; bit for bit at the paper's 2 000 x 2 000, ``tests/test_models.py``).
        """
        xt, tt = self._prep(x, t, broadcast=False)
        n_rows = xt.numel() // self.d
        n_chunks = -(-n_rows * self.width // FORWARD_ELEMENTS)
        if tt.ndim or n_chunks <= 1 or (torch.is_grad_enabled() and self.A.requires_grad):
            return self.features(xt, tt) @ self.A.T
        time_term = self.time_features(tt) @ self.w_t.T + self.b
        parts = torch.tensor_split(xt.reshape(-1, self.d), n_chunks)
        rows = parts[0].shape[0]
        key = threading.get_ident()  # one scratch array per calling thread
        buf = self._scratch.get(key)
        if buf is None or buf.shape != (rows, self.width) or buf.dtype != xt.dtype or buf.device != xt.device:
            buf = self._scratch[key] = torch.empty(rows, self.width, dtype=xt.dtype, device=xt.device)
        out = torch.cat([self._activations(part, time_term, buf[:part.shape[0]]) @ self.A.T for part in parts])
        return out.reshape(xt.shape[:-1] + (self.d,))

    # ------------------------------------------------------------------ interface
    def denoise(self, x: Any, t: Any) -> Any:
        """Estimate of E[x0 | x_t = x], (..., d); numpy or torch in, the same kind out."""
        xt, tt = self._prep(x, t, broadcast=False)  # one time for all rows stays a scalar (hoisted time term)
        f = self.forward(xt, tt)
        a, h = self.process.alpha(tt)[..., None], self.process.h(tt)[..., None]
        out = f / a if self.parametrization == "posterior_mean" else (xt + h * f) / a
        return to_like(out, x)

    def score(self, x: Any, t: Any) -> Any:
        """Estimate of grad log p_t(x), (..., d); numpy or torch in, the same kind out."""
        xt, tt = self._prep(x, t, broadcast=False)
        f = self.forward(xt, tt)
        h = self.process.h(tt)[..., None]
        out = (f - xt) / h if self.parametrization == "posterior_mean" else f
        return to_like(out, x)

    def with_A(self, A: Any) -> "RandomFeatureDenoiser":
        """A copy of this model (sharing the fixed features) carrying readout ``A`` (d, p)."""
        new = RandomFeatureDenoiser.__new__(RandomFeatureDenoiser)
        torch.nn.Module.__init__(new)
        new.__dict__.update({k: v for k, v in self.__dict__.items()
                             if k not in ("_parameters", "_buffers", "_modules", "_scratch")})
        new._scratch = {}
        for name, buf in self._buffers.items():
            new.register_buffer(name, buf)
        a = as_tensor(A, name="A", dtype=self.A.dtype, device=self.A.device)
        if a.shape != (self.d, self.width):
            raise ValueError(f"`A` must have shape ({self.d}, {self.width}); got {tuple(a.shape)}")
        new.A = torch.nn.Parameter(a.clone())
        return new

    def extra_repr(self) -> str:
        return (f"d={self.d}, width={self.width}, n_frequencies={self.n_frequencies}, "
                f"feature_period={self.feature_period}, "
                f"activation={self.activation!r}, parametrization={self.parametrization!r}, seed={self.seed}")
