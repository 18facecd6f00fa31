"""The exact solvers report their bound as proved: never capped by a plan, and never above one.

A bound above a plan's simulated step is a defect, so the runner turns it into an ``error``
record naming both numbers; the sweep runs ``milp`` and ``cpsat`` on every bundled instance
at budgets from 10% to 90% of P and holds each bound against every plan found for that case.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache

import pytest

from slackswap.instance import Instance
from slackswap.instances.catalog import BUNDLED, build_model, load
from slackswap.plan import Budget, Plan
from slackswap.solvers import Status, run
from slackswap.solvers.base import Solution, Solver
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._lp import BoundProgram, BoundResult

FAST_BUDGETS = (0.1, 0.3, 0.5, 0.7, 0.9)
ALL_BUDGETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@cache
def small() -> Instance:
    return build_model("gpt2-xl", layers=2, seq=128, batch=2, name="bounds-gpt2-2")


class _BoundAbovePlan(Solver):
    """Keeps everything and claims a bound 10% above that plan's step."""

    key = "bound-above-plan"

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Solution:
        plan = Plan.keep_all(instance)
        return Solution(plan, lower_bound_s=instance.ideal_step_s * 1.1, proven_optimal=True)


def test_a_bound_above_the_plan_is_an_error_naming_both_numbers() -> None:
    inst = small()
    rec = run(inst, 1.0, _BoundAbovePlan())
    assert rec.status is Status.ERROR
    assert rec.step_s == inst.ideal_step_s  # the raw figures stay on the record
    assert rec.lower_bound_s == inst.ideal_step_s * 1.1
    assert rec.error is not None and "invalid lower bound" in rec.error
    assert repr(inst.ideal_step_s * 1.1) in rec.error and repr(rec.step_s) in rec.error


@pytest.mark.parametrize("name", ["milp", "cpsat"])
def test_an_inflated_engine_bound_is_reported_raw_not_capped(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relaxation that claimed 1.5x its value must show as such: before, the solvers capped
    it at their plan's step and called the plan proven optimal."""
    real = BoundProgram.solve

    def inflated(self: BoundProgram, *args: object, **kwargs: object) -> BoundResult:
        res = real(self, *args, **kwargs)  # type: ignore[arg-type]
        if res.bound_s is None:
            return res
        return dataclasses.replace(res, bound_s=res.bound_s * 1.5)

    monkeypatch.setattr(BoundProgram, "solve", inflated)
    inst = small()
    rec = run(inst, 0.8, name, time_limit=4.0, options={"hint": "none", "max_evaluations": 300})
    assert rec.step_s is not None and rec.lower_bound_s is not None
    assert rec.lower_bound_s > rec.step_s  # the engine's number, not min(bound, step)
    assert rec.status is Status.ERROR, rec.status
    assert rec.error is not None and repr(rec.lower_bound_s) in rec.error


def _sweep(model: str, budgets: tuple[float, ...], time_limit: float) -> None:
    inst = load(model)
    for frac in budgets:
        recs = {
            name: run(inst, frac, name, time_limit=time_limit, find_min_budget=False)
            for name in ("milp", "cpsat")
        }
        base = run(inst, frac, "slackswap", find_min_budget=False)
        steps = [r.step_s for r in (*recs.values(), base) if r.step_s is not None]
        for name, rec in recs.items():
            where = f"{name} on {model} at {frac:.0%}"
            assert rec.status is not Status.ERROR, f"{where}: {rec.error}"
            assert rec.lower_bound_s is not None, where
            if math.isinf(rec.lower_bound_s):  # proven infeasible: no plan may exist
                assert rec.status is Status.INFEASIBLE and not steps, where
                continue
            assert rec.lower_bound_s >= inst.ideal_step_s * (1 - 1e-12), where
            # its own plan, the other exact solver's and SlackSwap's: none beats the bound
            for step in steps:
                assert rec.lower_bound_s <= step * (1 + 1e-9), (where, rec.lower_bound_s, step)
            if rec.status is Status.OPTIMAL:
                assert rec.step_s is not None and rec.step_s <= min(steps) * (1 + 1e-4), where


# Two of the bundled instances at the short limit run with the slow tests (the fast suite's
# wall time); every one of them runs there at every budget too.
@pytest.mark.parametrize(
    "model",
    [m if m in ("vgg16", "llama-7b") else pytest.param(m, marks=pytest.mark.slow) for m in BUNDLED],
)
def test_bounds_never_exceed_a_plan_on_bundled_instances(model: str) -> None:
    _sweep(model, FAST_BUDGETS, time_limit=2.0)


@pytest.mark.slow
@pytest.mark.parametrize("model", BUNDLED)
def test_bounds_never_exceed_a_plan_on_bundled_instances_every_budget(model: str) -> None:
    _sweep(model, ALL_BUDGETS, time_limit=8.0)
