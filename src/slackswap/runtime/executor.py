"""`PlanExecutor`: keep, swap or recompute each saved tensor of one live step, as a plan says.

Imported only by `slackswap.runtime.apply`, after torch has been found. The executor is a
``TorchDispatchMode`` that numbers the step with the profiler's own parts, by composition: the
storages and values (`torchstep.values.ValueNumbering` and its operator rule `number_call`) and
where the step is (`torchstep.context.ModuleContext`), not the profiler's timing, FLOPs or
memory bookkeeping. So every operator and value gets the number the profile gave it and the
step is matched to the instance operator by operator and
each saved tensor by value, dtype, shape and producing operator (the first difference named in
a `StepMismatchError`); ``saved_tensors_hooks`` (what ``save_on_cpu`` and torchtune's offloading
use) hand autograd a `Handle` instead of each saved tensor and tell when it is needed again.

The tensors themselves are handled by two engines the executor owns: `copies.CopyEngine` moves
swapped tensors to host memory and back (when the replayed copies happen is
`slackswap.runtime.schedule`), `rebuild.Rebuilder` records forward calls and recomputes. They
are parts, not mixins: each keeps its own state, the per-tensor `Entry` is what they share,
and the executor's ``quiet`` section (the runtime's own operators go unnumbered) is handed to
both, so what each engine reads and changes stays in sight.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.runtime.copies import CopyEngine, copy_model
from slackswap.runtime.entry import Entry, EntryState, Handle, Residency, StateError
from slackswap.runtime.observer import StepObserver
from slackswap.runtime.rebuild import Rebuilder
from slackswap.runtime.records import view
from slackswap.torchstep.context import ModuleContext
from slackswap.torchstep.torchapi import (
    StorageWeakRef,
    TorchDispatchMode,
    autocast_caching,
    storage_key,
)
from slackswap.torchstep.trace import EXTERNAL, Value
from slackswap.torchstep.values import ValueNumbering, number_call


class StepMismatchError(UserError):
    """The step run under a plan is not the step the plan's instance was profiled from."""


def _aten_of(op_name: str) -> tuple[int, str]:
    """(phase, aten packet name) of an instance operator name such as ``bwd:blocks.0/mm#3``."""
    phase = 1 if op_name.startswith("bwd:") else 0
    return phase, op_name.rsplit("/", 1)[-1].split("#", 1)[0]


@dataclass
class StepOp:
    """One operator of the live step, numbered as the profile numbered it."""

    aten: str
    phase: int  # 0 forward, 1 backward
    module: str  # module path of its forward context
    writes: list[int] = field(default_factory=list)  # the values it wrote


@dataclass
class StepTrace:
    """The live step's operators and values (`ValueNumbering.values`) so far."""

    ops: list[StepOp] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)


def _run(func: Any, args: Any, kwargs: Any) -> Any:
    return func(*args, **kwargs)


class PlanExecutor(TorchDispatchMode):
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
        observer: StepObserver | None = None,
    ):
        sig = instance.meta.get("runtime_signature")
        if not isinstance(sig, dict):
            raise StepMismatchError(
                f"instance {instance.name!r} has no runtime signature (meta.runtime_signature): "
                "profile the step again with this version of slackswap"
            )
        super().__init__()
        #: The profile's numbering of storages and values, rebuilt as the step runs.
        self.numbering = ValueNumbering()
        self.trace = StepTrace(values=self.numbering.values)
        self.context = ModuleContext(self.numbering)
        self.phase = 0
        self.instance = instance
        self.actions = actions
        self.budget_bytes = budget_bytes
        self.shift = int(sig["op_shift"])
        self.n_fwd = instance.n_forward_ops - self.shift
        self.n_ops = instance.n_ops - self.shift
        self._op_aten = [_aten_of(n)[1] for n in instance.op_name[self.shift :]]
        self._sig_dtypes = list(sig["dtypes"])
        self._sig_shapes = [tuple(s) for s in sig["shapes"]]
        self._entry_of_value = {int(v): i for i, v in enumerate(sig["values"])}
        # Earlier values of a saved tensor's storage that autograd also saves: views of it.
        self._earlier_value = {int(v): int(i) for v, i in sig.get("earlier_values", [])}
        self.entries = [
            Entry(i, int(a), int(b), instance.tensor_name[i])
            for i, (a, b) in enumerate(zip(actions, instance.tensor_bytes, strict=True))
        ]
        self._internal = 0  # > 0 while this runtime issues its own operators
        self.model: torch.nn.Module | None = None
        self.unplanned_packs = 0
        self.recomputed_bytes = 0
        self.copies = CopyEngine(
            instance,
            self.entries,
            budget_bytes,
            copy_model(instance, actions),
            lookahead_ops=lookahead_ops,
            overlap=overlap,
            prefetch=prefetch,
            schedule=schedule,
            current_op=self.current_op,
            quiet=self.quiet,
        )
        self.rebuilder = Rebuilder(
            self.numbering,
            instance,
            self.entries,
            self._entry_of_value,
            materialise=self._materialise,
            quiet=self.quiet,
        )
        self.error: BaseException | None = None
        self._global_hook: Any = None
        self.closed = False
        #: Called with the model when the executor adopts it (the caller's memory tracker).
        self.on_adopt: Any = None
        # Saved entries -> their storage's key, to see whether the step let the storage go;
        # storages saved again unplanned (autograd holds those itself).
        self.saved_storages: dict[int, int] = {}
        self.unplanned_storages: set[int] = set()
        #: Entries whose storage was still referenced outside autograd when backward began.
        self.held: list[int] = []
        #: Entries autograd saved again after their last backward reader (`_pack_planned`):
        #: a reentrant checkpoint's closure held them.
        self.resaved_after_release: set[int] = set()
        #: Swapped or recomputed entries held outside autograd when backward began (`held`)
        #: whose storage went during the backward pass (`_note_held_freed`): the holder was
        #: part of the graph (a non-reentrant checkpoint's function, which holds what it reads
        #: through a closure until its block's backward), not a hook or a variable.
        self.freed_in_backward: set[int] = set()
        self._held_refs: dict[int, Any] = {}  # such an entry -> a weak reference to its storage
        self._packed_earlier = False  # the pack being made is of an earlier value (`_pack`)
        #: The forward ran inside ``torch.autocast`` with its cache of casts on (looked at
        #: when the model is called; `RunStats.autocast_cache`).
        self.autocast_cache = False
        #: id -> weak reference of each ``.grad`` a leaf (a parameter, a model input that
        #: requires grad) had when the step began, until its first accumulation (`_carried`).
        self._carried_grads: dict[int, Any] = {}
        self._external = [int(p) < self.shift for p in instance.tensor_producer]
        #: Told of the step as it runs (the training path's first step learns from it).
        self.observer = observer
        if model is not None:
            self.adopt(model)
        if observer is not None:
            observer.started(self)

    @property
    def swapped_bytes(self) -> int:
        return self.copies.swapped_bytes

    @property
    def h2d_bytes(self) -> int:
        return self.copies.h2d_bytes

    @property
    def rebuilds(self) -> int:
        return self.rebuilder.rebuilds

    def adopt(self, model: torch.nn.Module) -> None:
        """Take ``model`` as the step's model: its parameters and buffers are not activations,
        its blocks get the profiler's hooks (they take part in the numbering)."""
        self.model = model
        self.numbering.add_params((*model.parameters(), *model.buffers()))
        self.context.attach(model, _block_modules(model, self.instance))
        self.copies.use_device(any(t.is_cuda for t in model.parameters()))
        self._note_carried_grads(model.parameters())
        self.context.add_hook(model.register_forward_pre_hook(self._model_call, with_kwargs=True))
        if self.on_adopt is not None:
            self.on_adopt(model)

    def _first_module_call(self, module: torch.nn.Module, args: Any) -> None:
        if self.model is None:
            self.adopt(module)
            self._model_call(module, args, {})

    def _model_call(self, module: Any, args: Any, kwargs: Any) -> None:
        # Looked at here, not in the dispatch mode: below autocast's kernels it reads as off.
        self.autocast_cache = self.autocast_cache or autocast_caching()
        self._note_carried_grads((*args, *kwargs.values()))

    def _note_carried_grads(self, leaves: Any) -> None:
        """Note the ``.grad`` each leaf among ``leaves`` that requires grad has now, from an
        earlier step: a model input that requires grad (reentrant checkpoint asks for one)
        keeps its gradient unless the loop sets it to None, and gradient accumulation over
        micro-batches keeps the parameters'. Weak references: a reference of ours would
        change whether autograd adds into it in place."""
        for t in leaves:
            if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad:
                g = t.grad
                if g is not None:
                    self._carried_grads[id(g)] = weakref.ref(g)

    def _carried(self, func: Any, args: tuple[Any, ...]) -> bool:
        """Whether this backward call is autograd's first accumulation of this step into a
        leaf's gradient carried over from an earlier step (``add_``, or ``add`` when someone
        else holds the old gradient): the profiled step started from no gradient, where the
        engine stores the new one without an operator, so the call is not one of the
        profile's. Later accumulations into it in this step (a weight used inside and outside
        a reentrant checkpoint) are the profile's own."""
        if not args or func.overloadpacket.__name__ not in ("add_", "add"):
            return False
        ref = self._carried_grads.get(id(args[0]))
        if ref is None or ref() is not args[0]:
            return False
        del self._carried_grads[id(args[0])]
        return True

    # ----- entering and leaving ----------------------------------------------------------------
    @contextmanager
    def installed(self) -> Iterator[PlanExecutor]:
        """Install the dispatch mode and the saved-tensor hooks; remove everything on exit."""
        with ExitStack() as stack:
            stack.callback(self.context.remove_hooks)
            if self.model is None:
                # The first module called inside the with block is the step's model.
                self._global_hook = torch.nn.modules.module.register_module_forward_pre_hook(
                    self._first_module_call
                )
                stack.callback(self._global_hook.remove)
            stack.enter_context(self)
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack))
            yield self

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Operators issued inside pass the dispatch mode unnumbered and tensors saved inside
        are not planned: the runtime's own copies and rebuilds are not the step's."""
        self._internal += 1
        try:
            yield
        finally:
            self._internal -= 1

    def finish(self) -> None:
        """Check the step ran to its end (called when the step returned without raising)."""
        if self.error is not None:
            raise self.error
        self.held = sorted({*self.held, *self._held_outside()})
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
        if self.observer is not None and not self.closed:
            self.observer.closing(self)  # it may keep the operator records; the tensors go
        self.closed = True
        for e in self.entries:
            e.free()
        self.rebuilder.clear()
        self.context.release()
        self.numbering.release()

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
        if self._internal or (
            self.phase == 1 and self._carried_grads and self._carried(func, args)
        ):
            return func(*args, **kwargs)
        obs = self.observer
        if obs is None or self.phase != 0:
            return self._dispatch(func, args, kwargs)
        index = len(self.trace.ops)
        token = obs.before_forward_op(func, args, kwargs)
        out = self._dispatch(func, args, kwargs)
        obs.after_forward_op(token, index, func, args, kwargs)
        return out

    def _dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Number the call, match it to the profile and run the copies due before it."""
        index = len(self.trace.ops)
        backward_starts = index == self.n_fwd and self.phase == 0
        self.copies.poll_offloads(backward_starts)
        if backward_starts:
            self.context.resolve_grad_fns()
            self.phase = 1
            self.held = self._held_outside()
            self._held_refs = self._refs_of(self.held)
        self.copies.let_go_due()
        # Copies start right before the next profiled operator itself (or its autograd node's
        # first unpack, see `_unpack`), not before the calls that precede it without a kernel
        # (views; the detach of an AccumulateGrad node, while the previous node's gradient
        # buffers are still held): the simulator starts them when that operator starts, after
        # the previous operator's transient bytes are gone.
        if index < self.n_ops and func.overloadpacket.__name__ == self._op_aten[index]:
            self.copies.before_op(backward=self.phase == 1)
        n_values = len(self.trace.values)
        forward = self.phase == 0
        if forward:
            before = self.rebuilder.before_call(func, args, kwargs)
        out = self._number(func, args, kwargs)
        if len(self.trace.ops) > index:
            self._check_op(index)
            if forward:
                self.rebuilder.remember(index, func, before, out, self.trace.ops[index].writes)
        elif forward and len(self.trace.values) > n_values:
            self.rebuilder.note_allocations(out, n_values)
        return out

    def value_of(self, t: torch.Tensor) -> int | None:
        """The current value of ``t``'s storage (`ValueNumbering.value_of`)."""
        return self.numbering.value_of(t)

    def _number(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the call and number it as the profiler did (`number_call`)."""
        if self.phase == 0:
            self.context.resolve_grad_fns()
            ctx = self.context.forward_context()
        else:
            ctx = self.context.backward_context()
        out, call = number_call(self.numbering, func, args, kwargs, _run, len(self.trace.ops))
        if self.phase == 0:
            self.context.note_outputs((*call.outputs, *call.mutated), ctx)
        elif self._held_refs:
            self._note_held_freed()
        if call.writes is not None:
            aten = func.overloadpacket.__name__
            self.trace.ops.append(StepOp(aten, self.phase, ctx[0], call.writes))
        return out

    def _refs_of(self, entries: list[int]) -> dict[int, Any]:
        """A weak reference to the storage of each swapped or recomputed entry of ``entries``
        (a kept one stays autograd's, which hands it to its readers)."""
        out: dict[int, Any] = {}
        for i in entries:
            if self.entries[i].action == KEEP:
                continue
            ref = self.numbering.ref(self.saved_storages.get(i, -1))
            if ref is not None:
                out[i] = ref
        return out

    def _note_held_freed(self) -> None:
        """After a backward operator: held entries whose storage is gone now were held by the
        graph (`freed_in_backward`)."""
        gone = [i for i, ref in self._held_refs.items() if ref.expired()]
        for i in gone:
            self.freed_in_backward.add(i)
            del self._held_refs[i]

    def _check_op(self, index: int) -> None:
        op = self.trace.ops[index]
        where = f"operator #{index + self.shift}"
        ran = f"{'backward' if op.phase else 'forward'} {op.aten} (module {op.module or 'model'})"
        if index >= self.n_ops:
            hint = ""
            if op.phase == 1 and op.aten in ("add_", "add"):
                hint = (
                    " (a gradient added into a .grad kept from an earlier step? the profile's "
                    "step starts from none: set .grad to None before each step on a tensor "
                    "that requires grad and is neither a parameter nor an input of the model)"
                )
            elif op.phase == 1:
                hint = (
                    " (a second backward pass over a graph kept with retain_graph=True? a plan "
                    "covers one forward and one backward pass: run the second one without it)"
                )
            self._fail(
                f"the step differs from {self.instance.name!r} at {where}: it ran {ran} after "
                f"the profile's last operator{hint}"
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

    # ----- saved-tensor hooks ------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        if self._internal:
            return t
        self._packed_earlier = False
        out = self._pack_planned(t)
        if self.observer is not None:
            entry = out.entry.index if isinstance(out, Handle) else -1
            if self._packed_earlier:
                self.observer.packed_earlier(t, entry)
            else:
                self.observer.packed(t, entry)
        return out

    def _pack_planned(self, t: torch.Tensor) -> Any:
        k = self.numbering.key(t)
        if k is None or self.numbering.is_param(k):
            return t
        v = self.value_of(t)
        i = self._entry_of_value.get(v) if v is not None else None
        if i is None:
            j = self._earlier_value.get(v) if v is not None else None
            if j is not None:
                # The storage is saved again later, as entry j: unplanned, autograd would read
                # this view from the storage as the step leaves it, so it reads it from entry
                # j's storage (kept, fetched back or rebuilt).
                self._packed_earlier = True
                ej = self.entries[j]
                return Handle(ej, t, keep=ej.action == KEEP, release=self.copies.release)
            self.unplanned_packs += 1  # a value the profile did not save
            self.unplanned_storages.add(k)
            return t
        e = self.entries[i]
        if e.released:
            # Saved again after its last backward reader let it go: a reentrant checkpoint's
            # re-run forward, whose block reads the tensor through a closure (which has held
            # it all along). The tensor is at hand; autograd keeps it for that node alone.
            self.unplanned_packs += 1
            self.resaved_after_release.add(i)
            return t
        if not e.packed:
            self._check_tensor(i, v, t)  # type: ignore[arg-type]
            e.to(EntryState.SAVED)
            self.saved_storages[i] = k
            if e.action == RECOMP:
                # Not held: dropped after its last forward reader (Python's references).
                self.recomputed_bytes += e.nbytes
            elif e.action == SWAP:
                self.copies.offload(e, t.untyped_storage())
            else:
                e.move(Residency.DEVICE, device=t.untyped_storage())
        return Handle(e, t, keep=e.action == KEEP, release=self.copies.release)

    def _held_outside(self) -> list[int]:
        """The entries whose original storage is still alive although neither autograd nor this
        runtime holds it, i.e. a reference kept outside autograd (a forward hook storing the
        activation, a variable): swapped and recomputed ones (autograd holds handles), whose
        memory was never freed and whose copy back or rebuild adds a second copy, and kept ones
        autograd released (their last backward reader done). Asked when backward begins (the
        step's own forward references are gone) and when the step ends."""
        held = []
        # Storages autograd still holds itself: a kept entry's (another value of the same
        # storage, after an in-place update, may be swapped or recomputed).
        kept = {
            k
            for j, k in self.saved_storages.items()
            if self.entries[j].action == KEEP and not self.entries[j].released
        }
        for i, k in self.saved_storages.items():
            e = self.entries[i]
            if k in kept:
                continue
            if e.action == KEEP and (not e.released or self._external[i]):
                # Autograd holds a kept one until its last backward reader; the caller's own
                # inputs outlive every step.
                continue
            ref = self.numbering.ref(k)
            if ref is None or ref.expired() or k in self.unplanned_storages:
                continue
            if e.device is not None and storage_key(StorageWeakRef(e.device)) == k:
                continue  # this runtime still holds it (an offload not yet done)
            held.append(i)
        return sorted(held)

    def _check_tensor(self, i: int, v: int, t: torch.Tensor) -> None:
        val = self.trace.values[v]
        name = self.instance.tensor_name[i]
        want = (self._sig_dtypes[i], self._sig_shapes[i], int(self.instance.tensor_bytes[i]))
        got = (val.dtype, tuple(val.shape), val.nbytes)
        if got != want:
            follows_data = got[0] == want[0] and got[1] != want[1]
            self._fail(
                f"the step differs from {self.instance.name!r} at saved tensor {name!r} (#{i}): "
                f"dtype {got[0]}, shape {list(got[1])}, {got[2]} bytes; the profile has dtype "
                f"{want[0]}, shape {list(want[1])}, {want[2]} bytes"
                + (
                    " (when the model's inputs have the profiled shapes, this shape follows "
                    "the data: a mixture of experts' routing, a selection by value; a plan is "
                    "made for a step whose saved tensors keep their shapes)"
                    if follows_data
                    else ""
                )
            )
        p = int(self.instance.tensor_producer[i]) - self.shift
        if val.producer != (p if p >= 0 else EXTERNAL):
            self._fail(
                f"the step differs from {self.instance.name!r} at saved tensor {name!r} (#{i}): "
                f"produced by operator #{val.producer + self.shift}, the profile says #{p}"
            )

    def _unpack(self, h: Any) -> torch.Tensor:
        if not isinstance(h, Handle):
            return h  # type: ignore[no-any-return]
        if self.closed and h.tensor is None:
            raise UserError(
                f"saved tensor {self.instance.tensor_name[h.entry.index]!r} was needed after the "
                "slackswap.runtime.apply block ended (a backward pass over a graph kept with "
                "retain_graph=True?): the plan swapped or recomputed it for one backward pass "
                "inside the block; run further backward passes without the plan"
            )
        if self.phase == 1:
            # Autograd unpacks a node's saved tensors before the node's first operator runs
            # (and before its rebuilds): the simulator's copies due before that operator start
            # first, evictions included.
            self.copies.before_op(backward=True)
        if h.tensor is not None:
            return h.tensor  # type: ignore[no-any-return]
        storage = self._materialise(h.entry)
        if h.entry.event is not None:
            torch.cuda.current_stream().wait_event(h.entry.event)
        with self.quiet():
            return view(storage, h.dtype, h.offset, h.size, h.stride)

    def _materialise(self, e: Entry) -> Any:
        """The device storage of entry ``e``, fetched back or rebuilt when not resident."""
        if e.on_device:
            return e.device
        if e.residency is Residency.HOST:
            self.copies.fetch(e)
        elif e.residency is Residency.ABSENT and e.action == RECOMP:
            self.rebuilder.rebuild(e)
            self.copies.evict_deferred()
        if not e.on_device:
            raise StateError(
                f"saved tensor {self.instance.tensor_name[e.index]!r} (#{e.index}) is needed "
                f"while {e.residency.value}"
            )
        return e.device


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
