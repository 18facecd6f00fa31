"""The first step of a plan in a training loop: what it learns (each saved tensor's pack, in
order, and the block that packed it), and from that, how later steps run: which blocks run
under ``torch.utils.checkpoint``, which recomputed tensors are replayed, or why every step runs
the checked path."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from slackswap.plan import KEEP, RECOMP, Plan
from slackswap.runtime.observer import StepObserver
from slackswap.runtime.records import rng_state, tensors_of
from slackswap.runtime.training.replay import FirstStepRecords, Replay, replay_of
from slackswap.torchstep.torchapi import tree_flatten


@dataclass(frozen=True)
class Pack:
    """One pack of the first step: the plan entry (-1: not a planned tensor), what is checked,
    the block whose forward packed it (-1: outside every block), and whether the tensor was
    contiguous from the start of its storage (``whole``: then, with its shape, dtype and
    storage size, it is the whole storage as one dense tensor). ``earlier``: the tensor held an
    earlier value of the entry's storage, which an in-place update (of another slice, say: a
    GRU cell's gates) changes before the step saves the entry itself (`StepObserver.packed`):
    not the entry's own first pack, which is where its bytes are copied out."""

    entry: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    block: int
    whole: bool = False
    earlier: bool = False


def storage_nbytes(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return -1  # sparse or other storage-less tensors: checked by shape and dtype only


def _whole(t: torch.Tensor, nbytes: int) -> bool:
    """``t`` is its whole storage (``nbytes``) as one contiguous tensor."""
    return (
        nbytes >= 0
        and t.layout == torch.strided
        and t.is_contiguous()
        and t.storage_offset() == 0
        and t.numel() * t.element_size() == nbytes
    )


def _module_of(op_name: str) -> str:
    """The module path of a forward operator name such as ``blocks.0.norm1/native_layer_norm``."""
    return op_name.rsplit("/", 1)[0] if "/" in op_name else ""


def _inside(path: str, block: str) -> bool:
    return path == block or path.startswith(block + ".")


def input_signature(args: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (tuple(x.shape), x.dtype) for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)
    ]


@dataclass
class Learned:
    """What the first step of a plan taught: the packs a fast step must see, in order, and the
    blocks it runs under ``torch.utils.checkpoint``."""

    packs: list[Pack]
    checkpointed: list[int]
    expected: list[Pack]
    actions: list[int]
    inputs: list[tuple[Any, ...]] | None
    reason: str = ""
    replay: Replay | None = None
    #: Entries whose storage the step also saved unplanned (autograd holds it itself).
    shared: frozenset[int] = frozenset()
    #: Entries a checkpoint's closure held: a reentrant one saved them again after their last
    #: backward reader; a non-reentrant one let them go during the backward pass (the checked
    #: path's `PlanExecutor.resaved_after_release`, `PlanExecutor.freed_in_backward`).
    closure_held: frozenset[int] = frozenset()
    #: What a fast step does per pack (`fast.pack_program`): made by the first fast step.
    program: list[tuple[Any, ...]] | None = None
    #: Per plan entry, the view its copy back or rebuild is made in (`fast.whole_views`).
    whole: list[Any] | None = None
    #: Per plan entry, (action, bytes, name) as Python values, for a fast step's entries.
    entry_fields: list[tuple[int, int, str]] | None = None
    #: Per recomputed entry with a whole view, whether its rebuild came out as that view (its
    #: operator, run on the same views of the same shapes, makes the same layout each step):
    #: seen at the first fast step's rebuild, checked again only with `CHECK_FAST_STATES`.
    rebuilt_whole: dict[int, bool] = field(default_factory=dict)


class FirstStepObserver(StepObserver):
    """Watches the checked first step (`slackswap.runtime.apply`, ``observer=``): notes each
    pack of the step, in order, with the block that made it; which random operators drew
    nothing or drew from the RNG state at the start of their module call; and, when the step
    closes, the operator records a fast step replays (`FirstStepRecords`)."""

    def __init__(self, block_now: list[int], calls: ModuleCalls):
        self.packs: list[Pack] = []
        self.block_now = block_now
        self.calls = calls
        self.rng_free: set[int] = set()
        self.rng_at: dict[int, tuple[str, int]] = {}
        self.rng_after_pack: dict[int, int] = {}
        # The RNG state when the step last packed a tensor (`rng_state`), for the random
        # operators that start from it.
        self._rng_at_pack: Any = None
        self.records: FirstStepRecords | None = None
        #: Entries whose storage the step also saved unplanned (autograd holds it itself).
        self.shared: frozenset[int] = frozenset()
        #: Entries a checkpoint's closure held (`Learned.closure_held`).
        self.closure_held: frozenset[int] = frozenset()

    def before_forward_op(self, func: Any, args: Any, kwargs: Any) -> Any:
        # An operator tagged random that drew nothing (attention with dropout_p = 0) can be
        # replayed without its RNG state: noted when its generators' state did not move.
        if torch.Tag.nondeterministic_seeded not in func.tags:
            return None
        return rng_state(tensors_of((args, kwargs)))

    def after_forward_op(self, token: Any, index: int, func: Any, args: Any, kwargs: Any) -> None:
        if token is None:
            return
        after = rng_state(tensors_of((args, kwargs)))
        if _same_rng(token, after):
            self.rng_free.add(index)
        elif self.calls.stack:
            # Drawn: a fast step can still replay it when the RNG state it started from is the
            # one at the start of the module call it ran in (a dropout module's bernoulli_).
            path, call, state = self.calls.stack[-1]
            if _same_rng(token, state):
                self.rng_at[index] = (path, call)
                return
        # Else a fast step notes the state where it packs the tensor packed last before the
        # operator, when that is the state it drew from (no random operator drew in between).
        at_pack = self._rng_at_pack
        if at_pack is not None and _same_rng(token, at_pack):
            self.rng_after_pack[index] = len(self.packs) - 1

    def packed_earlier(self, t: Any, entry: int) -> None:
        self.packed(t, entry, earlier=True)

    def packed(self, t: Any, entry: int, earlier: bool = False) -> None:
        nbytes = storage_nbytes(t)
        self._rng_at_pack = rng_state([t])  # the checked first step alone pays for it
        self.packs.append(
            Pack(
                entry,
                tuple(t.shape),
                t.dtype,
                nbytes,
                self.block_now[0],
                _whole(t, nbytes),
                earlier,
            )
        )

    def closing(self, executor: Any) -> None:
        # The operator records outlive the step (a fast step replays them); the tensors go.
        rb = executor.rebuilder
        # Swapped and recomputed entries whose storage autograd holds itself: saved again
        # unplanned, or (another value of it, after an in-place update) kept.
        saved, entries = executor.saved_storages, executor.entries
        holds = executor.unplanned_storages | {
            k for i, k in saved.items() if entries[i].action == KEEP
        }
        self.shared = frozenset(
            i for i, k in saved.items() if entries[i].action != KEEP and k in holds
        )
        self.closure_held = frozenset(executor.resaved_after_release | executor.freed_in_backward)
        self.records = FirstStepRecords(
            executor.trace,
            dict(rb.records),
            dict(rb.allocs),
            dict(executor._entry_of_value),
            dict(rb.externals),
            set(self.rng_free),
            dict(self.rng_at),
            dict(self.rng_after_pack),
        )


def _same_rng(a: Any, b: Any) -> bool:
    """Whether RNG states ``a`` and ``b`` (`rng_state`) agree on the CPU and on every device
    ``a`` holds."""
    if not torch.equal(a[0], b[0]):
        return False
    theirs = dict(b[1])
    return all(d in theirs and torch.equal(s, theirs[d]) for d, s in a[1])


class ModuleCalls:
    """The module calls running (path, how many calls of it came before, RNG state at its
    start), innermost last, while `tracking`."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.stack: list[tuple[str, int, Any]] = []
        self.counts: dict[str, int] = {}

    @contextmanager
    def tracking(self) -> Iterator[None]:
        devices: list[torch.Tensor] = [t.data for t in self.model.parameters() if t.is_cuda][:1]
        handles = []
        for path, mod in self.model.named_modules():

            def pre(m: Any, args: Any, path: str = path) -> None:
                k = self.counts.get(path, 0)
                self.counts[path] = k + 1
                self.stack.append((path, k, rng_state(devices)))

            def post(m: Any, args: Any, out: Any, path: str = path) -> None:
                if self.stack and self.stack[-1][0] == path:
                    self.stack.pop()

            handles.append(mod.register_forward_pre_hook(pre))
            handles.append(mod.register_forward_hook(post, always_call=True))
        try:
            yield
        finally:
            for h in handles:
                h.remove()


@contextmanager
def block_tracking(
    model: torch.nn.Module,
    blocks: list[str],
    current: list[int],
    given_objects: set[int] | None = None,
) -> Iterator[None]:
    """Keep ``current[0]`` at the index of the block whose forward runs (-1: none); add to
    ``given_objects`` each block a call of which is given an object other than tensors and
    plain values (`holds_objects`)."""
    handles = []
    for b, name in enumerate(blocks):
        m = model.get_submodule(name) if name else model

        def pre(mod: Any, args: Any, kwargs: Any, b: int = b) -> None:
            if current[0] < 0:
                current[0] = b
            if given_objects is not None and b not in given_objects:
                if holds_objects((args, kwargs)):
                    given_objects.add(b)

        def post(mod: Any, args: Any, out: Any, b: int = b) -> None:
            if current[0] == b:
                current[0] = -1

        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(m.register_forward_hook(post, always_call=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


#: Values a forward cannot change in place: what a block may be given and still be run again
#: by ``torch.utils.checkpoint`` (`holds_objects`).
_PLAIN = (torch.Tensor, bool, int, float, complex, str, bytes, torch.dtype, torch.device,
          torch.layout, torch.memory_format, Enum, slice, type(None), type(Ellipsis))  # fmt: skip


def holds_objects(args: Any) -> bool:
    """Whether ``args`` (a call's arguments, looked into as a pytree) hold an object that is no
    tensor or plain value: a key-value cache, say, which a block's forward updates in place. Run
    again under ``torch.utils.checkpoint``, such a block would update it a second time (the
    cache's keys twice over: Hugging Face's Falcon, BLOOM and GPT-Neo then fail on shapes)."""
    leaves, _ = tree_flatten(args)
    return any(not isinstance(x, _PLAIN) for x in leaves)


def learn(
    plan: Plan,
    model: torch.nn.Module,
    blocks: list[str],
    packs: list[Pack],
    inputs: list[tuple[Any, ...]] | None,
    kept: FirstStepRecords | None,
    input_tensors: list[torch.Tensor],
    *,
    shared: frozenset[int] = frozenset(),
    given_objects: frozenset[int] = frozenset(),
    closure_held: frozenset[int] = frozenset(),
) -> Learned:
    """Which blocks a fast step checkpoints, what it must see, or why it cannot run.
    ``given_objects``: blocks a call of which was given an object (`holds_objects`): never run
    under ``torch.utils.checkpoint``, their recomputed tensors are replayed."""
    inst = plan.instance
    actions = [int(a) for a in plan.actions]
    produced_in: dict[int, str] = {
        i: _module_of(inst.op_name[int(inst.tensor_producer[i])]) for i in range(inst.n_tensors)
    }
    by_block: dict[int, list[Pack]] = {}
    for p in packs:
        if p.block >= 0:
            by_block.setdefault(p.block, []).append(p)
    # A block's recomputed tensor that a later operator outside it saves (its output, say), or
    # that the rebuild of a recomputed tensor made outside it reads (its output read through
    # views, as Swin's patch merging reads it), is one torch.utils.checkpoint does not make
    # again where it is needed: such a block's tensors are replayed.
    leaves = {
        b
        for p in packs
        if p.entry >= 0 and actions[p.entry] == RECOMP
        for b, name in enumerate(blocks)
        if _inside(produced_in[p.entry], name)
        and not (p.block >= 0 and _inside(blocks[p.block], name))
    }
    leaves |= {
        b
        for v, reads in enumerate(inst.tensor_rebuild_inputs)
        if actions[v] == RECOMP
        for u in reads
        if actions[u] == RECOMP
        for b, name in enumerate(blocks)
        if _inside(produced_in[u], name) and not _inside(produced_in[v], name)
    }
    checkpointed: list[int] = []
    for b, ps in sorted(by_block.items()):
        inside = [p for p in ps if p.entry >= 0 and _inside(produced_in[p.entry], blocks[b])]
        outside = [p for p in ps if p.entry >= 0 and not _inside(produced_in[p.entry], blocks[b])]
        if (
            inside
            and b not in given_objects
            and b not in leaves
            and all(actions[p.entry] == RECOMP for p in inside)
            and all(actions[p.entry] == KEEP for p in outside)
        ):
            checkpointed.append(b)

    # What a checkpointed block makes again; a kept tensor from outside it (its input) is the
    # forward's own, wherever else it is saved.
    covered = {
        p.entry
        for p in packs
        if p.entry >= 0 and actions[p.entry] == RECOMP and p.block in checkpointed
    }
    expected = [p for p in packs if p.block not in checkpointed]
    at = {id(p): k for k, p in enumerate(expected)}
    pack_position = {j: at[id(p)] for j, p in enumerate(packs) if id(p) in at}
    seen = {p.entry for p in expected if p.entry >= 0}
    reason = ""
    for p in packs:
        if p.entry >= 0 and p.entry in covered and p.block not in checkpointed:
            reason = reason or (
                f"recomputed tensor {inst.tensor_name[p.entry]!r} is also saved outside its "
                "block: every step runs the checked path"
            )
    replayed = sorted({i for i in seen if actions[i] == RECOMP and i not in covered})
    replay = None
    if replayed and not reason:
        replay, reason = replay_of(inst, model, actions, replayed, seen, covered, kept,
                                   input_tensors, pack_position)  # fmt: skip
    return Learned(packs, checkpointed, expected, actions, inputs, reason, replay, shared=shared,
                   closure_held=closure_held)  # fmt: skip
