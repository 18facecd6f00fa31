"""Text files: a user's file read with one wording for what fails; a file written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from slackswap.errors import UserError


def read_user_text(
    path: str | os.PathLike[str], kind: str, error: type[Exception] = UserError
) -> str:
    """The UTF-8 text of ``path``; a directory, an unreadable file or bytes that are not UTF-8
    raise ``error`` with one line naming the file (``kind`` says what the file should have been,
    e.g. "a sweep file")."""
    p = Path(path)
    if p.is_dir():
        raise error(f"{p}: is a directory, not {kind}")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})") from None


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
