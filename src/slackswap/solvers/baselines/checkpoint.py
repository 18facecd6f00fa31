"""Block checkpointing: the fewest blocks recomputed from their inputs that fit the budget."""

from __future__ import annotations

from slackswap.console import format_bytes
from slackswap.instance import Instance
from slackswap.plan import Budget, Plan
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.baselines._common import checkpoint_actions, checkpointable_blocks, probe
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.registry import register


@register(
    "checkpoint",
    display=Display(colour="#d62728", marker="D", order=7, label="Checkpoint", featured=4),
)
class Checkpoint(Solver):
    """Block checkpointing (Chen et al.; Megatron-LM's "block" method): fewest blocks that fit.

    A checkpointed block keeps its input and marks every other tensor of the block RECOMP; the
    runtime's rebuild chains then re-run the block's forward from its input right before the
    block's backward needs it, so the whole block is resident again during its backward, as with
    real checkpointing. Decisions the paper leaves open:

    - Which blocks: the earliest ones (Megatron-LM's ``--recompute-method block``). Their tensors
      are needed last in the backward pass, when most memory has been released, so for equal
      blocks the earliest ones lower the peak the most; on VGG-16 the earliest stages are also
      the largest. The loss block (output head) is never checkpointed: its tensors are read at
      the very start of backward, where memory peaks, so recomputing them frees nothing.
    - The block's last GEMM is not rerun: the block's output is the next block's (kept) input,
      so only tensors the block saves are rebuilt (the FC2 GEMM of a GPT layer is not).
    - "Fits" is decided by the simulator (no swaps, so the runtime's memory is the static
      profile plus rebuilds); the count is found by bisection, assuming more checkpointed
      blocks never need more memory.

    When even every block checkpointed does not fit, there is no plan; the smallest budget that
    plan needs is reported (Fig. 4: no checkpointing plan at 10% of the peak).

    On VGG-16 the floor is set by the first stage's pooling backward, which needs both stage-0
    convolution outputs (rebuilt) next to its gradient buffers whatever blocks are chosen;
    SlackSwap goes lower by bringing the first convolution's output back only after that
    operator. The floors on the catalog are in benchmarks/README.md ("Figures from module
    docstrings").
    """

    key = "checkpoint"
    tags = Tags(deterministic=True, uses_seed=False)
    runtime = "barrier-free"

    def __init__(self) -> None:
        pass

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Plan | Solution:
        m = budget.bytes_for(instance)
        blocks = checkpointable_blocks(instance)

        def fits(k: int) -> bool:
            return probe(
                instance, checkpoint_actions(instance, blocks[:k]), m, self.runtime
            ).feasible

        if not fits(len(blocks)):
            full = checkpoint_actions(instance, blocks)
            need = probe(instance, full, int(instance.peak_bytes), self.runtime).peak_bytes
            return Solution(
                plan=None,
                min_budget_bytes=int(need),
                info={
                    "reason": (
                        f"every one of {len(blocks)} blocks checkpointed still needs "
                        f"{format_bytes(need)} > budget {format_bytes(m)}"
                    )
                },
            )
        lo, hi = -1, len(blocks)  # fits(hi) holds; find the smallest such k
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid
        actions = checkpoint_actions(instance, blocks[:hi])
        return Solution(
            plan=Plan(instance, actions, runtime=self.runtime),
            info={"blocks": blocks[:hi], "n_blocks": hi},
        )
