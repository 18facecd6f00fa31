"""Helpers the baseline planners share: block structure, category masks, feasibility probes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.plan import RECOMP, Budget
from slackswap.simulator import simulate

if TYPE_CHECKING:
    from slackswap.simulator import SimResult


def loss_block(instance: Instance) -> int:
    """The block of the last forward operator: the output head that holds the loss.

    Checkpointing it frees nothing at the peak (its tensors are read by the very first backward
    operators, right where memory peaks), so no checkpointing policy recomputes it.
    """
    n_fwd = instance.n_forward_ops
    return int(instance.op_block[n_fwd - 1]) if n_fwd else -1


def checkpointable_blocks(instance: Instance) -> list[int]:
    """Blocks that block checkpointing can recompute from their inputs, earliest first.

    A block qualifies when it has a block-input tensor (the checkpoint kept in its place), at
    least one other tensor with a finite recompute cost, and is not the loss block.
    """
    cat = np.asarray(instance.tensor_category)
    blk = instance.tensor_block
    finite = np.isfinite(instance.tensor_recompute_s)
    has_input = set(blk[cat == "block_input"].tolist())
    rebuildable = set(blk[finite & (cat != "block_input")].tolist())
    skip = loss_block(instance)
    return sorted(b for b in has_input & rebuildable if b >= 0 and b != skip)


def checkpoint_actions(instance: Instance, blocks: list[int] | np.ndarray) -> np.ndarray:
    """Actions for block checkpointing of ``blocks``: every finite-cost tensor of a block RECOMP.

    The block inputs (cost ``inf``) stay as they are (KEEP); rebuild chains in the runtime
    rebuild the rest of a block from its input right before the block's backward pass needs it.
    """
    actions = np.zeros(instance.n_tensors, dtype=np.int8)
    chosen = np.isin(instance.tensor_block, np.asarray(blocks, dtype=np.int64))
    mask = chosen & np.isfinite(instance.tensor_recompute_s)
    mask &= np.asarray(instance.tensor_category) != "block_input"
    actions[mask] = RECOMP
    return actions


def block_input_tensors(instance: Instance, blocks: list[int]) -> np.ndarray:
    """Indices of the block-input tensors of ``blocks`` (the checkpoints), in block order."""
    cat = np.asarray(instance.tensor_category)
    out = [
        int(t)
        for b in blocks
        for t in np.flatnonzero((instance.tensor_block == b) & (cat == "block_input"))
    ]
    return np.asarray(out, dtype=np.int64)


def category_mask(instance: Instance, categories: tuple[str, ...]) -> np.ndarray:
    """Boolean mask of the tensors whose category is one of ``categories``."""
    return np.isin(np.asarray(instance.tensor_category), categories)


def probe(instance: Instance, actions: np.ndarray, budget_bytes: int, runtime: str) -> SimResult:
    """Simulate ``actions`` under ``runtime`` at ``budget_bytes`` (the planner's feasibility probe)."""

    return simulate(instance, actions, Budget.bytes(budget_bytes), runtime=runtime)


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """Validate a string option; a bad one is a user error naming the option and the choices."""
    if value not in allowed:
        raise UserError(f"option {name}={value!r}: must be one of {', '.join(allowed)}")
    return value
