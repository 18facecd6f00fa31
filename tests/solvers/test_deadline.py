"""The one `Deadline` of a solve: made by `run` from the time limit, asked by the solver and
passed down to the engine calls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model
from slackswap.plan import Budget, Plan
from slackswap.solvers import run
from slackswap.solvers.base import Solver
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact import cpsat, milp
from slackswap.solvers.exact.cpsat import CpSat
from slackswap.solvers.exact.milp import Milp


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_remaining_and_expired_follow_the_clock() -> None:
    clock = FakeClock()
    d = Deadline.begin(9.0, clock=clock)
    assert (d.start, d.usable_s, d.at) == (100.0, 9.0, 109.0)
    assert d.remaining() == 9.0 and not d.expired()
    clock.now = 108.0
    assert d.remaining() == pytest.approx(1.0) and d.elapsed() == 8.0 and not d.expired()
    clock.now = 109.5
    assert d.remaining() == 0.0 and d.expired()


def test_a_lap_times_a_phase_on_the_same_clock() -> None:
    clock = FakeClock()
    d = Deadline.begin(9.0, clock=clock)
    clock.now = 103.0
    lap = d.lap()
    clock.now = 104.5
    assert lap.elapsed() == 1.5 and not lap.limited and d.elapsed() == 4.5


def test_no_time_limit_never_expires() -> None:
    clock = FakeClock()
    d = Deadline.begin(None, clock=clock)
    clock.now = 1e9
    assert d.remaining() == math.inf and not d.expired() and not d.limited
    assert d.share(0.5) is d and d.before(3.0) is d
    # a share of no limit is no limit, and every phase has room
    assert d.share_s(0.4) == math.inf and d.has_left(1e9)
    assert d.within(d.share_s(0.4)) is d and d.before(d.share_s(0.08)) is d
    assert not d.within(2.0).expired() and d.within(2.0).limit_s == pytest.approx(1e9 - 100 + 2)


def test_parts_of_a_deadline_count_from_its_start() -> None:
    clock = FakeClock()
    d = Deadline.begin(10.0, clock=clock).before(2.0)  # ends at 108
    assert d.share_s(0.25) == pytest.approx(2.0)  # 0.25 x 8 s usable, in seconds
    assert d.share(0.3).at == pytest.approx(102.4)  # a phase's share of what is left to use
    assert d.before(2.5).at == pytest.approx(105.5)  # room left after a phase
    clock.now = 104.0
    assert d.within(1.0).at == pytest.approx(105.0)  # a second from now
    assert d.within(100.0).at == pytest.approx(108.0)  # never past the deadline itself
    assert d.has_left(3.9) and not d.has_left(4.0)  # 4 s remain


def test_a_negative_time_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Deadline.begin(-1.0)


class _Records(Solver):
    """Keeps everything and remembers the deadline it was given."""

    key = "t-records-deadline"
    seen: list[Deadline] = []

    def solve(self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int) -> Plan:
        self.seen.append(deadline)
        return Plan(instance, np.zeros(instance.n_tensors, dtype=np.int8))


def test_run_hands_the_solver_one_deadline_of_the_whole_limit() -> None:
    inst = build_model("gpt2-xl", layers=2, seq=128, batch=1)
    _Records.seen.clear()
    rec = run(inst, 1.0, _Records(), time_limit=2.0, find_min_budget=False)
    (deadline,) = _Records.seen
    assert (deadline.limit_s, deadline.usable_s) == (2.0, 2.0)
    assert 0.0 <= rec.plan_s <= deadline.elapsed()
    run(inst, 1.0, _Records(), find_min_budget=False)
    assert not _Records.seen[-1].limited


def test_no_solver_declares_a_margin_for_run_to_apply() -> None:
    """The exact solvers keep their own room at the end of the limit (a named share)."""
    for cls in (Solver, Milp, CpSat):
        assert not hasattr(cls, "margin")
    assert 0.0 < milp.RESERVE_SHARE < milp.LP_SHARE and 0.0 < cpsat.RESERVE_SHARE < cpsat.LP_SHARE


def test_the_evaluation_budget_rides_on_every_part_of_the_deadline() -> None:
    clock = FakeClock()
    d = Deadline.begin(10.0, max_evaluations=500, clock=clock)
    assert [p.max_evaluations for p in (d.share(0.5), d.before(1.0), d.within(2.0))] == [500] * 3
    assert d.with_evaluations(800).max_evaluations == 500  # the smaller budget wins
    assert d.with_evaluations(200).max_evaluations == 200
    assert d.with_evaluations(None) is d
    assert Deadline.never().with_evaluations(300).max_evaluations == 300
    inner = d.time_only()  # a hint's or a seed's solve: the same clock, its own evaluations
    assert inner.max_evaluations is None and inner.at == d.at
    assert d.lap().max_evaluations is None
    assert (d.evaluations_left(120), d.evaluations_left(900)) == (380, 0)
    assert not d.out_of_evaluations(499) and d.out_of_evaluations(500)
    assert Deadline.never().evaluations_left(10**9) == math.inf
    assert not Deadline.never().out_of_evaluations(10**9)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_a_bad_evaluation_budget_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="evaluation budget"):
        Deadline.begin(None, max_evaluations=bad)  # type: ignore[arg-type]


def test_the_plan_scorer_counts_against_the_deadlines_evaluation_budget() -> None:
    from slackswap.solvers.exact._plans import Scorer

    inst = build_model("gpt2-xl", layers=2, seq=128, batch=1)
    scorer = Scorer(inst, inst.peak_bytes, Deadline.begin(None, max_evaluations=3))
    steps = scorer.many(np.zeros((5, inst.n_tensors), dtype=np.int8))
    assert np.isfinite(steps[:3]).all() and np.isinf(steps[3:]).all()
    assert scorer.evaluations == 3 and scorer.exhausted


def test_a_hint_solves_within_the_time_but_not_the_evaluation_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from slackswap.solvers.exact import _plans

    class Entry:
        def make(self) -> Solver:
            return _Records()

    monkeypatch.setattr(_plans, "REGISTRY", {"t-records-deadline": Entry()})
    inst = build_model("gpt2-xl", layers=2, seq=128, batch=1)
    _Records.seen.clear()
    parent = Deadline.begin(10.0, max_evaluations=40)
    assert len(_plans.hint_plans(inst, Budget.parse(1.0), "t-records-deadline", parent)) == 1
    (given,) = _Records.seen
    assert given.max_evaluations is None and given.at <= parent.at


def test_milp_says_its_evaluation_budget_ended_the_search() -> None:
    inst = build_model("gpt2-xl", layers=6, seq=128, batch=2)
    rec = run(inst, 0.4, "milp", time_limit=30.0, options={"hint": "none", "max_evaluations": 20})
    assert rec.evaluations is not None and rec.evaluations <= 20
    assert (rec.stopped_by, rec.info.get("stop")) == ("evaluations", "evaluations")
