"""One validation for every entry point: ``solve``, ``compare``, sweep files and `Sweep` refuse
the same bad values with the same words, before any work, and nothing unreadable is written."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import slackswap
from slackswap.analysis.jobs import SolverSpec, Sweep, parse_budgets, ref_from_arg
from slackswap.analysis.runner import run_sweep
from slackswap.analysis.sweepfile import load_sweep
from slackswap.cli import main
from slackswap.errors import UserError

SRC = Path(slackswap.__file__).resolve().parents[1]  # the slackswap under test


pytestmark = pytest.mark.usefixtures("toys")  # the toy solvers, registered (conftest)


def error_of(argv: list[str], capsys) -> str:
    """The one error line of a refused command (exit 2), without the ``slackswap: error:``."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("slackswap: error: ") and err.count("\n") == 1, err
    return err.removeprefix("slackswap: error: ").strip()


SOLVE = ["solve", "vgg16", "--solver", "checkpoint"]
COMPARE = ["compare", "vgg16", "--solvers", "checkpoint", "--no-progress"]


@pytest.mark.parametrize("budget", ["abc", "-1", "0", "nan", "inf", "1e30GB", "abc%"])
def test_a_bad_budget_reads_the_same_in_solve_and_compare(capsys, budget) -> None:
    in_solve = error_of([*SOLVE, "--budget", budget], capsys)
    in_compare = error_of([*COMPARE, "--budgets", budget], capsys)
    assert in_solve == in_compare
    assert in_solve.startswith(f"budget {budget!r}: ") and in_solve.count("budget") == 1


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--time-limit", "nan"), ("--time-limit", "inf"), ("--time-limit", "-1"),
     ("--time-limit", "abc"), ("--seed", "-1"), ("--seed", "99999999999999999999")],
)  # fmt: skip
def test_solve_and_compare_refuse_the_same_values_in_the_same_words(capsys, flag, value):
    in_solve = error_of([*SOLVE, "--budget", "0.5", flag, value], capsys)
    cflag = "--seeds" if flag == "--seed" else flag
    in_compare = error_of([*COMPARE, "--budgets", "0.5", cflag, value], capsys)
    assert in_solve.replace(flag, cflag) == in_compare


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-3"])
def test_compare_refuses_a_bad_job_timeout(capsys, value) -> None:
    assert "--job-timeout" in error_of(
        [*COMPARE, "--budgets", "0.5", "--job-timeout", value], capsys
    )


def test_an_unreadable_row_is_never_written(tmp_path, capsys) -> None:
    out = tmp_path / "r.csv"
    for budgets, seeds in (("1e30GB", "0"), ("1e30", "0"), ("0.5", "99999999999999999999")):
        error_of([*COMPARE, "--budgets", budgets, "--seeds", seeds, "-o", str(out)], capsys)
    assert not out.exists()


def test_an_absurd_budget_range_is_refused_before_it_is_expanded() -> None:
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="900,000,001 budgets"):
        parse_budgets("1:0.1:-1e-9")
    assert time.perf_counter() - t0 < 1.0  # counted, not built (it was 9e8 strings)
    with pytest.raises(UserError, match="too many budgets"):
        parse_budgets("1:1e308:1e-308")  # a count that overflows to inf
    with pytest.raises(UserError, match="reaches 0: budgets must be > 0"):
        parse_budgets("0.2:0:-0.1")  # its last point was 2.8e-17, a budget of 0 bytes


def test_the_library_sweep_checks_what_the_cli_checks() -> None:
    ref = ref_from_arg("vgg16")
    for bad in (
        {"time_limit": float("nan")},
        {"job_timeout": float("inf")},
        {"seeds": [-1]},
        {"seeds": [2**64]},
        {"find_min_budget": "false"},
        {"budgets": ["1e+30"]},
    ):
        sweep = Sweep([ref], ["0.5"], [SolverSpec.of("checkpoint")])
        for k, v in bad.items():
            setattr(sweep, k, v)
        with pytest.raises(UserError):
            sweep.check()
        with pytest.raises(UserError):  # nor can a runner skip the check
            run_sweep(sweep, progress=False)
    import numpy as np

    fine = Sweep([ref], ["0.5"], [SolverSpec.of("checkpoint")], seeds=[np.int64(3)])
    fine.time_limit, fine.find_min_budget = np.float64(2.0), np.bool_(False)
    assert fine.check() == [] and fine.seeds == [3]  # numpy numbers from code are numbers


def test_budgets_above_p_are_warned_about(capsys) -> None:
    assert main([*SOLVE, "--budget", "150%"]) == 0
    err = capsys.readouterr().err
    assert "warning: budget 150% is above the no-swap peak P (vgg16: 150%)" in err
    assert main([*COMPARE, "--budgets", "150%,0.5"]) == 0
    err = capsys.readouterr().err
    assert "warning: budget 150% is above the no-swap peak P (vgg16: 150%)" in err
    assert "budget 0.5" not in err


BARE_50 = (
    "50: "
    "a bare number above 1 is not a budget: write a fraction of P up to 1 (0.5), a percentage "
    "(50%, or 150% above P) or bytes (11GB, 11e9B, 16GiB)"
)


@pytest.mark.parametrize(
    "argv",
    [
        [*SOLVE, "--budget", "50"],
        ["simulate", "vgg16", "plan.json", "--budget", "50"],
        [*COMPARE, "--budgets", "0.5,50"],
        [*COMPARE, "--budgets", "50:10:-10"],
        ["reproduce", "gaps", "--instances", "vgg16", "--budgets", "50", "--solvers", "milp"],
    ],
)
def test_a_bare_number_above_one_is_refused_at_the_cli(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(BARE_50), err


def test_a_bare_number_above_one_is_refused_in_a_sweep_file(tmp_path, capsys) -> None:
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('instances = ["vgg16"]\nbudgets = [0.5, 50]\nsolvers = ["checkpoint"]\n')
    assert main(["compare", "--sweep", str(sweep)]) == 2
    assert capsys.readouterr().err.strip() == f"slackswap: error: {sweep}: {BARE_50}"


BASE = 'instances = ["vgg16"]\nbudgets = [0.5]\n'
GRID = "[[grid]]\nmodel = 'gpt2-xl'\n"
MANY = "[" + ",".join(str(i) for i in range(1, 200)) + "]"
# case: (file name, text, words the one-line error must hold)
SWEEPS = {
    "time_limit = nan": ("s.toml", BASE + 'solvers = ["checkpoint"]\ntime_limit = nan\n',
                         "time_limit: expected a positive number of seconds"),
    "job_timeout = inf": ("s.toml", BASE + 'solvers = ["checkpoint"]\njob_timeout = inf\n',
                          "job_timeout: expected a positive number of seconds"),
    'min_budget = "false"': ("s.toml", BASE + 'solvers = ["checkpoint"]\nmin_budget = "false"\n',
                             "min_budget: expected true or false, got 'false'"),
    "seeds = [-1]": ("s.toml", BASE + 'solvers = ["checkpoint"]\nseeds = [-1]\n',
                     "seeds: expected an integer seed from 0 to 4294967295, got -1"),
    "pop_size = abc": ("s.toml", BASE + 'solvers = [{name = "ga", options = {pop_size = "abc"}}]\n',
                       "solver 'ga' option pop_size: expected a non-negative integer"),
    'grid seq = "abc"': ("s.toml", 'budgets = [0.5]\nsolvers = ["checkpoint"]\n' + GRID
                         + 'seq = "abc"\n', "grid: seq: expected a positive integer, got 'abc'"),
    "absurd grid": ("s.toml", 'budgets = [0.5]\nsolvers = ["checkpoint"]\n' + GRID
                    + f"seq = {MANY}\nbatch = {MANY}\n", "make more than 10,000 instances"),
    "output = 3": ("s.toml", BASE + 'solvers = ["checkpoint"]\noutput = 3\n',
                   "output: expected a file name, got 3"),
    "non-UTF-8": ("s.toml", b"budgets = [0.5]\n# \xff\xfe\n", "not UTF-8"),
    "YAML 5000 deep": ("s.yaml", "budgets: " + "[" * 5000 + "]" * 5000 + "\n", "s.yaml: "),
    # loads (tomllib and every libyaml bound deeper), refused by the sweep file's own depth check
    "TOML 40 deep": ("s.toml", "budgets = " + "[" * 40 + "]" * 40 + "\n", "nested too deeply"),
    "a directory": ("x.toml", None, "is a directory"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SWEEPS))
def test_a_bad_sweep_file_is_one_line(tmp_path, capsys, case) -> None:
    name, text, words = SWEEPS[case]
    path = tmp_path / name
    if text is None:
        path.mkdir()
    elif isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(UserError, match=re.escape(words)):
        load_sweep(path).check()
    assert words in error_of(["compare", "--sweep", str(path), "--no-progress"], capsys)


@pytest.mark.parametrize(
    "option", ["guard=-1", "guard=NaN", 'oversubscribe="no"', "max_rounds=1.5", "pass1=1"]
)
def test_solver_options_are_type_checked(capsys, option) -> None:
    in_solve = error_of(["solve", "vgg16", "--budget", "0.5", "--option", option], capsys)
    assert in_solve.startswith(f"solver 'slackswap' option {option.split('=')[0]}: expected")
    in_compare = error_of(
        [*COMPARE[:2], "--solvers", "slackswap", "--budgets", "0.5", "--option",
         f"slackswap.{option}"], capsys,
    )  # fmt: skip
    assert in_compare == in_solve


@pytest.mark.parametrize("where", ["directory", "empty", "unwritable"])
def test_solve_output_is_checked_before_the_work(tmp_path, capsys, where) -> None:
    if where == "directory":
        out = str(tmp_path)
    elif where == "empty":
        out = ""
    else:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        out = str(blocker / "plan.json")  # a file where a folder should be
    msg = error_of([*SOLVE, "--budget", "0.5", "-o", out], capsys)
    assert msg.startswith("-o")


DIES_WITH_PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    code = (
        "import os, time; from slackswap.analysis.execute import die_with_parent; "
        "die_with_parent(os.getppid()); print('armed', flush=True); time.sleep(120)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "armed"
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_its_parent(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    parent = subprocess.Popen(
        [sys.executable, "-c", DIES_WITH_PARENT], env=env, stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())  # type: ignore[union-attr]
    parent.send_signal(signal.SIGKILL)  # as `kill -9` of a compare run
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not _alive(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, "the worker outlived its parent"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_of_compare_jobs_2_leaves_no_worker(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    argv = [sys.executable, "-m", "slackswap.cli", "compare", "vgg16", "--budgets", "0.5,0.4",
            "--solvers", "ga", "--option", "ga.processes=false", "--time-limit", "60",
            "--jobs", "2", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [c for c in _children(proc.pid) if b"popen_loky" in _cmdline(c)]
        time.sleep(0.1)
    assert len(workers) == 2
    time.sleep(10)  # the workers load and start their 60 s searches
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [w for w in workers if _alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left  # they used to search on, then idle for loky's five minutes


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


@pytest.mark.parametrize(
    ("solver", "options", "words"),
    [
        ("ga", {"repair": "yes"}, "option repair: expected true or false or null, got 'yes'"),
        ("ga", {"max_evaluations": 1.5}, "expected a non-negative integer or null, got 1.5"),
        ("cpsat", {"hint": None}, "option hint: expected a name, got None"),
        ("cpsat", {"lns_seconds": float("inf")}, "expected a non-negative finite number"),
    ],
)
def test_options_follow_their_annotations(solver, options, words) -> None:
    from slackswap.solvers.registry import REGISTRY

    with pytest.raises(UserError, match=re.escape(words)):
        REGISTRY[solver].make(**options)


def test_options_of_the_right_type_are_taken() -> None:
    from slackswap.solvers.registry import REGISTRY

    ga = REGISTRY["ga"].make(repair=None, indpb=0.5, max_evaluations=100, cxpb=1)
    assert (ga.repair, ga.indpb, ga.max_evaluations) == (None, 0.5, 100)  # stored as given
