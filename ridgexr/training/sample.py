"""The fixed Monte-Carlo/quadrature sample over which the loss's quadratic form is computed."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import torch

from .._backend import as_tensor
from .._validation import check_float, check_int
from ..empirical import SmoothedEmpirical
from ..process import OU
from ..ridge import ridge_frame

__all__ = ["TrainingSample", "draw_training_sample", "batches"]


@dataclass
class TrainingSample:
    """A fixed Monte-Carlo/quadrature sample of (x0, t, z) (numpy float64).

    Attributes
    ----------
    x0 : (S, d) training point of each sample
    t : (S,) time node
    z : (S, d) standard normal noise
    xt : (S, d) alpha_t x0 + sqrt(h_t) z
    weight : (S,) c_s, the measure weight (sums to the time average, ~1)
    group : (S,) index of the (point, time) cell; noise draws share it
    n_noise : int
    t_min, T : float, the time range
    key : str, unique per drawn sample (a cache key that outlives ``id()``)
    cache : per-sample results that do not depend on the model (exact posterior means,
        ridge frames), filled on first use by :meth:`posterior_mean` and
        :meth:`tangent_frames` and shared by every fit evaluated on this sample; valid for
        the training set the sample was drawn from
    """

    x0: np.ndarray
    t: np.ndarray
    z: np.ndarray
    xt: np.ndarray
    weight: np.ndarray
    group: np.ndarray
    n_noise: int
    t_min: float
    T: float
    key: str = field(default_factory=lambda: uuid.uuid4().hex, compare=False)
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> int:
        """Number of sample points S."""
        return int(self.t.shape[0])

    def posterior_mean(self, train: np.ndarray, process: OU) -> np.ndarray:
        """E[x0 | x_t] of the training set's p_t at every sample point (S, d), cached."""
        if "posterior_mean" not in self.cache:
            self.cache["posterior_mean"] = SmoothedEmpirical(train, self.t, process=process).posterior_mean(self.xt)
        return self.cache["posterior_mean"]

    def tangent_frames(self, train: np.ndarray, d_star: int, process: OU) -> np.ndarray:
        """Tangent bases (S, d, d*) of the ridge frame at every sample point, cached per d*."""
        key = ("tangent", int(d_star))
        if key not in self.cache:
            self.cache[key] = ridge_frame(SmoothedEmpirical(train, self.t, process=process), self.xt,
                                          int(d_star)).tangent
        return self.cache[key]


def draw_training_sample(train: Any, *, t_min: float, T: float, n_time: int, n_noise: int, seed: int,
                         process: OU | None = None) -> TrainingSample:
    """Draw the sample over which U, V, C and the losses are computed.

    Time: ``n_time`` Gauss-Legendre nodes in log t on [t_min, T], weights normalised to the
    uniform time average.  Noise: ``n_noise`` draws per (training point, time node) from
    ``numpy.random.default_rng(seed)``.

    Parameters
    ----------
    train : array (N, d), finite
    t_min, T : float, 0 < t_min < T (OU time)
    n_time, n_noise : int >= 1
    seed : int >= 0
    process : OU, optional

    Returns
    -------
    TrainingSample with S = N n_time n_noise points.
    """
    process = process or OU()
    x = np.asarray(as_tensor(train, name="train", dtype=torch.float64).cpu().numpy())
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"`train` must have shape (N, d) with N >= 1; got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("`train` contains non-finite values")
    n_time = check_int(n_time, "n_time", min_val=1)
    n_noise = check_int(n_noise, "n_noise", min_val=1)
    check_int(seed, "seed", min_val=0)
    t_min = check_float(t_min, "t_min", min_val=0, include_boundaries="neither")
    T = check_float(T, "T", min_val=t_min, include_boundaries="neither")
    n, d = x.shape
    xi, gw = np.polynomial.legendre.leggauss(n_time)
    lo, hi = math.log(t_min), math.log(T)
    u = 0.5 * (lo + hi) + 0.5 * (hi - lo) * xi
    tn = np.exp(u)
    qw = gw * 0.5 * (hi - lo) * tn / (T - t_min)  # int f dt / (T - t_min) ~ sum qw f(t_j)
    ii, jj, kk = np.meshgrid(np.arange(n), np.arange(n_time), np.arange(n_noise), indexing="ij")
    ii, jj = ii.ravel(), jj.ravel()
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((ii.size, d))
    t = tn[jj]
    x0 = x[ii]
    xt = process.alpha(t)[:, None] * x0 + np.sqrt(process.h(t))[:, None] * z
    weight = qw[jj] / (n * n_noise)
    return TrainingSample(x0=x0, t=t, z=z, xt=xt, weight=weight, group=ii * n_time + jj,
                          n_noise=n_noise, t_min=t_min, T=T)


def batches(n: int, size: int) -> Iterable[slice]:
    """Consecutive slices of ``size`` covering range(n)."""
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))
