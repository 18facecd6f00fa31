"""Run one call into a C++ engine (HiGHS, CP-SAT) so that Ctrl-C reaches Python while it runs.

Python runs its signal handlers in the main thread between bytecodes, so a long call into C++
made from the main thread defers Ctrl-C until it returns (HiGHS through scipy: up to the whole
time limit; CP-SAT by default even catches SIGINT itself and stops as if its time limit had
passed, so the solve went on and exited 0). Here the call runs in a worker thread (both engines
release the GIL while they work) and the main thread waits on it in short, interruptible joins:
SIGINT raises `KeyboardInterrupt` there at once. Before re-raising, ``on_interrupt`` asks the
engine to stop (CP-SAT's ``stop_search``) and the worker gets ``grace_s`` to return. An engine
that cannot be asked (HiGHS through scipy has no cancel hook) keeps running in its daemon
thread until its own time limit. ``slackswap solve`` then ends the process at once
(``os._exit``); any other program waits for such engines when it exits (an ``atexit`` hook),
since an interpreter that shuts down under a running C++ engine kills its thread mid-call and
aborts ("terminate called without an active exception", seen on a SIGINT during HiGHS).

Any other exception raised in the waiting thread (the sweep's wall-clock guard, `JobTimeout`)
waits for the engine to return first, as the call made directly did: the next job never runs
beside a leftover engine. Off the main thread (a sweep's worker threads) there is no signal to
wait for: a plain call.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds between the waiting main thread's looks at the worker (a bound on Ctrl-C's delay
#: should a platform not interrupt a timed join).
POLL_S = 0.05


#: Engine threads an interrupt left running (HiGHS, which cannot be cancelled).
_LEFT_RUNNING: list[threading.Thread] = []


def engines_left_running() -> int:
    """How many engine calls an interrupt left running in the background."""
    return sum(t.is_alive() for t in _LEFT_RUNNING)


@atexit.register
def _wait_for_engines() -> None:
    for worker in _LEFT_RUNNING:
        worker.join()


def call_interruptibly(
    fn: Callable[[], T],
    *,
    on_interrupt: Callable[[], object] | None = None,
    grace_s: float = 1.0,
) -> T:
    """``fn()``, run so that SIGINT raises `KeyboardInterrupt` in the main thread meanwhile."""
    if threading.current_thread() is not threading.main_thread():
        return fn()
    result: list[T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)

    worker = threading.Thread(target=work, name="slackswap-engine", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(POLL_S)
    except KeyboardInterrupt:
        if on_interrupt is not None:
            on_interrupt()
            worker.join(grace_s)
        if worker.is_alive():
            _LEFT_RUNNING.append(worker)
        raise
    except BaseException:
        worker.join()
        raise
    if failure:
        raise failure[0]
    return result[0]
