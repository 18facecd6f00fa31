"""Helpers of the tests that interrupt a command at a chosen moment."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def interrupted_as_it_ends() -> Iterator[None]:
    """A stand-in for `slackswap.interrupts.spawning` that has held a Ctrl-C while its block
    ran (workers started) and raises it as the block ends."""
    yield
    raise KeyboardInterrupt
