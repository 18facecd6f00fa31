"""torch-budget: PyTorch's own activation_memory_budget partitioner, as a plan the simulator
scores.

At profile time (`slackswap.compile.profile`) torch's min-cut partitioner ran on the compiled
step's joint graph at a grid of ``activation_memory_budget`` values (torch's functorch config)
(its default knapsack), and which saved tensors it kept at each went to
``instance.meta["compile"]["torch_budget"]``. This solver turns each into a plan (kept: keep,
the rest: recompute; a tensor torch re-made that the instance cannot rebuild is kept) and
returns the one of the largest torch budget whose plan fits the byte budget in the simulator:
what a user setting ``activation_memory_budget`` by hand would find best. Torch's budget is a
fraction of its own estimate of the activations, not of the instance's P: the grid is searched
rather than the value passed through. An instance without those decisions (one not profiled
from a compiled step) is refused in one line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, Budget, Plan
from slackswap.simulator import simulate
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.registry import register


class NoTorchDecisions(UserError):
    """The instance carries no torch partitioner decisions."""


def decisions(instance: Instance) -> list[dict[str, Any]]:
    """Torch's decisions stored with ``instance``, largest torch budget first."""
    got = (instance.meta.get("compile") or {}).get("torch_budget")
    if not got:
        raise NoTorchDecisions(
            f"instance {instance.name!r} has no torch partitioner decisions "
            "(meta['compile']['torch_budget']): torch-budget plans compiled steps only "
            "(slackswap run --compile, slackswap.compile.profile_compiled)"
        )
    return sorted(got, key=lambda d: -float(d["activation_memory_budget"]))


def actions_of(instance: Instance, kept: list[str]) -> np.ndarray:
    keep = set(kept)
    rebuildable = np.isfinite(instance.tensor_recompute_s)
    acts = np.full(instance.n_tensors, KEEP, dtype=np.int8)
    for t, name in enumerate(instance.tensor_name):
        if name not in keep and rebuildable[t]:
            acts[t] = RECOMP
    return acts


@register(
    "torch-budget",
    "PyTorch's activation_memory_budget partitioner: the largest torch budget that fits",
    display=Display(colour="#7f7f7f", marker="P", label="torch budget"),
)
class TorchBudget(Solver):
    key = "torch-budget"
    tags = Tags(deterministic=True, needs_meta=("compile",))
    runtime = "barrier-free"

    def __init__(self) -> None:
        pass

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Plan | Solution:
        grid = decisions(instance)
        tried = []
        for d in grid:
            plan = Plan(instance, actions_of(instance, list(d["kept"])), self.runtime)
            res = simulate(instance, plan, budget)
            tried.append((float(d["activation_memory_budget"]), res))
            if res.feasible:
                return Solution(plan=plan, info={"activation_memory_budget": tried[-1][0]})
        smallest = min(tried, key=lambda x: x[1].peak_bytes)
        return Solution(
            plan=None,
            min_budget_bytes=int(smallest[1].peak_bytes),
            info={
                "reason": f"no activation_memory_budget of {len(grid)} fits: at "
                f"{smallest[0]:g} the plan needs {int(smallest[1].peak_bytes)} bytes"
            },
        )
