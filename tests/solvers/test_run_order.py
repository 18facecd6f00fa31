"""`run` takes its arguments in the order of `solve` and `simulate` (instance, budget, solver)."""

from __future__ import annotations

import numpy as np
import pytest

from slackswap.errors import UserError
from slackswap.instances.catalog import load
from slackswap.solvers import run, solve


def test_run_takes_instance_budget_solver_like_solve() -> None:
    inst = load("vgg16")
    new = run(inst, 0.8, "slackswap", find_min_budget=False)
    via_solve = solve(inst, 0.8, solver="slackswap")
    assert new.plan is not None and via_solve.plan is not None
    assert np.array_equal(new.plan.actions, via_solve.plan.actions)
    assert new.solver == "slackswap" and new.budget_fraction == pytest.approx(0.8, abs=1e-6)


def test_the_solver_first_order_is_the_users_error() -> None:
    with pytest.raises(UserError, match="'slackswap' is neither a file nor a catalog name"):
        run("slackswap", load("vgg16"), "80%", find_min_budget=False)  # type: ignore[arg-type]
