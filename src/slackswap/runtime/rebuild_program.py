"""A rebuild's operator chain walked into a flat list of steps (`RebuildProgram`), then run.

To rebuild a recomputed tensor, `compile_rebuild` walks the recorded operators that produced
it, in the order the rebuild needs them, and writes down what to do: materialise a saved tensor
that is a rebuild input (fetched back, rebuilt on its own, or resident), take a model input,
allocate a buffer, run a recorded operator with its varying arguments filled in from earlier
steps, drop an intermediate after its last reader (as the simulator's workspace assumes).
`RebuildProgram.run` then does only those steps, as one Python function written for them
(`program_source`). A fast step of the training path keeps each program for the plan's later
steps (the same plan, the same step): the walk's one assumption, which saved tensors are
rebuild inputs (`is_rebuild_input`), is checked at each run (`RebuildProgram.holds`), and where
it changed the chain is walked again.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from keyword import iskeyword
from types import CodeType, FunctionType
from typing import Any, Protocol

import torch

# An import marked "(written)" is read only by the functions `program_source` writes, which
# run with this module's globals.
from slackswap.plan import KEEP  # noqa: F401 (written)
from slackswap.runtime.entry import Entry, EntryState, EntryTable
from slackswap.runtime.records import (
    OpRecord,
    Ref,
    is_view,  # noqa: F401 (written)
    set_rng,  # noqa: F401 (written)
    storage_of,  # noqa: F401 (written)
    tensors_of,
    view,
)
from slackswap.torchstep.torchapi import (
    autocast_on,
    below_autocast,
    below_autograd,
    set_grad_mode,  # noqa: F401 (written)
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
    @property
    def whole(self) -> list[Any] | None: ...


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
#: and the rebuild did not make it); a clone of the buffer itself (batch-norm statistics); a
#: rebuild input whose recorded view is its entry's whole view (`RecordedStep.whole`): its
#: `Entry.tensor`, which is that view whenever it is set, else a view over its storage.
AS_VIEW, SCRATCH, BUFFER_CLONE, WHOLE_INPUT = range(4)

_RELEASED = EntryState.RELEASED


class RebuildProgram:
    """The steps of one rebuild, in the order `Rebuilder.rebuild` takes them.

    ``steps``: tuples whose first item is the kind (`INPUT`, ...), which hand values on in
    numbered slots; ``target`` the slot of the rebuilt value; ``assumed``: per saved tensor the
    walk met, (its entry's index, whether it was a rebuild input). Entries are named by index:
    each step has its own.

    The steps are run as one Python function written for them (`program_source`): each slot a
    local variable, each operator's call spelled out with its constant arguments in place, so a
    rebuild runs no loop over steps, fills or writes of its own (its Python is the hot path of
    a fast step's unpack). Programs of the same shape share the function;
    ``program_source(program.steps, program.target)[0]`` shows it."""

    __slots__ = ("steps", "target", "assumed", "_fn", "_consts")

    def __init__(self, steps: list[tuple[Any, ...]], target: int, assumed: list[Any]):
        self.steps = steps
        self.target = target
        self.assumed = assumed
        source, consts = program_source(steps, target)
        self._fn = _function_for(source)
        self._consts = tuple(consts)

    def holds(self, entries: EntryTable) -> bool:
        """Every saved tensor the walk met is a rebuild input now exactly when it was then
        (``entries``: this step's)."""
        for i, was in self.assumed:  # a loop, not all(...): this runs once per rebuild
            e = entries[i]
            if (e.state is not _RELEASED or e.device is not None) is not was:  # _takes_as_it_is
                return False
        return True

    def run(self, rb: RecordedStep) -> Any:
        """Run the steps (operators below autograd, each in its recorded grad mode and, when
        random, from today's RNG state of its record); the rebuilt tensor. The operators were
        recorded as they ran, after ``torch.autocast`` cast them: with autocast on now (a
        backward inside an autocast region), they run below it, not cast a second time."""
        grad_now = torch.is_grad_enabled()
        if autocast_on():
            with below_autocast(), below_autograd():
                return self._fn(self._consts, rb, grad_now)
        with below_autograd():
            return self._fn(self._consts, rb, grad_now)


def program_source(steps: list[tuple[Any, ...]], target: int) -> tuple[str, list[Any]]:
    """The Python source of the function that runs ``steps`` (``run(K, rb, grad_now)``), and
    its constants ``K`` (entry indices, operator indices, recorded views, the calls' constant
    arguments): the source names slots and argument positions only, so programs of one shape
    have one source."""
    consts: list[Any] = []

    def k(obj: Any) -> str:
        consts.append(obj)
        return f"K[{len(consts) - 1}]"

    kinds = {s[0] for s in steps}
    body: list[str] = []
    if INPUT in kinds:
        body += ["entries = rb.entries", "materialise = rb.materialise"]
    if OP in kinds:
        body.append("records = rb.records")
    for step in steps:
        kind = step[0]
        if kind == INPUT:
            _, slot, entry = step
            body += [
                f"e = entries[{k(entry)}]",
                "if e.device is None and e.action == KEEP:",
                "    _not_resident(e)",
                "x = materialise(e)",
                "if e.event is not None:",
                "    _wait(e.event)",
                f"s{slot} = x if e.tensor is None else e.tensor",
            ]
        elif kind == EXTERNAL_INPUT:
            _, slot, value = step
            body += [
                f"s{slot} = rb.externals.get({k(value)})",
                f"if s{slot} is None:",
                f"    _no_input({k(value)})",
            ]
        elif kind == ALLOC:
            _, slot, nbytes, device = step
            body.append(
                f"s{slot} = torch.empty({k(nbytes)}, dtype=torch.uint8, device={k(device)})"
            )
        else:
            body += _op_source(step, k)
    body.append(f"return s{target}")
    source = "def run(K, rb, grad_now):\n" + "".join(f"    {line}\n" for line in body)
    return source, consts


def _op_source(step: tuple[Any, ...], k: Callable[[Any], str]) -> list[str]:
    """The lines of one `OP` step: ``(OP, operator, call, fills, writes, drops, returns)``: its
    varying arguments filled (`AS_VIEW`, `SCRATCH`, `BUFFER_CLONE`, `WHOLE_INPUT`), its call in
    the recorded grad mode and RNG state, the values it writes into their slots (``returns``:
    how many tensors it returns when its schema returns tensors alone, else None), the slots
    its last reads free."""
    _, p, call, fills, writes, drops, returns = step
    lines = [f"rec = records[{k(p)}]"]
    if any(how == BUFFER_CLONE for *_, how in fills) or any(not out for _, out, _ in writes):
        lines.append("flat = rec.args[1]")
    filled: dict[int, str] = {}
    for i, slot, ref, how in fills:
        name = filled[i] = f"a{i}"
        if how == WHOLE_INPUT:
            lines += [
                f"h = s{slot}",
                f"{name} = h if h.__class__ is _Tensor else _view_as(storage_of(h), {k(ref)})",
            ]
        elif how == AS_VIEW:
            r = k(ref)
            lines += [
                f"h = s{slot}",
                f"{name} = h if h.__class__ is _Tensor and is_view(h, {r}) else "
                f"_view_as(storage_of(h), {r})",
            ]
        elif how == SCRATCH:
            lines.append(f"{name} = _view_as(storage_of(s{slot}).clone(), {k(ref)})")
        else:
            lines.append(f"{name} = flat[{i}].clone()")
    lines += [
        "rng = rec.rng",
        "if rng is not None:",
        "    saved = set_rng(rng)",
        "grad = rec.grad",
        "if grad != grad_now:",
        "    set_grad_mode(grad)",
        "try:",
        f"    out = {_call_source(call, filled, k)}",
        "finally:",
        "    if grad != grad_now:",
        "        set_grad_mode(grad_now)",
        "    if rng is not None:",
        "        set_rng(saved)",
    ]
    from_output = [kk for _, out, kk in writes if out]
    # Its schema returns ``returns`` tensors: the output is that tensor, or their tuple.
    known = bool(from_output) and returns is not None and max(from_output) < returns
    if known and returns > 1:
        lines.append("o = out")
    elif from_output and not known:
        lines += [
            "o = (out,) if out.__class__ is _Tensor else _outputs(out)",
            f"if len(o) <= {max(from_output)}:",
            f"    _too_few(rec, o, {max(from_output) + 1})",
        ]
    for slot, out, kk in writes:
        if out:
            lines.append(f"s{slot} = out" if known and returns == 1 else f"s{slot} = o[{kk}]")
        else:
            lines.append(f"s{slot} = {filled.get(kk, f'flat[{kk}]')}")
    lines += [f"s{slot} = None" for slot in drops]
    return lines


def _call_source(call: Any, filled: dict[int, str], k: Callable[[Any], str]) -> str:
    """The operator's call: its recorded arguments with the filled ones in their places (each
    varying argument a top-level one, as for most operators), else through `Call.fill`."""
    if call.places is None:
        real = "{" + ", ".join(f"{i}: {name}" for i, name in filled.items()) + "}"
        return f"_call_filled(rec.func, {k(call)}, rec.args[1], {real})"
    positional = {at: filled[i] for i, is_pos, at in call.places if is_pos}
    by_keyword = {at: filled[i] for i, is_pos, at in call.places if not is_pos}
    args = [positional.get(n) or k(a) for n, a in enumerate(call.args)]
    kwargs = {key: by_keyword.get(key) or k(a) for key, a in call.kwargs.items()}
    named = [f"{key}={v}" for key, v in kwargs.items() if _plain_name(key)]
    odd = [f"{key!r}: {v}" for key, v in kwargs.items() if not _plain_name(key)]
    if odd:
        named.append("**{" + ", ".join(odd) + "}")
    return f"rec.func({', '.join(args + named)})"


def _plain_name(key: str) -> bool:
    return key.isidentifier() and not iskeyword(key)


def _tensor_returns(func: Any) -> int | None:
    """How many tensors operator ``func`` returns when its schema returns tensors alone (no
    list, optional or number), else None (also for a callable with no schema)."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns:
        return None
    if all(isinstance(r.type, torch.TensorType) for r in schema.returns):
        return len(schema.returns)
    return None


def _same_view(x: Ref, view_of: tuple[Any, int, Any, Any]) -> bool:
    """Recorded argument ``x`` is the view ``view_of`` (dtype, offset, shape, strides)."""
    dtype, offset, size, stride = view_of
    return (
        x.dtype == dtype
        and x.offset == offset
        and tuple(x.size) == tuple(size)
        and tuple(x.stride) == tuple(stride)
    )


def _not_resident(e: Entry) -> None:
    raise RuntimeError(f"kept tensor {e.name!r} not resident")


def _no_input(value: int) -> None:
    raise RuntimeError(f"value {value} cannot be rebuilt (no model input)")


def _too_few(rec: Any, outs: Any, want: int) -> None:
    raise RuntimeError(
        f"rebuilding {rec.func}: it returned {len(outs)} tensors, its recorded call {want} or more"
    )


def _wait(event: Any) -> None:
    torch.cuda.current_stream().wait_event(event)


def _view_as(storage: Any, ref: Ref) -> torch.Tensor:
    return view(storage, ref.dtype, ref.offset, ref.size, ref.stride)


def _outputs(out: Any) -> Any:
    if out.__class__ is tuple and all(isinstance(t, torch.Tensor) for t in out):
        return out  # as tensors_of gives them, without flattening a pytree
    return tensors_of(out)


def _call_filled(func: Any, call: Any, flat: list[Any], real: dict[int, Any]) -> Any:
    args, kwargs = call.fill(flat, real)
    return func(*args, **kwargs)


_Tensor = torch.Tensor

#: Source -> its function (programs of one shape share one).
_FUNCTIONS: dict[str, Callable[..., Any]] = {}


def _function_for(source: str) -> Callable[..., Any]:
    """The function ``source`` defines, reading this module's globals (its helpers, and
    `set_rng` and `set_grad_mode` as they are when it runs). Its source is put where
    tracebacks look for lines (`linecache`), so an error inside a rebuild shows the written
    line it came from."""
    fn = _FUNCTIONS.get(source)
    if fn is None:
        filename = f"<slackswap rebuild program {len(_FUNCTIONS)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module = compile(source, filename, "exec")
        code = next(c for c in module.co_consts if isinstance(c, CodeType))
        fn = _FUNCTIONS[source] = FunctionType(code, globals(), "run")
    return fn


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
    whole = rb.whole
    whole_inputs: set[int] = set()  # the slots of inputs whose `Entry.tensor` is a whole view
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
                if whole is not None and whole[rb.entry_of_value[v]] is not None:
                    whole_inputs.add(inputs[v])
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
            if how == AS_VIEW and slot in whole_inputs:
                assert whole is not None
                if _same_view(x, whole[rb.entry_of_value[x.value]]):
                    how = WHOLE_INPUT
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
        returns = _tensor_returns(rec.func)
        steps.append((OP, p, call, tuple(fills), tuple(writes), tuple(drops), returns))

    target = compute(value)
    return RebuildProgram(steps, target, list(assumed.values()))
