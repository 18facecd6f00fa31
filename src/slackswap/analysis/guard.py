"""The wall-clock guard's timer: `alarm` raises `JobTimeout` inside a call that runs past its
seconds (``SIGALRM``; a process's main thread only, `can_alarm`). Python checks signals between
bytecodes, so a call stuck in one long C call is stopped when that call returns."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class JobTimeout(BaseException):
    """Raised by the wall-clock guard; a BaseException so `run`'s ``except Exception`` lets it by."""


def can_alarm() -> bool:
    """Whether `alarm` works here: a platform with ``setitimer``, in the main thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise `JobTimeout` inside the body once ``seconds`` of wall clock have passed."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise JobTimeout(f"wall-clock guard: the job ran past {seconds:g} s and was stopped")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
