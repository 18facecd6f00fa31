"""The default loss of a profiled, planned or compiled step, and the error of a step that fails."""

from __future__ import annotations

from typing import Any

import torch

from slackswap.errors import UserError

__all__ = ["ProfileError", "default_loss"]


class ProfileError(UserError):
    """The profiled step failed (the model's forward, the loss or the backward raised)."""


def default_loss(output: Any) -> torch.Tensor:
    """The sum of every floating-point tensor in the output (a tensor, tuple, list or dict)."""
    if isinstance(output, dict):
        output = list(output.values())
    parts = output if isinstance(output, list | tuple) else [output]
    sums = [t.sum() for t in parts if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not sums:
        raise ProfileError(
            f"the model returned {type(output).__name__} with no floating-point tensor; "
            "pass a loss_fn"
        )
    total = sums[0]
    for s in sums[1:]:
        total = total + s
    return total
