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
    distinct, slot = _distinct_tensors(args)

    def body(*saved: Any, **k: Any) -> Any:
        saving_inputs[0] = False
        calls[0] += 1
        a = tuple(saved[s] if s >= 0 else arg for arg, s in zip(args, slot, strict=True))
        if calls[0] == 1:
            return fn(*a, **k)
        with put_back(buffers):
            return fn(*a, **k)

    saving_inputs[0] = True
    try:
        return checkpoint(body, *distinct, use_reentrant=False, **kwargs)
    finally:
        saving_inputs[0] = False


def _distinct_tensors(args: tuple[Any, ...]) -> tuple[list[torch.Tensor], list[int]]:
    """The distinct tensors among ``args`` and, per argument, its index among them (-1: not a
    tensor). checkpoint saves each tensor argument through the step's saved-tensor hooks, and
    a tensor unpacked through hooks is a new object: one tensor passed twice (self-attention's
    ``query is key is value``) would come back as two, and the recomputation would take
    another path (``nn.MultiheadAttention``'s separate in-projections) and save other tensors."""
    distinct: list[torch.Tensor] = []
    index: dict[int, int] = {}
    slot = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            slot.append(index.setdefault(id(arg), len(distinct)))
            if slot[-1] == len(distinct):
                distinct.append(arg)
        else:
            slot.append(-1)
    return distinct, slot


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
