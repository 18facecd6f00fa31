"""Without a time limit the exact solvers still end: each loop stops by its own rule (the
relaxation's rows, convergence, the patience of the random roundings and of the polish, the
no-good loop's proof), and `run` gives them the driver's default, not a solver option."""

from __future__ import annotations

from functools import cache

import pytest

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model
from slackswap.plan import Budget
from slackswap.simulator import simulate
from slackswap.solvers import REGISTRY, run
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.running import EXACT_TIME_LIMIT_S


@cache
def gpt2_3() -> Instance:
    return build_model("gpt2-xl", layers=3, seq=128, batch=1, name="exact-gpt2-3")


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("milp", {}),
        ("cpsat", {}),  # the neighbourhood search (34 tensors)
        # the no-good loop, its rounds ended by their work rule, then the polish (about 60 s)
        pytest.param("cpsat", {"exact_tensors": 40}, marks=pytest.mark.slow),
    ],
)
def test_an_exact_solver_with_no_time_limit_ends_with_a_plan_and_a_bound(
    name: str, options: dict[str, int]
) -> None:
    inst = gpt2_3()
    budget = Budget.fraction(0.7)
    solver = REGISTRY[name].make(**options)
    sol = solver.solve(inst, budget, deadline=Deadline.never(), seed=0)
    assert sol.plan is not None and sol.lower_bound_s is not None
    sim = simulate(inst, sol.plan, budget)
    assert sim.feasible
    # the bound is the engines' own, checked against the plan the simulator judged
    assert inst.ideal_step_s <= sol.lower_bound_s <= sim.step_s * (1 + 1e-9)
    # nothing stopped it but its own rules: no clock to run out
    assert not sol.timed_out


def test_no_exact_solver_has_a_time_limit_option() -> None:
    for name in ("milp", "cpsat"):
        assert not any("time_limit" in k for k in REGISTRY[name].make().get_params())


def test_run_gives_an_exact_solver_the_drivers_default_time_limit() -> None:
    inst = gpt2_3()
    rec = run(inst, 0.7, "milp", options={"hint": "none", "max_evaluations": 200})
    assert rec.time_limit_s == EXACT_TIME_LIMIT_S and rec.plan is not None
    plain = run(inst, 0.7, "slackswap")
    assert plain.time_limit_s is None  # a heuristic is given no time limit
