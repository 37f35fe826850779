"""A two-component Gaussian mixture in R^d: the law of Bonnaire et al. (2025)'s low-dimensional experiment.

Components N(+mu 1, sigma^2 I) and N(-mu 1, sigma^2 I) with equal weights (1 = (1, ..., 1)), as in the
authors' ``generate_GMM`` (tbonnair/Why-Diffusion-Models-Don-t-Memorize).  One difference: point i belongs
to component i mod 2 (the authors stack the two halves), so every prefix of the set -- the nested
``n_train`` subsets of a catalog entry -- holds both components equally (within one point).
"""

from __future__ import annotations

import numpy as np

__all__ = ["gaussian_mixture"]


def gaussian_mixture(n: int, d: int, *, mean: float = 1.0, sigma: float = 1.0, seed: int = 0) -> np.ndarray:
    """``n`` points (n, d), float64, of the mixture 1/2 N(+mean 1, sigma^2 I) + 1/2 N(-mean 1, sigma^2 I).

    Point i is drawn from the component of sign (-1)^i; the noise from ``numpy.random.default_rng(seed)``.

    Examples
    --------
    >>> x = gaussian_mixture(4000, 8, seed=0)
    >>> x.shape, bool(abs(x[0::2].mean() - 1) < 0.05), bool(abs(x[1::2].mean() + 1) < 0.05)
    ((4000, 8), True, True)
    """
    if n < 1 or d < 1:
        raise ValueError(f"`n` and `d` must be >= 1; got n={n}, d={d}")
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)[:, None]
    noise = np.random.default_rng(seed).standard_normal((n, d))
    return sign * mean + sigma * noise
