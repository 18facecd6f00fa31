"""Constructors store options as given and `check_options` refuses bad values (scikit-learn
validates in ``fit``, here in ``solve``); `run` solves on a deep copy (pymoo's ``minimize``)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from slackswap.errors import ArgumentError, ArgumentTypeError, UserError
from slackswap.instance import Instance
from slackswap.instances.catalog import load
from slackswap.plan import Budget, Plan
from slackswap.solvers import REGISTRY, Solver, Status, Tags, run
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact.milp import Milp
from slackswap.solvers.genetic.ga import GeneticSearch
from slackswap.solvers.planner.slackswap_planner import SlackSwap


class Counting(Solver):
    """Keeps a count across solves: the first solve keeps everything, later ones swap all."""

    key = "t-counting"
    tags = Tags(deterministic=False)

    def __init__(self) -> None:
        self.solves = 0

    def solve(self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int) -> Plan:
        self.solves += 1
        if self.solves == 1:
            return Plan.keep_all(instance)
        return Plan(instance, np.ones(instance.n_tensors, dtype=np.int8))


class Locked(Counting):
    key = "t-locked"

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()  # deepcopy cannot copy a lock


@pytest.mark.parametrize(
    "make,bad",
    [
        (lambda: SlackSwap(order="nope"), "order must be 'rho' or 'production'"),
        (lambda: Milp(hint="nope"), "unknown solver 'nope'"),
        (lambda: GeneticSearch(pop_size=1), "pop_size must be at least 2"),
    ],
)
def test_constructors_store_and_solve_refuses(make, bad: str) -> None:  # type: ignore[no-untyped-def]
    solver = make()  # no check in the constructor: the options are stored as given
    with pytest.raises(UserError, match=bad):
        solver.check_options()
    with pytest.raises(UserError, match=bad):
        solver.solve(load("vgg16"), Budget.parse(0.8), deadline=Deadline.never(), seed=0)
    with pytest.raises(UserError, match=bad):  # run refuses before any work, not an error row
        run("vgg16", 0.8, solver, find_min_budget=False)


def test_make_still_refuses_a_bad_option_in_one_line() -> None:
    with pytest.raises(ArgumentError, match="order must be 'rho' or 'production', got 'nope'"):
        REGISTRY["slackswap"].make(order="nope")
    with pytest.raises(UserError, match="did you mean 'slackswap'"):
        REGISTRY["milp"].make(hint="slackswp")


def test_run_solves_on_a_copy() -> None:
    solver = Counting()
    first = run("vgg16", 1.0, solver, find_min_budget=False)
    second = run("vgg16", 1.0, solver, find_min_budget=False)
    assert solver.solves == 0  # the caller's object is untouched
    assert first.status == second.status == Status.FEASIBLE
    assert first.plan == second.plan == Plan.keep_all(load("vgg16"))


def test_a_solver_that_cannot_be_copied_is_refused() -> None:
    with pytest.raises(ArgumentTypeError, match="cannot be copied"):
        run("vgg16", 1.0, Locked(), find_min_budget=False)
