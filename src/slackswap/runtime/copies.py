"""`CopyEngine`: move a step's swapped tensors to host memory and back, as the simulator does.

Offload: when the step first saves a swapped tensor its whole storage is copied to host memory,
on CUDA into pinned memory on a dedicated copy stream ordered after the producer, with a CUDA
event to poll; ``record_stream`` on the copy stream keeps the caching allocator from reusing
the device buffer before that stream read it. The host buffer is made with the dispatch modes
disabled (host memory is not device memory, so `StorageTracker` must not count it).

Back to the device, one of two ways: live, from the start of the backward pass and before each
operator, H2D copies start in deadline order (first backward reader) on a second stream while
the head fits the budget with the transient bytes of the next ``lookahead_ops`` operators (the
simulator's look-ahead, on the instance's memory model, `schedule.base_resident`); replayed, the
simulator's own copy times for the plan (`schedule.simulated_schedule`) are followed at operator
granularity, evictions included. A tensor needed before its copy started is fetched at once
(the deadlock rule). The device buffer of a fetch is allocated inside the executor's ``quiet``
section: not a step operator, but device memory a `StorageTracker` counts.

Without CUDA (or with ``overlap`` off) every copy is synchronous; the bookkeeping is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch

from slackswap.instance import Instance
from slackswap.plan import RECOMP, SWAP
from slackswap.runtime.entry import Entry, EntryState, Residency
from slackswap.runtime.schedule import base_resident, rebuild_points
from slackswap.torchstep.torchapi import disable_current_modes

__all__ = ["CopyEngine"]


class CopyEngine:
    """Offloads, evicts, admits and fetches the swapped entries of one step.

    ``schedule``: a replayed schedule (`simulated_schedule`), else copies back start live.
    ``current_op``: the instance index of the next operator the step runs. ``quiet``: a
    context in which the executor lets operators through unnumbered.
    """

    def __init__(
        self,
        instance: Instance,
        actions: np.ndarray,
        entries: list[Entry],
        budget_bytes: int,
        *,
        lookahead_ops: int,
        overlap: bool,
        prefetch: bool,
        schedule: dict[str, dict[int, list[int]]] | None,
        current_op: Callable[[], int],
        quiet: Callable[[], AbstractContextManager[None]],
    ):
        self.instance = instance
        self.entries = entries
        self.budget_bytes = budget_bytes
        self.lookahead_ops = lookahead_ops
        self.overlap = overlap
        self.prefetch = prefetch
        self.current_op = current_op
        self.quiet = quiet
        self.swapped_bytes = 0
        self.h2d_bytes = 0
        # The memory model the H2D admission uses (the simulator's, on instance operator
        # indices): bytes resident before operator o starts when nothing is fetched back yet.
        self._base = base_resident(instance, actions)
        self._cum_transient = np.concatenate(
            ([0], np.cumsum(instance.op_transient_bytes, dtype=np.int64))
        )
        self._admitted_bytes = 0
        self._offloading: list[Entry] = []  # CUDA: offloads whose copy may still run
        swapped = [e for e in entries if e.action == SWAP]
        fbr = instance.tensor_first_bwd_reader
        self._queue = sorted(swapped, key=lambda e: (int(fbr[e.index]), e.index))
        # A replayed schedule: operator index -> tensors whose H2D copy starts / whose
        # offloaded device buffer is let go before that operator.
        self._schedule = schedule
        self._hold_until: dict[int, int] = {}
        if schedule is not None:
            for o, ts in schedule["d2h_done"].items():
                for i in ts:
                    self._hold_until[i] = o
        self._deferred_evictions: list[Entry] = []
        # Released by autograd while a recomputed consumer's rebuild still reads them.
        self._deferred_releases: list[Entry] = []
        self._rebuild_at, _ = rebuild_points(instance, actions)
        # Tensor -> the recomputed tensors whose rebuild reads it (an eviction waits for them).
        self._consumers: list[list[int]] = [[] for _ in range(instance.n_tensors)]
        for v, ins in enumerate(instance.tensor_rebuild_inputs):
            for u in ins:
                if actions[v] == RECOMP:
                    self._consumers[u].append(v)
        self._cuda = False
        self._copy_stream: Any = None
        self._h2d_stream: Any = None

    def use_device(self, cuda: bool) -> None:
        """The step's model lives on CUDA (side streams when overlapping) or on the CPU."""
        self._cuda = cuda
        if cuda and self.overlap:
            self._copy_stream = torch.cuda.Stream()
            self._h2d_stream = torch.cuda.Stream()

    # ----- offload -----------------------------------------------------------------------------
    def offload(self, e: Entry) -> None:
        """D2H copy of the whole storage: on the copy stream after the producer (CUDA), or at
        once (CPU). The runtime keeps no device reference: the buffer is freed when the copy
        and the step's last reference (its last forward reader) are done."""
        e.check(Residency.TO_HOST)
        self.swapped_bytes += e.nbytes
        host, event = copy_to_host(e.device, self._copy_stream)
        if event is None and (self._schedule is None or e.index not in self._hold_until):
            # Copied synchronously (and, replaying, saved only after the simulated copy ended):
            # the runtime's reference goes at once.
            e.move(Residency.HOST, device=None, host=host, event=None)
            return
        # The copy runs on the copy stream, or the replayed schedule lets the device buffer go
        # when the simulated copy ends (never, when it had not ended by the backward pass).
        e.move(Residency.TO_HOST, host=host, event=event)
        if event is not None:
            self._offloading.append(e)

    def poll_offloads(self, backward_starts: bool) -> None:
        """Let go of the device buffers whose D2H copy has finished; when the backward pass
        starts, a tensor still being copied keeps its device buffer (no H2D is needed)."""
        still = []
        for e in self._offloading:
            if e.residency is not Residency.TO_HOST:
                continue  # released, or let go by the replayed schedule, meanwhile
            if e.event.query():
                e.move(Residency.HOST, device=None, event=None)
            elif backward_starts:
                e.forget_event()  # stays resident until its last backward reader
                if e in self._queue:
                    self._queue.remove(e)
            else:
                still.append(e)
        self._offloading = still

    # ----- before each operator ----------------------------------------------------------------
    def before_op(self, backward: bool) -> None:
        """What the simulator does before the next operator starts: replay the copies due
        by then, or (live, in the backward pass) start the H2D copies the look-ahead admits."""
        if self._schedule is not None:
            self._replay(self.current_op())
        elif backward:
            self._admit()

    def let_go_due(self) -> None:
        """Replaying: let go of the device buffers whose simulated D2H copy has ended before
        the next operator starts. A free, so it runs before any call that precedes that
        operator (an allocation such as a dropout mask's ``empty_like``), not only right before
        the operator itself: the simulator frees the buffer when the copy ends."""
        if self._schedule is None:
            return
        o = self.current_op()
        due = self._schedule["d2h_done"]
        for k in [k for k in due if k <= o]:
            for i in due.pop(k):
                self._let_go(self.entries[i])

    def _replay(self, o: int) -> None:
        """Before operator ``o``: drop device buffers whose simulated D2H copy has ended, and
        start the H2D copies the simulator started by then (synchronous on CPU)."""
        assert self._schedule is not None
        steps = (
            ("d2h_done", self._let_go),
            ("evict", self._evict),
            ("h2d_start", self._fetch_if_needed),
        )
        for key, act in steps:
            due = self._schedule[key]
            for k in [k for k in due if k <= o]:
                for i in due.pop(k):
                    act(self.entries[i])

    def _let_go(self, e: Entry) -> None:
        self._hold_until.pop(e.index, None)
        if e.released:
            # Its last reader was done before its offload ended: held for that alone.
            self._drop_released(e)
            return
        if self._schedule is not None and e.index in self._schedule["late"]:
            return
        if e.residency is Residency.TO_HOST:
            e.move(Residency.HOST, device=None)

    def _evict(self, e: Entry) -> None:
        """A simulated eviction. The simulator evicts after the rebuilds of the operator it
        evicts at, so an input one of them still needs goes only once they are done."""
        o = self.current_op()
        if any(
            self._rebuild_at[v] == o and self._awaits_rebuild(v) for v in self._consumers[e.index]
        ):
            self._deferred_evictions.append(e)
            return
        if e.residency is Residency.TO_DEVICE:
            self._admitted_bytes -= e.nbytes
            e.move(Residency.HOST, device=None, event=None)
        elif e.residency is Residency.TO_HOST:
            e.move(Residency.HOST, device=None)

    def _awaits_rebuild(self, v: int) -> bool:
        # Being rebuilt counts: an input an outer rebuild still reads stays while a rebuild it
        # started for another of its inputs ends.
        ent = self.entries[v]
        return ent.action == RECOMP and ent.residency in (Residency.ABSENT, Residency.REBUILDING)

    def evict_deferred(self) -> None:
        """After a rebuild: the evictions and releases that waited for it, if no other rebuild
        still waits."""
        if self._deferred_evictions:
            waiting, self._deferred_evictions = self._deferred_evictions, []
            for d in waiting:
                self._evict(d)
        if self._deferred_releases:
            waiting, self._deferred_releases = self._deferred_releases, []
            for d in waiting:
                self._drop_released(d)

    def _drop_released(self, e: Entry) -> None:
        """Drop a released entry's storage, unless a rebuild that reads it is still to come:
        the simulator keeps a rebuild input until the rebuilds that read it
        (`schedule.rebuild_points`), so the rebuild finds it instead of re-running its chain."""
        if e.residency is not Residency.DEVICE:
            return
        if any(self._awaits_rebuild(v) for v in self._consumers[e.index]):
            self._deferred_releases.append(e)
        elif e.index not in self._hold_until:  # else its offload still runs (replayed schedule)
            e.move(Residency.FREED, device=None)

    def _fetch_if_needed(self, e: Entry) -> None:
        if e.residency is Residency.HOST:
            self.fetch(e)

    def _admit(self) -> None:
        """Start H2D copies in deadline order while the head fits under the budget with the
        transient bytes of the next ``lookahead_ops`` operators (the simulator's rule)."""
        if not self.prefetch or self._schedule is not None:
            return
        o = self.current_op()
        while self._queue:
            e = self._queue[0]
            if e.residency is not Residency.HOST:
                self._queue.pop(0)  # on the device, or released
                continue
            end = min(o + self.lookahead_ops, self.instance.n_ops)
            look = int(self._cum_transient[end] - self._cum_transient[min(o, end)])
            used = int(self._base[min(o, self.instance.n_ops - 1)]) + self._admitted_bytes
            if used + e.nbytes + look > self.budget_bytes:
                return
            self._queue.pop(0)
            self.fetch(e)

    # ----- back to the device, and gone --------------------------------------------------------
    def fetch(self, e: Entry) -> None:
        """H2D copy of a swapped tensor into a new device buffer (on the H2D stream on CUDA)."""
        e.check(Residency.TO_DEVICE)
        if e in self._queue:
            self._queue.remove(e)
        host = e.host
        device = torch.device("cuda") if self._cuda else torch.device("cpu")
        event = None
        with self.quiet():
            if device.type == "cuda" and self._h2d_stream is not None:
                self._h2d_stream.wait_stream(torch.cuda.current_stream())
                if e.event is not None:
                    # Its offload may still run (a replayed let-go or eviction drops the device
                    # storage before the copy's end): the host copy must be complete first.
                    self._h2d_stream.wait_event(e.event)
                with torch.cuda.stream(self._h2d_stream):
                    buf = torch.empty(host.nbytes(), dtype=torch.uint8, device=device)
                    buf.untyped_storage().copy_(host, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(self._h2d_stream)
                buf.record_stream(torch.cuda.current_stream())
            else:
                buf = torch.empty(host.nbytes(), dtype=torch.uint8, device=device)
                buf.untyped_storage().copy_(host)
        e.move(Residency.TO_DEVICE, device=buf.untyped_storage(), event=event)
        self._admitted_bytes += e.nbytes
        self.h2d_bytes += e.nbytes

    def release(self, e: Entry) -> None:
        """Autograd dropped the last handle: the tensor's last backward reader is done. Its
        host copy goes; its device storage too, unless a rebuild still to come reads it or,
        replaying, its simulated offload has not ended yet."""
        if e.residency is Residency.TO_DEVICE:
            self._admitted_bytes -= e.nbytes
        e.to(EntryState.RELEASED)
        if e.on_device:
            if e.residency is not Residency.DEVICE:
                e.move(Residency.DEVICE, host=None, event=None)
            self._drop_released(e)
        else:
            e.free()


def copy_to_host(src: Any, copy_stream: Any) -> tuple[Any, Any]:
    """Copy the device storage ``src`` to a new host storage: pinned and on ``copy_stream``
    after the work queued so far (CUDA with a side stream; the CUDA event returned marks the
    copy's end), or at once (CPU, or CUDA without one; no event). Host memory is not the step's
    device memory: made with any dispatch mode (a `StorageTracker` measuring the step) disabled.
    """
    event = None
    with disable_current_modes():
        if src.device.type == "cuda":
            host = torch.empty(src.nbytes(), dtype=torch.uint8, pin_memory=True)
            if copy_stream is not None:
                copy_stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(copy_stream):
                    host.untyped_storage().copy_(src, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(copy_stream)
                # The allocator must not reuse the buffer before the copy stream read it.
                torch.empty((0,), device=src.device).set_(src).record_stream(copy_stream)
            else:
                host.untyped_storage().copy_(src)
        else:
            host = torch.empty(src.nbytes(), dtype=torch.uint8)
            host.untyped_storage().copy_(src)
    return host.untyped_storage(), event
