"""Load the training set an experiment's ``dataset`` block describes.

The catalog (:mod:`ridgexr.catalog`) only validates configuration; this module turns a
validated dataset block into data: a built-in point set, an array file, or MNIST digits
encoded by the cached VAE (:mod:`ridgexr.autoencoder`).  The block is read by attribute
(``points``, ``file``, ``mnist``), so this module does not import the catalog.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from .manifolds import Manifold
from .mnist import load_mnist
from .points import load_array_file, point_set

__all__ = ["load_training_set", "mnist_images", "mnist_latents", "dataset_provenance", "manifold_of",
           "dataset_extras"]


def manifold_of(spec: Any) -> Manifold:
    """The :class:`Manifold` of a validated ``dataset.manifold`` block."""
    return Manifold(spec.kind, ambient_dim=spec.ambient_dim, radius=spec.radius, minor_radius=spec.minor_radius,
                    rotation_seed=spec.rotation_seed)


def dataset_extras(dataset: Any) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Store variables that come with a dataset beyond ``train_data``: for a manifold, a fresh
    ``population_data`` (population, dim) sample of the same law (seed + 1) and the rotation
    ``manifold_rotation`` (dim, dim_in) with x = R @ (manifold point, 0, ..., 0)."""
    spec = getattr(dataset, "manifold", None)
    if spec is None:
        return {}
    m = manifold_of(spec)
    pop, _ = m.sample(spec.n_population, density=spec.density, kappa=spec.kappa, seed=spec.seed + 1)
    return {"population_data": (("population", "dim"), pop), "manifold_rotation": (("dim", "dim_in"), m.rotation)}


@functools.lru_cache(maxsize=8)
def _mnist_images(digits: tuple[int, ...], source: str, idx_dir: str | None, n_per_digit: int | None):
    return load_mnist(list(digits), source=source, idx_dir=idx_dir, n_per_digit=n_per_digit)


def mnist_images(spec: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """Images (n, 784), labels (n,) and a source text of an MNIST block (memoised per process)."""
    return _mnist_images(tuple(spec.digits), spec.source, spec.idx_dir, spec.n_per_digit)


def mnist_latents(spec: Any):
    """The cached VAE result (latents, reconstruction error, cache key) of an MNIST block."""
    from ..autoencoder import cached_vae

    x, _, _ = mnist_images(spec)
    return cached_vae(x, latent_dim=spec.latent_dim, epochs=spec.epochs, seed=spec.seed,
                      batch_size=spec.batch_size)


def load_training_set(dataset: Any, *, base_dir: str | Path | None = None) -> np.ndarray:
    """The training set (N, d), float64, of a validated dataset block.

    Parameters
    ----------
    dataset : DatasetSpec
        Exactly one of ``points`` (a built-in set), ``file`` (an array file), ``mnist`` or
        ``manifold`` (``n`` points drawn with ``seed``).
    base_dir : path, optional
        Folder a relative ``file`` is resolved against (the catalog file's folder).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> load_training_set(SimpleNamespace(points="two-points", file=None, mnist=None, manifold=None)).tolist()
    [[-3.0, 0.0], [3.0, 0.0]]
    """
    if dataset.points is not None:
        return point_set(dataset.points)
    if getattr(dataset, "manifold", None) is not None:
        spec = dataset.manifold
        return manifold_of(spec).sample(spec.n, density=spec.density, kappa=spec.kappa, seed=spec.seed)[0]
    if dataset.mnist is not None:
        return mnist_latents(dataset.mnist).latents
    path = Path(dataset.file)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return load_array_file(path)


def dataset_provenance(dataset: Any) -> dict:
    """Where the training set came from (MNIST: source, VAE cache key, reconstruction error)."""
    if getattr(dataset, "manifold", None) is not None:
        return {"dataset": "manifold", **dataset.manifold.model_dump()}
    if dataset.mnist is None:
        return {"dataset": dataset.points or dataset.file}
    _, labels, source = mnist_images(dataset.mnist)
    vae = mnist_latents(dataset.mnist)
    return {"dataset": "mnist", "source": source, "vae_key": vae.key, "vae_cache": str(vae.path),
            "vae_config": vae.config, "recon_bce": vae.recon_bce, "recon_mse": vae.recon_mse,
            "labels": [int(v) for v in labels], "latents": "encoder means, not standardised"}
