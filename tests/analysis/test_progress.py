"""Progress on stderr: a line per finished job when piped, nothing with --no-progress, and the
reports' solves going through the batch runner."""

from __future__ import annotations

import io
import re

import pytest

from slackswap.analysis.progress import JobProgress, job_line
from slackswap.cli import main

LINE = re.compile(r"^\[(\d+)/(\d+)\] ")


def job_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if LINE.match(line)]


def test_piped_progress_is_one_line_per_finished_job() -> None:
    out = io.StringIO()  # not a terminal
    with JobProgress(2, desc="compare", stream=out) as bar:
        bar.start("2 jobs")
        bar.finished({"instance": "gpt2-xl", "budget_fraction": 0.5, "solver": "slackswap",
                      "seed": 0, "status": "feasible", "throughput": 0.975, "wall_s": 0.05})  # fmt: skip
        bar.finished({"instance": "gpt2-xl", "budget_fraction": 0.2, "solver": "toy", "seed": 1,
                      "status": "error", "error": "ValueError: boom\nmore", "wall_s": 1.5})  # fmt: skip
    assert out.getvalue().splitlines() == [
        "compare: 2 jobs ...",
        "[1/2] gpt2-xl 50% slackswap: feasible, 97.5% of ideal, 0.05 s",
        "[2/2] gpt2-xl 20% toy seed 1: error, ValueError: boom, 1.50 s",
    ]
    assert bar.failures == 1


def test_no_progress_prints_nothing_and_forced_progress_draws_a_bar() -> None:
    quiet = io.StringIO()
    with JobProgress(1, mode=False, stream=quiet) as bar:
        bar.start("x")
        bar.finished({"status": "feasible"})
    assert quiet.getvalue() == ""
    forced = io.StringIO()
    with JobProgress(1, mode=True, stream=forced) as bar:
        bar.finished({"status": "feasible"})
    assert "1/1" in forced.getvalue() and "[1/1]" not in forced.getvalue()


def test_job_line_without_a_plan_or_a_budget_fraction() -> None:
    line = job_line({"instance": "vgg16", "budget": "11GB", "solver": "vdnn", "seed": 0,
                     "status": "infeasible", "throughput": None, "plan_s": 0.001})  # fmt: skip
    assert line == "vgg16 11GB vdnn: infeasible, 0.00 s"


def test_compare_piped_prints_a_line_per_job_as_it_finishes(capsys) -> None:  # type: ignore[no-untyped-def]
    rc = main(["compare", "bert-large", "--budgets", "1.0,0.5", "--solvers", "slackswap,vdnn"])
    assert rc == 0
    captured = capsys.readouterr()
    lines = job_lines(captured.err)
    assert [LINE.match(line).groups() for line in lines] == [  # type: ignore[union-attr]
        (str(k), "4") for k in range(1, 5)
    ]
    assert "compare: 4 jobs ..." in captured.err
    assert "[" not in captured.out.splitlines()[0]  # the table stays on stdout


def test_compare_no_progress_is_silent(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["compare", "bert-large", "--budgets", "0.5", "--solvers", "vdnn",
                 "--no-progress"]) == 0  # fmt: skip
    assert capsys.readouterr().err == ""


def test_solve_with_a_search_says_what_runs_and_a_quick_solver_stays_quiet(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["solve", "bert-large", "--budget", "0.5", "--solver", "milp",
                 "--time-limit", "1"]) in (0, 1)  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "solve: milp on bert-large at 50%, up to 1 s ..."
    assert len(job_lines("\n".join(err))) == 1
    assert main(["solve", "bert-large", "--budget", "0.5", "--solver", "milp",
                 "--time-limit", "1", "--no-progress"]) in (0, 1)  # fmt: skip
    assert capsys.readouterr().err == ""
    assert main(["solve", "bert-large", "--budget", "0.5"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("report", ["table2", "table3", "gaps"])
def test_reports_run_their_solves_through_the_batch_runner(report, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from slackswap.reproduce import _batch

    calls: list[int] = []
    real = _batch.run_sweep

    def spy(sweep, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(sweep))
        return real(sweep, **kw)

    monkeypatch.setattr(_batch, "run_sweep", spy)  # the reports' one batch runner
    argv = {
        "table2": ["reproduce", "table2"],
        "table3": ["reproduce", "table3", "--repeats", "0"],
        "gaps": ["reproduce", "gaps", "--instances", "bert-large", "--budgets", "0.5,0.2",
                 "--solvers", "slackswap,vdnn"],
    }[report]  # fmt: skip
    assert main(argv) == 0
    n = {"table2": 10, "table3": 24, "gaps": 4}[report]
    assert calls == [n]  # one batch with every solve, not a loop of its own
    err = capsys.readouterr().err
    assert len(job_lines(err)) == n
    assert main([*argv, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_gaps_in_two_workers_match_one_after_another() -> None:
    import argparse

    from slackswap.reproduce.gaps import certified_gaps

    def gaps(jobs: int) -> list[dict]:  # type: ignore[type-arg]
        args = argparse.Namespace(jobs=jobs, backend="joblib", scheduler=None, progress=False)
        rows = certified_gaps(["bert-large"], [0.5, 0.2], ["slackswap", "vdnn"], args=args)
        for r in rows:
            r.pop("plan_s")
        return rows

    assert gaps(2) == gaps(1)
