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
