"""The store's writer lock: one writer per store, released by the operating system however its holder exits."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["LOCK_NAME", "StoreLock", "StoreLockedError"]

#: suffix of the lock file beside a store (``STORE.ridgexr-lock``)
LOCK_NAME = ".ridgexr-lock"


class StoreLockedError(RuntimeError):
    """Another writer holds the store."""


class StoreLock:
    """An exclusive writer lock: ``fcntl.flock`` on a file beside the store.

    The operating system releases the lock when its holder exits, however it exits
    (kill -9, power loss), so a crashed writer never leaves a stale lock and there is no
    take-over race.  The file itself stays (deleting it would let two processes lock two
    different files); its content -- pid, host, time -- only feeds the error message, so
    an empty or garbage lock file is harmless.  POSIX only.
    """

    def __init__(self, store: str | Path):
        self.path = Path(str(store).rstrip("/") + LOCK_NAME)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _holder(self) -> dict:
        try:
            info = json.loads(self.path.read_text())
            return info if isinstance(info, dict) else {}
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "StoreLock":
        """Take the lock or raise :class:`StoreLockedError` naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never follow a symbolic link: the lock file is truncated and written
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP or self.path.is_symlink():
                raise OSError(errno.ELOOP, "the lock file is a symbolic link; ridgexr does not follow it (remove "
                              "the link)", str(self.path)) from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            held = self._holder()
            raise StoreLockedError(
                f"store {str(self.path)[:-len(LOCK_NAME)]!r} is being written by pid {held.get('pid', '?')} on host "
                f"{held.get('host', '?')!r} since {held.get('since', '?')}; wait for it to finish "
                "(the lock is released when that process exits)") from None
        note = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, note, 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (the file stays)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
