"""When a solve must end: one `Deadline`, made by `run` and handed to the solver.

`run` starts the clock and passes the solver ``deadline=``; the solver asks it what is left
(`Deadline.remaining`), whether time is up (`Deadline.expired`), or for a part of it (`share`,
`before`, `within`) to hand to a phase or an engine, and never reads the clock against a time
limit of its own: the exact programs take a `Deadline` down to the engine call and turn it into
seconds only there (HiGHS's and CP-SAT's time limits), and time a phase with `lap`. A solver that
needs time after its last step (an exact solver that prices its plan and writes its bound) keeps
it free itself, with `before` and a named share (`share_s`).

Without a time limit (`Deadline.never`, ``run(time_limit=None)``) every part of a deadline is
none too, and a solver ends by its own rule: a search by its evaluation or generation budget
or its convergence, an exact solver when its loops converge or its proof closes. A finite
default belongs to the driver that chose it (the command line and `slackswap.solve`:
`slackswap.solvers.running.EXACT_TIME_LIMIT_S`), never to a solver's option.

The deadline is the solve's one stopping rule, in the manner of pymoo's ``Termination``: beside
the time limit it carries the evaluation budget (``max_evaluations``: plans scored in the
simulator, None: none), which every part of it keeps (`share`, `before`, `within`). A search
with a ``max_evaluations`` option (``ga``, ``milp``, ``cpsat``) joins it to the deadline it was
given with `with_evaluations` (the smaller budget wins, so a caller may set one too with
`begin`) and hands the result down: a phase, the plan scorer and the island rules read both
rules from the one object (`out_of_evaluations`, `evaluations_left`). A solve started for
another solver's plan (a hint, a seed) gets `time_only`: it counts its own evaluations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Deadline:
    """A time limit of ``limit_s`` seconds (None: none) counted from the clock reading
    ``start``: the solve should end by `at`."""

    limit_s: float | None
    start: float
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)
    #: Plans the solve may score in the simulator (None: no evaluation budget).
    max_evaluations: int | None = None

    @classmethod
    def begin(
        cls,
        limit_s: float | None,
        *,
        max_evaluations: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> Deadline:
        """A deadline ``limit_s`` seconds (None: none) from now on ``clock``, with an evaluation
        budget of ``max_evaluations`` plans (None: none)."""
        if limit_s is not None and not limit_s >= 0:
            raise ValueError(f"a time limit is a non-negative number of seconds, got {limit_s!r}")
        _check_evaluations(max_evaluations)
        return cls(None if limit_s is None else float(limit_s), clock(), clock, max_evaluations)

    @classmethod
    def never(cls) -> Deadline:
        """No time limit (a solver that runs another to completion, a benchmark's solve)."""
        return cls.begin(None)

    @property
    def limited(self) -> bool:
        return self.limit_s is not None

    @property
    def usable_s(self) -> float:
        """The seconds from `start` to `at`: the time limit (inf without one)."""
        return math.inf if self.limit_s is None else self.limit_s

    @property
    def at(self) -> float:
        """The clock reading the solve should end by (inf without a time limit)."""
        return self.start + self.usable_s

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        """Seconds left until `at`, never below 0 (inf without a time limit)."""
        return max(0.0, self.at - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.at

    def share(self, fraction: float) -> Deadline:
        """The deadline at ``fraction`` of the time limit from the same start (a phase's end);
        no time limit stays none."""
        if self.limit_s is None:
            return self
        return replace(self, limit_s=self.limit_s * fraction)

    def before(self, seconds: float) -> Deadline:
        """The deadline ``seconds`` before this one (room left for what comes after a phase)."""
        if self.limit_s is None:
            return self
        return replace(self, limit_s=max(0.0, self.usable_s - seconds))

    def share_s(self, fraction: float) -> float:
        """``fraction`` of the time limit, in seconds (inf without one: a share of no limit is
        no limit). Where a solver names its time shares (``LP_SHARE`` and the like), it turns
        them into seconds here, never from a limit of its own."""
        return fraction * self.usable_s

    def has_left(self, seconds: float) -> bool:
        """Whether more than ``seconds`` remain (always, without a time limit): room for a
        phase that should not start without it."""
        return self.limit_s is None or self.remaining() > seconds

    def lap(self) -> Deadline:
        """A clock started now on this deadline's clock, with no time limit and no evaluation
        budget: what a phase or an engine call took is its `elapsed` (the only clock the
        solvers read)."""
        return Deadline(None, self.clock(), self.clock)

    def within(self, seconds: float) -> Deadline:
        """``seconds`` from now, or this deadline when it comes first (no time limit stays none
        when ``seconds`` is inf)."""
        end = min(self.usable_s, self.elapsed() + max(0.0, seconds))
        if math.isinf(end):
            return self
        return replace(self, limit_s=end)

    def with_evaluations(self, max_evaluations: int | None) -> Deadline:
        """This deadline with an evaluation budget of at most ``max_evaluations`` plans (None:
        this one's): a solver's own budget joins the driver's, the smaller wins."""
        _check_evaluations(max_evaluations)
        if max_evaluations is None:
            return self
        mine = self.max_evaluations
        return replace(
            self, max_evaluations=max_evaluations if mine is None else min(mine, max_evaluations)
        )

    def time_only(self) -> Deadline:
        """This deadline without its evaluation budget: for a solve started inside this one
        (another solver's plan as a hint or a seed), which counts its own evaluations."""
        return replace(self, max_evaluations=None)

    def evaluations_left(self, done: int) -> float:
        """Plans that may still be scored after ``done`` (inf without an evaluation budget)."""
        if self.max_evaluations is None:
            return math.inf
        return max(0, self.max_evaluations - done)

    def out_of_evaluations(self, done: int) -> bool:
        """Whether ``done`` plans scored spend the evaluation budget (never without one)."""
        return self.max_evaluations is not None and done >= self.max_evaluations


def _check_evaluations(max_evaluations: int | None) -> None:
    if max_evaluations is not None and (
        isinstance(max_evaluations, bool)
        or not isinstance(max_evaluations, int)
        or max_evaluations < 0
    ):
        raise ValueError(
            f"an evaluation budget is a non-negative whole number of plans, got {max_evaluations!r}"
        )
