"""Save tensors a piece of code updates in place, and put them back after it: the one way the
profiler, the runtime and its measurements keep a model's buffers (batch-norm running
statistics) as one step leaves them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

__all__ = ["put_back"]


@contextmanager
def put_back(tensors: Sequence[torch.Tensor]) -> Iterator[None]:
    """Run the ``with`` block, then copy each of ``tensors`` back to its value before it (in
    place, without autograd), also when the block raises. Nothing is copied for none."""
    if not tensors:
        yield
        return
    saved = [t.detach().clone() for t in tensors]
    try:
        yield
    finally:
        with torch.no_grad():
            for t, v in zip(tensors, saved, strict=True):
                t.copy_(v)
