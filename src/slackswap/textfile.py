"""Reading a user's text file (instance, sweep or results file) with one wording for what fails."""

from __future__ import annotations

import os
from pathlib import Path

from slackswap.problem import UserError


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
