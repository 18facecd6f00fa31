"""When a solve must end: one `Deadline`, made by `run` and handed to the solver.

`run` starts the clock and passes the solver ``deadline=``; the solver asks it what is left
(`Deadline.remaining`), whether time is up (`Deadline.expired`), or for a part of it (`share`,
`before`, `within`) to hand to a phase or an engine, and never reads the clock against a time
limit of its own. A solver class that needs time after its last step (an exact solver that
prices its plan and writes its bound) declares a ``margin``: the share of the time limit its
deadline keeps free, applied by `run` when it makes the deadline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

#: The margin of the exact solvers: the share of the time limit kept free for the runner and
#: the final bookkeeping (pricing the plan, writing the bound).
MARGIN = 0.08


@dataclass(frozen=True)
class Deadline:
    """A time limit of ``limit_s`` seconds (None: none) counted from the clock reading
    ``start``, of which the share ``margin`` is kept free: the solve should end by `at`."""

    limit_s: float | None
    start: float
    margin: float = 0.0
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)

    @classmethod
    def begin(
        cls,
        limit_s: float | None,
        *,
        margin: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> Deadline:
        """A deadline ``limit_s`` seconds (None: none) from now on ``clock``."""
        if limit_s is not None and not limit_s >= 0:
            raise ValueError(f"a time limit is a non-negative number of seconds, got {limit_s!r}")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"a deadline's margin is a share in [0, 1), got {margin!r}")
        return cls(None if limit_s is None else float(limit_s), clock(), margin, clock)

    @classmethod
    def never(cls) -> Deadline:
        """No time limit (a solver that runs another to completion, a benchmark's solve)."""
        return cls.begin(None)

    @property
    def limited(self) -> bool:
        return self.limit_s is not None

    @property
    def usable_s(self) -> float:
        """The seconds from `start` to `at`: the time limit less the margin (inf without one)."""
        return math.inf if self.limit_s is None else self.limit_s * (1.0 - self.margin)

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

    def or_limit(self, limit_s: float) -> Deadline:
        """This deadline, or, when it has no time limit, one of ``limit_s`` seconds from the same
        start (a solver's own default limit)."""
        return self if self.limit_s is not None else replace(self, limit_s=float(limit_s))

    def share(self, fraction: float) -> Deadline:
        """The deadline at ``fraction`` of the time limit from the same start (a phase's end),
        without a margin; no time limit stays none."""
        if self.limit_s is None:
            return self
        return replace(self, limit_s=self.limit_s * fraction, margin=0.0)

    def before(self, seconds: float) -> Deadline:
        """The deadline ``seconds`` before this one (room left for what comes after a phase)."""
        if self.limit_s is None:
            return self
        return replace(self, limit_s=max(0.0, self.usable_s - seconds), margin=0.0)

    def within(self, seconds: float) -> Deadline:
        """``seconds`` from now, or this deadline when it comes first."""
        end = min(self.usable_s, self.elapsed() + max(0.0, seconds))
        return replace(self, limit_s=end, margin=0.0)
