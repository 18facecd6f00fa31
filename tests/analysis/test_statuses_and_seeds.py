"""Statuses say what happened (a plan at the time limit is feasible, `timeout` only without one,
``stopped_by`` and ``reason`` filled); seed-independent solvers run once per case; a search's
history is kept in the results file and checked when read; results files written before these
columns stay readable (``--resume``, ``report``)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from slackswap.analysis.jobs import SolverSpec, Sweep, ref_from_instance
from slackswap.analysis.results import read_results
from slackswap.analysis.runner import run_sweep
from slackswap.cli import main
from slackswap.errors import UserError
from slackswap.instances.catalog import build_model
from slackswap.plan import Plan
from slackswap.solvers import run
from slackswap.solvers.base import Solution, Solver, Status, Tags
from slackswap.solvers.running import STOPPED_BY
from tests.support.analysis_toys import ToyKeep, ToyOnce, ToyOutOfTime, ToyRecompute

NEW_COLUMNS = ("stopped_by", "history", "seed_independent")


class NoPlanInTime(Solver):
    key = "no-plan-in-time"
    tags = Tags(uses_time_limit=True)

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        return Solution(None, timed_out=True, info={"reason": "nothing fits yet"})


class AtTheBound(Solver):
    key = "at-the-bound"
    tags = Tags(exact=True, uses_time_limit=True, uses_seed=False)

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        plan = Plan.keep_all(instance)
        return Solution(plan, lower_bound_s=instance.ideal_step_s, proven_optimal=True,
                        timed_out=True)  # fmt: skip


@pytest.fixture(scope="module")
def inst():  # type: ignore[no-untyped-def]
    return build_model("gpt2-xl", layers=1, seq=64, batch=1)


def test_a_plan_at_the_time_limit_is_feasible_not_timeout(inst) -> None:  # type: ignore[no-untyped-def]
    rec = run(inst, 1.0, ToyOutOfTime(), time_limit=1.0)
    assert rec.status is Status.FEASIBLE and rec.stopped_by == "time limit"
    assert rec.reason == "stopped by its 1 s time limit holding a plan"
    none = run(inst, 1.0, NoPlanInTime(), time_limit=1.0)
    assert none.status is Status.TIMEOUT and none.stopped_by == "time limit"
    assert none.reason == "no plan by its 1 s time limit: nothing fits yet"
    best = run(inst, 1.0, AtTheBound(), time_limit=1.0)
    assert best.status is Status.OPTIMAL and best.stopped_by == "bound reached"
    assert best.reason.startswith("optimal: ")
    plain = run(inst, 1.0, ToyKeep())
    assert plain.status is Status.FEASIBLE and plain.stopped_by == "finished" and not plain.reason
    assert all(r.stopped_by in STOPPED_BY for r in (rec, none, best, plain))


def test_every_row_that_is_not_plainly_feasible_says_why(inst) -> None:  # type: ignore[no-untyped-def]
    from tests.support.analysis_toys import ToyBoom

    boom = run(inst, 1.0, ToyBoom())
    assert boom.status is Status.ERROR and boom.stopped_by == "error"
    assert boom.reason == "the solver raised RuntimeError"
    tight = run(inst, 0.05, ToyKeep(), find_min_budget=False)
    assert tight.status is Status.INFEASIBLE and tight.reason


def test_seed_independent_solvers_run_once_per_case(inst) -> None:  # type: ignore[no-untyped-def]
    sweep = Sweep(
        [ref_from_instance(inst)],
        ["1", "0.9"],
        [SolverSpec.of_object(ToyOnce()), SolverSpec.of_object(ToyRecompute())],
        seeds=[4, 5, 6],
    )
    jobs = sweep.jobs()
    once = [j for j in jobs if j.solver.obj is not None and isinstance(j.solver.obj, ToyOnce)]
    assert [(j.budget, j.seed, j.seed_independent) for j in once] == [("1", 4, True),
                                                                       ("0.9", 4, True)]  # fmt: skip
    assert len(jobs) == 2 + 2 * 3  # the seeded solver once per seed
    df = run_sweep(sweep, progress=False)
    assert df.groupby("solver")["seed_independent"].first().to_dict() == {
        "toy-once": 1, "toy-recompute": 0,
    }  # fmt: skip


def test_builtin_heuristics_and_milp_ignore_the_seed_searches_do_not() -> None:
    from slackswap.solvers import REGISTRY

    once = {e.name for e in REGISTRY if not e.tags.uses_seed}
    assert {"slackswap", "swap-first", "vdnn", "checkpoint", "milp"} <= once
    assert not {"ga", "ga-random", "cpsat"} & once


def test_history_is_kept_and_checked(tmp_path: Path, inst) -> None:  # type: ignore[no-untyped-def]
    class Searching(Solver):
        key = "searching"

        def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
            plan = Plan.keep_all(instance)
            return Solution(plan, history=[(0.0, 1, float("inf")), (0.1, 9, 1.0)])

    path = tmp_path / "r.csv"
    run_sweep(Sweep([ref_from_instance(inst)], ["1"], [SolverSpec.of_object(Searching())]),
              results=path, progress=False)  # fmt: skip
    df = read_results(path)
    assert df.loc[0, "history"] == "[[0.0, 1, null], [0.1, 9, 1.0]]"
    text = path.read_text().replace("[[0.0, 1, null], [0.1, 9, 1.0]]", "[[0.0, 1]]")
    path.write_text(text)
    with pytest.raises(UserError, match=r"column history: point 0 .* is not \[seconds"):
        read_results(path)


def test_results_written_before_the_new_columns_still_read_resume_and_report(
    tmp_path: Path, inst, capsys
) -> None:  # type: ignore[no-untyped-def]
    """An old file: no stopped_by, history or seed_independent column, and a search's row with
    a plan marked timeout (the old meaning)."""
    path = tmp_path / "old.csv"
    sweep = Sweep([ref_from_instance(inst)], ["1", "0.9"], [SolverSpec.of_object(ToyKeep())])
    run_sweep(sweep, results=path, progress=False)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    header = [c for c in rows[0] if c not in NEW_COLUMNS]
    rows[0]["status"] = "timeout"  # a plan held at the time limit, as older versions said
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    df = read_results(path)
    assert len(df) == 2 and df["stopped_by"].isna().all() and df["history"].isna().all()
    # report reads it: tables and figures
    assert main(["report", str(path), "--table", "markdown"]) == 0
    assert "toy-keep" in capsys.readouterr().out
    assert main(["report", str(path), "-o", str(tmp_path / "figs"), "--format", "png"]) == 0
    capsys.readouterr()
    # resume continues it (nothing to run) and adopts today's columns
    again = run_sweep(sweep, results=path, resume=True, progress=False)
    assert len(again) == 2 and set(NEW_COLUMNS) <= set(read_results(path).columns)


def test_compare_resumes_a_file_from_before_the_new_columns(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "old.csv"
    argv = ["compare", "vgg16", "--budgets", "1,0.9", "--solvers", "checkpoint", "--seeds", "0,1",
            "--no-min-budget", "--no-progress", "-o", str(path)]  # fmt: skip
    assert main(argv) == 0
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    header = [c for c in rows[0] if c not in NEW_COLUMNS]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[0].splitlines()[2:]
    assert len(table) == 2  # once per case: checkpoint is seed-independent
    assert "best: vgg16 at 100% of P: checkpoint" in out
