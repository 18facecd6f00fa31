"""Plans guided by the relaxation (`slackswap.solvers.exact._guided`): the fewest-swaps optimum
and ``milp``'s random roundings of it."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model
from slackswap.plan import RECOMP, SWAP
from slackswap.solvers import Status, run
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._guided import fewest_swaps_point, random_rounding
from slackswap.solvers.exact._lp import BoundProgram


@cache
def bert_4() -> Instance:
    """Four BERT-Large layers (47 saved tensors): a single rounding of the relaxation plus
    local search ended 1.9-2.6% above the bound at 40-50% of P."""
    return build_model("bert-large", layers=4, name="guided-bert-4")


def _value_at(model: BoundProgram, s: np.ndarray, r: np.ndarray) -> float:
    """The relaxation's optimum with the swap and recompute shares fixed to (s, r), seconds."""
    lb, ub = model.var_lb.copy(), model.var_ub.copy()
    lb[model.s] = ub[model.s] = s
    lb[model.r] = ub[model.r] = r
    saved = model.var_lb, model.var_ub
    model.var_lb, model.var_ub = lb, ub
    try:
        res = model._lp(Deadline.begin(30.0))
    finally:
        model.var_lb, model.var_ub = saved
    assert res.status == 0, res.message
    return model.instance.ideal_step_s + float(res.fun) * model.time_unit


@pytest.mark.parametrize("frac", [0.4, 0.5])
def test_fewest_swaps_point_is_an_optimum_that_swaps_less(frac: float) -> None:
    inst = bert_4()
    model = BoundProgram(inst, int(frac * inst.peak_bytes))
    lp = model.solve(deadline=Deadline.begin(30.0))
    assert lp.bound_s is not None
    face = fewest_swaps_point(model, lp, Deadline.begin(30.0))
    assert face is not None
    s, r = face
    assert np.all(s + r <= 1 + 1e-6)
    # the relaxation's own point swaps bytes that buy nothing; the face point fewer, same value
    swapped = float(inst.tensor_bytes @ s)
    assert swapped < 0.9 * float(inst.tensor_bytes @ lp.s)
    value = _value_at(model, s, r)
    assert lp.bound_s * (1 - 1e-6) <= value <= lp.bound_s * (1 + 1e-5)
    # the model is left as it was: the same optimum when solved again
    again = model.solve(deadline=Deadline.begin(30.0))
    assert again.bound_s == pytest.approx(lp.bound_s, rel=1e-6)


def test_random_rounding_follows_the_shares() -> None:
    inst = bert_4()
    n = inst.n_tensors
    rng = np.random.default_rng(0)
    can = np.isfinite(inst.tensor_recompute_s)
    s = np.where(np.arange(n) % 2 == 0, 1.0, 0.0)
    r = np.where((np.arange(n) % 2 == 1) & can, 1.0, 0.0)
    acts = random_rounding(inst, s, r, rng)
    assert np.array_equal(acts == SWAP, s == 1.0)
    assert np.array_equal(acts == RECOMP, r == 1.0)
    half = np.full(n, 0.5)
    draws = np.stack([random_rounding(inst, half, np.zeros(n), rng) for _ in range(200)])
    assert 0.4 < float(np.mean(draws == SWAP)) < 0.6  # each tensor a fair coin
    assert not np.any(draws == RECOMP)


@pytest.mark.parametrize("frac", [0.4, 0.5])
def test_milp_plan_within_1_2_percent_of_its_bound(frac: float) -> None:
    # before the guided roundings: 2.58% (40%) and 1.85% (50%) with the same work budget (the
    # search ended before it was spent); with them 0.63% and 0.66% (scipy 1.17), 0.77% and 0.66%
    # (scipy 1.11, whose HiGHS returns another vertex of the relaxation's optimum: with 5,000
    # plans, one rounding, 2.2% and 1.9% there)
    opts = {"hint": "none", "max_evaluations": 15000}
    rec = run(bert_4(), frac, "milp", time_limit=30.0, seed=0, options=opts)
    assert rec.status is Status.FEASIBLE, rec.error
    assert rec.gap is not None and 0 <= rec.gap < 0.012
    assert rec.info["found_by"].startswith("lp-guided-rounding")
    assert rec.info["guided_roundings"] >= 1


def test_guided_roundings_are_repeatable_under_a_work_budget() -> None:
    opts = {"hint": "none", "max_evaluations": 5000}
    a = run(bert_4(), 0.4, "milp", time_limit=30.0, seed=3, options=opts)
    b = run(bert_4(), 0.4, "milp", time_limit=30.0, seed=3, options=opts)
    assert a.plan == b.plan and a.step_s == b.step_s
    assert a.info["found_by"] == b.info["found_by"]
