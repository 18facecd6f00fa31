"""`PlanExecutor`: keep, swap or recompute each saved tensor of one live step, as a plan says.

Imported only by `slackswap.runtime.apply`, after torch has been found. When the replayed
copies happen is `slackswap.runtime.schedule`. The executor is the
profiler's `Recorder` run again (so every operator and value gets the number the profile gave
it), plus ``saved_tensors_hooks`` that hand autograd a handle instead of the tensor.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.problem import Instance, UserError
from slackswap.profiling.recorder import Recorder, _bind
from slackswap.profiling.trace import EXTERNAL
from slackswap.runtime.schedule import base_resident, rebuild_points


class StepMismatchError(UserError):
    """The step run under a plan is not the step the plan's instance was profiled from."""


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def _aten_of(op_name: str) -> tuple[int, str]:
    """(phase, aten packet name) of an instance operator name such as ``bwd:blocks.0/mm#3``."""
    phase = 1 if op_name.startswith("bwd:") else 0
    return phase, op_name.rsplit("/", 1)[-1].split("#", 1)[0]


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

    __slots__ = ("func", "args", "mutated", "rng", "writes")

    def __init__(self, func: Any, args: Any, mutated: Any, rng: Any, writes: dict[int, Any]):
        self.func = func
        self.args = args
        self.mutated = mutated
        self.rng = rng
        self.writes = writes


class _Entry:
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
        self.event: Any = None  # CUDA: the H2D copy's completion
        self.admitted = False  # the H2D copy is admitted (bytes counted against the budget)
        self.released = False


class _Handle:
    """What the pack hook gives autograd: the entry, and the saved view of its storage."""

    __slots__ = ("entry", "tensor", "dtype", "offset", "size", "stride", "owner")

    def __init__(self, owner: PlanExecutor, entry: _Entry, t: torch.Tensor, keep: bool):
        self.owner = owner
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
            self.owner._release(self.entry)


class PlanExecutor(Recorder):
    """Runs one step under ``actions`` (tensor order) for ``instance``; see `slackswap.runtime`."""

    def __init__(
        self,
        instance: Instance,
        actions: np.ndarray,
        budget_bytes: int,
        model: torch.nn.Module | None = None,
        *,
        lookahead_ops: int = 3,
        overlap: bool = True,
        prefetch: bool = True,
        schedule: dict[str, dict[int, list[int]]] | None = None,
    ):
        sig = instance.meta.get("runtime_signature")
        if not isinstance(sig, dict):
            raise StepMismatchError(
                f"instance {instance.name!r} has no runtime signature (meta.runtime_signature): "
                "profile the step again with this version of slackswap"
            )
        super().__init__(torch.nn.Module(), [], timing=False)
        self.watch_frees = False  # the profile's bookkeeping, not needed to run a plan
        self.instance = instance
        self.actions = actions
        self.budget_bytes = budget_bytes
        self.lookahead_ops = lookahead_ops
        self.overlap = overlap
        self.prefetch = prefetch
        self.shift = int(sig["op_shift"])
        self.n_fwd = instance.n_forward_ops - self.shift
        self.n_ops = instance.n_ops - self.shift
        self._op_aten = [_aten_of(n)[1] for n in instance.op_name[self.shift :]]
        self._sig_dtypes = list(sig["dtypes"])
        self._sig_shapes = [tuple(s) for s in sig["shapes"]]
        self._entry_of_value = {int(v): i for i, v in enumerate(sig["values"])}
        self.entries = [
            _Entry(i, int(a), int(b))
            for i, (a, b) in enumerate(zip(actions, instance.tensor_bytes, strict=True))
        ]
        self._internal = 0  # > 0 while this runtime issues its own operators
        self._records: dict[int, _OpRecord] = {}
        self._externals: dict[int, torch.Tensor] = {}
        self._allocs: dict[int, tuple[int, torch.device]] = {}
        self.model: torch.nn.Module | None = None
        self.unplanned_packs = 0
        self.swapped_bytes = 0
        self.recomputed_bytes = 0
        self.h2d_bytes = 0
        self.rebuilds = 0
        # The memory model the H2D admission uses (the simulator's, on instance operator
        # indices): bytes resident before operator o starts when nothing is fetched back yet.
        self._base = base_resident(instance, actions)
        self._cum_transient = np.concatenate(
            ([0], np.cumsum(instance.op_transient_bytes, dtype=np.int64))
        )
        self._admitted_bytes = 0
        self._offloading: list[_Entry] = []  # CUDA: offloads whose copy may still run
        swapped = [e for e in self.entries if e.action == SWAP]
        fbr = instance.tensor_first_bwd_reader
        self._queue = sorted(swapped, key=lambda e: (int(fbr[e.index]), e.index))
        # A replayed schedule (see `simulated_schedule`): operator index -> tensors whose H2D
        # copy starts / whose offloaded device buffer is let go before that operator.
        self._schedule = schedule
        self._hold_until: dict[int, int] = {}
        self._deferred_evictions: list[_Entry] = []
        self._rebuild_at, _ = rebuild_points(instance, actions)
        self._consumers: list[list[int]] = [[] for _ in range(instance.n_tensors)]
        for v, ins in enumerate(instance.tensor_rebuild_inputs):
            for u in ins:
                if actions[v] == RECOMP:
                    self._consumers[u].append(v)
        if schedule is not None:
            for o, ts in schedule["d2h_done"].items():
                for i in ts:
                    self._hold_until[i] = o
        self._cuda = False
        self._copy_stream: Any = None
        self._h2d_stream: Any = None
        self.error: BaseException | None = None
        self._global_hook: Any = None
        if model is not None:
            self.adopt(model)

    def adopt(self, model: torch.nn.Module) -> None:
        """Take ``model`` as the step's model: its parameters and buffers are not activations,
        its blocks get the profiler's hooks (they take part in the numbering)."""
        self.model = model
        self.attach(model, _block_modules(model, self.instance))
        self._cuda = any(t.is_cuda for t in model.parameters())
        if self._cuda and self.overlap:
            self._copy_stream = torch.cuda.Stream()
            self._h2d_stream = torch.cuda.Stream()

    def _first_module_call(self, module: torch.nn.Module, args: Any) -> None:
        if self.model is None:
            self.adopt(module)

    # ----- entering and leaving ----------------------------------------------------------------
    @contextmanager
    def installed(self):  # type: ignore[no-untyped-def]
        """Install the dispatch mode and the saved-tensor hooks; remove everything on exit."""
        with ExitStack() as stack:
            stack.callback(self.remove_hooks)
            if self.model is None:
                # The first module called inside the with block is the step's model.
                self._global_hook = torch.nn.modules.module.register_module_forward_pre_hook(
                    self._first_module_call
                )
                stack.callback(self._global_hook.remove)
            stack.enter_context(self)
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack))
            yield self

    def finish(self) -> None:
        """Check the step ran to its end (called when the step returned without raising)."""
        if self.error is not None:
            raise self.error
        ran = len(self.trace.ops)
        if ran != self.n_ops:
            raise StepMismatchError(
                f"the step ran {ran} operators where the profile of {self.instance.name!r} has "
                f"{self.n_ops} (forward and backward must both run inside the with block)"
            )
        missing = [e.index for e in self.entries if not e.packed]
        if missing:
            i = missing[0]
            raise StepMismatchError(
                f"saved tensor {self.instance.tensor_name[i]!r} (#{i}) was never saved by the "
                f"step ({len(missing)} missing)"
            )

    def close(self) -> None:
        """Drop every reference this runtime holds to the step's tensors."""
        for e in self.entries:
            e.device = e.host = e.event = None
        self._records.clear()
        self._externals.clear()
        self.release()

    def current_op(self) -> int:
        """The instance index of the next operator the step runs."""
        return len(self.trace.ops) + self.shift

    # ----- numbering and matching --------------------------------------------------------------
    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self._internal:
            return func(*args, **kwargs)
        index = len(self.trace.ops)
        if self._offloading:
            self._poll_offloads(backward_starts=index == self.n_fwd and self.phase == 0)
        if index == self.n_fwd and self.phase == 0:
            self.start_backward()
        # Copies start right before the next profiled operator itself (or its autograd node's
        # first unpack, see `_unpack`), not before the calls that precede it without a kernel
        # (views; the detach of an AccumulateGrad node, while the previous node's gradient
        # buffers are still held): the simulator starts them when that operator starts, after
        # the previous operator's transient bytes are gone.
        if index < self.n_ops and func.overloadpacket.__name__ == self._op_aten[index]:
            self._before_op()
        n_values = len(self.trace.values)
        forward = self.phase == 0
        rng = None
        if forward and torch.Tag.nondeterministic_seeded in func.tags:
            rng = self._rng_state(_tensors((args, kwargs)))
        if forward:
            template = self._template(func, args, kwargs)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if len(self.trace.ops) > index:
            self._check_op(index)
            if forward:
                self._remember(index, func, template, rng, args, kwargs, out)
        elif forward and len(self.trace.values) > n_values:
            for t in _tensors(out):  # a bare allocation: rebuilt as a fresh buffer
                k = self._key(t)
                v = self._current.get(k) if k is not None else None
                if v is not None and v >= n_values:
                    self._allocs[v] = (int(t.untyped_storage().nbytes()), t.device)
        return out

    def _before_op(self) -> None:
        """What the simulator does before the next operator starts: replay the copies due
        by then, or (live) start the H2D copies the look-ahead admits."""
        if self._schedule is not None:
            self._replay(self.current_op())
        elif self.phase == 1:
            self._admit()

    def _check_op(self, index: int) -> None:
        op = self.trace.ops[index]
        where = f"operator #{index + self.shift}"
        ran = f"{'backward' if op.phase else 'forward'} {op.aten} (module {op.module or 'model'})"
        if index >= self.n_ops:
            self._fail(
                f"the step differs from {self.instance.name!r} at {where}: it ran {ran} after "
                f"the profile's last operator"
            )
        name = self.instance.op_name[index + self.shift]
        phase, aten = _aten_of(name)
        if aten != op.aten or phase != op.phase:
            hint = ""
            if op.phase == 1 and op.aten == "add_":
                hint = (
                    " (a gradient added into an existing .grad? the profile's step starts "
                    "from zero_grad(set_to_none=True))"
                )
            self._fail(
                f"the step differs from {self.instance.name!r} at {where}: it ran {ran}, the "
                f"profile has {name!r}{hint}"
            )

    def _fail(self, message: str) -> None:
        self.error = StepMismatchError(message)
        raise self.error

    def _template(self, func: Any, args: Any, kwargs: Any) -> Any:
        """The call's flattened arguments with every tensor replaced by what a rebuild needs to
        find it again, and the flat positions of the arguments the operator writes."""
        bound = _bind(func._schema, args, kwargs)
        written = {
            id(t)
            for a in func._schema.arguments
            if a.alias_info is not None and a.alias_info.is_write
            for t in _tensors(bound.get(a.name))
        }
        flat, spec = tree_flatten((args, kwargs))
        mutated = frozenset(i for i, x in enumerate(flat) if id(x) in written)
        out: list[Any] = []
        for x in flat:
            if isinstance(x, torch.Tensor):
                k = self._key(x)
                if k is None or k in self._params:
                    out.append(x)  # parameters and buffers: alive for the whole step
                    continue
                v = self.value_of(x)
                if v is not None and self.trace.values[v].producer == EXTERNAL:
                    if v not in self._allocs:
                        self._externals.setdefault(v, x)  # a model input
                out.append(_Ref(v, x) if v is not None else x)
            else:
                out.append(x)
        return spec, out, mutated

    def _remember(
        self, index: int, func: Any, template: Any, rng: Any, args: Any, kwargs: Any, out: Any
    ) -> None:
        spec, flat, mutated_set = template
        outs = _tensors(out)
        mutated = [i for i in sorted(mutated_set) if isinstance(flat[i], _Ref)]
        writes: dict[int, Any] = {}
        for v in self.trace.ops[index].writes:
            key = self.trace.values[v].storage
            where: Any = None
            for k, t in enumerate(outs):
                if self._key(t) == key:
                    where = ("out", k)
                    break
            else:
                for i in mutated:
                    if self.trace.values[flat[i].value].storage == key:
                        where = ("arg", i)
                        break
            writes[v] = where
        self._records[index] = _OpRecord(func, (spec, flat), mutated_set, rng, writes)

    def _rng_state(self, tensors: list[torch.Tensor]) -> Any:
        with _disable_current_modes():
            cpu = torch.get_rng_state()
            devs = sorted({t.device.index or 0 for t in tensors if t.is_cuda})
            cuda = [(d, torch.cuda.get_rng_state(d)) for d in devs]
        return cpu, cuda

    # ----- saved-tensor hooks ------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        if self._internal:
            return t
        k = self._key(t)
        if k is None or k in self._params:
            return t
        v = self.value_of(t)
        i = self._entry_of_value.get(v) if v is not None else None
        if i is None:
            self.unplanned_packs += 1  # an earlier value of a storage saved again later
            return t
        e = self.entries[i]
        if not e.packed:
            self._check_tensor(i, v, t)  # type: ignore[arg-type]
            e.packed = True
            e.device = t.untyped_storage()
            if e.action == SWAP:
                self._offload(e)
            elif e.action == RECOMP:
                e.device = None  # dropped after its last forward reader (Python's references)
                self.recomputed_bytes += e.nbytes
        return _Handle(self, e, t, keep=e.action == KEEP)

    def _check_tensor(self, i: int, v: int, t: torch.Tensor) -> None:
        val = self.trace.values[v]
        name = self.instance.tensor_name[i]
        want = (self._sig_dtypes[i], self._sig_shapes[i], int(self.instance.tensor_bytes[i]))
        got = (val.dtype, tuple(val.shape), val.nbytes)
        if got != want:
            self._fail(
                f"the step differs from {self.instance.name!r} at saved tensor {name!r} (#{i}): "
                f"dtype {got[0]}, shape {list(got[1])}, {got[2]} bytes; the profile has dtype "
                f"{want[0]}, shape {list(want[1])}, {want[2]} bytes"
            )
        p = int(self.instance.tensor_producer[i]) - self.shift
        if val.producer != (p if p >= 0 else EXTERNAL):
            self._fail(
                f"the step differs from {self.instance.name!r} at saved tensor {name!r} (#{i}): "
                f"produced by operator #{val.producer + self.shift}, the profile says #{p}"
            )

    def _unpack(self, h: Any) -> torch.Tensor:
        if not isinstance(h, _Handle):
            return h  # type: ignore[no-any-return]
        if self.phase == 1:
            # Autograd unpacks a node's saved tensors before the node's first operator runs
            # (and before its rebuilds): the simulator's copies due before that operator start
            # first, evictions included.
            self._before_op()
        if h.tensor is not None:
            return h.tensor  # type: ignore[no-any-return]
        storage = self._materialise(h.entry)
        if h.entry.event is not None:
            torch.cuda.current_stream().wait_event(h.entry.event)
        return self._view(storage, h.dtype, h.offset, h.size, h.stride)

    def _view(self, storage: Any, dtype: Any, offset: int, size: Any, stride: Any) -> torch.Tensor:
        self._internal += 1
        try:
            t = torch.empty((0,), dtype=dtype, device=storage.device)
            return t.set_(storage, offset, size, stride)
        finally:
            self._internal -= 1

    def _materialise(self, e: _Entry) -> Any:
        """The device storage of entry ``e``, fetched back or rebuilt when not resident."""
        if e.device is not None:
            return e.device
        if e.action == SWAP:
            self._fetch(e)
        elif e.action == RECOMP:
            self._rebuild(e)
        if e.device is None:
            raise RuntimeError(f"tensor {self.instance.tensor_name[e.index]!r} was released")
        return e.device

    def _release(self, e: _Entry) -> None:
        """Autograd dropped the last handle: the tensor's last backward reader is done."""
        if e.admitted:
            self._admitted_bytes -= e.nbytes
            e.admitted = False
        if e.index not in self._hold_until:  # else its offload still runs (replayed schedule)
            e.device = None
        e.host = e.event = None
        e.released = True

    # ----- swap --------------------------------------------------------------------------------
    def _offload(self, e: _Entry) -> None:
        """D2H copy of the whole storage: on the copy stream after the producer (CUDA), or at
        once (CPU). The runtime keeps no device reference: the buffer is freed when the copy
        and the step's last reference (its last forward reader) are done."""
        src = e.device
        self.swapped_bytes += e.nbytes
        with _disable_current_modes():
            if src.device.type == "cuda":
                host = torch.empty(src.nbytes(), dtype=torch.uint8, pin_memory=True)
                if self._copy_stream is not None:
                    self._copy_stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(self._copy_stream):
                        host.untyped_storage().copy_(src, non_blocking=True)
                        e.event = torch.cuda.Event()
                        e.event.record(self._copy_stream)
                    # The allocator must not reuse the buffer before the copy stream read it.
                    torch.empty((0,), device=src.device).set_(src).record_stream(self._copy_stream)
                    self._offloading.append(e)
                else:
                    host.untyped_storage().copy_(src)
            else:
                host = torch.empty(src.nbytes(), dtype=torch.uint8)
                host.untyped_storage().copy_(src)
        e.host = host.untyped_storage()
        if e.event is None and (self._schedule is None or e.index not in self._hold_until):
            # Copied synchronously (and, replaying, saved only after the simulated copy ended):
            # the runtime's reference goes at once.
            e.device = None
        # else: the replayed schedule lets the device buffer go when the simulated copy ends
        # (never, when the simulated copy had not ended by the backward pass)

    def _poll_offloads(self, backward_starts: bool) -> None:
        """Let go of the device buffers whose D2H copy has finished; when the backward pass
        starts, a tensor still being copied keeps its device buffer (no H2D is needed)."""
        still = []
        for e in self._offloading:
            if e.event.query():
                e.device = e.event = None
            elif backward_starts:
                e.event = None  # stays resident until its last backward reader
                if e in self._queue:
                    self._queue.remove(e)
            else:
                still.append(e)
        self._offloading = still

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

    def _let_go(self, e: _Entry) -> None:
        self._hold_until.pop(e.index, None)
        if self._schedule is not None and e.index in self._schedule["late"]:
            if e.released:
                e.device = None  # its last reader was done before its offload
            return
        if e.host is not None and not e.admitted:
            e.device = None

    def _evict(self, e: _Entry) -> None:
        """A simulated eviction. The simulator evicts after the rebuilds of the operator it
        evicts at, so an input one of them still needs goes only once they are done."""
        o = self.current_op()
        if any(
            self._rebuild_at[v] == o and self._pending_rebuild(v) for v in self._consumers[e.index]
        ):
            self._deferred_evictions.append(e)
            return
        if e.host is not None and e.device is not None:
            if e.admitted:
                self._admitted_bytes -= e.nbytes
                e.admitted = False
            e.device = None

    def _fetch_if_needed(self, e: _Entry) -> None:
        if e.device is None and e.host is not None and not e.released:
            self._fetch(e)

    def _admit(self) -> None:
        """Start H2D copies in deadline order while the head fits under the budget with the
        transient bytes of the next ``lookahead_ops`` operators (the simulator's rule)."""
        if not self.prefetch or self._schedule is not None:
            return
        o = len(self.trace.ops) + self.shift  # the instance index of the next operator
        while self._queue:
            e = self._queue[0]
            if e.released or e.device is not None:
                self._queue.pop(0)
                continue
            end = min(o + self.lookahead_ops, self.instance.n_ops)
            look = int(self._cum_transient[end] - self._cum_transient[min(o, end)])
            used = int(self._base[min(o, self.instance.n_ops - 1)]) + self._admitted_bytes
            if used + e.nbytes + look > self.budget_bytes:
                return
            self._queue.pop(0)
            self._fetch(e)

    def _fetch(self, e: _Entry) -> None:
        """H2D copy of a swapped tensor into a new device buffer (on the H2D stream on CUDA)."""
        if e in self._queue:
            self._queue.remove(e)
        host = e.host
        device = self._device_of(e)
        self._internal += 1
        try:
            if device.type == "cuda" and self._h2d_stream is not None:
                self._h2d_stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(self._h2d_stream):
                    buf = torch.empty(host.nbytes(), dtype=torch.uint8, device=device)
                    buf.untyped_storage().copy_(host, non_blocking=True)
                    e.event = torch.cuda.Event()
                    e.event.record(self._h2d_stream)
                buf.record_stream(torch.cuda.current_stream())
            else:
                buf = torch.empty(host.nbytes(), dtype=torch.uint8, device=device)
                buf.untyped_storage().copy_(host)
        finally:
            self._internal -= 1
        e.device = buf.untyped_storage()
        e.admitted = True
        self._admitted_bytes += e.nbytes
        self.h2d_bytes += e.nbytes

    def _device_of(self, e: _Entry) -> torch.device:
        return torch.device("cuda") if self._cuda else torch.device("cpu")

    # ----- recompute ---------------------------------------------------------------------------
    def _rebuild(self, e: _Entry) -> None:
        """Re-run the operator chain that produced entry ``e``'s value, its recomputed inputs
        rebuilt first, with each random operator's original RNG state."""
        value = self._value_of_entry(e)
        cache: dict[int, Any] = {}
        self._internal += 1
        try:
            storage = self._compute(value, cache, target=True)
        finally:
            self._internal -= 1
        e.device = storage
        self.rebuilds += 1
        if self._deferred_evictions:
            waiting, self._deferred_evictions = self._deferred_evictions, []
            for d in waiting:
                self._evict(d)

    def _pending_rebuild(self, v: int) -> bool:
        ent = self.entries[v]
        return ent.action == RECOMP and ent.device is None and not ent.released

    def _value_of_entry(self, e: _Entry) -> int:
        sig = self.instance.meta["runtime_signature"]["values"]
        return int(sig[e.index])

    def _resolve(self, value: int, cache: dict[int, Any]) -> Any:
        """The storage holding ``value`` now: a resident or fetched/rebuilt saved tensor, a
        model input, a fresh buffer for an allocation, or its producer run again."""
        i = self._entry_of_value.get(value)
        if i is not None and not self.entries[i].released:
            e = self.entries[i]
            if e.device is None and e.action == KEEP:
                raise RuntimeError(f"kept tensor {self.instance.tensor_name[i]!r} not resident")
            storage = self._materialise(e)
            if e.event is not None:
                torch.cuda.current_stream().wait_event(e.event)
            return storage
        return self._compute(value, cache, target=False)

    def _compute(self, value: int, cache: dict[int, Any], *, target: bool) -> Any:
        if value in cache:
            return cache[value]
        if value in self._externals:
            return self._externals[value].untyped_storage()
        if value in self._allocs:
            nbytes, device = self._allocs[value]
            storage = torch.empty(nbytes, dtype=torch.uint8, device=device).untyped_storage()
            cache[value] = storage
            return storage
        p = self.trace.values[value].producer
        rec = self._records.get(p) if p != EXTERNAL else None
        if rec is None:
            raise RuntimeError(f"value {value} cannot be rebuilt (no recorded producer)")
        self._run_recorded(rec, cache)
        return cache[value]

    def _run_recorded(self, rec: _OpRecord, cache: dict[int, Any]) -> None:
        spec, flat = rec.args
        real: list[Any] = []
        for i, x in enumerate(flat):
            if isinstance(x, _Ref):
                storage = self._resolve(x.value, cache)
                if i in rec.mutated and x.value in self._entry_of_value:
                    # Never write into a resident saved tensor: work on a copy.
                    storage = storage.clone()
                real.append(self._view(storage, x.dtype, x.offset, x.size, x.stride))
            elif isinstance(x, torch.Tensor) and i in rec.mutated:
                real.append(x.clone())  # a buffer the operator updates (batch-norm statistics)
            else:
                real.append(x)
        args, kwargs = tree_unflatten(real, spec)
        with _rng_restored(rec.rng):
            out = rec.func(*args, **kwargs)
        outs = _tensors(out)
        for v, where in rec.writes.items():
            if where is None:
                continue
            kind, k = where
            t = outs[k] if kind == "out" else real[k]
            cache[v] = t.untyped_storage()


@contextmanager
def _rng_restored(rng: Any):  # type: ignore[no-untyped-def]
    if rng is None:
        yield
        return
    cpu, cuda = rng
    with _disable_current_modes():
        saved_cpu = torch.get_rng_state()
        saved_cuda = [(d, torch.cuda.get_rng_state(d)) for d, _ in cuda]
        torch.set_rng_state(cpu)
        for d, s in cuda:
            torch.cuda.set_rng_state(s, d)
    try:
        yield
    finally:
        with _disable_current_modes():
            torch.set_rng_state(saved_cpu)
            for d, s in saved_cuda:
                torch.cuda.set_rng_state(s, d)


def _block_modules(model: torch.nn.Module, instance: Instance) -> list[torch.nn.Module]:
    out: list[torch.nn.Module] = []
    for name in dict.fromkeys(instance.meta.get("block_modules", [])):
        try:
            m = model.get_submodule(name) if name else model
        except AttributeError:
            raise StepMismatchError(
                f"the step differs from {instance.name!r}: its model has no module {name!r} "
                "(a block of the profiled model)"
            ) from None
        out.append(m)
    return out
