"""Profiled blocks run under PyTorch's own ``torch.utils.checkpoint`` in a fast step of the
training path, the model's buffers (batch-norm statistics) updated once per step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from slackswap.torchstep.state import put_back


def checkpoint_call(
    fn: Callable[..., Any],
    buffers: list[torch.Tensor],
    saving_inputs: list[bool],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)`` under non-reentrant ``torch.utils.checkpoint``; ``buffers`` it
    updates in place are put back after each recomputation (one update per step).
    ``saving_inputs[0]`` is True while checkpoint saves the inputs (before the body)."""
    calls = [0]

    def body(*a: Any, **k: Any) -> Any:
        saving_inputs[0] = False
        calls[0] += 1
        if calls[0] == 1:
            return fn(*a, **k)
        with put_back(buffers):
            return fn(*a, **k)

    saving_inputs[0] = True
    try:
        return checkpoint(body, *args, use_reentrant=False, **kwargs)
    finally:
        saving_inputs[0] = False


@contextmanager
def checkpointed_block(
    model: torch.nn.Module, name: str, saving_inputs: list[bool]
) -> Iterator[None]:
    """Run block ``name``'s forward under non-reentrant ``torch.utils.checkpoint``
    (`checkpoint_call`)."""
    block = model.get_submodule(name) if name else model
    forward = block.forward
    buffers = list(block.buffers())

    def run_checkpointed(*args: Any, **kwargs: Any) -> Any:
        return checkpoint_call(forward, buffers, saving_inputs, *args, **kwargs)

    with _forward_replaced(block, run_checkpointed):
        yield


@contextmanager
def _forward_replaced(module: torch.nn.Module, forward: Callable[..., Any]) -> Iterator[None]:
    had = "forward" in module.__dict__
    old = module.__dict__.get("forward")
    module.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had:
            module.forward = old  # type: ignore[method-assign,assignment]
        else:
            del module.forward
