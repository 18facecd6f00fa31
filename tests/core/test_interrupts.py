"""Ctrl-C at any moment ends the command with one line and exit status 130, and no process it
started outlives it (Ctrl-C or ``kill -9``).

The windows are reached with ``SLACKSWAP_TEST_SLEEP_IN`` (see `slackswap.interrupts`): the
command sleeps inside one, writes a flag file when it gets there, and the test sends SIGINT at
several offsets into the sleep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import slackswap
from slackswap import interrupts
from slackswap._startup import started_as_command
from slackswap.cli import main

SRC = Path(slackswap.__file__).resolve().parents[1]
SOLVE = ["solve", "gpt2-xl", "--budget", "0.5", "--solver", "vdnn"]
# Islands in forked worker processes: the fork window, and workers to leave behind.
GA = ["solve", "gpt2-xl", "--budget", "0.5", "--solver", "ga", "--time-limit", "20",
      "--option", "islands=2", "--option", "n_jobs=2"]  # fmt: skip
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process checks")


def _start(
    argv: list[str], tmp_path: Path, window: str | None = None, seconds: float = 60
) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("SLACKSWAP_TEST_SLEEP_IN", None)
    if window:
        env["SLACKSWAP_TEST_SLEEP_IN"] = f"{window}:{seconds}"
        env["SLACKSWAP_TEST_SLEEP_FLAG"] = str(tmp_path / "flag")
    return subprocess.Popen(
        [sys.executable, "-m", "slackswap", *argv], env=env, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _wait_for(check, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < timeout, "never got there"
        time.sleep(0.02)


def _alive(pgid: int) -> list[str]:
    """Processes of the group ``pgid`` still running (zombies waiting to be reaped are not)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(f"{d.name} {(d / 'cmdline').read_bytes()[:120]!r}")
    return out


def _progress(line: str) -> bool:
    """A progress line: a phase ("... "), or the one-time notice of a cold numba cache (a
    fresh venv's first run compiles the planner or the simulator)."""
    return "..." in line or line.startswith("first run: compiling")


def _interrupted(proc: subprocess.Popen, *, group: bool = True) -> None:
    """Send SIGINT (to the whole group, as a terminal does) and check the ending."""
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)  # far less than the window's 60 s sleep
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines()[-1] == interrupts.LINE, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert [ln for ln in err.splitlines() if not _progress(ln)] == [interrupts.LINE], err


@LINUX
@pytest.mark.parametrize("offset", [0.0, 0.2])
@pytest.mark.parametrize("window", ["package", "start", "imports", "registry", "command"])
def test_ctrl_c_in_each_window_of_solve_is_one_line_and_130(tmp_path, window, offset) -> None:
    proc = _start(SOLVE, tmp_path, window)
    _wait_for((tmp_path / "flag").exists)
    time.sleep(offset)
    _interrupted(proc)
    time.sleep(0.5)
    assert _alive(proc.pid) == []


@pytest.mark.parametrize(
    "orig_argv,expected",
    [
        (["python", "-m", "slackswap", "solve"], True),
        (["python", "-X", "importtime", "-mslackswap.__main__"], True),
        (["/venv/bin/python", "/venv/bin/slackswap", "solve"], True),  # the console script
        (["python", "-m", "pytest", "-m", "slackswap"], False),
        (["python", "-c", "import slackswap", "-m", "slackswap"], False),
        (["python", "train.py", "slackswap"], False),
        (["python"], False),
    ],
)
def test_only_the_command_takes_sigint_at_the_package_import(orig_argv, expected) -> None:
    assert started_as_command(orig_argv) is expected


def test_a_library_import_leaves_sigint_alone() -> None:
    code = "import signal, slackswap; print(signal.getsignal(signal.SIGINT).__name__)"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.strip() == "default_int_handler"


@LINUX
# The later offset of each window runs with the slow tests (the fast suite's wall time).
@pytest.mark.parametrize("offset", [0.0, pytest.param(0.7, marks=pytest.mark.slow)])
@pytest.mark.parametrize("window", ["fork", "after-fork"])
def test_ctrl_c_inside_a_fork_is_held_then_ends_the_solve(tmp_path, window, offset) -> None:
    # Raised in an at-fork hook, KeyboardInterrupt would be "Exception ignored" and the search
    # would go on for its 20 s; held, it ends the process as the fork returns.
    env = {**os.environ, "PYTHONPATH": str(SRC), "SLACKSWAP_TEST_SLEEP_IN": f"{window}:1.5",
           "SLACKSWAP_TEST_SLEEP_FLAG": str(tmp_path / "flag")}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "slackswap", *GA], env=env, cwd=tmp_path, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _wait_for((tmp_path / "flag").exists)
    time.sleep(offset)
    t0 = time.monotonic()
    _interrupted(proc)
    assert time.monotonic() - t0 < 15  # not the 20 s search
    time.sleep(1.0)
    assert _alive(proc.pid) == []


@LINUX
# The two later moments run with the slow tests (the fast suite's wall time).
@pytest.mark.parametrize(
    "offset", [0.5, 2.0, *(pytest.param(x, marks=pytest.mark.slow) for x in (4.0, 6.0))]
)
def test_ctrl_c_into_compare_jobs_2_at_several_moments(tmp_path, offset) -> None:
    out = tmp_path / "r.csv"
    proc = _start(
        ["compare", "gpt2-xl", "--budgets", "0.5,0.6,0.7", "--solvers", "ga,vdnn",
         "--time-limit", "2", "--jobs", "2", "-o", str(out), "--no-progress"],
        tmp_path,
    )  # fmt: skip
    time.sleep(offset)
    _interrupted(proc)
    time.sleep(5.0)
    assert _alive(proc.pid) == []


@LINUX
@pytest.mark.parametrize("backend", ["joblib", pytest.param("dask", marks=pytest.mark.slow)])
def test_ctrl_c_while_compare_starts_its_workers_is_one_line_and_130(tmp_path, backend) -> None:
    # Held until the workers have started, then raised as the block ends: the jobs joblib
    # had dispatched, left to the collector, warned of themselves after the line.
    if backend == "dask":
        pytest.importorskip("dask.distributed")
    proc = _start(
        ["compare", "gpt2-xl", "--budgets", "0.5,0.6,0.7", "--solvers", "ga,vdnn",
         "--time-limit", "2", "--jobs", "2", "-o", str(tmp_path / "r.csv"), "--no-progress",
         "--backend", backend],
        tmp_path, "spawned", seconds=1.0,
    )  # fmt: skip
    _wait_for((tmp_path / "flag").exists)
    _interrupted(proc)
    time.sleep(5.0)
    assert _alive(proc.pid) == []


@LINUX
def test_ctrl_c_into_compare_on_dask_is_one_line_and_130(tmp_path) -> None:
    # While the jobs run, the cluster's workers logged a WARNING per task cancelled
    # and its close outlasted the watchdog; loky's and Python's trackers warned of what they
    # cleaned up. The line must still be the only one, and no worker outlive the command.
    pytest.importorskip("dask.distributed")
    proc = _start(
        ["compare", "gpt2-xl", "--budgets", "0.5,0.6,0.7", "--solvers", "ga,vdnn",
         "--time-limit", "2", "--jobs", "2", "-o", str(tmp_path / "r.csv"), "--no-progress",
         "--backend", "dask"],
        tmp_path,
    )  # fmt: skip
    time.sleep(4.0)
    _interrupted(proc)
    time.sleep(5.0)
    assert _alive(proc.pid) == []


@LINUX
@pytest.mark.parametrize("what", ["compare", "dask", pytest.param("ga", marks=pytest.mark.slow)])
def test_kill_9_leaves_no_worker_behind(tmp_path, what) -> None:
    out = tmp_path / "r.csv"
    argv = (
        ["compare", "gpt2-xl", "--budgets", "0.5,0.6,0.7,0.8", "--solvers", "ga",
         "--time-limit", "30", "--jobs", "2", "-o", str(out), "--no-progress"]
        if what != "ga"
        else GA
    )  # fmt: skip
    if what == "dask":
        pytest.importorskip("dask.distributed")
        argv += ["--backend", "dask"]
    proc = _start(argv, tmp_path)
    # Workers started (the loky ones may still be starting or idle: tied at start-up).
    _wait_for(lambda: len(_alive(proc.pid)) >= (2 if what == "ga" else 3))
    proc.kill()
    proc.communicate()
    time.sleep(5.0)
    assert _alive(proc.pid) == []


@pytest.fixture
def fresh_state(monkeypatch):
    for key in ("interrupted", "said"):
        monkeypatch.setitem(interrupts._state, key, False)


def _solve_func() -> str:
    from slackswap.cli import build_parser

    return build_parser().parse_args(SOLVE).func.__name__


def test_whatever_fails_after_a_ctrl_c_is_the_interrupt(monkeypatch, capfd, fresh_state):
    # An extension's import cut short by KeyboardInterrupt says "ImportError: initialization
    # failed"; after a Ctrl-C that is the interrupt, not a crash.
    import slackswap.commands.solve as solve_cmd

    def cut_short(args):
        interrupts._state["interrupted"] = True
        raise ImportError("initialization failed")

    monkeypatch.setattr(solve_cmd, _solve_func(), cut_short)
    assert main(SOLVE) == 130
    assert capfd.readouterr().err.strip() == interrupts.LINE


def test_a_swallowed_ctrl_c_still_ends_with_130(monkeypatch, capfd, fresh_state) -> None:
    import slackswap.commands.solve as solve_cmd

    def swallowed(args):
        interrupts._state["interrupted"] = True
        return 0  # the code it hit went on and finished

    monkeypatch.setattr(solve_cmd, _solve_func(), swallowed)
    assert main(SOLVE) == 130
    assert capfd.readouterr().err.strip() == interrupts.LINE


@LINUX
@pytest.mark.parametrize("window", ["exit", pytest.param("shutdown", marks=pytest.mark.slow)])
def test_ctrl_c_after_compare_jobs_2_returned_ends_after_the_clean_up(tmp_path, window) -> None:
    # The results are written: ending at once there left the workers' temporary folders for
    # loky's resource tracker to warn about; raised, it was an exit hook's traceback or an exit
    # by SIGINT itself; ignored, the status said nothing of the Ctrl-C.
    out = tmp_path / "r.csv"
    proc = _start(
        ["compare", "gpt2-xl", "--budgets", "0.5,0.6", "--solvers", "vdnn", "--jobs", "2",
         "-o", str(out), "--no-progress"],
        tmp_path, window, seconds=2,
    )  # fmt: skip
    _wait_for((tmp_path / "flag").exists)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "Warning" not in err, err
    lines = err.strip().splitlines()
    assert lines[-1] == interrupts.LINE and lines[-2].startswith("results: "), err
    assert len(out.read_text().splitlines()) == 1 + 2  # the header and both rows
    time.sleep(1.0)
    assert _alive(proc.pid) == []


@LINUX
def test_a_second_ctrl_c_while_closing_does_not_wait_for_the_clean_up(tmp_path) -> None:
    proc = _start(SOLVE, tmp_path, "shutdown", seconds=60)
    _wait_for((tmp_path / "flag").exists)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None  # the first waits for the clean-up (here: the 60 s sleep)
    _interrupted(proc)


_CTYPES_CALLBACK = """
import ctypes, os, signal, time
from slackswap import interrupts
interrupts.install()
interrupts.command_starts()
def callback():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100):  # the handler runs here, inside the callback
        time.sleep(0.01)
interrupts.begin_ending_at_once()
ctypes.CFUNCTYPE(None)(callback)()
interrupts.end_ending_at_once()
print("the compile went on", flush=True)
time.sleep(5)
"""


def test_ctrl_c_inside_a_ctypes_callback_of_a_compile_ends_at_once() -> None:
    """numba's LLVM calls back into Python through ctypes: a KeyboardInterrupt raised there
    would be "Exception ignored" (a traceback) and the compile would go on."""
    proc = subprocess.run(
        [sys.executable, "-c", _CTYPES_CALLBACK], env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.strip() == interrupts.LINE, proc.stderr
    assert "went on" not in proc.stdout


_SPAWNING = """
import os, signal, subprocess, sys, time
from slackswap import interrupts
interrupts.install()
interrupts.command_starts()
try:
    with interrupts.spawning():
        child = subprocess.run(
            [sys.executable, "-c", "print(open('/proc/self/status').read())"],
            capture_output=True, text=True, check=True,
        ).stdout
        blocked = [ln for ln in child.splitlines() if ln.startswith("SigBlk:")][0]
        print("child blocks SIGINT:", bool(int(blocked.split()[1], 16) & (1 << (signal.SIGINT - 1))))
        if sys.argv[1] in ("unblocked", "twice"):
            # What Python's multiprocessing.resource_tracker does as it starts its process
            # (3.11-3.13): block, spawn, then unblock, whatever the mask was before.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        for _ in range(2 if sys.argv[1] == "twice" else 1):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(50):
                time.sleep(0.01)
        print("the window ran to its end", flush=True)
except KeyboardInterrupt:
    print("interrupted after the window", flush=True)
    interrupts.exit_now()
print("the Ctrl-C was lost", flush=True)
"""


@LINUX
@pytest.mark.parametrize("mask", ["blocked", "unblocked", "twice"])
def test_a_ctrl_c_while_workers_start_is_held_to_the_windows_end_not_lost(mask: str) -> None:
    """Workers start inside `spawning` with SIGINT blocked, so none prints a traceback while it
    imports. A Ctrl-C meanwhile ends the command when the window ends, also when a library in
    the window unblocked SIGINT (Python's resource tracker does): the window ignored SIGINT
    before, and such a Ctrl-C was lost (`compare --jobs 2` ran to its end, exit status 0).
    ``twice``: a second Ctrl-C in the window keeps the first held."""
    proc = subprocess.run(
        [sys.executable, "-c", _SPAWNING, mask], env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines == ["child blocks SIGINT: True", "the window ran to its end",
                     "interrupted after the window"], proc.stdout  # fmt: skip
    assert proc.stderr.strip() == interrupts.LINE, proc.stderr


def test_numba_compiles_inside_the_warm_up_end_at_once_on_ctrl_c() -> None:
    from numba import njit
    from numba.core import event

    from slackswap.analysis.warmup import _watch_numba

    seen: list[bool] = []

    class Probe(event.Listener):  # registered after the warm-up's: sees its state
        def on_start(self, ev) -> None:
            seen.append(interrupts.ends_at_once())

        def on_end(self, ev) -> None:
            pass

    @njit(cache=False)
    def double(x: int) -> int:
        return 2 * x

    probe = Probe()
    with _watch_numba(None):
        event.register("numba:compile", probe)
        try:
            assert double(21) == 42
        finally:
            event.unregister("numba:compile", probe)
    assert seen and all(seen)
    assert not interrupts.ends_at_once()


def test_the_solver_modules_import_ending_at_once_on_ctrl_c(monkeypatch) -> None:
    """A sweep completes the registry inside the command; OR-Tools' extension calls protobuf's
    ``descriptor_pool.Default`` from C++ as it initialises and prints, as a traceback, a
    KeyboardInterrupt raised there (CI, ``compare --jobs 2`` interrupted at 2 s)."""
    import importlib

    import slackswap.solvers as solvers

    real = importlib.import_module
    seen: dict[str, bool] = {}

    def watched(name: str, package: str | None = None):
        seen[name] = interrupts.ends_at_once()
        return real(name, package)

    monkeypatch.setattr(solvers, "_loaded", False)
    monkeypatch.setattr(importlib, "import_module", watched)
    solvers.load_solver_modules()
    assert set(solvers.SOLVER_MODULES) <= set(seen)
    assert all(seen.values()), seen
    assert not interrupts.ends_at_once()


@pytest.mark.parametrize(
    "argv,status",
    [
        (SOLVE, 0),
        (["solve", "gpt2-xl", "--budget", "1%", "--solver", "vdnn"], 1),  # no plan fits
        (["solve", "gpt2-xl", "--budget", "nope"], 2),
    ],
)
def test_the_last_exit_hook_ends_with_the_commands_own_status(tmp_path, argv, status) -> None:
    # The hook ends the process itself (no interpreter teardown, where a Ctrl-C was a death by
    # the signal), with what the command wrote flushed.
    proc = _start(argv, tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, (proc.returncode, err)
    if status == 0:
        assert out.strip(), "the command's output was lost"


# A command that ends at once (a second Ctrl-C, the watchdog, a Ctrl-C in numba's compiler)
# skips the exit hooks that remove loky's semaphores: loky's resource tracker removes them.
_ENDS_AT_ONCE = """
import os, sys
from slackswap import interrupts
from slackswap.interrupts import trackers_quiet_about_leaks
from joblib.externals.loky.backend import resource_tracker
from joblib.externals.loky.backend.synchronize import Lock
if sys.argv[1] == "command":
    interrupts.install()
    interrupts.command_starts()
with trackers_quiet_about_leaks():
    resource_tracker.ensure_running()
lock = Lock()
print(lock._semlock.name[1:], flush=True)
interrupts.exit_now()
"""


@LINUX
@pytest.mark.parametrize("caller", ["command", "library"])
def test_a_command_that_ends_at_once_leaves_loky_to_clean_up_without_a_word(caller) -> None:
    pytest.importorskip("joblib")
    proc = subprocess.run(
        [sys.executable, "-c", _ENDS_AT_ONCE, caller], env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    semaphore = Path("/dev/shm") / f"sem.{proc.stdout.strip()}"
    _wait_for(lambda: not semaphore.exists(), timeout=10)  # the tracker removed it
    if caller == "command":
        assert proc.stderr.splitlines() == [interrupts.LINE], proc.stderr
    else:  # a library caller's tracker warns as loky's does (the check above can fail)
        assert "leaked semlock" in proc.stderr, proc.stderr
