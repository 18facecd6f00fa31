"""A rebuild's operator chain walked into a flat list of steps (`RebuildProgram`), then run.

To rebuild a recomputed tensor, `compile_rebuild` walks the recorded operators that produced
it, in the order the rebuild needs them, and writes down what to do: materialise a saved tensor
that is a rebuild input (fetched back, rebuilt on its own, or resident), take a model input,
allocate a buffer, run a recorded operator with its varying arguments filled in from earlier
steps, drop an intermediate after its last reader (as the simulator's workspace assumes).
`RebuildProgram.run` then does only those steps. A fast step of the training path keeps each
program for the plan's later steps (the same plan, the same step): the walk's one assumption,
which saved tensors are rebuild inputs (`is_rebuild_input`), is checked at each run
(`RebuildProgram.holds`), and where it changed the chain is walked again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from slackswap.plan import KEEP
from slackswap.runtime.entry import Entry, EntryState, EntryTable
from slackswap.runtime.records import (
    OpRecord,
    Ref,
    is_view,
    set_rng,
    storage_of,
    tensors_of,
    view,
)
from slackswap.torchstep.torchapi import (
    autocast_on,
    below_autocast,
    below_autograd,
    set_grad_mode,
)
from slackswap.torchstep.trace import EXTERNAL

__all__ = [
    "ProducerOf",
    "RebuildProgram",
    "RecordedStep",
    "chain_reads",
    "compile_rebuild",
    "is_rebuild_input",
]


class ProducerOf(Protocol):
    """The operator that produced a value (`EXTERNAL`: none of the step's)."""

    def producer(self, v: int) -> int: ...


class RecordedStep(Protocol):
    """What a rebuild reads of its step (`slackswap.runtime.rebuild.Rebuilder` is one)."""

    @property
    def numbering(self) -> ProducerOf: ...
    @property
    def entries(self) -> EntryTable: ...
    @property
    def entry_of_value(self) -> dict[int, int]: ...
    @property
    def records(self) -> dict[int, OpRecord]: ...
    @property
    def externals(self) -> dict[int, torch.Tensor]: ...
    @property
    def allocs(self) -> dict[int, tuple[int, torch.device]]: ...
    @property
    def materialise(self) -> Callable[[Entry], Any]: ...


def is_rebuild_input(rb: RecordedStep, value: int) -> bool:
    """``value`` is a saved tensor a rebuild takes as it is (resident, fetched back or rebuilt
    on its own), not one it computes again."""
    i = rb.entry_of_value.get(value)
    return i is not None and _takes_as_it_is(rb.entries[i])


def _takes_as_it_is(e: Entry) -> bool:
    """A rebuild takes saved tensor ``e`` as it is: not released, or released but still
    holding its storage (kept for a rebuild that reads it)."""
    return e.state is not _RELEASED or e.device is not None


def chain_reads(rb: RecordedStep, value: int) -> tuple[dict[int, int], int]:
    """How many times the operators that rebuilding ``value`` runs read each value (an
    intermediate is dropped after its last reader, as the simulator's workspace assumes), and
    how many operators it runs."""
    reads: dict[int, int] = {}
    ops: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v != value and v in rb.entry_of_value and is_rebuild_input(rb, v):
            continue
        if v in rb.externals or v in rb.allocs:
            continue
        p = rb.numbering.producer(v)
        rec = rb.records.get(p) if p != EXTERNAL else None
        if rec is None or p in ops:
            continue
        ops.add(p)
        for w in rec.writes:
            reads.setdefault(w, 0)
        for x in rec.args[1]:
            if isinstance(x, Ref):
                reads[x.value] = reads.get(x.value, 0) + 1
                stack.append(x.value)
    return reads, len(ops)


#: Step kinds: materialise a rebuild input (its `Entry.tensor`, else its storage); a model
#: input; a fresh buffer for a bare allocation; a recorded operator.
INPUT, EXTERNAL_INPUT, ALLOC, OP = range(4)

#: How an operator's varying argument is filled: the value as it is when it is the recorded
#: view, else a view over its storage; a scratch copy of its storage (the operator writes it
#: and the rebuild did not make it); a clone of the buffer itself (batch-norm statistics).
AS_VIEW, SCRATCH, BUFFER_CLONE = range(3)

_RELEASED = EntryState.RELEASED


class RebuildProgram:
    """The steps of one rebuild, in the order `Rebuilder.rebuild` takes them.

    ``steps``: tuples whose first item is the kind (`INPUT`, ...); ``n_slots`` the values the
    steps hand on; ``target`` the slot of the rebuilt value; ``assumed``: per saved tensor the
    walk met, (its entry's index, whether it was a rebuild input). Entries are named by index:
    each step has its own."""

    __slots__ = ("steps", "n_slots", "target", "assumed")

    def __init__(self, steps: list[tuple[Any, ...]], n_slots: int, target: int, assumed: list[Any]):
        self.steps = steps
        self.n_slots = n_slots
        self.target = target
        self.assumed = assumed

    def holds(self, entries: EntryTable) -> bool:
        """Every saved tensor the walk met is a rebuild input now exactly when it was then
        (``entries``: this step's)."""
        for i, was in self.assumed:  # a loop, not all(...): this runs once per rebuild
            if _takes_as_it_is(entries[i]) is not was:
                return False
        return True

    def run(self, rb: RecordedStep) -> Any:
        """Run the steps (operators below autograd, each in its recorded grad mode and, when
        random, from today's RNG state of its record); the rebuilt tensor. The operators were
        recorded as they ran, after ``torch.autocast`` cast them: with autocast on now (a
        backward inside an autocast region), they run below it, not cast a second time."""
        if autocast_on():
            with below_autocast():
                return self._run(rb)
        return self._run(rb)

    def _run(self, rb: RecordedStep) -> Any:
        slots: list[Any] = [None] * self.n_slots
        records = rb.records
        entries = rb.entries
        grad_now = torch.is_grad_enabled()
        with below_autograd():
            for step in self.steps:
                kind = step[0]
                if kind == OP:
                    _run_op(step, records[step[1]], slots, grad_now)
                elif kind == INPUT:
                    e = entries[step[2]]
                    if e.device is None and e.action == KEEP:
                        raise RuntimeError(f"kept tensor {e.name!r} not resident")
                    storage = rb.materialise(e)
                    if e.event is not None:
                        torch.cuda.current_stream().wait_event(e.event)
                    slots[step[1]] = storage if e.tensor is None else e.tensor
                elif kind == EXTERNAL_INPUT:
                    x = rb.externals.get(step[2])
                    if x is None:
                        raise RuntimeError(f"value {step[2]} cannot be rebuilt (no model input)")
                    slots[step[1]] = x
                else:  # ALLOC
                    _, slot, nbytes, device = step
                    slots[slot] = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return slots[self.target]


def _run_op(step: tuple[Any, ...], rec: Any, slots: list[Any], grad_now: bool) -> None:
    """One `OP` step: ``(OP, operator, call, fills, writes, drops)`` (`compile_rebuild`)."""
    _, _, call, fills, writes, drops = step
    flat = rec.args[1]
    real: dict[int, Any] = {}
    for i, slot, ref, how in fills:
        if how == AS_VIEW:
            held = slots[slot]
            if held.__class__ is torch.Tensor and is_view(held, ref):
                real[i] = held  # the tensor itself: no tensor made over its storage
            else:
                real[i] = view(storage_of(held), ref.dtype, ref.offset, ref.size, ref.stride)
        elif how == SCRATCH:
            held = slots[slot]
            real[i] = view(storage_of(held).clone(), ref.dtype, ref.offset, ref.size, ref.stride)
        else:
            real[i] = flat[i].clone()
    args, kwargs = call.fill(flat, real)
    rng = rec.rng
    if rng is not None:
        saved = set_rng(rng)
    if rec.grad != grad_now:
        set_grad_mode(rec.grad)
    try:
        out = rec.func(*args, **kwargs)
    finally:
        if rec.grad != grad_now:
            set_grad_mode(grad_now)
        if rng is not None:
            set_rng(saved)
    if isinstance(out, torch.Tensor):
        outs: Any = (out,)
    elif out.__class__ is tuple and all(isinstance(t, torch.Tensor) for t in out):
        outs = out  # as tensors_of gives them, without flattening a pytree
    else:
        outs = tensors_of(out)
    for slot, from_output, k in writes:
        if from_output:
            if k >= len(outs):
                raise RuntimeError(
                    f"rebuilding {rec.func}: it returned {len(outs)} tensors, its recorded "
                    f"call {k + 1} or more"
                )
            slots[slot] = outs[k]
        else:
            slots[slot] = real.get(k, flat[k])
    for slot in drops:
        slots[slot] = None


def compile_rebuild(rb: RecordedStep, value: int) -> RebuildProgram:
    """The steps `Rebuilder.rebuild` takes to rebuild ``value`` now, in its order and by its
    rules: a saved tensor that is a rebuild input is materialised (once), a model input taken,
    an allocation made afresh, a recorded operator run after the values it reads; an
    intermediate is dropped after the chain's last reader of it (`chain_reads` counts the
    reads), the target kept."""
    reads, n_ops = chain_reads(rb, value)
    counting = n_ops > 1  # one operator leaves no intermediate to drop early
    steps: list[tuple[Any, ...]] = []
    slot_of: dict[int, int] = {}  # value -> its slot
    cached: set[int] = set()  # the values computed so far and not dropped yet
    inputs: dict[int, int] = {}  # rebuild input value -> its slot
    externals: dict[int, int] = {}
    assumed: dict[int, tuple[int, bool]] = {}
    n = [0]

    def new_slot() -> int:
        n[0] += 1
        return n[0] - 1

    def is_input(v: int) -> bool:
        i = rb.entry_of_value.get(v)
        if i is None:
            return False
        was = is_rebuild_input(rb, v)
        assumed.setdefault(v, (i, was))
        return was

    def resolve(v: int) -> int:
        if is_input(v):
            if v not in inputs:
                inputs[v] = new_slot()
                steps.append((INPUT, inputs[v], rb.entry_of_value[v]))
            return inputs[v]
        return compute(v)

    def compute(v: int) -> int:
        if v in cached:
            return slot_of[v]
        if v in rb.externals:
            if v not in externals:
                externals[v] = new_slot()
                steps.append((EXTERNAL_INPUT, externals[v], v))
            return externals[v]
        if v in rb.allocs:
            nbytes, device = rb.allocs[v]
            slot_of[v] = new_slot()
            steps.append((ALLOC, slot_of[v], nbytes, device))
            cached.add(v)
            return slot_of[v]
        p = rb.numbering.producer(v)
        rec = rb.records.get(p) if p != EXTERNAL else None
        if rec is None:
            raise RuntimeError(f"value {v} cannot be rebuilt (no recorded producer)")
        run_recorded(p, rec)
        if v not in cached:
            raise RuntimeError(f"value {v} cannot be rebuilt (its producer does not write it)")
        return slot_of[v]

    def run_recorded(p: int, rec: Any) -> None:
        call = rec.call()
        fills = []
        for i, x, written in call.inputs:
            if x is None:
                fills.append((i, -1, None, BUFFER_CLONE))
                continue
            slot = resolve(x.value)
            how = SCRATCH if written and x.value not in cached else AS_VIEW
            fills.append((i, slot, x, how))
        writes = []
        for v, where in rec.writes.items():
            if where is None:
                continue
            kind, k = where
            slot_of[v] = new_slot()
            cached.add(v)
            writes.append((slot_of[v], kind == "out", k))
        drops = []
        if counting:
            read = call.refs
            for v in read:
                if v in reads:
                    reads[v] -= 1
            for v in (*read, *rec.writes):
                if v != value and reads.get(v, 1) <= 0 and v in cached:
                    cached.discard(v)
                    drops.append(slot_of[v])
        steps.append((OP, p, call, tuple(fills), tuple(writes), tuple(drops)))

    target = compute(value)
    return RebuildProgram(steps, n[0], target, list(assumed.values()))
