"""Solvers that use other solvers' plans name them in options: the GA's ``seed_solvers`` and the
exact solvers' ``hint``. Registering a new solver changes no other solver's results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from slackswap.cli import main
from slackswap.errors import UserError
from slackswap.instances.catalog import build_model
from slackswap.plan import SWAP, Budget, Plan
from slackswap.solvers import REGISTRY, Solution, Solver, run
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.genetic.ga import DEFAULT_SEED_SOLVERS

#: A quick, deterministic search: one island in the calling thread, a fixed work budget.
GA_OPTS = {"max_evaluations": 200, "islands": 1, "processes": False}


@pytest.fixture(scope="module")
def small():  # type: ignore[no-untyped-def]
    return build_model("gpt2-xl", layers=4, seq=128, batch=2)


class _SwapHalf(Solver):
    """A static planner unlike any built-in one: swaps every other tensor (block inputs too)."""

    key = "t-swap-half"
    calls: list[str] = []

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        type(self).calls.append(instance.name)
        acts = np.zeros(instance.n_tensors, dtype=np.int8)
        acts[::2] = SWAP
        return Plan(instance, acts)


@contextmanager
def extra_solver() -> Iterator[str]:
    """``t-swap-half`` in the registry for the test's duration only (the conformance suite runs
    every registered solver, so it must not stay)."""
    REGISTRY.register(_SwapHalf.key, _SwapHalf)
    _SwapHalf.calls.clear()
    try:
        yield _SwapHalf.key
    finally:
        REGISTRY._entries.pop(_SwapHalf.key, None)


def test_default_seed_solvers_are_the_builtin_static_planners() -> None:
    assert REGISTRY["ga"].defaults["seed_solvers"] == DEFAULT_SEED_SOLVERS
    assert DEFAULT_SEED_SOLVERS[0] == "slackswap"
    # a solver that needs an instance's metadata (torch-budget: a compiled step's) seeds no search
    builtin_static = {
        e.name
        for e in REGISTRY
        if e.tags.static_plan and not e.tags.uses_time_limit and not e.tags.needs_meta
    }
    assert set(DEFAULT_SEED_SOLVERS) == builtin_static
    assert REGISTRY["milp"].defaults["hint"] == "slackswap"
    assert REGISTRY["cpsat"].defaults["hint"] == "slackswap"


def test_registering_a_static_solver_leaves_ga_unchanged(small) -> None:  # type: ignore[no-untyped-def]
    before = run(small, 0.5, "ga", seed=0, options=GA_OPTS)
    with extra_solver() as name:
        during = run(small, 0.5, "ga", seed=0, options=GA_OPTS)
        assert _SwapHalf.calls == []  # never run as a seed unless named
    assert before.plan is not None and during.plan is not None
    assert np.array_equal(before.plan.actions, during.plan.actions)
    assert before.step_s == during.step_s and before.evaluations == during.evaluations
    assert name not in during.info["seed_step_s"]
    assert list(during.info["seed_step_s"]) == [
        n for n in DEFAULT_SEED_SOLVERS if n in during.info["seed_step_s"]
    ]


@pytest.mark.parametrize("given", [["swap-first", "t-swap-half"], "swap-first, t-swap-half"])
def test_chosen_seed_solvers_are_the_seeds(small, given) -> None:  # type: ignore[no-untyped-def]
    with extra_solver():
        solver = REGISTRY["ga"].make(seed_solvers=given, **GA_OPTS)
        assert solver.seed_solvers == ("swap-first", "t-swap-half")
        sol = solver.solve(small, Budget.parse(0.5), deadline=Deadline.never(), seed=0)
        assert _SwapHalf.calls == [small.name]
    assert isinstance(sol, Solution)
    assert list(sol.info["seed_step_s"]) == ["swap-first", "t-swap-half"]


@pytest.mark.parametrize(
    ("solver", "options", "needle"),
    [
        ("ga", {"seed_solvers": ["slackswap", "nope"]}, "unknown solver 'nope'"),
        ("ga", {"seed_solvers": ["milp"]}, "'milp' is a search or a run-time policy"),
        ("ga", {"seed_solvers": ["superneurons"]}, "'superneurons' is a search or a run-time"),
        ("ga", {"seed_solvers": [1]}, "option seed_solvers: expected a list of names"),
        ("ga", {"seed_solvers": 3}, "option seed_solvers: expected a list of names"),
        ("milp", {"hint": "slackswp"}, "option hint: unknown solver 'slackswp'"),
        ("milp", {"hint": "milp"}, "'milp' cannot use its own plans"),
        ("cpsat", {"hint": "nope"}, "option hint: unknown solver 'nope'"),
        ("cpsat", {"hint": "slackswap,vdnn"}, "option hint: one solver or none"),
    ],
)
def test_bad_solver_names_are_the_users_error(solver, options, needle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        REGISTRY[solver].make(**options)


def test_no_hint_and_no_seeds_are_allowed() -> None:
    assert REGISTRY["milp"].make(hint="none").hint == "none"
    assert REGISTRY["ga"].make(seed_solvers=[]).seed_solvers == ()


def test_chosen_hint_solver_is_run(small) -> None:  # type: ignore[no-untyped-def]
    with extra_solver() as name:
        rec = run(
            small, 0.5, "milp", time_limit=20.0, options={"hint": name, "max_evaluations": 50}
        )
        assert _SwapHalf.calls == [small.name]
        _SwapHalf.calls.clear()
        run(small, 0.5, "milp", time_limit=20.0, options={"max_evaluations": 50})
        assert _SwapHalf.calls == []  # the default hint is slackswap, whatever is registered
    assert rec.status.value in ("feasible", "optimal", "timeout")


def test_seed_solvers_through_solve_and_compare(small, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "small.json"
    small.save(path)
    argv = ["--budget", "0.5", "--solver", "ga", "--json", "--option", "max_evaluations=50",
            "--option", "islands=1", "--option", "processes=false"]  # fmt: skip
    assert main(["solve", str(path), *argv, "--option", "seed_solvers=slackswap,vdnn"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert json.loads(row["solver_config"])["seed_solvers"] == ["slackswap", "vdnn"]
    assert main(["solve", str(path), *argv, "--option", "seed_solvers=slackswap,nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown solver 'nope'" in err and "\n" not in err
    code = main(["compare", str(path), "--budgets", "0.5", "--solvers", "ga", "--no-progress",
                 "--option", 'ga.seed_solvers=["vdnn"]', "--option", "ga.max_evaluations=50",
                 "--option", "ga.islands=1", "--json"])  # fmt: skip
    assert code == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert json.loads(row["solver_config"])["seed_solvers"] == ["vdnn"]
    assert row["solver"] == "ga(islands=1, max_evaluations=50, seed_solvers=['vdnn'])"
    assert row["status"] == "feasible"
