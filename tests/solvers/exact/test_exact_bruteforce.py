"""Brute force over all 3^n plans of tiny instances: bounds at or below the optimum, cpsat finds it.

Instances with at most 10 saved tensors (a miniature transformer layer and random chains) run by
default; the builders' one-layer models (12-14 tensors, up to 4.8 million plans) are slow tests.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model
from slackswap.plan import Budget
from slackswap.solvers import Status, run
from tests.support.exact_helpers import brute_force, mini_layer
from tests.support.strategies import small_instances

SECONDS = 2.0  # time limit per exact solve on a tiny instance


def check(inst: Instance, frac: float) -> None:
    budget = max(1, int(frac * inst.peak_bytes))
    opt, _ = brute_force(inst, budget)
    for name in ("milp", "cpsat"):
        rec = run(inst, Budget.bytes(budget), name, time_limit=SECONDS, seed=0)
        assert rec.status is not Status.ERROR, rec.error
        if math.isinf(opt):
            assert rec.step_s is None
            continue
        # the bound never exceeds the true optimum (the brute force is the ground truth)
        assert rec.lower_bound_s is not None
        assert rec.lower_bound_s <= opt * (1 + 1e-9), (name, frac, rec.lower_bound_s, opt)
        if rec.claimed_step_s is not None:
            assert rec.claimed_step_s <= rec.step_s * (1 + 1e-9)
        if name == "cpsat":  # finds the optimum (within 0.1%)
            assert rec.step_s is not None and rec.step_s <= opt * 1.001, (frac, rec.step_s, opt)
        if rec.status is Status.OPTIMAL:
            assert rec.step_s == pytest.approx(opt, rel=1e-3)


@pytest.mark.parametrize("frac", [1.0, 0.8, 0.65, 0.55, 0.45, 0.3])
def test_mini_layer(frac: float) -> None:
    check(mini_layer(), frac)


@settings(max_examples=6)
@given(small_instances(max_layers=5), st.floats(0.3, 1.0))
def test_random_chains(inst: Instance, frac: float) -> None:
    check(inst, frac)


def test_mini_layer_has_interesting_budgets() -> None:
    # the budgets above cover every regime: ideal, stalls/recompute, and no plan at all
    inst = mini_layer()
    steps = [brute_force(inst, int(f * inst.peak_bytes))[0] for f in (1.0, 0.55, 0.3)]
    assert steps[0] == pytest.approx(inst.ideal_step_s)
    assert inst.ideal_step_s * 1.01 < steps[1] < math.inf
    assert math.isinf(steps[2])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama-7b", "gpt2-xl"])
@pytest.mark.parametrize("frac", [0.8, 0.6, 0.45])
def test_one_layer_builders(model: str, frac: float) -> None:
    inst = build_model(model, layers=1, seq=128, batch=1)
    assert inst.n_tensors <= 14
    check(inst, frac)


def test_cpsat_proves_an_ideal_plan_optimal() -> None:
    inst = mini_layer()
    rec = run(inst, 1.0, "cpsat", time_limit=SECONDS)
    assert rec.status is Status.OPTIMAL
    assert rec.step_s == pytest.approx(inst.ideal_step_s)
    assert rec.lower_bound_s == pytest.approx(inst.ideal_step_s, rel=1e-4)


def test_brute_force_helper_counts_recompute_only_where_possible() -> None:
    from tests.support.exact_helpers import all_plans

    inst = mini_layer()
    plans = all_plans(inst)
    infinite = ~np.isfinite(inst.tensor_recompute_s)
    assert len(plans) == 3 ** int((~infinite).sum()) * 2 ** int(infinite.sum())
    assert not np.any(plans[:, infinite] == 2)
