"""`Entry`, one saved tensor's state during a planned step, and the `Handle` autograd holds.

The executor creates one entry per saved tensor of the instance and shares them with the copy
engine (`slackswap.runtime.copies`) and the rebuilder (`slackswap.runtime.rebuild`): each reads
and sets the fields its own work needs, so the entry is where the three meet. Its place in the
step (`EntryState`: not saved, saved, released) changes only through `Entry.to`, which refuses a
change a step never makes; where its bytes are (``device``, ``host``, ``event``) is still read
from the storages it holds. No torch import: tensors appear here only as annotations.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Entry", "EntryState", "Handle", "StateError"]


class EntryState(Enum):
    """Where a saved tensor is in its step: not yet saved by autograd, saved (autograd holds
    handles to it; kept, swapped or recomputed as the plan says), or released (autograd dropped
    its last handle: its last backward reader is done)."""

    NOT_SAVED = "not saved"
    SAVED = "saved"
    RELEASED = "released"


#: The state changes a step makes; any other is a bug of the runtime's (`StateError`).
TRANSITIONS: dict[EntryState, frozenset[EntryState]] = {
    EntryState.NOT_SAVED: frozenset({EntryState.SAVED}),
    EntryState.SAVED: frozenset({EntryState.RELEASED}),
    EntryState.RELEASED: frozenset(),
}


class StateError(RuntimeError):
    """A saved tensor's state changed in a way the runtime never makes."""


class Entry:
    """One saved tensor of the instance during the step."""

    __slots__ = ("index", "action", "nbytes", "device", "host", "handles", "state", "event",
                 "admitted")  # fmt: skip

    def __init__(self, index: int, action: int, nbytes: int):
        self.index = index
        self.action = action
        self.nbytes = nbytes
        self.device: Any = None  # the device storage while this runtime holds it
        self.host: Any = None  # the host copy (swap)
        self.handles = 0  # handles autograd still holds
        self.state = EntryState.NOT_SAVED
        self.event: Any = None  # CUDA: the running copy's completion (D2H, later H2D)
        self.admitted = False  # the H2D copy is admitted (bytes counted against the budget)

    def to(self, state: EntryState) -> None:
        """Move to ``state``; a change the runtime never makes is a `StateError`."""
        if state not in TRANSITIONS[self.state]:
            raise StateError(
                f"saved tensor #{self.index}: {self.state.value} -> {state.value} is no "
                "state change of a step"
            )
        self.state = state

    @property
    def packed(self) -> bool:
        """Autograd saved it in this step."""
        return self.state is not EntryState.NOT_SAVED

    @property
    def released(self) -> bool:
        """Autograd dropped its last handle."""
        return self.state is EntryState.RELEASED


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
