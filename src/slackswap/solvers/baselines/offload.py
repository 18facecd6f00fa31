"""Checkpoint offload (the essay's two runtimes): every block checkpointed, its input swapped."""

from __future__ import annotations

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import SWAP, Budget, Plan
from slackswap.solvers.base import Solver, Tags
from slackswap.solvers.baselines._common import (
    block_input_tensors,
    checkpoint_actions,
    checkpointable_blocks,
)
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.registry import register


def offload_actions(instance: Instance, *, keep_last: int) -> np.ndarray:
    """Every checkpointable block recomputed from its input; the inputs swapped but the newest
    ``keep_last`` of them kept on the device."""
    blocks = checkpointable_blocks(instance)
    actions = checkpoint_actions(instance, blocks)
    inputs = block_input_tensors(instance, blocks)
    swapped = inputs[: max(0, len(inputs) - keep_last)]
    actions[swapped] = SWAP
    return actions


class _CheckpointOffload(Solver):
    """Shared planning of the two checkpoint-offload runtimes; subclasses fix the runtime."""

    keep_last: int = 0
    runtime: str = ""

    def __init__(self) -> None:
        pass

    def solve(self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int) -> Plan:
        return Plan(
            instance, offload_actions(instance, keep_last=self.keep_last), runtime=self.runtime
        )


@register("offload-sync", display=Display(colour="#7f7f7f", marker="p", order=8))
class OffloadSync(_CheckpointOffload):
    """Synchronous checkpoint offload (Hugging Face ``gradient_checkpointing(offload=True)``).

    Every layer is checkpointed (non-reentrant, the block recomputed from its input in backward)
    and every checkpoint (block input) goes through ``save_on_cpu``: on the ``sync`` runtime the
    D2H copy runs on the compute stream right after the tensor is produced and the H2D copy on
    the compute stream right before the first use, with no prefetch. The budget plays no part:
    the policy is fixed, and the simulator says whether it fits. The output head (loss block)
    is not checkpointed: it is outside the checkpointed layers, and its input is saved by the
    final norm as an ordinary tensor.
    """

    key = "offload-sync"
    tags = Tags(deterministic=True, uses_seed=False)
    runtime = "sync"
    keep_last = 0


@register("offload-overlap", display=Display(colour="#bcbd22", marker="h", order=9))
class OffloadOverlap(_CheckpointOffload):
    """Overlapped checkpoint offload (Arctic Platform's ``activation_offload``).

    The same checkpointing, but on the ``layer-prefetch`` runtime: D2H copies on a side stream
    (forward never waits for them, only for memory), the newest checkpoint kept on the device
    (``keep_last_n=1``), and in backward the reload of layer k-1's checkpoint starts when layer
    k's backward starts, compute waiting only for what it needs. Only the checkpoints are
    offloaded; the head's own saved tensors stay (they are read first in backward).
    """

    key = "offload-overlap"
    tags = Tags(deterministic=True, uses_seed=False)
    runtime = "layer-prefetch"
    keep_last = 1
