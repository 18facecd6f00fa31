"""`RuntimePolicy`: how the real runtime runs a registered simulator runtime (no torch import).

The simulator's runtime registry (`slackswap.simulator.policies`) is the one place a runtime's
policy lives: its `ExecutionMode` (copies overlapped on side streams or not, copies back
admitted ahead of need or each when needed) and, for a compiled `RuntimeSpec`, its forward
waits, its H2D release rule and its memory look-ahead. `runtime_policy` reads all of them, so
the executor's live copies follow the same look-ahead the simulator used, and refuses, in one
line before the step, a runtime whose rules the live executor cannot follow (its forward
barriers or its per-layer prefetch). A replayed schedule (``schedule="simulated"``) follows the
simulator's own timeline for the runtime and so honours any runtime with an `ExecutionMode`.
"""

from __future__ import annotations

from dataclasses import dataclass

from slackswap.plan import PlanError
from slackswap.simulator.policies import (
    FWD_WAIT_EVERY_OP,
    FWD_WAIT_NONE,
    H2D_ALL_AT_BACKWARD,
    H2D_ON_DEMAND,
    RuntimeSpec,
    execution_modes,
    get_runtime,
)

__all__ = ["RuntimePolicy", "runtime_policy"]


@dataclass(frozen=True)
class RuntimePolicy:
    """What the executor needs of a runtime: side-stream copies (``overlap``), copies back
    admitted by the look-ahead rule from the start of backward (``prefetch``) with the transient
    bytes of the next ``lookahead_ops`` operators counted."""

    name: str
    overlap: bool
    prefetch: bool
    lookahead_ops: int


def runtime_policy(name: str, *, live: bool) -> RuntimePolicy:
    """The policy of registered runtime ``name``; a `PlanError` (one line) when the real
    runtime cannot run it, or, ``live`` (copies timed as the step runs), cannot follow it."""
    modes = execution_modes()
    if name not in modes:
        raise PlanError(
            f"runtime = {name!r}: slackswap.runtime runs {', '.join(modes)} "
            "(pass runtime='barrier-free' to run the plan's actions barrier-free)"
        )
    mode = modes[name]
    rt = get_runtime(name)
    lookahead = getattr(rt, "lookahead_ops", None)
    if isinstance(rt, RuntimeSpec):
        fwd_wait, h2d_release, lookahead = rt.code()
        if live:
            ok = (
                (mode.overlap and fwd_wait == FWD_WAIT_NONE)
                or (not mode.overlap and fwd_wait == FWD_WAIT_EVERY_OP)
            ) and h2d_release == (H2D_ALL_AT_BACKWARD if mode.prefetch else H2D_ON_DEMAND)
            if not ok:
                raise PlanError(
                    f"runtime = {name!r}: its forward waits or its H2D release rule cannot be "
                    "followed live (the live executor prefetches by the memory look-ahead "
                    "only); pass schedule='simulated' to replay its schedule, or "
                    "runtime='barrier-free'"
                )
    if not isinstance(lookahead, int) or lookahead < 0:
        if live and mode.prefetch:
            raise PlanError(
                f"runtime = {name!r}: it states no look-ahead (an integer lookahead_ops >= 0), "
                "so its copies back cannot be timed live; pass schedule='simulated'"
            )
        lookahead = 0
    return RuntimePolicy(name, mode.overlap, mode.prefetch, int(lookahead))
