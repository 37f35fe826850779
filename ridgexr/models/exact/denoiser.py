"""The exact denoiser (torch): the posterior mean of the smoothed empirical density."""

from __future__ import annotations

import warnings
from typing import Any

from ..._backend import as_tensor, check_finite
from ..._validation import check_optional_int
from ...empirical import SmoothedEmpirical
from ...process import MAX_DATA_SCALE, OU

__all__ = ["ExactDenoiser", "build"]


class ExactDenoiser:
    """The empirical optimum: E[x0 | x_t = x] under p_t of the training set (memorizes).

    Parameters
    ----------
    train : array (N, d)
    process : OU, optional
    top_k : int, optional
        Truncate the posterior to the k most responsible training points.
    drop_tol : float
        Truncate only where the dropped posterior mass is <= drop_tol (else exact).

    Warns
    -----
    RuntimeWarning
        When a training point lies farther than ``MAX_DATA_SCALE`` (1e6) from the origin: float64
        does not resolve the posterior there (a query near the origin loses its offset against
        alpha_t x_i and gets the mean of points of equal norm: (0, 0) for (-3e50, 0), (3e50, 0)).
        A run refuses such data (:func:`ridgexr.process.data_scale_limit`).

    Examples
    --------
    >>> import numpy as np
    >>> ex = ExactDenoiser(np.array([[-3.0, 0.0], [3.0, 0.0]]))
    >>> ex.denoise(np.array([[0.0, 1.0]]), 0.5).round(6).tolist()
    [[0.0, 0.0]]
    """

    parametrization = "posterior_mean"
    #: its error is zero by definition: samplers and observers skip the residuals
    is_exact = True
    #: OU time below which the score is not used (a stopped, coarse score; the sampler's state is
    #: frozen there and the output is denoise(x, t_stop)); None: not stopped
    t_stop = None

    def __init__(self, train: Any, process: OU | None = None, *, top_k: int | None = None,
                 drop_tol: float = 1e-6):
        tr = as_tensor(train, name="train")
        check_finite(tr, "train")
        self.density = SmoothedEmpirical(tr, 1.0, process=process, drop_tol=drop_tol)
        top = float(tr.abs().max())  # the largest |x_i|, scaled so that its square cannot overflow
        norm = top * float(((tr / top).to(float) ** 2).sum(-1).max().sqrt()) if 0 < top else 0.0
        if norm > MAX_DATA_SCALE:
            warnings.warn(f"ExactDenoiser: training data reach |x| = {norm:.3g} > {MAX_DATA_SCALE:g} (MAX_DATA_SCALE "
                          "noise scales at h = 1): float64 does not resolve the posterior there; rescale them",
                          RuntimeWarning, stacklevel=2)
        self.process = self.density.process
        self.top_k = check_optional_int(top_k, "top_k", min_val=1)
        self.d = self.density.d

    def denoise(self, x: Any, t: Any) -> Any:
        """E[x0 | x_t = x], (..., d)."""
        return self.density.with_time(t).posterior_mean(x, top_k=self.top_k)

    def score(self, x: Any, t: Any) -> Any:
        """grad log p_t(x), (..., d)."""
        return self.density.with_time(t).score(x, top_k=self.top_k)

    def __repr__(self) -> str:
        return f"ExactDenoiser(N={self.density.n_train}, d={self.d})"


def build(exp, block, task, train, device: str = "cpu") -> ExactDenoiser:
    """The exact denoiser of one cell's training set ``train`` (N, d), truncated as ``exp.ridge`` says;
    a stopped block (``t_stop`` or ``sigma_stop``) sets ``t_stop`` (the sampler freezes below it)."""
    model = ExactDenoiser(train, top_k=exp.ridge.top_k, drop_tol=exp.ridge.drop_tol)
    stop = getattr(block, "stop_time", None)
    model.t_stop = stop(len(train)) if stop is not None else None
    return model
