"""Helpers of the input-surface fuzz tests: run the CLI in this process and require one answer."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from slackswap.cli import main

#: The longest any command may take before it answers a bad input (seconds).
ANSWER_WITHIN_S = 10.0


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``slackswap ARGV``: it must exit 2 with one ``slackswap: error:`` line, within
    `ANSWER_WITHIN_S`; returns the line."""
    capsys.readouterr()
    t0 = time.monotonic()
    rc = main(argv)
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2, (argv, rc, err)
    lines = err.splitlines()
    assert lines and lines[-1].startswith("slackswap: error: "), err
    assert not any(line.startswith("Traceback") for line in lines), err
    assert sum(line.startswith("slackswap: error: ") for line in lines) == 1, err
    assert elapsed < ANSWER_WITHIN_S, (argv, elapsed)
    return lines[-1]


def null_device(path: Path) -> Path:
    """A copy of ``/dev/null`` at ``path`` (the test is skipped where mknod is not allowed)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    return path


def is_char_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)
