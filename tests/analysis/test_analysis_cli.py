"""``slackswap compare``: JSON lines, table, sweep files, bad input, kill and --resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slackswap.analysis.results import read_results, read_rows
from slackswap.cli import main
from slackswap.solvers import RunRecord

TESTS = Path(__file__).parent.parent / "support"


pytestmark = pytest.mark.usefixtures("toys")  # the toy solvers, registered (conftest)


def test_json_lines_one_per_job(capsys) -> None:
    rc = main(
        ["compare", "vgg16", "--budgets", "1.0,0.5", "--solvers", "toy-keep,toy-recompute",
         "--seeds", "0,1", "--json", "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        assert set(RunRecord.ROW_KEYS) <= set(row)  # the issue-4 keys, evaluations included
    assert {(r["budget_fraction"], r["solver"], r["seed"]) for r in rows} == {
        (b, s, k) for b in (1.0, 0.5) for s in ("toy-keep", "toy-recompute") for k in (0, 1)
    }


def test_table_and_results_file(tmp_path, capsys) -> None:
    out = tmp_path / "r.parquet"
    rc = main(
        ["compare", "vgg16", "--budgets", "100%", "--solvers", "toy-keep", "-o", str(out),
         "--option", "toy-keep.delay_s=0.01", "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split()[:3] == ["instance", "budget", "solver"]
    assert "toy-keep(delay_s=0.01)" in lines[2] and "feasible" in lines[2] and "100.0" in lines[2]
    df = read_results(out)
    assert len(df) == 1 and df.loc[0, "solver_options"] == '{"delay_s": 0.01}'
    assert "results:" in captured.err


def test_sweep_file_with_cli_overrides(tmp_path, capsys) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        'instances = ["vgg16"]\nbudgets = [1.0, 0.5]\nsolvers = ["toy-boom"]\noutput = "out.csv"\n'
    )
    assert main(["compare", "--sweep", str(sweep), "--solvers", "toy-keep", "--no-progress"]) == 0
    df = read_results(tmp_path / "out.csv")
    assert list(df["solver"]) == ["toy-keep", "toy-keep"]


def test_failed_jobs_are_reported(capsys) -> None:
    rc = main(["compare", "vgg16", "--budgets", "1", "--solvers", "toy-boom", "--no-progress"])
    assert rc == 0
    captured = capsys.readouterr()
    assert "error" in captured.out and "1 of 1 jobs failed" in captured.err


def test_a_job_that_returns_a_plan_is_no_failure_and_failures_are_named(capsys) -> None:
    # A search out of time with its best plan is feasible, stopped by the time limit, and its
    # reason says so: not a failure, and never `timeout` (that is a run with no plan).
    argv = ["compare", "vgg16", "--budgets", "1", "--solvers", "toy-out-of-time,toy-boom",
            "--time-limit", "1", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    table = captured.out.split("\n\n")[0].splitlines()[2:]
    assert [line.split()[4:7] for line in table] == [
        ["feasible", "time", "limit"],
        ["error", "error", "-"],
    ]
    # one line per case: the best solver and its gap to the bound (keep-all at P: the ideal)
    summary = [line for line in captured.out.splitlines() if line.startswith("best: ")]
    assert len(summary) == 1 and re.fullmatch(
        r"best: vgg16 at 100% of P: toy-out-of-time [\d.]+ ms \(throughput 100\.0%\), "
        r"0% above the best lower bound \(the ideal step\)",
        summary[0],
    ), summary
    err = captured.err.splitlines()
    at = err.index("slackswap: 1 of 2 jobs failed:")
    assert err[at + 1].startswith("  vgg16 100% toy-boom: error: RuntimeError: toy solver failure")
    assert "toy-out-of-time" not in captured.err


def test_infeasible_rows_show_the_reason_and_the_smallest_budget_that_fits(capsys) -> None:
    argv = ["compare", "vgg16", "--budgets", "0.5,1", "--solvers", "checkpoint", "--no-progress"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("fits from        no plan: why")
    half = next(line for line in lines if " 50% " in line)
    assert "infeasible" in half and "2.71 GB (69.1%)" in half
    assert half.endswith("every one of 5 blocks checkpointed still needs 2.71 GB > budget 1.96 GB")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["vgg16", "--budgets", "1", "--solvers", "nope"], "unknown solver 'nope'"),
        (["vgg16", "--budgets", "x%", "--solvers", "toy-keep"], "budget 'x%'"),
        (["vgg16", "--solvers", "toy-keep"], "--budgets is required"),
        (["no-such-model", "--budgets", "1", "--solvers", "toy-keep"], "no-such-model"),
        (["vgg16", "--budgets", "1", "--solvers", "toy-keep", "--resume"], "--resume needs"),
        (["vgg16", "--budgets", "1", "--solvers", "toy-keep", "--option", "x"], "SOLVER.KEY"),
        (["vgg16", "--budgets", "1", "--solvers", "toy-keep", "--option", "toy-keep.nope=1"],
         "no option 'nope'"),
        (["vgg16", "--budgets", "1", "--solvers", "toy-keep", "-o", "r.txt"], ".csv or .parquet"),
        (["vgg16", "--budgets", "1", "--solvers", "toy-keep", "--jobs", "0"], "at least 1"),
        (["--sweep", "missing.toml"], "no such sweep file"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(argv, match, capsys) -> None:
    assert main(["compare", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from analysis_toys import registered
from slackswap.cli import main
with registered():
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "suffix",
    # the Parquet journal is covered in-process by test_analysis_results; its kill run is slow
    [".csv", pytest.param(".parquet", marks=pytest.mark.slow)],
)
def test_killed_sweep_resumes_with_every_job_once(tmp_path, suffix: str) -> None:
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(tests=str(TESTS)))
    results = tmp_path / f"r{suffix}"
    log = tmp_path / "solves.log"
    argv = [
        sys.executable, str(script), "compare", "vgg16", "--budgets", "1.0:0.1:-0.1",
        "--solvers", "toy-keep", "--option", "toy-keep.delay_s=0.08", "--seeds", "0,1,2",
        "-o", str(results), "--no-progress", "--no-min-budget",
    ]  # fmt: skip
    env = {**os.environ, "SLACKSWAP_TOY_LOG": str(log)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    n_before = 0
    while time.monotonic() < deadline and proc.poll() is None:
        n_before = len(read_rows(results)) if results.exists() else 0
        if n_before >= 8:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the sweep ended before it was killed: {proc.stderr.read()!r}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    partial = read_rows(results)
    assert 8 <= len(partial) < 30

    done = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    df = read_results(results)
    assert len(df) == 30 and df["job_id"].is_unique
    keys = set(zip(df["budget"], df["seed"], strict=True))
    assert keys == {(f"{b / 10:g}", s) for b in range(1, 11) for s in range(3)}
    # every job solved once, plus at most the one in flight when the kill came, plus one
    # untimed warm-up solve in each of the two processes
    solves = log.read_text().splitlines()
    assert 30 <= len(solves) - 2 <= 31
    assert {r["job_id"] for r in partial} <= set(df["job_id"])


def test_compare_says_which_solvers_ran_once_per_case(capsys) -> None:
    argv = ["compare", "vgg16", "--budgets", "1", "--solvers", "toy-once,toy-keep", "--seeds",
            "0,1,2", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[0].splitlines()[2:]
    assert [line.split()[2:4] for line in table] == [
        ["toy-once", "0"], ["toy-keep", "0"], ["toy-keep", "1"], ["toy-keep", "2"],
    ]  # fmt: skip
    note = " ".join(out.split("\n\n")[1].split())
    assert "ran once per case, the seed never changes their plans (seed-independent): toy-once;" \
        " the other solvers ran once per seed (3 seeds)" in note  # fmt: skip
