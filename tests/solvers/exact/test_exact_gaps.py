"""``slackswap reproduce gaps``: certified gaps to the best bound, infeasibility proofs, bad input."""

from __future__ import annotations

import json
import math

import pytest

from slackswap.cli import main
from slackswap.reproduce.gaps import certified_gaps, render


def test_gaps_are_measured_against_the_best_bound() -> None:
    rows = certified_gaps(["bert-large"], [0.5], ["slackswap", "milp"], time_limit=6.0)
    assert {r["solver"] for r in rows} == {"slackswap", "milp"}
    best = max(r["lower_bound_s"] for r in rows if r["lower_bound_s"] is not None)
    for r in rows:
        assert r["best_lower_bound_s"] == best
        assert r["step_s"] is not None
        assert r["certified_gap"] == pytest.approx((r["step_s"] - best) / best)
        assert r["certified_gap"] >= -1e-12
    # SlackSwap proves nothing itself; its gap comes from milp's bound
    assert next(r for r in rows if r["solver"] == "slackswap")["lower_bound_s"] is None
    table = render(rows, ["slackswap", "milp"])
    assert "bert-large" in table and "50%" in table


def test_the_table_names_the_solver_of_the_best_bound_in_a_column_so_named() -> None:
    def row(solver: str, bound: float | None, step: float) -> dict:
        return dict(model="bert-large", budget_fraction=0.5, best_lower_bound_s=0.2,
                    ideal_s=0.18, solver=solver, throughput=0.18 / step, lower_bound_s=bound,
                    certified_gap=(step - 0.2) / 0.2)  # fmt: skip

    table = render([row("slackswap", None, 0.21), row("milp", 0.2, 0.205)], ["slackswap", "milp"])
    header, _, line = table.splitlines()
    assert header.endswith("best bound by") and "bound s" not in header
    assert line.split()[-1] == "milp"


def test_an_infeasible_budget_is_reported_with_its_proof(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        ["reproduce", "gaps", "--instances", "vgg16", "--budgets", "0.5", "--solvers", "milp",
         "--time-limit", "3", "--json"]
    )  # fmt: skip
    assert code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(rows) == 1
    assert rows[0]["status"] == "infeasible" and rows[0]["proven_infeasible"]
    assert rows[0]["best_lower_bound_s"] is None  # inf, written as null in JSON
    assert rows[0]["certified_gap"] is None
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in rows[0].values())


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--budgets", "half", "--budgets"),
        ("--budgets", "7", "fraction"),
        ("--solvers", "nope", "unknown solver"),
        ("--instances", "nope", "nope"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    flag: str, value: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["reproduce", "gaps", "--instances", "vgg16", "--budgets", "0.5", "--solvers", "milp"]
    args[args.index(flag) + 1] = value
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
