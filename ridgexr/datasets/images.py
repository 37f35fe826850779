"""Image training sets read from IDX files: Fashion-MNIST by name, or any folder of IDX files.

Images come back flattened, (n, H * W) float64, with pixels scaled to

- ``unit``: [0, 1] (uint8 / 255), the scale the VAE of :mod:`ridgexr.autoencoder` is trained on;
- ``symmetric``: [-1, 1] (2 * uint8 / 255 - 1), the usual scale of image diffusion models.

A named set (``fashion-mnist``) is looked for, in this order, in ``$RIDGEXR_IMAGES`` (the
folder itself or its ``fashion-mnist/`` subfolder), ``<data folder>/images/fashion-mnist``
(the data folder of :func:`ridgexr.paths.data_folder` without ``data_dir``: ``$RIDGEXR_DATA``, else
the platform's user data folder; ``--data-dir`` moves the stores, not this lookup) and
the folder of the Debian package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``).
The files of a named set are checked against its published counts (Fashion-MNIST: 60 000
training and 10 000 test images, 6 000 and 1 000 per class).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..choices import IMAGE_SCALES
from ..paths import data_folder
from .mnist import MnistError, load_idx

__all__ = ["IMAGE_SETS", "ImageError", "locate_images", "read_idx_images", "load_images", "scale_pixels",
           "DEBIAN_DATASETS"]

#: folder where Debian's ``dataset-*`` packages install their files
DEBIAN_DATASETS = Path("/usr/share/datasets")

#: named image sets: Debian package, class names and the published counts per split
IMAGE_SETS: dict[str, dict] = {
    "fashion-mnist": {
        "package": "dataset-fashion-mnist",
        "classes": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                    "Ankle boot"),
        "counts": {"train": 60_000, "test": 10_000},
        "shape": (28, 28),
    },
}

_PREFIX = {"train": "train", "test": "t10k"}


class ImageError(MnistError):
    """Missing or corrupt image files, or an impossible selection (a ValueError)."""


def _has_idx(folder: Path, split: str) -> bool:
    stem = f"{_PREFIX[split]}-images-idx3-ubyte"
    return any((folder / (stem + s)).is_file() for s in ("", ".gz"))


def locate_images(images: str, *, base_dir: str | Path | None = None, split: str = "train") -> Path:
    """The folder holding the IDX files of ``images`` (a named set, or a folder / images file path).

    Parameters
    ----------
    images : str
        ``"fashion-mnist"``, or a folder of IDX files (``train-images-idx3-ubyte[.gz]``,
        ``train-labels-idx1-ubyte[.gz]``, ...), or the path of such an images file; a relative
        path is resolved against ``base_dir``.
    base_dir : path, optional
        The catalog file's folder.
    split : {"train", "test"}

    Raises
    ------
    ImageError
        One line naming where it looked and how to get the files.
    """
    if split not in _PREFIX:
        raise ImageError(f"split must be 'train' or 'test', got {split!r}")
    if images in IMAGE_SETS:
        candidates = []
        env = os.environ.get("RIDGEXR_IMAGES")
        if env:
            candidates += [Path(env).expanduser() / images, Path(env).expanduser()]
        candidates += [data_folder() / "images" / images, DEBIAN_DATASETS / images]
        for folder in candidates:
            if _has_idx(folder, split):
                return folder
        looked = ", ".join(str(c) for c in candidates)
        raise ImageError(f"no {images} IDX files ({_PREFIX[split]}-images-idx3-ubyte[.gz]) in {looked}; install them "
                         f"with `apt-get install {IMAGE_SETS[images]['package']}` or put the four IDX files in "
                         f"$RIDGEXR_IMAGES/{images}")
    path = Path(images).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if path.is_file() and "images-idx3-ubyte" in path.name:
        return path.parent
    if path.is_dir() and _has_idx(path, split):
        return path
    raise ImageError(f"dataset.images {images!r}: {str(path.absolute())!r} is neither {sorted(IMAGE_SETS)} nor a folder holding "
                     f"{_PREFIX[split]}-images-idx3-ubyte[.gz] and {_PREFIX[split]}-labels-idx1-ubyte[.gz]")


def _find(folder: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    raise ImageError(f"no {stem}[.gz] in {str(folder)!r}")


def read_idx_images(folder: str | Path, split: str = "train", *, name: str | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The raw images (n, H, W) uint8 and labels (n,) int64 of one split of an IDX folder.

    When ``name`` is a named set of :data:`IMAGE_SETS`, the counts are checked: the split's
    published total, an equal share per class and the image size (Fashion-MNIST: 60 000 /
    10 000 images of 28 x 28, 6 000 / 1 000 per class).

    Raises
    ------
    ImageError
        Missing files, images and labels of different lengths, or counts that do not match.
    """
    d = Path(folder)
    if split not in _PREFIX:
        raise ImageError(f"split must be 'train' or 'test', got {split!r}")
    x = load_idx(_find(d, f"{_PREFIX[split]}-images-idx3-ubyte"))
    y = load_idx(_find(d, f"{_PREFIX[split]}-labels-idx1-ubyte"))
    if x.ndim != 3 or y.ndim != 1:
        raise ImageError(f"IDX files in {str(d)!r}: images must be 3-D and labels 1-D, got {x.shape} and {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise ImageError(f"IDX files in {str(d)!r}: {x.shape[0]} images but {y.shape[0]} labels")
    if name is not None:
        info = IMAGE_SETS[name]
        want = info["counts"][split]
        n_classes = len(info["classes"])
        per_class = np.bincount(y, minlength=n_classes)
        if x.shape[0] != want or x.shape[1:] != info["shape"] or per_class.size != n_classes \
                or np.any(per_class != want // n_classes):
            raise ImageError(f"{name} {split} files in {str(d)!r} hold {x.shape[0]} images of {x.shape[1:]} with "
                             f"per-class counts {per_class.tolist()}; expected {want} of {info['shape']}, "
                             f"{want // n_classes} per class (damaged or other files)")
    return x, y.astype(np.int64)


def scale_pixels(raw: np.ndarray, scale: str = "unit") -> np.ndarray:
    """uint8 pixels -> float64 in [0, 1] (``unit``: p / 255) or [-1, 1] (``symmetric``: 2 p / 255 - 1)."""
    if scale not in IMAGE_SCALES:
        raise ImageError(f"scale must be one of {IMAGE_SCALES}, got {scale!r}")
    x = np.asarray(raw, dtype=np.float64) / 255.0
    return x if scale == "unit" else 2.0 * x - 1.0


def load_images(images: str, *, classes=None, n: int | None = None, scale: str = "unit", split: str = "train",
                base_dir: str | Path | None = None) -> tuple[np.ndarray, np.ndarray, tuple[int, int], str]:
    """Flattened images (n, H * W), labels (n,), the image size (H, W) and a source text.

    Parameters
    ----------
    images : str
        A named set or an IDX folder (see :func:`locate_images`).
    classes : sequence of int, optional
        Labels to keep (all when None).
    n : int, optional
        Keep the first ``n`` images (file order) of the kept classes; all when None.
    scale : {"unit", "symmetric"}
        Pixels in [0, 1] or [-1, 1].

    Examples
    --------
    >>> x, y, hw, _ = load_images("fashion-mnist", classes=[7], n=5)  # doctest: +SKIP
    >>> x.shape, hw, set(y.tolist())  # doctest: +SKIP
    ((5, 784), (28, 28), {7})
    """
    folder = locate_images(images, base_dir=base_dir, split=split)
    raw, labels = read_idx_images(folder, split, name=images if images in IMAGE_SETS else None)
    keep = np.ones(labels.shape[0], dtype=bool)
    if classes is not None:
        classes = [int(c) for c in classes]
        missing = sorted(set(classes) - set(np.unique(labels).tolist()))
        if not classes or missing:
            raise ImageError(f"dataset.images.classes {classes}: no image of class {missing} in {str(folder)!r}")
        keep = np.isin(labels, classes)
    idx = np.flatnonzero(keep)
    if n is not None:
        if n > idx.size:
            raise ImageError(f"dataset.images.n = {n} but the selection holds only {idx.size} images")
        idx = idx[:n]
    x = scale_pixels(raw[idx].reshape(idx.size, -1), scale)
    rng = "[0, 1]" if scale == "unit" else "[-1, 1]"
    desc = (f"{images} IDX files in {folder.resolve()} ({split}); classes "
            f"{'all' if classes is None else classes}; {idx.size} images of {raw.shape[1]} x {raw.shape[2]}; "
            f"pixels in {rng}")
    return x, labels[idx], (int(raw.shape[1]), int(raw.shape[2])), desc
