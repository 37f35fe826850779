"""A two-component Gaussian mixture in R^d: the law of Bonnaire et al. (2025)'s low-dimensional experiment.

Components N(+mu 1, sigma^2 I) and N(-mu 1, sigma^2 I) with equal weights (1 = (1, ..., 1)), as in the
authors' ``generate_GMM`` (tbonnair/Why-Diffusion-Models-Don-t-Memorize).  One difference: point i belongs
to component i mod 2 (the authors stack the two halves), so every prefix of the set -- the nested
``n_train`` subsets of a catalog entry -- holds both components equally (within one point).
"""

from __future__ import annotations

import numpy as np

__all__ = ["gaussian_mixture", "mixture_score"]


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


def mixture_score(x: np.ndarray, t: float, *, mean: float = 1.0, sigma: float = 1.0) -> np.ndarray:
    """The population score of the mixture under the OU process at time ``t``: grad log p_t(x), (..., d).

    p_t = 1/2 N(alpha_t m, Gamma_t I) + 1/2 N(-alpha_t m, Gamma_t I) with m = mean (1, ..., 1), alpha_t = e^-t
    and Gamma_t = alpha_t^2 sigma^2 + h_t (h_t = 1 - e^-2t), so

        grad log p_t(x) = (alpha_t m tanh(alpha_t m . x / Gamma_t) - x) / Gamma_t,

    the score the authors' ``compute_generalization_score_GMM_alpha`` computes for sigma = 1 (Gamma_t = 1).

    Parameters
    ----------
    x : (..., d) array, data units at time t
    t : float > 0, diffusion time
    mean, sigma : the mixture's parameters (``dataset.mixture``)

    Examples
    --------
    >>> s = mixture_score(np.array([[0.0, 0.0], [5.0, 5.0]]), 1.0)
    >>> s[0].tolist(), bool(np.allclose(s[1], np.exp(-1) * np.tanh(10 * np.exp(-1)) - 5.0))
    ([0.0, 0.0], True)
    """
    x = np.asarray(x, dtype=np.float64)
    if not (np.isfinite(t) and t > 0):
        raise ValueError(f"`t` must be a finite diffusion time > 0; got {t!r}")
    alpha = np.exp(-t)
    gamma = alpha**2 * sigma**2 - np.expm1(-2 * t)
    m = np.full(x.shape[-1], float(mean))
    proj = np.tanh(alpha * (x @ m) / gamma)
    return (alpha * proj[..., None] * m - x) / gamma
