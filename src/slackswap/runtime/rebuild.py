"""`Rebuilder`: record each forward operator's call, and rebuild a recomputed tensor from them.

During the forward pass each operator's call is kept as a template (`slackswap.runtime.records`):
its flattened arguments (pytree) with every activation replaced by the number of its value,
parameters, buffers and model inputs as themselves, and the RNG state it ran with when it is
random (``torch.Tag.nondeterministic_seeded``). When autograd first unpacks a recomputed tensor,
the chain of recorded operators that produced it is run again on its rebuild inputs
(`slackswap.runtime.rebuild_program`): inputs that are themselves recomputed are rebuilt first,
swapped ones fetched, and random operators run with their recorded RNG state, so dropout masks
come out identical (``torch.utils.checkpoint`` recomputes whole regions, not single tensors, so
only its idea of restoring the RNG state per random operator is borrowed). What an operator
writes is what its schema marks as written plus the arguments some operators update without a
mark (`UNMARKED_WRITES`): a resident saved tensor or a buffer a rebuild would write gets a
scratch copy, so the model's state is that of one step.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from slackswap.instance import Instance
from slackswap.runtime.entry import Entry, EntryTable, Residency
from slackswap.runtime.rebuild_program import RebuildProgram, compile_rebuild
from slackswap.runtime.records import (
    OpRecord,
    Ref,
    rng_state,
    tensors_of,
    written_arguments,
)
from slackswap.torchstep.torchapi import tree_flatten
from slackswap.torchstep.trace import EXTERNAL
from slackswap.torchstep.values import bind

__all__ = ["Numbering", "Rebuilder"]


class Numbering(Protocol):
    """The step's numbering of storages and values, as a `Rebuilder` reads it
    (`slackswap.torchstep.values.ValueNumbering` is one)."""

    def key(self, t: torch.Tensor) -> int | None: ...
    def is_param(self, k: int | None) -> bool: ...
    def value_of(self, t: torch.Tensor) -> int | None: ...
    def current(self, k: int | None) -> int | None: ...
    def producer(self, v: int) -> int: ...
    def storage(self, v: int) -> int: ...


class Rebuilder:
    """Records the step's forward operators and rebuilds recomputed saved tensors from them.

    ``numbering``: the step's numbering of storages and values, which the records use.
    ``materialise``: the device storage of a saved tensor, fetched back or rebuilt when not
    resident. ``quiet``: a context in which the executor lets operators through unnumbered
    (None: nothing to hide from, as in a fast step). ``programs``: where each rebuild's
    `RebuildProgram` is kept for the next (a fast step's, shared by the plan's steps, whose
    records, externals and allocations stay those of the step that filled it); None: each
    rebuild walks its chain (the checked path, whose records are each step's own).
    ``values``: per entry, the value its saved tensor is (None: read from the instance at the
    first rebuild; a fast step passes the plan's, read once for all its steps). ``whole``: per
    entry, the view (dtype, offset, shape, strides) its `Entry.tensor` is whenever it is set
    (a fast step's `whole_views`), or None: a rebuild reading an entry in that view takes the
    tensor as it is, with no check of its view; None (the checked path): every view is checked.
    """

    def __init__(
        self,
        numbering: Numbering,
        instance: Instance,
        entries: EntryTable,
        entry_of_value: dict[int, int],
        *,
        materialise: Callable[[Entry], Any],
        quiet: Callable[[], AbstractContextManager[None]] | None,
        programs: dict[int, RebuildProgram] | None = None,
        values: list[int] | None = None,
        whole: list[Any] | None = None,
    ):
        self.numbering = numbering
        self.instance = instance
        self.entries = entries
        self.entry_of_value = entry_of_value
        self.materialise = materialise
        self.quiet = quiet
        self.rebuilds = 0
        #: Forward operator index -> its recorded call (`before_call`, `remember`).
        self.records: dict[int, OpRecord] = {}
        #: Model inputs, by value: taken as they are by a rebuild.
        self.externals: dict[int, torch.Tensor] = {}
        #: Values of bare allocations -> (bytes, device): a rebuild makes a fresh buffer.
        self.allocs: dict[int, tuple[int, torch.device]] = {}
        self.programs = programs
        self._values = values
        self.whole = whole

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
            rng = rng_state(tensors_of((args, kwargs)))
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
                out.append(Ref(v, x) if v is not None else x)
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
        mutated = [i for i in sorted(mutated_set) if isinstance(flat[i], Ref)]
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
        self.records[index] = OpRecord(func, (spec, flat), mutated_set, rng, grad, writes)

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
        it (an output of the last operator, or an argument it updated), over ``e.device``. The
        chain is walked into a `RebuildProgram` (`compile_rebuild`) and that is run; with
        ``programs`` (a fast step's, shared by the plan's steps), it is walked again only where
        a saved tensor it met has become or stopped being a rebuild input."""
        if self._values is None:
            self._values = [int(v) for v in self.instance.meta["runtime_signature"]["values"]]
        value = self._values[e.index]
        programs = self.programs
        program = programs.get(value) if programs is not None else None
        if program is None or not program.holds(self.entries):
            program = compile_rebuild(self, value)
            if programs is not None:
                programs[value] = program
        e.move(Residency.REBUILDING)
        if self.quiet is None:
            tensor = program.run(self)
        else:
            with self.quiet():
                tensor = program.run(self)
        e.move(Residency.DEVICE, device=tensor.untyped_storage())
        self.rebuilds += 1
        return tensor
