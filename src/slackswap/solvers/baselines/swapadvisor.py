"""SwapAdvisor (Huang et al., ASPLOS 2020) without its search: Belady eviction, early swaps."""

from __future__ import annotations

import numpy as np

from slackswap.console import format_bytes
from slackswap.instance import Instance
from slackswap.plan import SWAP, Budget, Plan
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.registry import register


def belady_swaps(instance: Instance, budget_bytes: int) -> tuple[np.ndarray, int]:
    """Walk the keep-all memory profile; at every operator over budget, evict (mark SWAP) the
    idle resident tensor whose next use is furthest away until the operator fits.

    Returns the actions and the static floor: the largest memory (bytes) left at any operator
    once every idle tensor there is swapped (above the budget only when the walk cannot fit).
    The profile is SwapAdvisor's planning view: a swapped tensor is absent from the end of its
    last forward reader until its first backward reader, the copies themselves taking no time.
    """
    n_ops = instance.n_ops
    lfr = instance.tensor_last_fwd_reader.astype(np.int64)
    fbr = instance.tensor_first_bwd_reader.astype(np.int64)
    size = instance.tensor_bytes.astype(np.int64)
    # Candidates in Belady order: furthest next use first; the next use of an idle tensor is its
    # first backward reader. Ties: the earlier-produced tensor first (deterministic).
    order = np.lexsort((instance.tensor_producer, -fbr))
    profile = np.array(instance.memory_profile_keep_all, dtype=np.int64)
    actions = np.zeros(instance.n_tensors, dtype=np.int8)
    floor = 0
    for i in range(n_ops):
        if profile[i] <= budget_bytes:
            floor = max(floor, int(profile[i]))
            continue
        idle = order[(lfr[order] < i) & (fbr[order] > i) & (actions[order] != SWAP)]
        for t in idle:
            actions[t] = SWAP
            profile[lfr[t] + 1 : fbr[t]] -= size[t]
            if profile[i] <= budget_bytes:
                break
        floor = max(floor, int(profile[i]))
    return actions, floor


@register(
    "swapadvisor",
    display=Display(colour="#2ca02c", marker="v", order=6, label="SwapAdvisor", featured=3),
)
class SwapAdvisor(Solver):
    """SwapAdvisor's swap policy: Belady eviction on the planned schedule, as-early-as-possible swaps.

    Planning walks the keep-all memory profile in operator order and, wherever it exceeds the
    budget, marks SWAP the idle tensor whose next use (its first backward reader) is furthest
    away, Belady's MIN rule, until the operator fits (`belady_swaps`). Nothing is recomputed and
    the number of swapped bytes is set by the memory deficit alone, not by the link.

    The plan runs on the ``barrier-free`` runtime, which issues each D2H copy as soon as the
    tensor is produced and each H2D copy as early as memory admits, in deadline order: the
    as-early-as-possible swaps. SwapAdvisor's genetic search over operator orders and memory-pool
    layouts is omitted, as in the paper (near-linear graphs, a fragmentation-free allocator).

    When the walk cannot fit some operator (its inputs, outputs and temporaries alone exceed the
    budget) there is no plan; the static floor is reported as the smallest budget to try.
    """

    key = "swapadvisor"
    tags = Tags(deterministic=True, uses_seed=False)
    runtime = "barrier-free"

    def __init__(self) -> None:
        pass

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Plan | Solution:
        m = budget.bytes_for(instance)
        actions, floor = belady_swaps(instance, m)
        if floor > m:
            return Solution(
                plan=None,
                info={
                    "reason": (
                        f"with every idle tensor swapped some operator still needs "
                        f"{format_bytes(floor)} > budget {format_bytes(m)}"
                    ),
                    "static_floor_bytes": floor,
                },
            )
        return Plan(instance, actions, runtime=self.runtime)
