"""The solver contract: `Solver`, its declared `Tags`, the `Solution` it may return and the
`Status` a run ends in. The registry is `slackswap.solvers.registry`, the option checks
`slackswap.solvers.options`, a solver's look in figures `slackswap.solvers.display`.

A solver is a class with keyword-only constructor options (stored as attributes of the same
name, nothing else: a value is checked by `Solver.check_options`, which ``solve`` calls) and
one method::

    solve(instance, budget, *, deadline, seed) -> Plan | Solution

``deadline`` is the `Deadline` `run` made from the time limit: the solver asks it what time
is left and never times itself against a limit of its own (a solver whose work needs room
after its last step keeps it free itself, with a named share of the deadline). It returns a
`Plan` (whose ``runtime`` names the runtime it is meant for), or a `Solution` when
it has more to say: a proven lower bound, its own claimed step time, proof of optimality or
infeasibility, a search history. Solvers never time or score themselves:
`slackswap.solvers.running.run` does, on a copy of the solver, and turns a solver's exception into an ``error`` record.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from slackswap.instance import Instance
from slackswap.plan import Budget, Plan
from slackswap.solvers.deadline import Deadline


class Status(StrEnum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Tags:
    """Declared capabilities; tests and the CLI select solvers by these."""

    exact: bool = False  # proves lower bounds / optimality
    deterministic: bool = True  # same instance, budget, options and seed -> same plan
    needs: tuple[str, ...] = ()  # importable modules the solver requires
    honours_time_limit: bool = True  # returns within time_limit (+10%)
    uses_time_limit: bool = False  # quality depends on the time limit (searches, exact solvers)
    # False: the seed never changes the plan, so a sweep runs the solver once per case
    # whatever seeds it is given (and the conformance kit checks two seeds agree)
    uses_seed: bool = True
    static_plan: bool = True  # the plan alone decides (no run-time policy in the simulator)
    #: ``Instance.meta`` entries the solver reads; it refuses (one line) an instance without
    #: them, so the conformance suite runs it on instances that carry them, not the catalog's
    needs_meta: tuple[str, ...] = ()


@dataclass
class Solution:
    """What a solver may return beyond a plan (all optional)."""

    plan: Plan | None
    lower_bound_s: float | None = None  # no plan can simulate faster than this
    claimed_step_s: float | None = None  # the solver's own objective value, checked by tests
    proven_optimal: bool = False
    proven_infeasible: bool = False
    timed_out: bool = False
    min_budget_bytes: int | None = None  # smallest budget the solver could fit, when known
    evaluations: int | None = None  # plans scored (searches)
    history: list[tuple[float, int, float]] = field(default_factory=list)  # (s, evals, best step)
    info: dict[str, Any] = field(default_factory=dict)


class Solver:
    """Base class: subclasses set ``key``/``tags``, take keyword-only options, implement solve."""

    key: ClassVar[str] = ""
    tags: ClassVar[Tags] = Tags()

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Plan | Solution:
        raise NotImplementedError

    def check_options(self) -> None:
        """Raise a `ValueError` (or `UserError`) naming an option whose value this solver
        refuses. The constructor only stores options (scikit-learn's rule: ``get_params`` and
        a clone see them as given); ``solve`` calls this first, and `run` and the registry's
        ``make`` call it before any solve, so a bad value is one line, not an error row."""

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        """Constructor options and their defaults, read from the signature."""
        sig = inspect.signature(cls.__init__)
        return {
            n: p.default
            for n, p in sig.parameters.items()
            if n != "self" and p.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def get_params(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.option_defaults()}

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.get_params().items() if self.option_defaults().get(k) != v}
        args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"{self.key}({args})" if args else self.key
