"""Each forward operator's call as a rebuild replays it: the call with every activation
replaced by the number of its value (`Ref`, never the tensor, so nothing stays alive), the RNG
state a random operator ran with, and the helpers a replay uses (a tensor over a storage, the
generators' state, what a call writes).
"""

from __future__ import annotations

from typing import Any

import torch

from slackswap.torchstep.torchapi import (
    disable_current_modes,
    dispatch_mode_active,
    tree_flatten,
    tree_unflatten,
)

__all__ = [
    "Call",
    "OpRecord",
    "Ref",
    "UNMARKED_WRITES",
    "is_view",
    "rng_state",
    "set_rng",
    "storage_of",
    "tensors_of",
    "view",
    "written_arguments",
]


def tensors_of(obj: Any) -> list[torch.Tensor]:
    """The tensors in a nest of lists, tuples and dicts (an operator's arguments or outputs)."""
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


#: Arguments operators update in place although their schema does not mark them as written:
#: the running statistics of ``native_batch_norm``, ``cudnn_batch_norm`` and
#: ``miopen_batch_norm`` in training mode (``_native_batch_norm_legit`` marks them).
UNMARKED_WRITES = frozenset({"running_mean", "running_var"})


def written_arguments(schema: Any, bound: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors a call writes: those its schema marks as written, and the unmarked ones
    (`UNMARKED_WRITES`) unless the call says it is not training."""
    training = bound.get("training", True) is not False
    return [
        t
        for a in schema.arguments
        if (a.alias_info is not None and a.alias_info.is_write)
        or (training and a.name in UNMARKED_WRITES)
        for t in tensors_of(bound.get(a.name))
    ]


def view(storage: Any, dtype: Any, offset: int, size: Any, stride: Any) -> torch.Tensor:
    """A tensor over ``storage``; call it in the executor's ``quiet`` section (else the
    operators it issues would be numbered as the step's). Made from an empty tensor of the
    dtype and device (``Tensor.new``, a third of ``torch.empty``'s cost: it runs once per
    unpacked tensor on the training path)."""
    key = (dtype, storage.device)
    empty = _EMPTY.get(key)
    if empty is None:
        empty = _EMPTY[key] = torch.empty((0,), dtype=dtype, device=storage.device)
    return empty.new().set_(storage, offset, size, stride)


def cpu_view(storage: Any, dtype: Any, offset: int, size: Any, stride: Any) -> torch.Tensor:
    """`view` of a storage known to be on the CPU (a fast step's, on a CPU): its device is not
    read."""
    empty = _EMPTY_CPU.get(dtype)
    if empty is None:
        empty = _EMPTY_CPU[dtype] = torch.empty((0,), dtype=dtype)
    return empty.new().set_(storage, offset, size, stride)


#: An empty tensor per (dtype, device), for `view`; per dtype on the CPU, for `cpu_view`.
_EMPTY: dict[tuple[Any, Any], torch.Tensor] = {}
_EMPTY_CPU: dict[Any, torch.Tensor] = {}


class Ref:
    """A tensor argument of a recorded forward operator, by value (never the tensor itself)."""

    __slots__ = ("value", "dtype", "device", "offset", "size", "stride")

    def __init__(self, value: int, t: torch.Tensor):
        self.value = value
        self.dtype = t.dtype
        self.device = t.device
        self.offset = int(t.storage_offset())
        self.size = tuple(t.shape)
        self.stride = tuple(t.stride())


class OpRecord:
    """What rebuilding a forward operator's outputs needs: the call with tensors as `Ref`s
    (parameters, buffers and model inputs as themselves), the RNG state it ran with, and where
    each value it wrote came from (output k or mutated argument k)."""

    __slots__ = ("func", "args", "mutated", "rng", "grad", "writes", "_call")

    def __init__(
        self, func: Any, args: Any, mutated: Any, rng: Any, grad: bool, writes: dict[int, Any]
    ):
        self.func = func
        self.args = args
        self.mutated = mutated
        self.rng = rng
        self.grad = grad
        self.writes = writes
        self._call: Call | None = None

    def with_rng(self, rng: Any) -> OpRecord:
        """The same call, replayed from RNG state ``rng`` (`rng_state`)."""
        rec = OpRecord(self.func, self.args, self.mutated, rng, self.grad, self.writes)
        rec._call = self._call
        return rec

    def call(self) -> Call:
        """The call's arguments as a rebuild fills them in (made once, on the first rebuild)."""
        if self._call is None:
            spec, flat = self.args
            self._call = Call(spec, flat, self.mutated)
        return self._call


class Call:
    """A recorded call's arguments with what changes between rebuilds left to fill in: the
    flat positions of its activations and of the buffers it writes (``varying``), and, when
    each of them is a top-level argument (as for most operators), the call with the rest in
    place, so a rebuild fills in a few arguments instead of rebuilding the whole pytree."""

    __slots__ = ("spec", "varying", "refs", "args", "kwargs", "places", "inputs", "by_keyword")

    def __init__(self, spec: Any, flat: list[Any], mutated: Any):
        self.spec = spec
        self.varying = [
            i
            for i, x in enumerate(flat)
            if isinstance(x, Ref) or (i in mutated and isinstance(x, torch.Tensor))
        ]
        self.refs = [x.value for x in flat if isinstance(x, Ref)]
        #: Per varying position: its `Ref` (None for a buffer it writes) and whether the
        #: operator writes it.
        self.inputs = [
            (i, flat[i] if isinstance(flat[i], Ref) else None, i in mutated) for i in self.varying
        ]
        slots = [_Slot(i) for i in range(len(flat))]
        at_args, at_kwargs = tree_unflatten(slots, spec)
        found: dict[int, tuple[bool, Any]] = {}
        for pos, a in enumerate(at_args):
            if isinstance(a, _Slot):
                found[a.i] = (True, pos)
        for key, a in at_kwargs.items():
            if isinstance(a, _Slot):
                found[a.i] = (False, key)
        self.places: list[tuple[int, bool, Any]] | None = None
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}
        if all(i in found for i in self.varying):
            held = set(self.varying)
            args, kwargs = tree_unflatten(
                [None if i in held else x for i, x in enumerate(flat)], spec
            )
            self.args, self.kwargs = list(args), dict(kwargs)
            self.places = [(i, *found[i]) for i in self.varying]
        self.by_keyword = any(not positional for _, positional, _ in self.places or ())

    def fill(self, flat: list[Any], real: dict[int, Any]) -> tuple[Any, Any]:
        """The call's ``(args, kwargs)``, with ``real`` at the varying positions."""
        if self.places is None:
            return tree_unflatten([real.get(i, x) for i, x in enumerate(flat)], self.spec)
        args, kwargs = list(self.args), self.kwargs
        if self.by_keyword:
            kwargs = dict(kwargs)
        for i, positional, at in self.places:
            if positional:
                args[at] = real[i]
            else:
                kwargs[at] = real[i]
        return args, kwargs


class _Slot:
    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def storage_of(held: Any) -> Any:
    """The storage of ``held``, a tensor or a storage (what a rebuild holds of a value)."""
    return held.untyped_storage() if isinstance(held, torch.Tensor) else held


def is_view(t: torch.Tensor, x: Ref) -> bool:
    """``t`` is the view ``x`` recorded (its dtype, shape, strides and offset)."""
    return (
        t.dtype == x.dtype
        and t.shape == x.size
        and t.stride() == x.stride
        and t.storage_offset() == x.offset
    )


def rng_state(tensors: list[torch.Tensor]) -> Any:
    """The CPU generator's state and that of each CUDA device ``tensors`` are on. The
    dispatch modes are disabled only when one is active (entering that context costs several
    times the reading: a fast step reads the state at each module call a replayed random
    operator starts from)."""
    if dispatch_mode_active():
        with disable_current_modes():
            return rng_state(tensors)
    cpu = torch.get_rng_state()
    devs = sorted({t.device.index or 0 for t in tensors if t.is_cuda})
    return cpu, [(d, torch.cuda.get_rng_state(d)) for d in devs]


def set_rng(rng: Any) -> Any:
    """Put the generators in state ``rng`` (`rng_state`); the state they were in (of the
    same devices). Plain calls, no context objects: this runs once per replayed random
    operator; the dispatch modes are disabled only when one is active."""
    if dispatch_mode_active():
        with disable_current_modes():
            return set_rng(rng)
    cpu, cuda = rng
    # The CPU generator itself (what torch.get_rng_state and set_rng_state call).
    saved_cpu = _CPU_GENERATOR.get_state()
    _CPU_GENERATOR.set_state(cpu)
    if not cuda:
        return saved_cpu, cuda
    saved = saved_cpu, [(d, torch.cuda.get_rng_state(d)) for d, _ in cuda]
    for d, s in cuda:
        torch.cuda.set_rng_state(s, d)
    return saved


_CPU_GENERATOR = torch.default_generator
