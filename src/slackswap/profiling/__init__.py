"""Profile a real PyTorch training step into an `Instance` (needs ``pip install slackswap[torch]``).

``profile_step(model, inputs, loss_fn)`` runs one forward and backward pass and records, with
``saved_tensors_hooks`` and a ``TorchDispatchMode``, every ATen operator in order with its phase,
every saved tensor (one per storage: aliases and views count once; parameters and buffers are not
activations) with its size, producer, last forward reader, first and last backward reader and
rebuild inputs, and the blocks (the model's repeated child modules). The result is an ordinary
instance: every solver and the simulator work on it unchanged.

This package imports torch only when `profile_step` or `load_factory` is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slackswap.errors import UserError

if TYPE_CHECKING:
    from slackswap.profiling.factory import load_factory
    from slackswap.profiling.step import profile_step

__all__ = ["TORCH_HINT", "profile_step", "load_factory", "require_torch", "TorchMissingError"]


#: How to install torch: the CPU-only wheel serves profiling and `run` on CPU (about 200 MB);
#: the default wheel on Linux carries CUDA (several GB), which only a GPU needs.
TORCH_HINT = (
    "profiling and `run` need torch: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu (CPU only), or pip install 'slackswap[torch]' "
    "(with CUDA, several GB)"
)


class TorchMissingError(UserError):
    """torch is not installed; the message says how to get it."""


def require_torch() -> Any:
    """The torch module, or `TorchMissingError` naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise TorchMissingError(TORCH_HINT) from None
    return torch


def __getattr__(name: str) -> Any:
    if name == "profile_step":
        require_torch()
        from slackswap.profiling.step import profile_step

        return profile_step
    if name == "load_factory":
        from slackswap.profiling.factory import load_factory

        return load_factory
    raise AttributeError(f"module 'slackswap.profiling' has no attribute {name!r}")
