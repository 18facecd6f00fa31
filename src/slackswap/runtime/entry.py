"""`Entry`, one saved tensor's state during a planned step, and the `Handle` autograd holds.

The executor creates one entry per saved tensor of the instance and shares them with the copy
engine (`slackswap.runtime.copies`) and the rebuilder (`slackswap.runtime.rebuild`): each reads
and sets the fields its own work needs, so the entry is where the three meet. No torch import:
tensors appear here only as annotations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Entry", "Handle"]


class Entry:
    """One saved tensor of the instance during the step."""

    __slots__ = ("index", "action", "nbytes", "device", "host", "handles", "packed", "event",
                 "admitted", "released")  # fmt: skip

    def __init__(self, index: int, action: int, nbytes: int):
        self.index = index
        self.action = action
        self.nbytes = nbytes
        self.device: Any = None  # the device storage while this runtime holds it
        self.host: Any = None  # the host copy (swap)
        self.handles = 0  # handles autograd still holds
        self.packed = False
        self.event: Any = None  # CUDA: the running copy's completion (D2H, later H2D)
        self.admitted = False  # the H2D copy is admitted (bytes counted against the budget)
        self.released = False


class Handle:
    """What the pack hook gives autograd: the entry, and the saved view of its storage.

    ``keep``: hold the tensor itself (a kept tensor). ``release``: called with the entry when
    autograd drops its last handle, i.e. when the tensor's last backward reader is done.
    """

    __slots__ = ("entry", "tensor", "dtype", "offset", "size", "stride", "release")

    def __init__(
        self, entry: Entry, t: torch.Tensor, *, keep: bool, release: Callable[[Entry], None]
    ):
        self.release = release
        self.entry = entry
        self.tensor = t if keep else None
        self.dtype = t.dtype
        self.offset = int(t.storage_offset())
        self.size = tuple(t.shape)
        self.stride = tuple(t.stride())
        entry.handles += 1

    def __del__(self) -> None:
        self.entry.handles -= 1
        if self.entry.handles == 0:
            self.release(self.entry)
