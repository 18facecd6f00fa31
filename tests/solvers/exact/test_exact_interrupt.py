"""Ctrl-C during ``slackswap solve --solver milp|cpsat`` stops within 2 s: ``interrupted``, 130.

HiGHS (through scipy) and CP-SAT run in C++, where Python does not see a signal until the call
returns; CP-SAT by default even catches SIGINT itself and goes on. The CLI runs under a small
wrapper that prints a marker to stderr when the engine under test is first entered (around the
engine's own entry point, so it works whichever way the solver calls it); SIGINT is sent while
the engine works.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slackswap.instances.catalog import build_model

SCRIPT = """
import sys, threading
from slackswap.solvers.exact import _lp as _exact_lp
from ortools.sat.python import cp_model

entered = set()

def marking(name, fn):
    def wrapper(*args, **kwargs):
        if name not in entered:
            entered.add(name)
            print("ENTERED " + name, file=sys.stderr, flush=True)
        return fn(*args, **kwargs)
    return wrapper

_exact_lp.linprog = marking("highs-lp", _exact_lp.linprog)
_exact_lp.milp = marking("highs-mip", _exact_lp.milp)
cp_model.CpSolver.solve = marking("cp-sat", cp_model.CpSolver.solve)

from slackswap.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: Seconds the engine runs before the signal, and the most the process may take after it.
IN_ENGINE_S = 0.5
STOP_WITHIN_S = 2.0


def _interrupt(tmp_path: Path, engine: str, argv: list[str]) -> tuple[int, float, str]:
    """Start ``slackswap ARGV``, SIGINT it once ``engine`` has run a moment; (status, seconds
    from the signal to the exit, stderr)."""
    script = tmp_path / "solve.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.strip() == f"ENTERED {engine}":
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(120), f"{engine} never ran: {''.join(lines)}"
        time.sleep(IN_ENGINE_S)
        assert proc.poll() is None, f"the solve ended before the signal: {''.join(lines)}"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        finally:
            waited = time.monotonic() - t0
        reader.join(5)
        return proc.returncode, waited, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    ("engine", "options"),
    [
        # the relaxation's row generation on GPT-2 XL at 30%: HiGHS rounds of about 2 s each
        ("highs-lp", []),
        # the binary version, one HiGHS call for the rest of the minute (no local search first)
        ("highs-mip", ["--option", "search=false"]),
    ],
)
def test_ctrl_c_stops_milp_inside_highs(tmp_path: Path, engine: str, options: list[str]) -> None:
    argv = ["solve", "gpt2-xl", "--budget", "0.3", "--solver", "milp", "--time-limit", "60"]
    code, waited, err = _interrupt(tmp_path, engine, [*argv, *options])
    assert code == 130, err
    assert waited < STOP_WITHIN_S, (waited, err)
    assert "slackswap: interrupted" in err and "Traceback" not in err


def test_ctrl_c_stops_cpsat_inside_cp_sat(tmp_path: Path) -> None:
    # 14 saved tensors: the no-good loop, one CP-SAT solve after another for most of a minute
    path = tmp_path / "gpt2-1.json"
    build_model("gpt2-xl", layers=1, seq=128, batch=2, name="gpt2-1").save(path)
    argv = ["solve", str(path), "--budget", "0.8", "--solver", "cpsat", "--time-limit", "60"]
    argv += ["--option", "hint=none"]
    code, waited, err = _interrupt(tmp_path, "cp-sat", argv)
    assert code == 130, err
    assert waited < STOP_WITHIN_S, (waited, err)
    assert "slackswap: interrupted" in err and "Traceback" not in err


def test_an_interrupt_in_a_library_call_stops_cp_sat(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a library call (a notebook's interrupt), `KeyboardInterrupt` reaches the caller
    promptly and CP-SAT is asked to stop, not left searching in the background."""
    from ortools.sat.python import cp_model

    from slackswap.solvers import run
    from slackswap.solvers.exact._interrupt import engines_left_running

    entered = threading.Event()
    real = cp_model.CpSolver.solve

    def marked(self: cp_model.CpSolver, *args: object, **kwargs: object) -> object:
        entered.set()
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cp_model.CpSolver, "solve", marked)

    sent: list[float] = []

    def interrupt() -> None:
        if entered.wait(120):
            time.sleep(IN_ENGINE_S)
            sent.append(time.monotonic())
            signal.raise_signal(signal.SIGINT)

    inst = build_model("gpt2-xl", layers=1, seq=128, batch=2, name="gpt2-1")
    sender = threading.Thread(target=interrupt, daemon=True)
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        run(inst, 0.8, "cpsat", time_limit=60.0, options={"hint": "none"})
    stopped_at = time.monotonic()
    sender.join()
    assert sent, "CP-SAT never ran"
    assert stopped_at - sent[0] < STOP_WITHIN_S
    assert engines_left_running() == 0  # stop_search ended it
