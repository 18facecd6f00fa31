"""Profile a real PyTorch training step into an `Instance` (needs ``pip install slackswap[torch]``).

``profile_step(model, inputs, loss_fn)`` runs one forward and backward pass and records, with
``saved_tensors_hooks`` and a ``TorchDispatchMode``, every ATen operator in order with its phase,
every saved tensor (one per storage: aliases and views count once; parameters and buffers are not
activations) with its size, producer, last forward reader, first and last backward reader and
rebuild inputs, and the blocks (the model's repeated child modules). The result is an ordinary
instance: every solver and the simulator work on it unchanged.

This package imports torch only when `profile_step` is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slackswap.profiling.factory import load_factory
from slackswap.torchstep import TORCH_HINT, TorchMissingError, require_torch

if TYPE_CHECKING:
    from slackswap.profiling.step import profile_step

__all__ = ["TORCH_HINT", "profile_step", "load_factory", "require_torch", "TorchMissingError"]


def __getattr__(name: str) -> Any:
    if name == "profile_step":
        require_torch()
        from slackswap.profiling.step import profile_step  # lazy: imports torch (optional)

        return profile_step
    raise AttributeError(f"module 'slackswap.profiling' has no attribute {name!r}")
