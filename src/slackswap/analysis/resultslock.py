"""One writer per results file, whatever name reaches it: a symbolic link, a hard link, ``..``.

Two locks, both held while a writer is open:

* a lock file beside the *resolved* path (``.NAME.lock`` next to the real file), so every name
  that resolves to the same place (links followed, ``..`` resolved) takes the same lock, even
  before the file exists;
* an exclusive ``flock`` on the results file itself (POSIX), which belongs to the file's inode:
  a hard link (another name, maybe in another directory, for the same inode) meets it too.

A writer that replaces its file (an atomic rewrite gives a new inode) calls `ResultsLock.hold`
with the new file so the second lock follows the data. ``--overwrite`` takes the same locks as
``--resume``: it never removes rows a running writer has reported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from slackswap.errors import UserError

try:
    import fcntl
except ImportError:  # Windows: the lock file beside the resolved path is what is left
    fcntl = None  # type: ignore[assignment]

BUSY = "another slackswap process is writing this results file"


def resolved(path: str | os.PathLike[str]) -> Path:
    """``path`` with every link and ``..`` resolved (the file a write through it reaches)."""
    return Path(os.path.realpath(path))


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file a writer of results file ``path`` holds (beside the file it resolves to)."""
    p = resolved(path)
    return p.with_name(f".{p.name}.lock")


class ResultsLock:
    """Held by one `ResultsWriter` from before it reads the file until it closes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._name_lock: Any = None
        # inode -> descriptor holding its flock: the file the writer found (other names may
        # still reach it after a rewrite gave the writer a new one) and the file it writes now
        self._held: dict[tuple[int, int], int] = {}
        self._first: tuple[int, int] | None = None

    def acquire(self) -> None:
        """Take both locks or raise `UserError` (one line) holding neither."""
        from filelock import FileLock, Timeout

        where = lock_path(self.path)
        lock = FileLock(str(where), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise UserError(
                f"{self.path}: {BUSY} (it holds {where}); wait for it to finish or write to "
                "another file"
            ) from None
        except OSError as exc:
            raise UserError(f"{self.path}: cannot write beside it ({exc.strerror})") from None
        self._name_lock = lock
        try:
            if self.path.exists():
                self.hold(self.path)
        except BaseException:
            self.release()
            raise

    def hold(self, path: str | os.PathLike[str]) -> None:
        """Lock the file now at ``path`` (its inode) too; a file held before that is neither
        the first nor this one is let go."""
        if fcntl is None:
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise UserError(f"{self.path}: cannot read ({exc.strerror})") from None
        st = os.fstat(fd)
        inode = (st.st_dev, st.st_ino)
        if inode in self._held:  # already ours (a second flock of it would meet our own)
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UserError(
                f"{self.path}: {BUSY} through another name (a link to the same file); wait "
                "for it to finish or write to another file"
            ) from None
        for old in [k for k in self._held if k != self._first]:
            os.close(self._held.pop(old))
        self._held[inode] = fd
        if self._first is None:
            self._first = inode

    def release(self) -> None:
        for fd in self._held.values():
            os.close(fd)  # closing the only descriptor ends its flock
        self._held, self._first = {}, None
        if self._name_lock is not None:
            self._name_lock.release()
            self._name_lock = None

    def __del__(self) -> None:
        # A writer dropped without close() lets go, as a killed process's locks go with it.
        self.release()
