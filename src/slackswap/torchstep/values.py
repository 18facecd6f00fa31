"""`ValueNumbering`: storages and their values as one step creates them, for the profiler and the
runtime alike.

A value is the content of one storage between two writes (`slackswap.torchstep.trace`). The
numbering keeps, per storage key, the value it holds now; parameters and buffers are noted
apart and get no values. `number_call` is the rule both the profiler's `Recorder` and the
runtime's `PlanExecutor` apply to each call their dispatch mode sees: which calls are operators
and which values they write, so a live step numbers its values exactly as its profile did.

Imported only after torch has been found.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from slackswap.torchstep.costs import NO_KERNEL
from slackswap.torchstep.torchapi import StorageWeakRef, storage_key, tree_flatten
from slackswap.torchstep.trace import EXTERNAL, Value

__all__ = ["Call", "ValueNumbering", "bind", "number_call", "tensors"]


def tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors in a nest of lists, tuples and dicts (a call's arguments or outputs)."""
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def bind(schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by the names its schema gives them."""
    bound = {a.name: v for a, v in zip(schema.arguments, args, strict=False)}
    bound.update(kwargs)
    return bound


class ValueNumbering:
    """Storage key -> the value it holds now; every value's storage, producer, dtype, shape and
    bytes (``values``, indexed by value id). A `StorageWeakRef` per storage seen keeps the
    storage object allocated (not its data), so keys stay unique while the numbering lives."""

    def __init__(self) -> None:
        self.values: list[Value] = []
        #: Keys of storages no operator of the step allocated (model inputs, constants).
        self.preexisting: set[int] = set()
        self._refs: dict[int, StorageWeakRef] = {}
        self._current: dict[int, int] = {}
        self._params: set[int] = set()

    def key(self, t: torch.Tensor) -> int | None:
        """The key of ``t``'s storage; None for storage-less tensors (sparse, nested)."""
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        ref = StorageWeakRef(s)
        k = storage_key(ref)
        if k not in self._refs:
            self._refs[k] = ref
        return k

    def add_params(self, params: Iterable[torch.Tensor]) -> int:
        """Note parameters and buffers (never values); the bytes of the storages new here."""
        added = 0
        for p in params:
            k = self.key(p)
            if k is not None and k not in self._params:
                self._params.add(k)
                added += p.untyped_storage().nbytes()
        return added

    def is_param(self, k: int | None) -> bool:
        """Whether storage key ``k`` is a parameter's or a buffer's."""
        return k in self._params

    def new_value(self, k: int, t: torch.Tensor, producer: int) -> int:
        """A new value of storage ``k`` (written by operator ``producer``, or `EXTERNAL`)."""
        vid = len(self.values)
        nbytes = int(t.untyped_storage().nbytes())
        dtype = str(t.dtype).replace("torch.", "")
        self.values.append(Value(k, nbytes, producer, dtype, tuple(t.shape)))
        self._current[k] = vid
        return vid

    def value_of(self, t: torch.Tensor) -> int | None:
        """The current value of ``t``'s storage (created as external if never seen); None for
        parameters, buffers and storage-less tensors."""
        k = self.key(t)
        if k is None or k in self._params:
            return None
        vid = self._current.get(k)
        if vid is None:
            vid = self.new_value(k, t, EXTERNAL)
            self.preexisting.add(k)
        return vid

    def current(self, k: int | None) -> int | None:
        """The value storage ``k`` holds now; None if it has none."""
        return self._current.get(k) if k is not None else None

    def ref(self, k: int) -> StorageWeakRef | None:
        """The weak reference to storage ``k``, None if never seen (or released)."""
        return self._refs.get(k)

    def producer(self, v: int) -> int:
        """The operator that wrote value ``v`` (`EXTERNAL`: none)."""
        return self.values[v].producer

    def storage(self, v: int) -> int:
        """The key of value ``v``'s storage."""
        return self.values[v].storage

    def release(self) -> None:
        """Drop every reference to the step's storages; the values stay."""
        self._current.clear()
        self._refs.clear()


@dataclass
class Call:
    """One call as `number_call` numbered it: the tensors it read and wrote, and the values."""

    inputs: list[torch.Tensor]
    mutated: list[torch.Tensor]
    reads: list[int]
    outputs: list[torch.Tensor]
    fresh: list[torch.Tensor]  # outputs in storages none of the inputs had
    #: The values the call wrote when it is an operator; None for a view or an alias (no
    #: kernel, no value) and for a bare allocation (its storage gets a value nobody computed;
    #: the operator that first writes it becomes the producer).
    writes: list[int] | None
    bound: dict[str, Any]


def number_call(
    numbering: ValueNumbering, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
    run: Any, index: int,
) -> tuple[Any, Call]:  # fmt: skip
    """Run ``func`` through ``run(func, args, kwargs)`` and number it as operator ``index``
    would be: (its result, the `Call`)."""
    inputs = tensors((args, kwargs))
    schema = func._schema
    bound = bind(schema, args, kwargs)
    mutated = [
        t
        for a in schema.arguments
        if a.alias_info is not None and a.alias_info.is_write
        for t in tensors(bound.get(a.name))
    ]
    in_keys = {numbering.key(t) for t in inputs}
    reads = [v for v in (numbering.value_of(t) for t in inputs) if v is not None]
    out = run(func, args, kwargs)
    outputs = tensors(out)
    fresh = [t for t in outputs if numbering.key(t) not in in_keys]
    call = Call(inputs, mutated, reads, outputs, fresh, None, bound)
    if not mutated and not fresh:
        return out, call
    if func.overloadpacket.__name__ in NO_KERNEL:
        for t in fresh:
            k = numbering.key(t)
            if k is not None:
                numbering.new_value(k, t, EXTERNAL)
        return out, call
    writes: list[int] = []
    written: set[int] = set()
    for t in (*mutated, *fresh):
        k = numbering.key(t)
        if k is not None and not numbering.is_param(k) and k not in written:
            written.add(k)
            writes.append(numbering.new_value(k, t, index))
    call.writes = writes
    return out, call
