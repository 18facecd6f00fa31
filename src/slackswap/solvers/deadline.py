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

    @classmethod
    def begin(
        cls,
        limit_s: float | None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> Deadline:
        """A deadline ``limit_s`` seconds (None: none) from now on ``clock``."""
        if limit_s is not None and not limit_s >= 0:
            raise ValueError(f"a time limit is a non-negative number of seconds, got {limit_s!r}")
        return cls(None if limit_s is None else float(limit_s), clock(), clock)

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
        """A clock started now on this deadline's clock, with no time limit: what a phase or an
        engine call took is its `elapsed` (the only clock the solvers read)."""
        return Deadline(None, self.clock(), self.clock)

    def within(self, seconds: float) -> Deadline:
        """``seconds`` from now, or this deadline when it comes first (no time limit stays none
        when ``seconds`` is inf)."""
        end = min(self.usable_s, self.elapsed() + max(0.0, seconds))
        if math.isinf(end):
            return self
        return replace(self, limit_s=end)
