"""`PlanFacts`: what a fast step reads of its plan and model, worked out once per plan.

A prepared plan (`slackswap.runtime.training.planned.PlannedStep`) makes them at its first fast
step and hands the same object to every later one (`slackswap.runtime.training.fast.FastStep`),
so a step's set-up reads fields instead of converting the instance's arrays again. Plain Python
lists: a step indexes them per saved tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from slackswap.instance import Instance
from slackswap.plan import SWAP, Plan
from slackswap.runtime.copies import CopyModel, copy_model
from slackswap.runtime.policy import RuntimePolicy, runtime_policy
from slackswap.runtime.schedule import simulated_schedule
from slackswap.runtime.stats import RunStats

__all__ = ["PlanFacts", "plan_facts"]


@dataclass(frozen=True)
class PlanFacts:
    """What every fast step of one plan reads.

    ``budget_bytes``, ``simulated_peak_bytes``, ``simulated_step_s``, ``runtime``: the plan's
    check (`slackswap.runtime.check_plan`), copied into each step's `RunStats`. ``cuda``: the
    model lives on CUDA (a module does not move between the steps of a training loop).
    ``policy``: the runtime's policy for the fast steps (live copies back). ``copies``: what the
    copy engine reads of the plan. Per saved tensor: ``producer`` the operator that makes it
    (where a step is when it packs the tensor), ``external`` whether it is made outside the step
    (the caller's input), ``first_bwd_reader`` its first backward reader (where a step is when
    it unpacks it). Per operator: ``transient`` the transient bytes the instance models for it.
    ``blocks``: the profiled blocks' module paths, in order. ``evictions``: on a CPU, where the
    checked step replays the simulator's schedule, the swapped tensors whose copy back the
    simulator evicts before each backward operator (`simulated_schedule`'s ``evict``), in
    operator order; ``late``: the swapped tensors whose offload the simulator had not ended
    when the backward pass began, so it keeps them on the device and never copies them back;
    both empty on CUDA, where copies back follow the live look-ahead."""

    instance: Instance
    budget_bytes: int
    simulated_peak_bytes: int
    simulated_step_s: float
    runtime: str
    cuda: bool
    policy: RuntimePolicy
    copies: CopyModel
    producer: list[int]
    external: list[bool]
    first_bwd_reader: list[int]
    transient: list[int]
    blocks: list[str]
    evictions: list[tuple[int, list[int]]]
    late: frozenset[int]

    def new_stats(self) -> RunStats:
        """A step's stats before it runs: the plan's budget and simulated figures."""
        return RunStats(
            budget_bytes=self.budget_bytes,
            simulated_peak_bytes=self.simulated_peak_bytes,
            simulated_step_s=self.simulated_step_s,
            runtime=self.runtime,
        )


def plan_facts(plan: Plan, checked: RunStats, model: torch.nn.Module) -> PlanFacts:
    """The `PlanFacts` of ``plan`` (``checked``: its check's stats) on ``model``."""
    inst = plan.instance
    cuda = any(p.is_cuda for p in model.parameters())
    shift = int(inst.meta.get("runtime_signature", {}).get("op_shift", 0))
    producer = [int(x) for x in inst.tensor_producer]
    evictions, late = ([], frozenset()) if cuda else _replayed(plan, checked)
    return PlanFacts(
        instance=inst,
        budget_bytes=checked.budget_bytes,
        simulated_peak_bytes=checked.simulated_peak_bytes,
        simulated_step_s=checked.simulated_step_s,
        runtime=checked.runtime,
        cuda=cuda,
        policy=runtime_policy(checked.runtime, live=cuda),
        copies=copy_model(inst, np.asarray(plan.actions)),
        producer=producer,
        external=[p < shift for p in producer],
        first_bwd_reader=[int(x) for x in inst.tensor_first_bwd_reader],
        transient=[int(x) for x in inst.op_transient_bytes],
        blocks=list(dict.fromkeys(inst.meta.get("block_modules", []))),
        evictions=evictions,
        late=late,
    )


def _replayed(plan: Plan, checked: RunStats) -> tuple[list[tuple[int, list[int]]], frozenset[int]]:
    """The simulator's evictions of ``plan`` at its checked budget, by operator, in order, and
    the swapped tensors it keeps on the device ("late": offload not ended by the backward
    pass)."""
    acts = np.asarray(plan.actions)
    if not (acts == SWAP).any():
        return [], frozenset()
    schedule = simulated_schedule(plan.instance, acts, checked.budget_bytes, checked.runtime)
    evictions = sorted((int(o), [int(i) for i in ts]) for o, ts in schedule["evict"].items())
    return evictions, frozenset(int(i) for i in schedule["late"])
