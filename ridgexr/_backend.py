"""Small helpers shared by the array layer: numpy/torch round trips, array checks, atomic torch files.

Every array function in ridgexr computes in torch (so the same code runs on CPU and
CUDA) and hands back the kind of array it was given.  This module holds the few
conversions and checks that make that possible; it imports neither xarray nor any
other ridgexr module.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import numbers
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "as_tensor",
    "broadcast_time",
    "to_like",
    "check_finite",
    "check_positive_time",
    "save_atomic",
    "load_plain",
    "PickledCodeError",
    "threads_for",
    "callable_digest",
]


def as_tensor(x: Any, *, name: str, dtype: torch.dtype | None = None,
              device: torch.device | str | None = None) -> torch.Tensor:
    """Convert ``x`` (float, numpy array or tensor) to a floating torch tensor.

    numpy arrays are wrapped without copying when their dtype already fits.  Integer
    and boolean inputs become float64.  ``name`` is used in error messages.
    """
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, (numbers.Number, np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(x)
        if arr.dtype == object:
            raise TypeError(f"{name} must be numeric, got an object array")
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
        if np.iscomplexobj(arr):
            raise TypeError(f"{name} must be real, got dtype {arr.dtype}")
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            arr = arr.copy()
        t = torch.from_numpy(arr)
    else:
        raise TypeError(f"`{name}` must be a float, numpy array or torch tensor; "
                        f"got {type(x).__name__}")
    if not t.is_floating_point():
        t = t.to(torch.float64)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if device is not None:
        t = t.to(device)
    return t


def to_like(t: torch.Tensor, like: Any) -> Any:
    """Return ``t`` as the kind of array ``like`` is (tensor stays tensor, else numpy)."""
    if isinstance(like, torch.Tensor):
        return t
    out = t.detach().cpu().numpy()
    if out.ndim == 0 and not isinstance(like, np.ndarray):
        return out[()]
    return out


def check_finite(t: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` when ``t`` holds NaN or infinity."""
    if not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf)")


def check_positive_time(t: torch.Tensor, name: str = "t") -> None:
    """Raise ``ValueError`` when any diffusion time is not a finite positive number."""
    if t.numel() == 1:  # one time (every sampler step): checked as a Python float, no tensor passes
        v = float(t)
        if not math.isfinite(v):
            raise ValueError(f"{name} contains 1 non-finite value(s) (NaN or inf)")
        if v <= 0:
            raise ValueError(f"{name} must be > 0, got min {v}")
        return
    check_finite(t, name)
    if t.numel() and bool((t <= 0).any()):
        raise ValueError(f"{name} must be > 0, got min {float(t.min())}")


def broadcast_time(t: torch.Tensor, batch_shape: tuple, name: str = "x") -> torch.Tensor:
    """Broadcast diffusion times ``t`` to ``batch_shape``; ``ValueError`` when they do not fit."""
    try:
        return torch.broadcast_to(t, batch_shape)
    except RuntimeError:
        raise ValueError(f"t with shape {tuple(t.shape)} does not broadcast against the batch shape "
                         f"{tuple(batch_shape)} of {name}") from None


def save_atomic(obj: Any, path: str | Path) -> None:
    """``torch.save(obj, path)`` so that a kill at any instant leaves the old file or the new one, never a torn one.

    Written to a hidden temporary file beside ``path`` (named by the process id, so concurrent
    writers do not share it), flushed to disk, renamed over ``path``, and the folder synced.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def callable_digest(model: Any, *extra: str) -> str:
    """A short SHA-256 (16 hex digits) of what determines a callable's outputs, then of ``extra`` strings.

    An ``nn.Module``: its class and every state-dict tensor (names, dtypes, shapes, bytes).  Another callable:
    its qualified name and bytecode -- data it closes over are not seen.  ``extra`` adds what a wrapper
    reads the outputs with (e.g. :func:`ridgexr.models.module.denoiser.model_digest`: the parametrization and
    time convention); :func:`ridgexr.fit_neural` keys its checkpoints by the initial weights' digest.

    Examples
    --------
    >>> import torch
    >>> a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    >>> callable_digest(a) == callable_digest(a), callable_digest(a) == callable_digest(b)
    (True, False)
    """
    h = hashlib.sha256(type(model).__qualname__.encode())
    if isinstance(model, torch.nn.Module):
        for name, tensor in model.state_dict().items():
            t = tensor.detach().cpu().contiguous()
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-d too
    else:
        h.update(getattr(model, "__qualname__", repr(model)).encode())
        code = getattr(model, "__code__", None)
        if code is not None:
            h.update(code.co_code + repr(code.co_consts).encode())
    for part in extra:
        h.update(part.encode())
    return h.hexdigest()[:16]


class PickledCodeError(ValueError):
    """A torch file holds pickled Python objects (code that loading would run), not plain data."""


def _numpy_arrays() -> list:
    """The globals that unpickle a numpy array of floats (and nothing else): float arrays in caches written before
    they held tensors (``latents`` of a cached autoencoder)."""
    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, np.dtypes.Float64DType, np.dtypes.Float32DType]


def load_plain(path: str | Path, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``: tensors, numbers, strings, lists, tuples and dicts of them (and numpy
    arrays of floats), never pickled code.

    Checkpoints and caches are state dicts and plain values (:func:`save_atomic` writes them), so they load as data;
    a file that holds anything else -- a pickled callable, an object of some class -- is refused before any of it
    runs.

    Raises
    ------
    PickledCodeError
        Naming the file, when it holds something that is not plain data.
    """
    import pickle

    try:
        with torch.serialization.safe_globals(_numpy_arrays()):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:  # torch's refusal (its message: run with --debug)
        raise PickledCodeError(f"{str(path)!r} holds pickled Python objects, not plain data (tensors, numbers, "
                               "strings, lists, dicts); ridgexr does not load it, since unpickling it could run "
                               "code: delete it if you did not write it (ridgexr writes its checkpoints and caches "
                               "again)") from exc


#: below this many flops per call, torch's CPU kernels run faster on one thread than on its pool: a small
#: op's hand-off to the pool's threads (tens of microseconds, milliseconds while the cores are shared) costs
#: more than the work (docs/performance.md, "Ridge projection"; the measurements in CHANGELOG.md, 0.4.0)
SMALL_WORK_FLOPS = 4e6


@contextlib.contextmanager
def threads_for(flops: float, device: torch.device | str = "cpu"):
    """Run the block on one CPU thread when its calls are small (< :data:`SMALL_WORK_FLOPS` flops each).

    The calling thread's previous count is restored on exit.  With torch's OpenMP backend (this CPU
    build's) the count is each thread's own OpenMP setting, so blocks in other Python threads (dask's
    threaded workers) neither see nor undo it.  CUDA work, and CPU work of at least the threshold, run
    unchanged.

    Examples
    --------
    >>> import torch
    >>> n = torch.get_num_threads()
    >>> with threads_for(1e3):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == n
    True
    """
    n = torch.get_num_threads()
    if torch.device(device).type != "cpu" or n == 1 or flops >= SMALL_WORK_FLOPS:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
