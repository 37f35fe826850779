"""The forward references of a store's claims kept on disk beside the store, block by block, so that a claims
table computed again (``ridgexr claims``, the report) reads them instead of observing them again, and one that
was killed resumes at the block it was in.

The folder ``STORE.claims-cache`` (:func:`cache_path`) is a Zarr v3 group beside the store (the store itself is
never written).  Each reference is a subgroup ``forward-<digest>`` whose attribute ``ridgexr_reference`` holds its
key (:func:`forward_key`: the training set's SHA-256 and shape, the time, d*, the number of draws, the seed, the
block size, the ridge settings and the versions of the code that computes it) and the key's SHA-256; its arrays
are ``ridge_distance`` (n,), ``ridge_projection`` (n, d), chunked by block, and ``block_complete`` (n_blocks,), one
chunk per block, written after the block's chunks (each chunk file is written to a temporary name and renamed, so
a kill loses at most the block it was in).  A reference is read only when its stored key equals the one asked
for; another key, a damaged group or a chunk that fails its checksum is computed again.  One process writes the
folder at a time (a :class:`ridgexr.store.StoreLock`, the file ``STORE.claims-cache.ridgexr-lock`` beside it, as
the store's own lock is beside the store); another computes its references without the cache meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

__all__ = ["CACHE_SUFFIX", "CACHE_FORMAT", "cache_path", "forward_key", "ReferenceCache", "CachedReference"]

#: the cache folder of a store ``NAME.zarr`` is ``NAME.zarr`` + this, beside it
CACHE_SUFFIX = ".claims-cache"
#: the layout and the meaning of a cached reference; a change that alters either bumps it (and so every key)
CACHE_FORMAT = 1
#: the group attribute holding a reference's key, and the root's holding what the folder is
KEY_ATTR = "ridgexr_reference"
ROOT_ATTR = "ridgexr_claims_cache"


def cache_path(store: str | Path) -> Path:
    """The cache folder of the store ``store``: ``STORE.claims-cache`` beside it.

    >>> cache_path("/data/two-points.zarr").name
    'two-points.zarr.claims-cache'
    """
    return Path(str(store).rstrip("/") + CACHE_SUFFIX)


def forward_key(train: np.ndarray, t: float, d_star: int, n: int, seed: int, ridge, block: int) -> dict:
    """Everything that determines the numbers of a forward reference (:func:`ridgexr.claims.observe_forward`):
    the training set (its SHA-256 as float64 and its shape), the time ``t``, ``d_star``, the ``n`` draws and their
    ``seed``, the ``block`` size, the ridge settings (``ridge``, a :class:`ridgexr.catalog.RidgeSpec` or None: its
    defaults), the cache's format and the versions of ridgexr, torch and numpy.  A JSON-able dict.

    >>> k = forward_key(np.zeros((2, 2)), 0.5, 1, 10, 0, None, 5)
    >>> k["t"], k["n_draws"], k["train_shape"]
    (0.5, 10, [2, 2])
    """
    import torch

    from .._version import __version__

    train = np.ascontiguousarray(train, dtype=np.float64)
    return {"kind": "forward", "format": CACHE_FORMAT, "train_sha256": hashlib.sha256(train.tobytes()).hexdigest(),
            "train_shape": [int(s) for s in train.shape], "t": float(t), "d_star": int(d_star), "n_draws": int(n),
            "seed": int(seed), "block": int(block),
            "ridge": None if ridge is None else json.loads(ridge.model_dump_json()),
            "ridgexr": __version__, "torch": torch.__version__, "numpy": np.__version__}


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


class ReferenceCache:
    """The cache folder of one store (:func:`cache_path`): a Zarr v3 group of forward references by key.

    Parameters
    ----------
    folder : path
        The folder (created at the first write).
    provenance : dict, optional
        Written into every reference's attributes beside its key (e.g. the store's path and config hash); not part
        of the key.
    """

    def __init__(self, folder: str | Path, provenance: dict | None = None):
        self.folder = Path(folder)
        self.provenance = dict(provenance or {})
        self._unwritable = False

    def reference(self, key: dict, n: int, d: int) -> CachedReference | None:
        """The reference of ``key`` ((n,) distances and (n, d) projections in blocks of ``key["block"]``), opened
        when the folder holds it under this very key, else created empty (a group under the key's name that holds
        another key, or that does not open, is removed first), with the folder's lock held until
        :meth:`CachedReference.close`.  None, with a warning, where the folder cannot be written (a read-only file
        system or permissions) or another process holds its lock: the reference is then computed without a cache."""
        import zarr

        from ..store.integrity import READ_ONLY_ERRNOS
        from ..store.lifecycle import remove_partial_files
        from ..store.lock import StoreLock, StoreLockedError

        if self._unwritable:
            return None
        digest = _digest(key)
        name = f"forward-{digest[:24]}"
        lock = StoreLock(self.folder)  # one writer at a time: STORE.claims-cache.ridgexr-lock, beside the folder
        try:
            lock.acquire()
        except StoreLockedError as err:
            warnings.warn(f"the claims' cache {str(self.folder)!r} is in use ({err}): this reference is computed "
                          "without it", RuntimeWarning, stacklevel=3)
            return None
        except OSError as err:
            return self._cannot_write(err, READ_ONLY_ERRNOS)
        try:
            root = zarr.open_group(self.folder, mode="a", zarr_format=3)
            if ROOT_ATTR not in root.attrs:
                root.attrs[ROOT_ATTR] = {"format": CACHE_FORMAT, "contents": "forward-process references of the "
                                         "store's claims (ridgexr.claims.reference_cache); safe to delete"}
            if (self.folder / name).exists():
                remove_partial_files(self.folder / name)  # chunk files a killed write left half-way
                found = self._open(root, name, key, digest, n, d)
                if found is None:
                    shutil.rmtree(self.folder / name)
            else:
                found = None
            found = found or self._create(root, name, key, digest, n, d)
        except BaseException as err:
            lock.release()
            if isinstance(err, OSError):
                return self._cannot_write(err, READ_ONLY_ERRNOS)
            raise
        found.lock = lock
        return found

    def _cannot_write(self, err: OSError, read_only: tuple) -> None:
        if err.errno not in read_only:
            raise err
        self._unwritable = True
        warnings.warn(f"the claims' cache {str(self.folder)!r} cannot be written ({err.strerror}): the forward "
                      "references are computed without it", RuntimeWarning, stacklevel=4)
        return None

    @staticmethod
    def _open(root, name: str, key: dict, digest: str, n: int, d: int) -> CachedReference | None:
        """The reference ``name`` when its stored key is ``key`` (every field, and its digest ``digest``) and its
        arrays have the key's shapes, else None (another key, or metadata that do not parse: said in a warning)."""
        try:
            group = root[name]
            stored = dict(group.attrs.get(KEY_ATTR, {}))
            shapes = (group["ridge_distance"].shape, group["ridge_projection"].shape)
            marks = group["block_complete"]
        except (KeyError, ValueError, TypeError) as err:  # damaged or foreign metadata: computed again
            warnings.warn(f"the claims' cache group {name!r} does not open ({type(err).__name__}: {err}): it is "
                          "computed again", RuntimeWarning, stacklevel=4)
            return None
        same = {k: stored.get(k) for k in key} == json.loads(json.dumps(key)) and stored.get("digest") == digest
        if not same or shapes != ((n,), (n, d)):
            warnings.warn(f"the claims' cache group {name!r} holds another reference (its key differs from the one "
                          "asked for): it is computed again", RuntimeWarning, stacklevel=4)
            return None
        return CachedReference(group, marks)

    def _create(self, root, name: str, key: dict, digest: str, n: int, d: int) -> CachedReference:
        from ..store.layout import CODECS

        block = int(key["block"])
        n_blocks = -(-n // block)
        group = root.create_group(name, overwrite=True)
        group.create_array("ridge_distance", shape=(n,), chunks=(block,), dtype="float64", fill_value=np.nan,
                           compressors=CODECS, attributes={"units": "data units", "long_name": "ridge distance"})
        group.create_array("ridge_projection", shape=(n, d), chunks=(block, d), dtype="float64", fill_value=np.nan,
                           compressors=CODECS, attributes={"units": "data units", "long_name": "ridge projection"})
        marks = group.create_array("block_complete", shape=(n_blocks,), chunks=(1,), dtype="bool", fill_value=False,
                                   compressors=CODECS, attributes={"long_name": "block written in full"})
        # the key last: a group killed before it is written holds no key and is created again
        group.attrs[KEY_ATTR] = {**key, "digest": digest, "created": datetime.now(timezone.utc).isoformat(),
                                 **{f"store_{k}": v for k, v in self.provenance.items()}}
        return CachedReference(group, marks)


class CachedReference:
    """One forward reference on disk: its blocks written so far, read and written one block at a time."""

    def __init__(self, group, marks):
        self.group = group
        self.marks = marks
        self.block = int(group["ridge_distance"].chunks[0])
        self.lock = None

    def close(self) -> None:
        """Release the cache folder's lock."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def complete(self) -> np.ndarray:
        """Which blocks are written in full: (n_blocks,) bool; none where a mark fails its checksum (said in a
        warning)."""
        try:
            return np.asarray(self.marks[:], dtype=bool)
        except ValueError as err:  # a mark's chunk whose checksum or compression does not decode
            warnings.warn(f"the block marks of the claims' cache {self.group.store_path} are damaged ({err}): every "
                          "block is computed again", RuntimeWarning, stacklevel=3)
            return np.zeros(self.marks.shape, dtype=bool)

    def read(self, b: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Block ``b``'s distances (m,) and projections (m, d); None where a chunk fails its checksum (said in a
        warning; the block is then computed again)."""
        rows = slice(b * self.block, (b + 1) * self.block)
        try:
            return self.group["ridge_distance"][rows], self.group["ridge_projection"][rows]
        except ValueError as err:  # a chunk whose checksum or compression does not decode
            warnings.warn(f"block {b} of the claims' cache {self.group.store_path} is damaged ({err}): it is computed "
                          "again", RuntimeWarning, stacklevel=3)
            return None

    def write(self, b: int, distance: np.ndarray, projection: np.ndarray) -> None:
        """Write block ``b`` (its distances and projections), then its completion mark."""
        rows = slice(b * self.block, b * self.block + len(distance))
        self.group["ridge_distance"][rows] = distance
        self.group["ridge_projection"][rows] = projection
        self.marks[b] = True
