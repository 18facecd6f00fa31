"""`Entry`, one saved tensor's state during a planned step, and the `Handle` autograd holds.

The executor creates one entry per saved tensor of the instance and shares them with the copy
engine (`slackswap.runtime.copies`) and the rebuilder (`slackswap.runtime.rebuild`): each moves
the entry as its own work needs, so the entry is where the three meet. Two explicit state
machines, each changed only through a checked transition that refuses a change a step never
makes (`StateError`, naming the tensor and both states):

- `EntryState`, its place in the step: not saved, saved (autograd holds handles), released
  (autograd dropped its last handle). `Entry.to`.
- `Residency`, where its bytes are, as this runtime holds them: absent, on the device, being
  copied to the host, on the host, copied back, being rebuilt, freed. `Entry.move` changes it
  together with the storages it holds (``device``, ``host``) and the running copy's ``event``,
  and checks that they agree with it (a device storage exactly where the state has one).

Both paths (the checked one: `executor`, `copies`, `rebuild`; the training path's fast steps:
`slackswap.runtime.training.fast`) read where a tensor is from ``residency`` and write the
storages only through `Entry.move`. The checked path's entries check every change; a fast
step's check none (a saved tensor's Python is its hot path) unless ``SLACKSWAP_CHECK_STATES=1``
(`CHECK_FAST_STATES`), which the tests set to follow each move. No torch import: tensors
appear here only as annotations.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

__all__ = [
    "CHECK_FAST_STATES",
    "Entry",
    "EntryState",
    "EntryTable",
    "Handle",
    "RESIDENCY_TRANSITIONS",
    "Residency",
    "StateError",
]


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


class Residency(Enum):
    """Where a saved tensor's bytes are, as this runtime holds them (``device``: its device
    storage; ``host``: its host copy)."""

    ABSENT = "absent"  # neither: not saved yet, or recomputed and not rebuilt yet
    DEVICE = "on the device"  # device storage only
    TO_HOST = "being copied to the host"  # both: the device storage stays until the copy ends
    HOST = "on the host"  # host copy only (``event``: the copy's end, while it may still run)
    # both: a device storage made from the host copy (``event``: the copy back's end, while it
    # may still run); the host copy stays, so the device storage can be let go again
    TO_DEVICE = "copied back"
    REBUILDING = "being rebuilt"  # neither, while its rebuild runs
    # neither, for good: released and let go, the step closed, or (training path) a kept one
    # held only for the rebuilds that read it, once they are done (autograd holds it itself)
    FREED = "freed"


#: The residency changes the runtime makes; any other is a bug of the runtime's (`StateError`).
#: Every state but freed may become freed: autograd drops the last handle when it drops the
#: graph, and closing a step (also one that failed half way) lets everything go.
RESIDENCY_TRANSITIONS: dict[Residency, frozenset[Residency]] = {
    # saved (a swapped one copied out as it is saved: held while its copy runs, or not)
    Residency.ABSENT: frozenset(
        {Residency.DEVICE, Residency.TO_HOST, Residency.HOST, Residency.REBUILDING, Residency.FREED}
    ),
    # saved, then offloaded: synchronously (to the host at once) or while it stays
    Residency.DEVICE: frozenset({Residency.TO_HOST, Residency.HOST, Residency.FREED}),
    # the copy ended (or a replayed eviction); released while a rebuild or the copy holds it
    Residency.TO_HOST: frozenset({Residency.HOST, Residency.DEVICE, Residency.FREED}),
    Residency.HOST: frozenset({Residency.TO_DEVICE, Residency.FREED}),
    # evicted again; released while a rebuild still reads it
    Residency.TO_DEVICE: frozenset({Residency.HOST, Residency.DEVICE, Residency.FREED}),
    Residency.REBUILDING: frozenset({Residency.DEVICE, Residency.FREED}),
    Residency.FREED: frozenset(),
}

#: Which storages a state holds: (device, host).
_HOLDS: dict[Residency, tuple[bool, bool]] = {
    Residency.ABSENT: (False, False),
    Residency.DEVICE: (True, False),
    Residency.TO_HOST: (True, True),
    Residency.HOST: (False, True),
    Residency.TO_DEVICE: (True, True),
    Residency.REBUILDING: (False, False),
    Residency.FREED: (False, False),
}

#: Whether a fast step of the training path checks each state change of its entries (the
#: checked path always does): off by default, as the checks cost Python per saved tensor on
#: the hot path; ``SLACKSWAP_CHECK_STATES=1`` in the environment turns them on (a debug aid).
CHECK_FAST_STATES = os.environ.get("SLACKSWAP_CHECK_STATES", "") not in ("", "0")

#: `Entry.move`'s "leave this field as it is".
_SAME: Any = object()


class StateError(RuntimeError):
    """A saved tensor's state changed in a way the runtime never makes."""


class Entry:
    """One saved tensor of the instance during the step."""

    __slots__ = ("index", "name", "action", "nbytes", "device", "host", "handles", "state",
                 "residency", "event", "checked", "tensor", "whole_host")  # fmt: skip

    def __init__(
        self,
        index: int,
        action: int,
        nbytes: int,
        name: str | None = None,
        *,
        checked: bool = True,
    ):
        #: Whether `to` and `move` check each change (the checked path always; a fast step of
        #: the training path only under ``SLACKSWAP_CHECK_STATES=1``, `CHECK_FAST_STATES`).
        self.checked = checked
        self.index = index
        self.name = name
        self.action = action
        self.nbytes = nbytes
        self.device: Any = None  # the device storage while this runtime holds it
        # the host copy (swap): a storage, or from a CPU storage a flat tensor of words over one
        self.host: Any = None
        #: The device storage as one tensor of its first pack's shape and dtype, contiguous
        #: (a fast step's copy back or rebuild, when it made one): its unpacks return it as it
        #: is instead of making a tensor over the storage. None whenever ``device`` changes.
        self.tensor: Any = None
        #: The host copy is such a tensor (a CPU copy of a saved tensor that was its whole
        #: storage): its copy back is one.
        self.whole_host = False
        self.handles = 0  # handles autograd still holds
        self.state = EntryState.NOT_SAVED
        self.residency = Residency.ABSENT
        self.event: Any = None  # CUDA: the running copy's completion (D2H, later H2D)

    def _label(self) -> str:
        if self.name is None:
            return f"saved tensor #{self.index}"
        return f"saved tensor {self.name!r} (#{self.index})"

    def to(self, state: EntryState) -> None:
        """Move to ``state``; a change the runtime never makes is a `StateError` (checked)."""
        if self.checked and state not in TRANSITIONS[self.state]:
            raise StateError(
                f"{self._label()}: {self.state.value} -> {state.value} is no state change of a step"
            )
        self.state = state

    def move(
        self, residency: Residency, *, device: Any = _SAME, host: Any = _SAME, event: Any = _SAME
    ) -> None:
        """Move to ``residency``, setting the storages and the event given (the others stay).
        A change the runtime never makes, or storages that disagree with the new state (a
        device storage where it has none, none where it has one; the same for the host copy),
        is a `StateError` naming the tensor and both states; the entry is left as it was.
        Unchecked (``checked`` False), the storages and state are set as given."""
        if device is not _SAME:
            self.tensor = None
        if not self.checked:
            if device is not _SAME:
                self.device = device
            if host is not _SAME:
                self.host = host
            if event is not _SAME:
                self.event = event
            self.residency = residency
            return
        self.check(residency)
        new_device = self.device if device is _SAME else device
        new_host = self.host if host is _SAME else host
        want_device, want_host = _HOLDS[residency]
        if (new_device is not None) != want_device or (new_host is not None) != want_host:
            has = " and ".join(
                n
                for n, x in (("a device storage", new_device), ("a host copy", new_host))
                if x is not None
            )
            raise StateError(
                f"{self._label()}: {self.residency.value} -> {residency.value} with "
                f"{has or 'no storage'}, which does not agree with {residency.value}"
            )
        self.device, self.host = new_device, new_host
        if event is not _SAME:
            self.event = event
        self.residency = residency

    def check(self, residency: Residency) -> None:
        """A `StateError` unless the runtime may move the entry to ``residency`` now (asked
        before the work that move ends, such as a copy, begins)."""
        if residency not in RESIDENCY_TRANSITIONS[self.residency]:
            raise StateError(
                f"{self._label()}: {self.residency.value} -> {residency.value} is no change of "
                "where a saved tensor is"
            )

    def free(self) -> None:
        """Let go of everything this runtime holds for it (the step is over); idempotent."""
        if self.residency is Residency.FREED:
            return
        if self.checked:
            self.move(Residency.FREED, device=None, host=None, event=None)
        else:  # what `move` does unchecked, without its keyword handling (a fast step's path)
            self.device = self.host = self.event = self.tensor = None
            self.residency = Residency.FREED

    def forget_event(self) -> None:
        """Nothing waits for the running copy's end any more (it stays where it is)."""
        self.event = None

    @property
    def on_device(self) -> bool:
        """This runtime holds its device storage (on the device, being copied to the host, or
        copied back)."""
        return _HOLDS[self.residency][0]

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
    ``whole``: the view (dtype, offset, size, stride), known to be the entry's whole storage as
    its first pack's contiguous tensor (a fast step's pack order says so): ``t`` is not read,
    and ``direct`` says the entry's `Entry.tensor`, when it has one, is this view.
    """

    __slots__ = ("entry", "tensor", "dtype", "offset", "size", "stride", "release", "direct")

    def __init__(
        self,
        entry: Entry,
        t: torch.Tensor | None,
        keep: bool,
        release: Callable[[Entry], None],
        whole: tuple[Any, int, Any, Any] | None = None,
    ):
        # Made once per saved tensor (the training path's hot path): torch already gives an
        # int, an immutable ``torch.Size`` and a tuple, so they are stored as they come.
        self.release = release
        self.entry = entry
        self.offset: Any  # an int (a SymInt only when traced)
        if whole is not None:
            self.tensor = None
            self.dtype, self.offset, self.size, self.stride = whole
            self.direct = True
        else:
            assert t is not None
            self.tensor = t if keep else None
            self.dtype = t.dtype
            self.offset = t.storage_offset()
            self.size = t.shape
            self.stride = t.stride()
            self.direct = False
        entry.handles += 1

    def __del__(self) -> None:
        self.entry.handles -= 1
        if self.entry.handles == 0:
            self.release(self.entry)


class EntryTable(Protocol):
    """A step's entries by instance index: the checked path's list, a fast step's table of
    the entries it made (`slackswap.runtime.training.fast`)."""

    def __getitem__(self, index: int, /) -> Entry: ...
