"""The ``milp`` and ``cpsat`` solvers: claims, bounds, statuses, time limits, infeasibility proofs."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model, load
from slackswap.plan import Budget
from slackswap.simulator import simulate
from slackswap.solvers import REGISTRY, Status, run
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._lp import BoundProgram
from slackswap.solvers.exact._plans import Scorer, local_search, repair


@cache
def gpt2_6() -> Instance:
    return build_model("gpt2-xl", layers=6, seq=128, batch=2, name="exact-gpt2-6")


@pytest.mark.parametrize("name", ["milp", "cpsat"])
def test_registered_as_exact(name: str) -> None:
    tags = REGISTRY[name].tags
    assert tags.exact and tags.uses_time_limit and tags.deterministic


@pytest.mark.parametrize("name", ["milp", "cpsat"])
@pytest.mark.parametrize("frac", [0.6, 0.4])
def test_bound_claim_and_plan_agree_with_the_simulator(name: str, frac: float) -> None:
    inst = gpt2_6()
    rec = run(inst, frac, name, time_limit=6.0, options={"hint": "none"})
    assert rec.status in (Status.FEASIBLE, Status.TIMEOUT, Status.OPTIMAL), rec.error
    assert rec.plan is not None and rec.step_s is not None
    sim = simulate(inst, rec.plan, Budget.fraction(frac))
    assert sim.feasible and sim.step_s == rec.step_s
    assert rec.lower_bound_s is not None
    assert inst.ideal_step_s <= rec.lower_bound_s <= rec.step_s * (1 + 1e-9)
    assert rec.gap is not None and 0 <= rec.gap < 0.05
    if rec.claimed_step_s is not None:  # the model's own value for its plan: never above
        assert rec.claimed_step_s <= rec.step_s * (1 + 1e-9)


def test_infeasible_budget_is_proven() -> None:
    inst = load("vgg16")
    for name in ("milp", "cpsat"):
        rec = run(inst, 0.5, name, time_limit=5.0)
        assert rec.status is Status.INFEASIBLE
        assert rec.plan is None and rec.step_s is None
        assert "s0.c1.conv.bwd" in rec.reason  # the operator that cannot fit, named
        assert rec.lower_bound_s == math.inf  # no plan at all: an infinite bound


@pytest.mark.slow
@pytest.mark.wallclock  # a wall-clock bound: run alone, in a process of its own (.ci/run)
@pytest.mark.parametrize("name", ["milp", "cpsat"])
def test_timeout_keeps_incumbent_and_bound(name: str) -> None:
    inst = load("gpt2-xl")
    limit = 4.0
    rec = run(inst, 0.5, name, time_limit=limit, options={"hint": "none"})
    assert rec.plan_s <= limit * 1.1 + 0.25  # the runner's 10%, plus process noise
    assert rec.status in (Status.TIMEOUT, Status.FEASIBLE), rec.error
    # an incumbent (keep-all repaired at worst) and a bound (the ideal step at worst)
    assert rec.step_s is not None and rec.lower_bound_s is not None
    assert inst.ideal_step_s <= rec.lower_bound_s <= rec.step_s


def test_a_plan_at_the_bound_ends_the_solve() -> None:
    # At P keep-all reaches the ideal step, the LP's bound: milp skips its searches and binary
    # version, cpsat its CP-SAT loop, instead of spending the time limit on a proven optimum.
    inst = gpt2_6()
    for name in ("milp", "cpsat"):
        sol = (
            REGISTRY[name]
            .make()
            .solve(inst, Budget.fraction(1.0), deadline=Deadline.begin(8.0), seed=0)
        )
        assert sol.plan is not None and sol.proven_optimal, (name, sol.info)
        assert "guided_points" not in sol.info and "milp_status" not in sol.info, sol.info
        if name == "cpsat":
            assert sol.info["mode"] == "at the bound", sol.info
        rec = run(inst, 1.0, name, time_limit=8.0)
        assert rec.status is Status.OPTIMAL, (name, rec.status)


def test_lp_bound_rises_as_memory_shrinks() -> None:
    inst = gpt2_6()
    bounds = [
        BoundProgram(inst, int(f * inst.peak_bytes)).solve(deadline=Deadline.begin(30.0)).bound_s
        for f in (1.0, 0.6, 0.4)
    ]
    assert bounds[0] == pytest.approx(inst.ideal_step_s)
    assert bounds[0] <= bounds[1] <= bounds[2]
    assert bounds[2] > bounds[0] * 1.01


def test_repair_makes_a_plan_fit_and_local_search_only_improves() -> None:
    inst = gpt2_6()
    budget = int(0.4 * inst.peak_bytes)
    scorer = Scorer(inst, budget)
    keep_all = np.zeros(inst.n_tensors, dtype=np.int8)
    fixed = repair(scorer, keep_all, deadline=Deadline.never())
    assert fixed is not None
    step = float(scorer.many(fixed[None, :])[0])
    assert math.isfinite(step)
    better, best, _ = local_search(scorer, fixed, step, deadline=Deadline.never())
    assert best <= step
    assert simulate(inst, better, Budget.bytes(budget)).step_s == pytest.approx(best)


def test_work_budget_makes_runs_repeatable() -> None:
    inst = gpt2_6()
    opts = {"hint": "none", "max_evaluations": 150}
    # the work budget ends the search long before the clock would
    a = run(inst, 0.5, "cpsat", time_limit=20.0, seed=1, options=opts)
    b = run(inst, 0.5, "cpsat", time_limit=20.0, seed=1, options=opts)
    assert a.plan == b.plan and a.step_s == b.step_s
    assert a.evaluations is not None and a.evaluations <= 150
    assert a.status is Status.FEASIBLE  # a spent work budget is not a timeout
