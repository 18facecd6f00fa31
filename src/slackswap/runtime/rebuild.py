"""`Rebuilder`: record each forward operator's call, and rebuild a recomputed tensor from them.

During the forward pass each operator's call is kept as a template: its flattened arguments
(pytree) with every activation replaced by the number of its value (a `_Ref`,
never the tensor, so nothing stays alive), parameters, buffers and model inputs as themselves,
and the RNG state it ran with when it is random (``torch.Tag.nondeterministic_seeded``). When
autograd first unpacks a recomputed tensor, the chain of recorded operators that produced it is
run again on its rebuild inputs: inputs that are themselves recomputed are rebuilt first, swapped
ones fetched, and random operators run with their recorded RNG state, so dropout masks come out
identical (``torch.utils.checkpoint`` recomputes whole regions, not single tensors, so only its
idea of restoring the RNG state per random operator is borrowed). What an operator writes is
what its schema marks as written plus the arguments some operators update without a mark (the
running statistics of ``native_batch_norm`` and its cuDNN and MIOpen variants,
`UNMARKED_WRITES`): a resident saved tensor or a buffer a rebuild would write gets a scratch
copy, so the model's state is that of one step.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from slackswap.instance import Instance
from slackswap.plan import KEEP
from slackswap.runtime.entry import Entry, EntryTable, Residency
from slackswap.torchstep.torchapi import (
    below_autograd,
    disable_current_modes,
    dispatch_mode_active,
    set_grad_mode,
    tree_flatten,
    tree_unflatten,
)
from slackswap.torchstep.trace import EXTERNAL
from slackswap.torchstep.values import bind

__all__ = ["Numbering", "Rebuilder", "UNMARKED_WRITES", "tensors_of", "view", "written_arguments"]


class Numbering(Protocol):
    """The step's numbering of storages and values, as a `Rebuilder` reads it
    (`slackswap.torchstep.values.ValueNumbering` is one)."""

    def key(self, t: torch.Tensor) -> int | None: ...
    def is_param(self, k: int | None) -> bool: ...
    def value_of(self, t: torch.Tensor) -> int | None: ...
    def current(self, k: int | None) -> int | None: ...
    def producer(self, v: int) -> int: ...
    def storage(self, v: int) -> int: ...


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


#: An empty tensor per (dtype, device), for `view`.
_EMPTY: dict[tuple[Any, Any], torch.Tensor] = {}


class _Ref:
    """A tensor argument of a recorded forward operator, by value (never the tensor itself)."""

    __slots__ = ("value", "dtype", "device", "offset", "size", "stride")

    def __init__(self, value: int, t: torch.Tensor):
        self.value = value
        self.dtype = t.dtype
        self.device = t.device
        self.offset = int(t.storage_offset())
        self.size = tuple(t.shape)
        self.stride = tuple(t.stride())


class _OpRecord:
    """What rebuilding a forward operator's outputs needs: the call with tensors as `_Ref`s
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
        self._call: _Call | None = None

    def with_rng(self, rng: Any) -> _OpRecord:
        """The same call, replayed from RNG state ``rng`` (`_rng_state`)."""
        rec = _OpRecord(self.func, self.args, self.mutated, rng, self.grad, self.writes)
        rec._call = self._call
        return rec

    def call(self) -> _Call:
        """The call's arguments as a rebuild fills them in (made once, on the first rebuild)."""
        if self._call is None:
            spec, flat = self.args
            self._call = _Call(spec, flat, self.mutated)
        return self._call


class _Call:
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
            if isinstance(x, _Ref) or (i in mutated and isinstance(x, torch.Tensor))
        ]
        self.refs = [x.value for x in flat if isinstance(x, _Ref)]
        #: Per varying position: its `_Ref` (None for a buffer it writes) and whether the
        #: operator writes it.
        self.inputs = [
            (i, flat[i] if isinstance(flat[i], _Ref) else None, i in mutated) for i in self.varying
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


class Rebuilder:
    """Records the step's forward operators and rebuilds recomputed saved tensors from them.

    ``numbering``: the step's numbering of storages and values, which the records use.
    ``materialise``: the device storage of a saved tensor, fetched back or rebuilt when not
    resident. ``quiet``: a context in which the executor lets operators through unnumbered.
    """

    def __init__(
        self,
        numbering: Numbering,
        instance: Instance,
        entries: EntryTable,
        entry_of_value: dict[int, int],
        *,
        materialise: Callable[[Entry], Any],
        quiet: Callable[[], AbstractContextManager[None]],
    ):
        self.numbering = numbering
        self.instance = instance
        self.entries = entries
        self.entry_of_value = entry_of_value
        self.materialise = materialise
        self.quiet = quiet
        self.rebuilds = 0
        #: Forward operator index -> its recorded call (`before_call`, `remember`).
        self.records: dict[int, _OpRecord] = {}
        #: Model inputs, by value: taken as they are by a rebuild.
        self.externals: dict[int, torch.Tensor] = {}
        #: Values of bare allocations -> (bytes, device): a rebuild makes a fresh buffer.
        self.allocs: dict[int, tuple[int, torch.device]] = {}
        #: Rebuilt value -> its chain's read counts and the rebuild inputs they assume
        #: (`_chain_reads`); given only where records, externals and allocations stay those
        #: of the step that filled it (a fast step's replay, shared by its steps).
        self.chains: dict[int, tuple[dict[int, int], int, list[tuple[int, bool]]]] | None = None
        self._values: Any = None

    def clear(self) -> None:
        """Drop every reference to the step's tensors."""
        self.records.clear()
        self.externals.clear()

    # ----- recording ---------------------------------------------------------------------------
    def before_call(self, func: Any, args: Any, kwargs: Any) -> tuple[Any, Any, bool]:
        """Before a forward call runs: its template, for a random operator its RNG state, and
        the grad mode it runs in."""
        rng = None
        if torch.Tag.nondeterministic_seeded in func.tags:
            rng = _rng_state(tensors_of((args, kwargs)))
        return self._template(func, args, kwargs), rng, torch.is_grad_enabled()

    def _template(self, func: Any, args: Any, kwargs: Any) -> Any:
        """The call's flattened arguments with every tensor replaced by what a rebuild needs to
        find it again, and the flat positions of the arguments the operator writes."""
        rec = self.numbering
        bound = bind(func._schema, args, kwargs)
        written = {id(t) for t in written_arguments(func._schema, bound)}
        flat, spec = tree_flatten((args, kwargs))
        mutated = frozenset(i for i, x in enumerate(flat) if id(x) in written)
        out: list[Any] = []
        for x in flat:
            if isinstance(x, torch.Tensor):
                k = rec.key(x)
                if k is None or rec.is_param(k):
                    out.append(x)  # parameters and buffers: alive for the whole step
                    continue
                v = rec.value_of(x)
                if v is not None and rec.producer(v) == EXTERNAL:
                    if v not in self.allocs:
                        self.externals.setdefault(v, x)  # a model input
                out.append(_Ref(v, x) if v is not None else x)
            else:
                out.append(x)
        return spec, out, mutated

    def remember(
        self, index: int, func: Any, before: tuple[Any, Any, bool], out: Any, written: list[int]
    ) -> None:
        """Keep forward operator ``index``'s call (``before``, from `before_call`) and where
        each value it wrote (``written``) is found in its outputs or mutated arguments."""
        rec = self.numbering
        (spec, flat, mutated_set), rng, grad = before
        outs = tensors_of(out)
        mutated = [i for i in sorted(mutated_set) if isinstance(flat[i], _Ref)]
        writes: dict[int, Any] = {}
        for v in written:
            key = rec.storage(v)
            where: Any = None
            for k, t in enumerate(outs):
                if rec.key(t) == key:
                    where = ("out", k)
                    break
            else:
                for i in mutated:
                    if rec.storage(flat[i].value) == key:
                        where = ("arg", i)
                        break
            writes[v] = where
        self.records[index] = _OpRecord(func, (spec, flat), mutated_set, rng, grad, writes)

    def note_allocations(self, out: Any, first_new_value: int) -> None:
        """A forward call the profile does not number as an operator made new values (a bare
        allocation, values from ``first_new_value`` on): a rebuild makes a fresh buffer."""
        rec = self.numbering
        for t in tensors_of(out):
            v = rec.current(rec.key(t))
            if v is not None and v >= first_new_value:
                self.allocs[v] = (int(t.untyped_storage().nbytes()), t.device)

    # ----- rebuilding --------------------------------------------------------------------------
    def rebuild(self, e: Entry) -> Any:
        """Re-run the operator chain that produced entry ``e``'s value, its recomputed inputs
        rebuilt first, with each random operator's original RNG state; the tensor that wrote
        it (an output of the last operator, or an argument it updated), over ``e.device``."""
        if self._values is None:
            self._values = [int(v) for v in self.instance.meta["runtime_signature"]["values"]]
        value = self._values[e.index]
        reads, n_ops = self._chain_reads(value)
        # One operator leaves no intermediate to drop early: a plain dict, no counting.
        cache = _Cache(value, reads) if n_ops > 1 else {}
        e.move(Residency.REBUILDING)
        with self.quiet():
            tensor = self._compute(value, cache)
        e.move(Residency.DEVICE, device=_storage_of(tensor))
        self.rebuilds += 1
        return tensor

    def _is_input(self, value: int) -> bool:
        """``value`` is a saved tensor a rebuild takes as it is (resident, fetched back or
        rebuilt on its own), not one it computes again."""
        i = self.entry_of_value.get(value)
        # A released entry still holding its storage is an input kept for this rebuild.
        return i is not None and (
            not self.entries[i].released or self.entries[i].device is not None
        )

    def _chain_reads(self, value: int) -> tuple[dict[int, int], int]:
        """How many times the operators that rebuilding ``value`` runs read each value (an
        intermediate is dropped after its last reader, as the simulator's workspace assumes),
        and how many operators it runs. With a memo (``chains``), the chain is walked again
        only when a saved tensor the walk met has become or stopped being a rebuild input."""
        chains = self.chains
        if chains is not None:
            known = chains.get(value)
            if known is not None and all(self._is_input(v) is was for v, was in known[2]):
                return dict(known[0]), known[1]
        reads: dict[int, int] = {}
        assumed: list[tuple[int, bool]] = []
        ops: set[int] = set()
        stack = [value]
        while stack:
            v = stack.pop()
            if v != value and v in self.entry_of_value:
                is_input = self._is_input(v)
                assumed.append((v, is_input))
                if is_input:
                    continue
            if v in self.externals or v in self.allocs:
                continue
            p = self.numbering.producer(v)
            rec = self.records.get(p) if p != EXTERNAL else None
            if rec is None or p in ops:
                continue
            ops.add(p)
            for w in rec.writes:
                reads.setdefault(w, 0)
            for x in rec.args[1]:
                if isinstance(x, _Ref):
                    reads[x.value] = reads.get(x.value, 0) + 1
                    stack.append(x.value)
        if chains is not None:
            chains[value] = (dict(reads), len(ops), assumed)
        return reads, len(ops)

    def _resolve(self, value: int, cache: dict[int, Any]) -> Any:
        """What holds ``value`` now: a resident or fetched/rebuilt saved tensor (its
        `Entry.tensor` when it has one, else its storage), a model input, a fresh buffer for an
        allocation, or what its producer, run again, wrote it with (tensors: some view of the
        value's storage)."""
        i = self.entry_of_value.get(value)
        if i is not None and self._is_input(value):
            e = self.entries[i]
            if e.device is None and e.action == KEEP:
                raise RuntimeError(f"kept tensor {self.instance.tensor_name[i]!r} not resident")
            storage = self.materialise(e)
            if e.event is not None:
                torch.cuda.current_stream().wait_event(e.event)
            return storage if e.tensor is None else e.tensor
        return self._compute(value, cache)

    def _compute(self, value: int, cache: dict[int, Any]) -> Any:
        if value in cache:
            return cache[value]
        if value in self.externals:
            return self.externals[value]
        if value in self.allocs:
            nbytes, device = self.allocs[value]
            buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
            cache[value] = buffer
            return buffer
        p = self.numbering.producer(value)
        rec = self.records.get(p) if p != EXTERNAL else None
        if rec is None:
            raise RuntimeError(f"value {value} cannot be rebuilt (no recorded producer)")
        self._run_recorded(rec, cache)
        return cache[value]

    def _run_recorded(self, rec: _OpRecord, cache: dict[int, Any]) -> None:
        _, flat = rec.args
        call = rec.call()
        real: dict[int, Any] = {}
        for i, x, written in call.inputs:
            if x is not None:
                held = self._resolve(x.value, cache)
                if written and x.value not in cache:
                    # Write only into what this rebuild made: a resident saved tensor or a
                    # tensor of the caller's (running statistics that are no buffer) gets a
                    # scratch copy.
                    real[i] = view(_storage_of(held).clone(), x.dtype, x.offset, x.size, x.stride)
                elif held.__class__ is torch.Tensor and _is_view(held, x):
                    real[i] = held  # the tensor itself: no tensor made over its storage
                else:
                    real[i] = view(_storage_of(held), x.dtype, x.offset, x.size, x.stride)
            else:
                real[i] = flat[i].clone()  # a buffer the operator updates (batch-norm statistics)
        args, kwargs = call.fill(flat, real)
        if rec.rng is None:
            out = _replay(rec, args, kwargs)
        else:
            saved = _set_rng(rec.rng)
            try:
                out = _replay(rec, args, kwargs)
            finally:
                _set_rng(saved)
        if isinstance(out, torch.Tensor):
            outs = [out]
        elif out.__class__ is tuple and all(isinstance(t, torch.Tensor) for t in out):
            outs = list(out)  # as tensors_of gives them, without flattening a pytree
        else:
            outs = tensors_of(out)
        for v, where in rec.writes.items():
            if where is None:
                continue
            kind, k = where
            if kind == "out" and k >= len(outs):
                raise RuntimeError(
                    f"rebuilding {rec.func}: it returned {len(outs)} tensors, its recorded "
                    f"call {k + 1} or more"
                )
            cache[v] = outs[k] if kind == "out" else real.get(k, flat[k])
        if isinstance(cache, _Cache):
            cache.done_reading(call.refs, rec.writes)


def _storage_of(held: Any) -> Any:
    """The storage of ``held``, a tensor or a storage (`Rebuilder._resolve`)."""
    return held.untyped_storage() if isinstance(held, torch.Tensor) else held


def _is_view(t: torch.Tensor, x: _Ref) -> bool:
    """``t`` is the view ``x`` recorded (its dtype, shape, strides and offset)."""
    return (
        t.dtype == x.dtype
        and t.shape == x.size
        and t.stride() == x.stride
        and t.storage_offset() == x.offset
    )


def _replay(rec: _OpRecord, args: Any, kwargs: Any) -> Any:
    """Run ``rec``'s operator in the grad mode the forward call ran in (the backward pass runs
    with grad off): some kernels return more outputs when grad is on (the workspace of
    mkldnn_rnn_layer, which nn.LSTM runs on CPU). Autograd stays out of the replay, as it was
    below the mode. The mode is set only where it differs (plain calls, no context objects:
    this runs once per replayed operator)."""
    before = torch.is_grad_enabled()
    if before == rec.grad:
        with below_autograd():
            return rec.func(*args, **kwargs)
    set_grad_mode(rec.grad)
    try:
        with below_autograd():
            return rec.func(*args, **kwargs)
    finally:
        set_grad_mode(before)


class _Cache(dict[int, Any]):
    """The storages one rebuild has computed, by value; each intermediate is dropped once the
    chain's last reader of it has run (``reads``: reads left), the rebuilt value kept."""

    def __init__(self, target: int, reads: dict[int, int]):
        super().__init__()
        self.target = target
        self.reads = reads

    def done_reading(self, read: list[int], written: Any) -> None:
        for v in read:
            if v in self.reads:
                self.reads[v] -= 1
        for v in (*read, *written):
            # a value the counts do not know (the chain changed while it ran) stays
            if v != self.target and self.reads.get(v, 1) <= 0:
                self.pop(v, None)


def _rng_state(tensors: list[torch.Tensor]) -> Any:
    """The CPU generator's state and that of each CUDA device ``tensors`` are on."""
    with disable_current_modes():
        cpu = torch.get_rng_state()
        devs = sorted({t.device.index or 0 for t in tensors if t.is_cuda})
        cuda = [(d, torch.cuda.get_rng_state(d)) for d in devs]
    return cpu, cuda


def _set_rng(rng: Any) -> Any:
    """Put the generators in state ``rng`` (`_rng_state`); the state they were in (of the
    same devices). Plain calls, no context objects: this runs once per replayed random
    operator; the dispatch modes are disabled only when one is active."""
    if dispatch_mode_active():
        with disable_current_modes():
            return _set_rng(rng)
    cpu, cuda = rng
    saved = torch.get_rng_state(), [(d, torch.cuda.get_rng_state(d)) for d, _ in cuda]
    torch.set_rng_state(cpu)
    for d, s in cuda:
        torch.cuda.set_rng_state(s, d)
    return saved
