"""Ctrl-C at any moment ends the ``slackswap`` command with one line and exit status 130, and
the processes it starts never outlive it.

SIGINT is taken as early as a program can: the package's ``__init__``, the first code of ours
both ``python -m slackswap`` and the console script run, takes it when started as the command
(`slackswap._startup`), and `install` (the entry point's first statement) puts this module's
handler in its place. Only the interpreter's own start-up comes before (about 10 ms here: a
Ctrl-C there is Python's traceback, or a death by the signal before Python has a handler). Then:

* until the command itself runs (interpreter start, the imports of numpy, OR-Tools and the
  solver registry, building the parser) a Ctrl-C ends the process at once: a
  `KeyboardInterrupt` raised inside an extension module's initialisation would come out as
  ``ImportError: initialization failed``, and nothing needs cleaning yet;
* while the command runs, a Ctrl-C raises `KeyboardInterrupt` so that files are closed and
  workers stopped, and arms a watchdog: should the exception be swallowed (Python ignores one
  raised in an at-fork hook or a ``__del__``) or the clean-up hang, the process still ends,
  ``GRACE_S`` seconds later;
* inside ``os.fork`` (the fork and every at-fork hook) a Ctrl-C is held and ends the process
  as the call returns; while worker processes start (`spawning`) it is held and raised as the
  window closes; inside numba's compiler and the solver modules' import, which a sweep does
  inside the command (`begin_ending_at_once`), it ends the process at once;
* once the command has returned (its output written; the interpreter shutting down, exit hooks
  stopping workers and removing their temporary folders) a Ctrl-C lets that clean-up finish,
  then ends the process with the line and 130 (see `command_ends`; a second Ctrl-C ends it at
  once). A Ctrl-C that came before and was swallowed still makes the status 130.

Worker processes (loky, Dask, the genetic search's islands) call `tie_to_parent` first: they
ignore SIGINT (a terminal sends it to the whole process group; the parent stops them) and die
with the parent, even one killed with ``kill -9``.

``SLACKSWAP_TEST_SLEEP_IN=WINDOW[:SECONDS]`` makes `window` sleep in the named window, so tests
can send SIGINT inside each one at will. The windows: ``package`` (the package's import, just
after its early `install`), ``start`` (before the command line's
modules are imported), ``imports`` (before the parser and its commands), ``registry`` (before
the solver modules and OR-Tools), ``command`` (the command runs), ``fork`` (inside ``os.fork``,
in its at-fork hooks), ``after-fork`` (in an at-fork hook registered after ours, in the parent),
``spawned`` (the end of a `spawning` block, its workers started, a Ctrl-C held),
``exit`` (the command has returned), ``shutdown`` (the entry point is about to return to the
interpreter, whose shutdown runs exit hooks and joins workers).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from slackswap._startup import EXIT_INTERRUPTED, LINE, window

#: Seconds a Ctrl-C leaves the command to clean up before the process is ended regardless.
GRACE_S = 2.0
#: The same once the command has returned: stopping workers and removing their temporary
#: folders takes up to a few seconds on a loaded machine, and ending before it leaves them to
#: loky's resource tracker (a warning). A second Ctrl-C ends the process at once.
CLOSING_GRACE_S = 20.0
#: Seconds between a worker's looks at its parent (where the kernel cannot be asked to tell).
PARENT_POLL_S = 0.5

_PR_SET_PDEATHSIG = 1
_state: dict[str, Any] = {
    "installed": False,  # the handler is ours (the command line, not a library caller)
    "soft": False,  # the command runs: raise KeyboardInterrupt rather than end at once
    "in_fork": 0,  # inside os.fork's hooks: hold the signal
    "at_once": 0,  # inside code that cannot take a KeyboardInterrupt: end at once
    "closing": False,  # the command has returned: let the clean-up finish, then end with 130
    "hit_closing": False,  # a Ctrl-C came while closing
    "status": None,  # the command's exit status, once it has returned
    "held": False,  # a signal came inside os.fork
    "spawning": 0,  # inside `spawning`: hold the signal to the window's end
    "held_spawning": False,  # a signal came inside `spawning`
    "interrupted": False,
    "said": False,
    "pid": 0,
}


def install() -> None:
    """Take SIGINT for the ``slackswap`` command (see the module docstring)."""
    first = not _state["installed"]
    _state.update(installed=True, soft=False, pid=os.getpid())
    signal.signal(signal.SIGINT, _on_sigint)
    if first and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_fork_before, after_in_child=_fork_child)
        os.fork = _forking()
    if first:
        # Registered before any library's: exit hooks run last-registered first, so this one
        # runs after the hooks that stop workers and remove their temporary folders.
        atexit.register(_after_the_clean_up)


def command_starts() -> None:
    """From now on a Ctrl-C raises `KeyboardInterrupt` (with the watchdog) so clean-up runs."""
    if _state["installed"]:
        _state["soft"] = True
        if os.environ.get("SLACKSWAP_TEST_SLEEP_IN", "").startswith("after-fork"):
            # A hook registered after ours, as logging's lock release or a thread pool's is.
            os.register_at_fork(after_in_parent=lambda: window("after-fork"))


def command_ends() -> None:
    """The command has returned, its output written: a Ctrl-C from now on lets the clean-up
    finish and then ends the process with the line and exit status 130 (`_after_the_clean_up`,
    the last exit hook; a second Ctrl-C, or the watchdog after ``CLOSING_GRACE_S``, ends it at
    once). Raised in the interpreter's shutdown it was a traceback from an exit hook (or, once
    Python has put back the default action, an exit by the signal), and ending at once would
    skip the exit hooks that stop the workers and remove their temporary folders and
    semaphores (loky's resource tracker then warns of them)."""
    if _state["installed"]:
        _state["closing"] = True


def was_interrupted() -> bool:
    """Whether a Ctrl-C came (any exception after one is its consequence, not a new error)."""
    return bool(_state["interrupted"])


def say_interrupted() -> None:
    """Write the one line, once, whoever comes first (the command or the watchdog)."""
    if _state["said"]:
        return
    _state["said"] = True
    if threading.current_thread() is threading.main_thread():
        # What the command wrote first goes first. Not from the watchdog's thread: the main
        # thread may hold the stream's lock, blocked on a full pipe.
        try:
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - inside a signal handler: a reentrant flush
            pass
    try:
        os.write(2, (LINE + "\n").encode())
    except OSError:
        pass


def exit_now() -> NoReturn:
    """The line and exit status 130, now: no interpreter shutdown (nothing it would wait for)."""
    say_interrupted()
    os._exit(EXIT_INTERRUPTED)


def _on_sigint(signum: int, frame: Any) -> None:
    if os.getpid() != _state["pid"]:  # a forked child that kept the handler: not our command
        return
    first = not _state["interrupted"]
    _state["interrupted"] = True
    if _state["closing"]:  # no exception: it would come out of an exit hook
        if _state["hit_closing"]:  # a second Ctrl-C: the clean-up is not waited for
            exit_now()
        _state["hit_closing"] = True
        _arm_watchdog(CLOSING_GRACE_S)
        return
    if _state["in_fork"]:
        _state["held"] = True
        return
    if _state["spawning"]:
        if first:  # a later one finds the first held, or the watchdog armed
            _state["held_spawning"] = True
        return
    _interrupt(first)


def _interrupt(first: bool) -> None:
    """End at once, or raise `KeyboardInterrupt` with the watchdog armed (once)."""
    if not _state["soft"] or _state["at_once"]:
        exit_now()
    if not first:  # the watchdog is armed: the process ends within GRACE_S whatever happens
        return
    _arm_watchdog()
    raise KeyboardInterrupt


def set_exit_status(status: int) -> None:
    """The command's exit status, for `_after_the_clean_up` to end the process with."""
    _state["status"] = status


def _after_the_clean_up() -> None:
    """The last exit hook: nothing of ours runs after it, so it ends the process itself, with
    what the command wrote flushed: exit status 130 and the line after a Ctrl-C (while the
    command ran, or while it was closing), else the command's own status (`set_exit_status`).

    Left to the interpreter, both endings went wrong (measured, Ctrl-C's into ``solve`` at 0.4-
    1.3 s under load): its exit turned the status into a death by SIGINT whenever it held a
    `KeyboardInterrupt` it considered unhandled, even one the command caught (2 of 30); and it
    puts SIGINT's default action back before its module teardown (about 0.2 s, the freeing of
    numba's and LLVM's modules), so a Ctrl-C there, after the command's output was complete,
    was a death by the signal. Only objects that still buffer data at this point
    would lose it, and the command closes every file it writes (results atomically)."""
    if os.getpid() != _state["pid"]:
        return
    status = EXIT_INTERRUPTED if _state["interrupted"] else _state["status"]
    if status is None:  # not the command line's entry point: let the interpreter end it
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream: nothing more to write
            pass
    if status == EXIT_INTERRUPTED:
        exit_now()
    os._exit(status)


def begin_ending_at_once() -> None:
    """Until the matching `end_ending_at_once`, a Ctrl-C ends the process at once (the line,
    exit status 130), as before the command runs. For code that cannot take a
    `KeyboardInterrupt` and writes nothing of ours meanwhile: numba's compiler, whose LLVM
    calls back into Python through ctypes (an exception raised there is "Exception ignored",
    a traceback, and the compile goes on until the watchdog). Pairs nest."""
    _state["at_once"] += 1


def end_ending_at_once() -> None:
    """The end of a `begin_ending_at_once`."""
    _state["at_once"] = max(0, _state["at_once"] - 1)


def ends_at_once() -> bool:
    """Whether a Ctrl-C now would end the process at once (inside `begin_ending_at_once`)."""
    return bool(_state["at_once"])


def _arm_watchdog(seconds: float = GRACE_S) -> None:
    watchdog = threading.Timer(seconds, exit_now)
    watchdog.daemon = True
    watchdog.start()


def _fork_before() -> None:
    window("fork")  # inside os.fork, among the other at-fork hooks


def _forking() -> Any:
    """`os.fork` with every at-fork hook inside the held window: hooks run in registration
    order after the fork (logging's lock release, the thread pools' ...), and a
    KeyboardInterrupt raised in any of them would be "Exception ignored" and the command would
    go on. So the whole call is the window, not a hook of it."""
    real = os.fork

    def fork() -> int:
        _state["in_fork"] += 1
        try:
            pid = real()
        finally:
            _state["in_fork"] -= 1
        if pid and _state["held"] and not _state["in_fork"]:
            exit_now()  # the child ties itself to this process and dies with it
        return pid

    fork.__wrapped__ = real  # type: ignore[attr-defined]
    return fork


def _fork_child() -> None:
    _state["in_fork"] = 0
    _state["held"] = False
    if _state["installed"] and _state["pid"] and os.getpid() != _state["pid"]:
        tie_to_parent(_state["pid"])


_TIED_TO = 0


def tie_to_parent(parent_pid: int | None = None) -> None:
    """Make this worker process ignore SIGINT and end when ``parent_pid`` (its parent; None:
    whichever process is its parent now) dies.

    On Linux the kernel sends SIGKILL at the parent's death (``PR_SET_PDEATHSIG``); elsewhere a
    daemon thread polls the parent's pid. A worker whose parent is already gone exits now.
    Once per process."""
    global _TIED_TO
    if parent_pid is None:
        parent_pid = os.getppid()
    if _TIED_TO == parent_pid:
        return
    _TIED_TO = parent_pid
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # here: the command's start-up imports this module first thing

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):  # no prctl (an unusual libc): the watcher instead
            pass
    if os.getppid() != parent_pid:  # the parent died before the worker was tied
        os._exit(1)
    if not armed:
        # Only where the kernel cannot do it: a thread would make the genetic search's
        # islands start fresh interpreters instead of forking (see `fork_available`).
        watcher = threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True)
        watcher.start()


@contextmanager
def spawning() -> Iterator[None]:
    """Start worker processes inside this: they begin life with SIGINT blocked (a blocked
    signal stays blocked through fork and exec, and Python leaves the mask as it is) until
    `tie_to_parent` ignores it, so a terminal's Ctrl-C, sent to the whole process group, cannot
    print a traceback from a worker still importing; the parent stops them.

    A Ctrl-C meanwhile waits for the end of the block (this thread blocks SIGINT; one the
    handler sees from another thread is held) and then ends the command. Not ignored: a
    library in the window may unblock SIGINT (Python's ``multiprocessing.resource_tracker``
    unblocks it after starting its process, whatever the mask was before), and an ignored
    Ctrl-C delivered then is lost (``compare --jobs 2`` ran to its end, exit status 0)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        yield
        return
    # Started here, before the block: as it starts its process, Python's resource tracker
    # unblocks SIGINT (3.11-3.13), and the workers started after it in the window would begin
    # life with it unblocked. Every caller's workers need it (loky's, Dask's and the genetic
    # search's spawned islands use its semaphores or shared memory); a caller whose library
    # has a tracker of its own that does the same starts that one first (`analysis.runner`).
    from multiprocessing import resource_tracker

    with trackers_quiet_about_leaks():
        resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    _state["spawning"] += 1
    try:
        yield
        window("spawned")
    finally:
        _state["spawning"] -= 1
        # A Ctrl-C still pending runs the handler as the mask comes back (not held now).
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if _state["held_spawning"] and not _state["spawning"]:
        _state["held_spawning"] = False
        _interrupt(True)


#: A warnings filter (``-W``) for a resource tracker's process: the warnings its shutdown
#: writes start "resource_tracker:" (a message field cannot hold the colon after it).
TRACKER_LEAK_FILTER = "ignore:resource_tracker:UserWarning"


@contextmanager
def trackers_quiet_about_leaks() -> Iterator[None]:
    """Start a resource tracker's process (Python's, loky's) inside this, and for the command
    line it does not warn of what it cleans up: semaphores and folders whose owner ended at
    once (a second Ctrl-C, the watchdog, a Ctrl-C in numba's compiler: `exit_now`, which skips
    the exit hooks that remove them). It still removes them (its purpose); its warning, written
    after the command's one line, broke the one-line ending. Both trackers start their process
    with the interpreter's ``-W`` options (``sys.warnoptions``). Outside the command line
    (`install` not called) the trackers start as they would."""
    if not _state["installed"] or TRACKER_LEAK_FILTER in sys.warnoptions:
        yield
        return
    sys.warnoptions.append(TRACKER_LEAK_FILTER)
    try:
        yield
    finally:
        sys.warnoptions.remove(TRACKER_LEAK_FILTER)


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)
