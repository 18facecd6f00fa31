"""Blocks and runs of an ``nn.Sequential``'s children run under PyTorch's own
``torch.utils.checkpoint`` in a fast step of the training path, the model's buffers (batch-norm
statistics) updated once per step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.checkpoint import checkpoint

if TYPE_CHECKING:
    from slackswap.runtime.training.learning import Span


def checkpoint_call(
    fn: Callable[..., Any],
    buffers: list[torch.Tensor],
    saving_inputs: list[int | None],
    *args: Any,
    saving: int = -1,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)`` under non-reentrant ``torch.utils.checkpoint``; ``buffers`` it
    updates in place are put back after each recomputation (one update per step).
    ``saving_inputs[0]`` is ``saving`` while checkpoint saves the inputs (before the body),
    None otherwise."""
    calls = [0]

    def body(*a: Any, **k: Any) -> Any:
        saving_inputs[0] = None
        calls[0] += 1
        if calls[0] == 1 or not buffers:
            return fn(*a, **k)
        saved = [b.detach().clone() for b in buffers]
        try:
            return fn(*a, **k)
        finally:
            with torch.no_grad():
                for b, v in zip(buffers, saved, strict=True):
                    b.copy_(v)

    saving_inputs[0] = saving
    try:
        return checkpoint(body, *args, use_reentrant=False, **kwargs)
    finally:
        saving_inputs[0] = None


@contextmanager
def checkpointed_block(
    model: torch.nn.Module, name: str, saving_inputs: list[int | None]
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
def checkpointed_spans(
    model: torch.nn.Module, spans: list[Span], saving_inputs: list[int | None]
) -> Iterator[None]:
    """Run each ``nn.Sequential`` holding ``spans`` with each span's children as one
    `checkpoint_call` (the rest of its children as ``nn.Sequential`` calls them)."""
    with ExitStack() as stack:
        for parent_path in dict.fromkeys(s.parent for s in spans):
            seq = model.get_submodule(parent_path) if parent_path else model
            mods: list[Any] = list(seq._modules.values())
            ends = {s.first: s.last for s in spans if s.parent == parent_path}
            runs: dict[int, tuple[Callable[[Any], Any], list[torch.Tensor], int]] = {}
            for s in spans:
                if s.parent == parent_path:
                    part = mods[s.first : s.last + 1]
                    bufs = [b for m in part for b in m.buffers()]
                    runs[s.first] = (_chain(part), bufs, s.swapped_input)

            def forward(x: Any, mods: list[Any] = mods, ends: dict[int, int] = ends,
                        runs: dict[int, Any] = runs) -> Any:  # fmt: skip
                k = 0
                while k < len(mods):
                    if k in ends:
                        fn, buffers, swapped = runs[k]
                        x = checkpoint_call(fn, buffers, saving_inputs, x, saving=swapped)
                        k = ends[k] + 1
                    else:
                        x = mods[k](x)
                        k += 1
                return x

            stack.enter_context(_forward_replaced(seq, forward))
        yield


def _chain(mods: list[Any]) -> Callable[[Any], Any]:
    def run(x: Any) -> Any:
        for m in mods:
            x = m(x)
        return x

    return run


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
