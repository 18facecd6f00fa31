"""Record one forward and backward pass with a dispatch mode, saved-tensor hooks and module hooks.

Imported only by `slackswap.profiling.step`, after torch has been found.

How each piece is observed:
- Operators: a `TorchDispatchMode` sees every ATen call below autograd, in execution order, in
  forward and in backward (the autograd engine carries the mode into backward).
- Saved tensors: `saved_tensors_hooks`; the pack hook maps the tensor to the current value of its
  storage, the unpack hook notes the next backward operator (the one that unpacked it) and the
  autograd node that unpacked it: the node holds the tensor until it has run all its operators
  (the engine releases a node's saved variables after the node returns).
- Storage identity: a `StorageWeakRef` per storage keeps the storage object allocated (not its
  data), so storage addresses stay unique for the whole trace.
- Release: the pack hook keeps a detached alias of each saved tensor, not the tensor itself,
  so before each forward operator the storages whose only remaining references are those
  aliases (`torchapi.storage_use_count`) are known to have been dropped by the step (a
  Python local such as ``q`` in an attention block keeps its buffer until the function
  returns, after its last reader): `Trace.released_after`. Those still held so when the
  backward pass begins are watched through it, before each backward operator: where a holder
  lets go of one there (a non-reentrant checkpoint's function holding it through a closure),
  or holds it past the backward pass's end (a forward hook, a reentrant checkpoint's closure,
  autocast's cache), is noted in `Trace.let_go_in_backward`.
- Let go: a ``weakref.finalize`` on each object the pack hook returns notes the backward
  operator after which autograd dropped it (`Trace.let_go_after`): a node's saved tensors go
  after the node ran, but a node that saved a tensor may run long after the nodes that read
  it (a non-reentrant checkpoint's input saver runs after the whole block's backward pass).
- Frees: a ``weakref.finalize`` on each storage an operator allocates notes the operator after
  which it was freed (`Trace.freed_after`): an unsaved buffer a Python local holds lives past
  its last reader too.
- Context: module forward hooks give the module path and the block; in backward, the autograd
  node being run (`torchapi.current_node_key`) is mapped back to the forward context that
  created it, through its sequence number.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils import flop_counter

from slackswap.torchstep.context import ModuleContext
from slackswap.torchstep.costs import op_kind
from slackswap.torchstep.torchapi import (
    TorchDispatchMode,
    current_graph_task,
    current_node_key,
    disable_current_modes,
    storage_use_count,
)
from slackswap.torchstep.trace import OpRecord, Trace
from slackswap.torchstep.values import ValueNumbering, number_call, tensors


class _Handle:
    """What the pack hook hands autograd for an activation: an index into the saved table."""

    __slots__ = ("index", "__weakref__")

    def __init__(self, index: int):
        self.index = index


def _extent_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Recorder(TorchDispatchMode):
    """Fills a `Trace`; use ``with recorder, recorder.saved_hooks(): ...`` around the step."""

    def __init__(self, model: torch.nn.Module, blocks: list[torch.nn.Module], timing: bool):
        super().__init__()
        self.trace = Trace()
        self.phase = 0
        self.timing = timing
        #: Storages and their values (the trace's ``values`` and ``preexisting``).
        self.numbering = ValueNumbering()
        self.trace.values = self.numbering.values
        self.trace.preexisting = self.numbering.preexisting
        self._saved_tensors: list[torch.Tensor] = []  # detached aliases, held until the end
        self._saved_values: set[int] = set()  # the values packed so far
        self._aliases: dict[int, int] = {}  # storage key -> aliases held, until released
        #: Saved storages the step made, still held besides our aliases when the backward
        #: pass began -> our aliases of each (`_note_let_go_in_backward`).
        self._held_into_backward: dict[int, int] = {}
        #: Note when each storage an operator allocates is freed (`Trace.freed_after`).
        self.watch_frees = True
        self._watched: set[int] = set()
        #: Where the step is (module, block); numbers block inputs and outputs.
        self.context = ModuleContext(
            self.numbering,
            on_block_input=lambda v, b: self.trace.block_inputs.setdefault(v, b),
            on_block_output=self.trace.block_outputs.__setitem__,
        )
        self.trace.block_modules = self.context.block_modules
        self.attach(model, blocks)

    def attach(self, model: torch.nn.Module, blocks: list[torch.nn.Module]) -> None:
        """Note ``model``'s parameters and buffers (not activations) and hook its modules."""
        self.trace.param_bytes += self.numbering.add_params((*model.parameters(), *model.buffers()))
        for p in model.parameters():
            if p.requires_grad:
                self.context.add_hook(p.register_post_accumulate_grad_hook(self._grad_accumulated))
        self.context.attach(model, blocks)

    def note_model_inputs(self, inputs: tuple[Any, ...]) -> None:
        """The model's positional arguments this step: its tensors' storages are the inputs a
        rebuild may read (`Trace.model_inputs`)."""
        keys = {self._key(t) for t in inputs if isinstance(t, torch.Tensor)}
        self.trace.model_inputs = {k for k in keys if k is not None}

    # ----- storages and values -------------------------------------------------------------------
    def _key(self, t: torch.Tensor) -> int | None:
        return self.numbering.key(t)

    def value_of(self, t: torch.Tensor) -> int | None:
        """The current value of ``t``'s storage (`ValueNumbering.value_of`)."""
        return self.numbering.value_of(t)

    # ----- hooks -------------------------------------------------------------------------------
    def _grad_accumulated(self, p: torch.Tensor) -> None:
        """A parameter's gradient reached ``.grad``: its buffer was in use until now (the
        autograd node that made it may run further operators first)."""
        k = self._key(p.grad) if p.grad is not None else None
        if k is not None and self.trace.ops:
            self.trace.grad_accumulated[k] = len(self.trace.ops) - 1

    def remove_hooks(self) -> None:
        self.context.remove_hooks()

    def resolve_grad_fns(self) -> None:
        """Map the autograd nodes of the last forward outputs to their forward context."""
        self.context.resolve_grad_fns()

    def start_backward(self) -> None:
        self.resolve_grad_fns()
        if self.phase == 0 and self._aliases:
            self._note_released()
        # Still held when backward begins (by the caller, or by something the graph keeps):
        # watched through the backward pass (`_note_let_go_in_backward`).
        preexisting = self.numbering.preexisting
        self._held_into_backward = {k: n for k, n in self._aliases.items() if k not in preexisting}
        self._aliases.clear()
        self.phase = 1

    # ----- saved-tensor hooks --------------------------------------------------------------------
    def saved_hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: torch.Tensor) -> Any:
        v = self.value_of(t)
        if v is None:
            return t  # parameters and buffers are not activations
        if self.phase == 1 and v not in self._saved_values:
            self.trace.saved_first_in_backward.add(v)
        self._saved_values.add(v)
        self.trace.saved.append(v)
        with disable_current_modes():
            alias = t.detach()  # a tensor of our own: the step's references to t stay countable
        self._saved_tensors.append(alias)
        k = self._key(t)
        if k is not None and k not in self.trace.released_after:
            self._aliases[k] = self._aliases.get(k, 0) + 1
            if k in self._held_into_backward:  # saved again in backward: one alias more
                self._held_into_backward[k] += 1
        handle = _Handle(len(self._saved_tensors) - 1)
        weakref.finalize(handle, self._let_go, len(self.trace.saved) - 1)
        return handle

    def _let_go(self, pack: int) -> None:
        """Autograd dropped what pack ``pack`` returned: `Trace.let_go_after`."""
        if self.watch_frees and self.phase == 1 and self.trace.ops:
            self.trace.let_go_after[pack] = len(self.trace.ops) - 1

    def _watch(self, t: torch.Tensor) -> None:
        """Note in `Trace.freed_after` when ``t``'s (new) storage is freed during the step."""
        k = self._key(t)
        if k is not None and k not in self._watched:
            self._watched.add(k)
            weakref.finalize(t.untyped_storage(), self._storage_freed, k)

    def _storage_freed(self, k: int) -> None:
        if self.watch_frees:
            self.trace.freed_after[k] = len(self.trace.ops) - 1

    def _note_released(self) -> None:
        """Saved storages nothing but our aliases holds any more were released by the step
        after the last recorded operator."""
        self._note_unheld(self._aliases, self.trace.released_after)

    def _note_unheld(self, watched: dict[int, int], into: dict[int, int]) -> None:
        """The storages of ``watched`` (storage key -> our aliases of it) that nothing but
        those aliases holds now: noted in ``into`` at the last recorded operator, and no longer
        watched."""
        after = len(self.trace.ops) - 1
        for k, n in list(watched.items()):
            # +1: the storage's Python object, which PyTorch keeps while the storage lives.
            ref = self.numbering.ref(k)
            if ref is not None and storage_use_count(ref) <= n + 1:
                into[k] = after
                del watched[k]

    def end_backward(self) -> None:
        """The backward pass returned: saved storages still held into it are held past it (by
        the graph the step's loss keeps, as a reentrant checkpoint's function, or by a forward
        hook of the caller's): let go after the last operator, for the profile."""
        self._note_let_go_in_backward()
        last = len(self.trace.ops) - 1
        for k in self._held_into_backward:
            self.trace.let_go_in_backward[k] = last
        self._held_into_backward.clear()

    def _note_let_go_in_backward(self) -> None:
        """Saved storages held into the backward pass whose only references are our aliases
        now were let go by their holder after the last recorded operator
        (`Trace.let_go_in_backward`)."""
        self._note_unheld(self._held_into_backward, self.trace.let_go_in_backward)

    def _unpack(self, h: Any) -> torch.Tensor:
        if not isinstance(h, _Handle):
            return h
        v = self.trace.saved[h.index]
        self.trace.unpacked_before.append((v, len(self.trace.ops)))
        self.trace.unpacked_by.append(_node_key())
        return self._saved_tensors[h.index]

    def release(self) -> None:
        """Drop every reference to the step's tensors and storages; the trace stays."""
        self.watch_frees = False  # what the end of the step frees is not the step's doing
        self._saved_tensors.clear()
        self._aliases.clear()
        self._held_into_backward.clear()
        self.context.release()
        self.numbering.release()

    # ----- the dispatch mode ---------------------------------------------------------------------
    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.phase == 0:
            self.resolve_grad_fns()
            if self._aliases:
                self._note_released()
            ctx = self.context.forward_context()
        else:
            if self._held_into_backward:
                self._note_let_go_in_backward()
            ctx = self.context.backward_context()
        cuda = self.timing and any(t.is_cuda for t in tensors((args, kwargs)))
        elapsed = 0.0

        def run(func: Any, args: Any, kwargs: Any) -> Any:
            nonlocal elapsed
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = func(*args, **kwargs)
            if cuda or (self.timing and any(t.is_cuda for t in tensors(out))):
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            return out

        index = len(self.trace.ops)
        out, call = number_call(self.numbering, func, args, kwargs, run, index)
        inputs, mutated, outputs, fresh = call.inputs, call.mutated, call.outputs, call.fresh
        if self.phase == 0:
            self.context.note_outputs((*outputs, *mutated), ctx)
        if not mutated and not fresh:
            return out  # a view or an alias: no kernel, no new value
        if self.watch_frees:
            for t in fresh:
                self._watch(t)
        if call.writes is None:
            return out  # a bare allocation
        aten = func.overloadpacket.__name__
        bound, reads, writes = call.bound, call.reads, call.writes
        touched: dict[int, int] = {}
        for t in (*inputs, *outputs):
            k = self._key(t)
            if k is not None and not self.numbering.is_param(k):
                touched[k] = int(t.untyped_storage().nbytes())
        # Bytes moved: every input read once, every written tensor (fresh or in place) once more.
        moved = sum(_extent_bytes(t) for t in _unique(inputs))
        moved += sum(_extent_bytes(t) for t in _unique([*mutated, *fresh]))
        module, block, in_block = ctx
        self.trace.ops.append(
            OpRecord(
                aten=aten,
                phase=self.phase,
                module=module,
                block=block,
                in_block=in_block,
                kind=op_kind(aten),
                reads=sorted(set(reads)),
                writes=writes,
                touched=sorted(touched.items()),
                flops=_flops(func, aten, bound, args, kwargs, out),
                bytes_moved=float(moved),
                measured_s=elapsed,
                node=_node_key() if self.phase == 1 else -1,
                task=current_graph_task() if self.phase == 1 else -1,
            )
        )
        return out


def _node_key() -> int:
    """The sequence number of the autograd node running now; -1 outside any node."""
    return current_node_key()


def _unique(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _shape(x: Any) -> tuple[int, ...] | None:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else None


def _attention_flops(aten: str, bound: dict[str, Any]) -> float | None:
    """FLOPs of a scaled-dot-product attention kernel, halved when causal (the kernel skips the
    masked half, as FlashAttention does). None when the arguments are not the expected ones."""
    q, k, v = (_shape(bound.get(n)) for n in ("query", "key", "value"))
    if q is None or k is None or v is None or not (len(q) == len(k) == len(v) == 4):
        return None
    if not aten.startswith("_scaled_dot_product"):
        # The lower-level kernels take (batch, seq, heads, dim).
        q, k, v = ((s[0], s[2], s[1], s[3]) for s in (q, k, v))
    if "backward" in aten:
        g = _shape(bound.get("grad_out")) or _shape(bound.get("grad_out_"))
        g = g if g is not None and len(g) == 4 else q[:3] + v[3:]
        if not aten.startswith("_scaled_dot_product"):
            g = (g[0], g[2], g[1], g[3])
        flops = float(flop_counter.sdpa_backward_flop_count(g, q, k, v))
    else:
        flops = float(flop_counter.sdpa_flop_count(q, k, v))
    return flops / 2 if bound.get("is_causal") else flops


def _flops(func: Any, aten: str, bound: dict[str, Any], args: Any, kwargs: Any, out: Any) -> float:
    if op_kind(aten) == "attention":
        f = _attention_flops(aten, bound)
        if f is not None:
            return f
    formula = flop_counter.flop_registry.get(func.overloadpacket)
    if formula is None:
        return 0.0
    try:
        return float(formula(*args, **kwargs, out_val=out))
    except Exception:  # noqa: BLE001 - a formula that rejects odd arguments costs no FLOPs
        return 0.0
