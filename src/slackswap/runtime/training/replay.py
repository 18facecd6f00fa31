"""Recomputed tensors a fast step rebuilds outside checkpointed blocks: from the first step's
operator records (`slackswap.runtime.rebuild.Rebuilder`), with no dispatch mode."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from slackswap.runtime.rebuild import Rebuilder
from slackswap.runtime.records import rng_state


def storage_ptr(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return -1


@dataclass(frozen=True)
class FirstStepRecords:
    """What the checked first step leaves for a fast step's replay: its value numbering
    (``trace``), operator records and allocations by operator (`Rebuilder`), each saved
    tensor's entry by value, the external tensors by value, and the random operators that drew
    nothing (``rng_free``), drew from the RNG state at the start of a module call (``rng_at``:
    operator -> (module path, call)), or else from the state autograd's last pack before them
    saw (``rng_after_pack``: operator -> that pack's index in the step's packs: no random
    operator drew in between, as when a layer calls dropout twice)."""

    trace: Any
    records: dict[int, Any]
    allocs: dict[int, Any]
    entry_of_value: dict[int, int]
    externals: dict[int, Any]
    rng_free: set[int]
    rng_at: dict[int, tuple[str, int]]
    rng_after_pack: dict[int, int] = field(default_factory=dict)


@dataclass
class Replay:
    """What a fast step needs to rebuild recomputed tensors outside checkpointed blocks: the
    first step's operator records (`Rebuilder`), its value numbering, the model input each
    external value is (by position), and per recomputed tensor the saved tensors its rebuild
    reads (``deps``) and the reverse (``consumers``)."""

    trace: Any
    records: dict[int, Any]
    allocs: dict[int, Any]
    entry_of_value: dict[int, int]
    externals: dict[int, int]
    deps: dict[int, set[int]]
    consumers: dict[int, set[int]]
    buffers: list[torch.Tensor]
    random: dict[int, tuple[str, int]]  # random operator -> (module, call) it starts with
    #: A fast step's pack position -> the random operators that start from the RNG state at
    #: that pack (`FirstStepRecords.rng_after_pack`, on the fast step's pack order).
    random_after_pack: dict[int, list[int]] = field(default_factory=dict)
    #: Each rebuild's program, walked once for all steps (`Rebuilder.programs`).
    programs: dict[int, Any] = field(default_factory=dict)
    #: Per plan entry, the value its saved tensor is (`Rebuilder.values`), read once per plan.
    values: list[int] = field(default_factory=list)
    #: Tensors with no elements the model made outside its operators (a key-value cache's
    #: first, empty, tensor, ``torch.tensor([])``), by value: no data to go stale, so a rebuild
    #: takes the first step's as they are (with the model inputs, `Rebuilder.externals`).
    constants: dict[int, torch.Tensor] = field(default_factory=dict)


class _TraceOf:
    """The first step's numbering of values, as a fast step's `Rebuilder` reads it (it
    replays recorded operators, records none)."""

    def __init__(self, trace: Any):
        self.trace = trace

    def producer(self, v: int) -> int:
        return int(self.trace.values[v].producer)

    def storage(self, v: int) -> int:
        return int(self.trace.values[v].storage)

    def key(self, t: torch.Tensor) -> int | None:
        raise RuntimeError("a fast step's rebuilder records no operator")

    def is_param(self, k: int | None) -> bool:
        raise RuntimeError("a fast step's rebuilder records no operator")

    def value_of(self, t: torch.Tensor) -> int | None:
        raise RuntimeError("a fast step's rebuilder records no operator")

    def current(self, k: int | None) -> int | None:
        raise RuntimeError("a fast step's rebuilder records no operator")


def replay_of(
    inst: Any,
    model: torch.nn.Module,
    actions: list[int],
    replayed: list[int],
    seen: set[int],
    covered: set[int],
    kept: FirstStepRecords | None,
    input_tensors: list[torch.Tensor],
    pack_position: dict[int, int] | None = None,
) -> tuple[Replay | None, str]:
    """How a fast step rebuilds ``replayed`` from the first step's operator records, or why it
    cannot (a random operator, whose RNG state only a dispatch mode could capture each step;
    a tensor that is neither a model input, a parameter nor a saved tensor it sees).
    ``pack_position``: the first step's pack index -> its position in a fast step's pack order
    (packs inside checkpointed blocks have none)."""
    if kept is None:
        return None, "the first step kept no operator records"
    trace, records, allocs = kept.trace, kept.records, kept.allocs
    entry_of_value, externals = kept.entry_of_value, kept.externals
    rng_free, rng_at, rng_after = kept.rng_free, kept.rng_at, kept.rng_after_pack
    random: dict[int, tuple[str, int]] = {}
    after_pack: dict[int, list[int]] = {}
    positions = pack_position or {}
    ptrs = [x.untyped_storage().data_ptr() for x in input_tensors]
    ext_pos: dict[int, int] = {}
    for v, t in externals.items():
        ptr = t.untyped_storage().data_ptr()
        if ptr in ptrs:
            ext_pos[v] = ptrs.index(ptr)
    # Parameters and buffers (and views of them, such as a transposed weight) are updated in
    # place by an optimizer: the first step's tensors over their storages read today's values.
    persistent = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    # An empty tensor made outside the operators holds no data: the first step's serves all.
    constants = {v: t for v, t in externals.items() if v not in ext_pos and t.numel() == 0}
    buffers = {storage_ptr(b): b for b in model.buffers()}
    touched: dict[int, torch.Tensor] = {}
    deps: dict[int, set[int]] = {}
    used: set[int] = set()  # the operator records a replay runs: the only ones kept
    name = inst.tensor_name

    def walk(value: int, target: int, out: set[int], top: bool) -> str:
        i = entry_of_value.get(value)
        if i is not None and not top:
            if i in covered or i not in seen:
                return f"its rebuild reads {name[i]!r}, which a fast step does not see saved"
            out.add(i)
            return ""
        if value in externals:
            if value in ext_pos or value in constants:
                return ""
            t = externals[value]
            return (
                f"its rebuild reads a {str(t.dtype).replace('torch.', '')} tensor of shape "
                f"{list(t.shape)} the model makes outside its operators, and no input: "
                "a fast step cannot see it; made once, as a buffer of the module, it could"
            )
        if value in allocs:
            return ""
        p = trace.values[value].producer
        rec = records.get(p)
        if rec is None:
            return "no operator record makes it"
        used.add(p)
        if rec.rng is not None and p not in rng_free and p not in random:
            if p in rng_at:
                random[p] = rng_at[p]
            elif positions.get(rng_after.get(p, -1)) is not None:
                k = positions[rng_after[p]]
                if p not in after_pack.get(k, ()):
                    after_pack.setdefault(k, []).append(p)
            else:
                return (
                    f"its rebuild runs the random operator {rec.func} after another random "
                    "operator drew, with no saved tensor in between"
                )
        for x in rec.args[1]:
            if isinstance(x, torch.Tensor) and storage_ptr(x) not in persistent:
                return "its rebuild reads a tensor that is no input, parameter or buffer"
            if isinstance(x, torch.Tensor) and storage_ptr(x) in buffers:
                touched[storage_ptr(x)] = buffers[storage_ptr(x)]
            v = getattr(x, "value", None)
            if v is not None and not isinstance(x, torch.Tensor):
                why = walk(int(v), target, out, False)
                if why:
                    return why
        return ""

    values = inst.meta["runtime_signature"]["values"]
    for i in replayed:
        out: set[int] = set()
        why = walk(int(values[i]), i, out, True)
        if why:
            return None, (
                f"recomputed tensor {name[i]!r} cannot be rebuilt without a dispatch mode "
                f"({why}): every step runs the checked path"
            )
        deps[i] = out
    consumers: dict[int, set[int]] = {}
    for v, us in deps.items():
        for u in us:
            consumers.setdefault(u, set()).add(v)
    for v in list(externals):
        if v not in ext_pos:
            del externals[v]
    records = {p: records[p] for p in used}
    return Replay(_TraceOf(trace), records, allocs, entry_of_value, ext_pos, deps,
                  consumers, list(touched.values()), random,
                  random_after_pack=after_pack, values=[int(v) for v in values],
                  constants=constants), ""  # fmt: skip


@contextmanager
def capturing_rng(model: torch.nn.Module, rp: Replay, rb: Rebuilder) -> Iterator[None]:
    """At the start of each module call a random operator of a rebuild starts from, note the
    RNG state: that operator's replay (by ``rb``) runs from it (this step's dropout masks)."""
    wanted: dict[tuple[str, int], list[int]] = {}
    for p, at in rp.random.items():
        wanted.setdefault(at, []).append(p)
    counts: dict[str, int] = {}
    devices: list[torch.Tensor] = [t.data for t in model.parameters() if t.is_cuda][:1]
    handles = []
    for path in {path for path, _ in wanted}:
        mod = model.get_submodule(path) if path else model

        def pre(m: Any, args: Any, path: str = path) -> None:
            k = counts.get(path, 0)
            counts[path] = k + 1
            for p in wanted.get((path, k), ()):
                old = rp.records[p]
                rb.records[p] = old.with_rng(rng_state(devices))

        handles.append(mod.register_forward_pre_hook(pre))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
