"""`run` takes its arguments in the order of `solve` and `simulate` (instance, budget, solver);
the order before, solver first, still works and warns."""

from __future__ import annotations

import numpy as np
import pytest

from slackswap.instances.catalog import load
from slackswap.solvers import REGISTRY, run, solve


def test_run_takes_instance_budget_solver_like_solve() -> None:
    inst = load("vgg16")
    new = run(inst, 0.8, "slackswap", find_min_budget=False)
    via_solve = solve(inst, 0.8, solver="slackswap")
    assert new.plan is not None and via_solve.plan is not None
    assert np.array_equal(new.plan.actions, via_solve.plan.actions)
    assert new.solver == "slackswap" and new.budget_fraction == pytest.approx(0.8, abs=1e-6)


@pytest.mark.parametrize("by_object", [False, True])
def test_the_old_solver_first_order_warns_and_gives_the_same_record(by_object: bool) -> None:
    inst = load("vgg16")
    solver = REGISTRY["slackswap"].make() if by_object else "slackswap"
    new = run(inst, "80%", solver, find_min_budget=False)
    with pytest.warns(DeprecationWarning, match=r"use run\(instance, budget, solver\)"):
        old = run(solver, inst, "80%", find_min_budget=False)  # type: ignore[arg-type]
    assert old.plan is not None and new.plan is not None
    assert np.array_equal(old.plan.actions, new.plan.actions)
    assert (old.status, old.step_s, old.budget_bytes) == (new.status, new.step_s, new.budget_bytes)
