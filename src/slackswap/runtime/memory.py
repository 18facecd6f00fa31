"""Measure a step's activation memory independently of the runtime: live output storages.

`StorageTracker` is a ``TorchDispatchMode`` that counts, in bytes, every storage an operator
allocates while it is active (outputs whose storage is not one of the operator's inputs), and a
``weakref.finalize`` on each such storage (PyTorch preserves a storage's Python object for the
storage's whole life, so the finalizer runs exactly when the memory is freed) takes it off
again. ``peak_bytes`` is the highest sum seen.

Accounting and limits (what the figure is, and is not):
- Counted: every storage an ATen operator allocates under the mode (forward outputs, saved
  tensors, temporaries the operator returns, gradients, tensors rebuilt or fetched back by the
  runtime), by its whole ``nbytes``, on every device (on a CPU-only machine host and device
  are one memory; copies the runtime keeps on the host are made with the modes disabled, so
  they are not counted, as host memory is not device memory).
- Not counted: storages that existed before the mode was entered (parameters, buffers, the
  model inputs), scratch memory inside a kernel that no returned tensor owns, allocator
  caching and fragmentation.
- Parameter gradients: a gradient stops counting once autograd has accumulated it into a
  parameter's ``.grad`` (it is model state from then on, like the parameter; the simulator
  counts gradient buffers only while the operator that makes them runs). Pass ``params``.
- Timing: a storage counts from the end of the operator that made it until its last Python
  reference dies, so the figure follows Python's reference lifetimes, not the plan's model.

On CUDA, `cuda_peak_bytes` also reads the caching allocator's own counter
(``torch.cuda.max_memory_allocated`` above what was allocated at entry): it includes the
parameter gradients and the allocator's rounding, so it is reported beside, not instead of,
the tracker's figure.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch

from slackswap.torchstep.torchapi import TorchDispatchMode, tree_flatten


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def _storage(t: torch.Tensor) -> Any:
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


class StorageTracker(TorchDispatchMode):
    """Live bytes of the storages operators allocate while active; ``peak_bytes`` the highest.

    Use ``with StorageTracker(params=model.parameters()) as tr: step()``; then read
    ``tr.peak_bytes`` and ``tr.live_bytes`` (bytes still held at exit).
    """

    def __init__(self, params: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0
        self.allocated_bytes = 0  # every storage counted, freed or not
        self._live: dict[int, int] = {}  # id(storage object) -> bytes
        self._grad_hooks = [
            p.register_post_accumulate_grad_hook(self._grad_accumulated)
            for p in params
            if p.requires_grad
        ]
        self._cuda_start = 0
        self.cuda_peak_bytes: int | None = None
        #: Set to a callable giving the instance index of the operator about to run (the
        #: runtime's `RunStats.op_index`) to get ``op_peak_bytes``: the highest live bytes seen
        #: while each operator index was current (for finding where two accountings differ).
        self.op_index: Any = None
        self.op_peak_bytes: dict[int, int] = {}
        #: The operator index current when ``peak_bytes`` was reached (with ``op_index``).
        self.peak_op: int | None = None

    def watch_params(self, params: Iterable[torch.Tensor]) -> None:
        """Take ``params`` as parameters too (a model known only once the step calls it)."""
        self._grad_hooks += [
            p.register_post_accumulate_grad_hook(self._grad_accumulated)
            for p in params
            if p.requires_grad
        ]

    def cuda_peak_now(self) -> int | None:
        """``torch.cuda.max_memory_allocated`` above what was allocated on entry, so far:
        includes kernel workspace and gradients the tracker does not count; None without CUDA."""
        if not torch.cuda.is_available():
            return None
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - self._cuda_start)

    def __enter__(self) -> StorageTracker:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._cuda_start = torch.cuda.memory_allocated()
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for h in self._grad_hooks:
            h.remove()
        self._grad_hooks.clear()
        self.cuda_peak_bytes = self.cuda_peak_now()

    def _freed(self, key: int) -> None:
        nbytes = self._live.pop(key, 0)
        self.live_bytes -= nbytes

    def _grad_accumulated(self, p: torch.Tensor) -> None:
        if p.grad is not None:
            s = _storage(p.grad)
            if s is not None:
                self._freed(id(s))

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {id(s) for s in map(_storage, _tensors((args, kwargs))) if s is not None}
        for t in _tensors(out):
            s = _storage(t)
            if s is None or id(s) in inputs or id(s) in self._live:
                continue
            nbytes = int(s.nbytes())
            self._live[id(s)] = nbytes
            weakref.finalize(s, self._freed, id(s))
            self.live_bytes += nbytes
            self.allocated_bytes += nbytes
            if self.live_bytes > self.peak_bytes:
                self.peak_bytes = self.live_bytes
                self.peak_op = self.op_index() if self.op_index is not None else None
            if self.op_index is not None:
                o = self.op_index()
                self.op_peak_bytes[o] = max(self.op_peak_bytes.get(o, 0), self.live_bytes)
        return out


class _StorageRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a storage that knows its key and bytes (for the callback)."""

    __slots__ = ("key", "nbytes")
    key: int
    nbytes: int


class SavedBytesTracker:
    """A fast step's own memory measure, with no dispatch mode: the live bytes of the storages
    its saved tensors hold, with the transient bytes the instance models for the operator the
    step is at. A storage counts from when the step first packs it (or copies it back, or
    rebuilds it) until Python frees it: a weak reference's callback on the storage, whose
    Python object PyTorch keeps exactly as long as the storage. ``peak_bytes`` the highest of
    live bytes plus the operator's transient bytes seen when a storage is counted, at
    ``peak_op``, the instance operator the step was at then (the producer of a tensor packed,
    the first backward reader of one unpacked): the budget's own accounting (saved tensors and
    each operator's transient bytes), the saved tensors measured, the transients modelled.

    Not measured: the operators' other outputs and temporaries as they really are (the checked
    path's `StorageTracker` measures those), parameters and buffers, what
    ``torch.utils.checkpoint`` recomputes inside its own hooks.
    """

    def __init__(self, transient: list[int]) -> None:
        #: Per instance operator, its transient bytes in the instance's memory model (what the
        #: operator allocates beside the saved tensors: workspace, gradient buffers).
        self.transient = transient
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_op = -1
        self._alive: dict[int, _StorageRef] = {}
        self._on_gone = self._gone  # bound once: every storage counted gets it as a callback

    def add(self, storage: Any, nbytes: int, op: int) -> weakref.ref[Any]:
        """Count ``storage`` (``nbytes``) from now, at operator ``op``; a weak reference to it
        (dead once the storage is freed)."""
        key = id(storage)
        alive = self._alive
        ref = alive.get(key)
        if ref is not None:
            return ref
        ref = alive[key] = _StorageRef(storage, self._on_gone)
        ref.key = key
        ref.nbytes = nbytes
        live = self.live_bytes + nbytes
        self.live_bytes = live
        live += self.transient[op]
        if live > self.peak_bytes:
            self.peak_bytes = live
            self.peak_op = op
        return ref

    def _gone(self, ref: _StorageRef) -> None:
        if self._alive.get(ref.key) is ref:
            del self._alive[ref.key]
            self.live_bytes -= ref.nbytes
