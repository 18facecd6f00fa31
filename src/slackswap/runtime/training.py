"""`prepare` and `PlannedStep`: a plan run step after step in a training loop.

``planned = prepare(model, plan, "50%")`` once, then ``with planned.step(): ...`` around each
iteration's forward and backward. The first step is the checked path (`slackswap.runtime.apply`:
every operator numbered and matched to the profile by a dispatch mode), and it learns, in the
order autograd packs them, every saved tensor's shape, dtype, storage size, plan entry and the
block whose forward saved it. Later steps install ``torch.autograd.graph.saved_tensors_hooks``
and nothing else, no dispatch mode:

- a saved tensor is identified by its position in the pack order and checked against what the
  first step learned (shape, dtype, storage bytes); a different shape is a `ShapeChangeError`
  before the step's first operator when the model's inputs changed shape (or, with
  ``replan=True``, the step is profiled and solved again with the same solver and runs as the
  checked first step of the new plan);
- a kept tensor (and a parameter, or a value the plan does not cover) is handed back as is; a
  plan that keeps every tensor (no checkpointed block, no replay) installs no hook at all after
  the first step, since autograd's own handling is then the plan (the inputs' shapes are still
  checked);
- a swapped tensor's storage is copied to host memory when first packed (pinned, on a side
  stream, on CUDA) and back when autograd first unpacks it; on CUDA with a prefetching runtime
  the copies back are started ahead by the runtime's look-ahead rule on the plan's memory
  model, in deadline order, the step's position read from the tensor being unpacked;
- recomputed tensors are rebuilt by PyTorch's own ``torch.utils.checkpoint`` (non-reentrant)
  over each profiled block whose saved tensors are all recomputed (those made inside it) or
  kept (its inputs): the block is run again in backward with the RNG state it first ran with,
  and buffers it updates (batch-norm statistics) are restored after the recomputation, so the
  model's state is that of one step. A plan that recomputes anything else is run by the checked
  path at every step (`PlannedStep.fast` is False, `PlannedStep.reason` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan
from slackswap.profiling import profile_step
from slackswap.runtime import RunStats, apply, check_plan
from slackswap.runtime.copies import copy_to_host
from slackswap.runtime.entry import Entry, EntryState, Handle
from slackswap.runtime.executor import PlanExecutor, StepMismatchError
from slackswap.runtime.policy import RuntimePolicy, runtime_policy
from slackswap.runtime.rebuild import Rebuilder, _rng_state, tensors_of, view
from slackswap.runtime.schedule import base_resident

__all__ = ["PlannedStep", "ShapeChangeError", "prepare"]


class ShapeChangeError(UserError):
    """A step of a prepared plan saw other shapes than the profiled step (another batch size)."""


@dataclass(frozen=True)
class _Pack:
    """One pack of the first step: the plan entry (-1: not a planned tensor), what is checked,
    the block whose forward packed it (-1: outside every block) and the innermost module whose
    forward packed it (its path; '' for the model or no module)."""

    entry: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    block: int
    path: str = ""


def _storage_nbytes(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return -1  # sparse or other storage-less tensors: checked by shape and dtype only


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return -1


def _module_of(op_name: str) -> str:
    """The module path of a forward operator name such as ``blocks.0.norm1/native_layer_norm``."""
    return op_name.rsplit("/", 1)[0] if "/" in op_name else ""


def _inside(path: str, block: str) -> bool:
    return path == block or path.startswith(block + ".")


def _signature(args: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (tuple(x.shape), x.dtype) for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)
    ]


@dataclass
class _Learned:
    """What the first step of a plan taught: the packs a fast step must see, in order, and the
    blocks it runs under ``torch.utils.checkpoint``."""

    packs: list[_Pack]
    checkpointed: list[int]
    expected: list[_Pack]
    actions: list[int]
    inputs: list[tuple[Any, ...]] | None
    reason: str = ""
    swap_entries: list[int] = field(default_factory=list)
    replay: _Replay | None = None
    spans: list[_Span] = field(default_factory=list)


@dataclass(frozen=True)
class _Span:
    """Children ``first`` to ``last`` of the ``nn.Sequential`` at ``parent``, run as one
    ``torch.utils.checkpoint`` call: a profiled block and the modules after it that save what
    it makes (a convolution and the batch-norm that saves its output)."""

    parent: str
    first: int
    last: int
    children: tuple[str, ...]  # the module paths of children first..last
    swapped_input: int = -1  # the plan swaps the span's input (this entry): -1, it keeps it

    def holds(self, path: str) -> bool:
        return any(_inside(path, c) for c in self.children)


@dataclass
class _Replay:
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


class PlannedStep:
    """A plan prepared for a training loop (see `prepare`); ``with planned.step(): ...``."""

    def __init__(
        self,
        model: torch.nn.Module,
        plan: Plan,
        budget: Budget | float | str,
        *,
        loss_fn: Callable[[Any], torch.Tensor] | None = None,
        runtime: str | None = None,
        schedule: str | None = None,
        replan: bool = False,
        solver: Callable[[Instance, Budget], Plan | None] | None = None,
    ):
        if not isinstance(model, torch.nn.Module):
            raise UserError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        if replan and not callable(solver):
            raise UserError(
                "replan=True: pass solver=, a function (instance, budget) -> Plan that solves "
                "as the plan was solved, e.g. lambda i, b: slackswap.solve(i, b, 'slackswap').plan"
            )
        self.model = model
        self.budget = Budget.parse(budget)
        self.loss_fn = loss_fn
        self.runtime = runtime
        self.schedule = schedule
        self.replan = replan
        self.solver = solver
        self.steps = 0
        self._use(plan)

    def _use(self, plan: Plan) -> None:
        self.plan = plan
        self._stats = check_plan(plan, self.budget, runtime=self.runtime)  # refused here, early
        self._learned: _Learned | None = None
        self._policies: dict[bool, RuntimePolicy] = {}
        self._memory: tuple[Any, Any] | None = None
        self._cuda: bool | None = None

    def _on_cuda(self) -> bool:
        """Whether the model lives on CUDA (looked at once per plan: a module does not move
        between the steps of a training loop; the first step of another plan looks again)."""
        if self._cuda is None:
            self._cuda = any(p.is_cuda for p in self.model.parameters())
        return self._cuda

    def _policy(self, live: bool) -> RuntimePolicy:
        if live not in self._policies:
            self._policies[live] = runtime_policy(self._stats.runtime, live=live)
        return self._policies[live]

    def _memory_model(self) -> tuple[Any, Any]:
        """The plan's resident bytes before each operator and the running sum of transient
        bytes: what the look-ahead admission of copies back reads."""
        if self._memory is None:
            inst = self.plan.instance
            self._memory = (
                base_resident(inst, np.asarray(self.plan.actions, dtype=np.int8)),
                np.concatenate(([0], np.cumsum(inst.op_transient_bytes, dtype=np.int64))),
            )
        return self._memory

    # ----- what the first step learned --------------------------------------------------------
    @property
    def fast(self) -> bool:
        """Whether steps after the first run with saved-tensor hooks alone."""
        return self._learned is not None and not self._learned.reason

    @property
    def reason(self) -> str:
        """Why steps run the checked path ('' when they do not, or before the first step)."""
        return self._learned.reason if self._learned is not None else ""

    @property
    def checkpointed_blocks(self) -> list[str]:
        """The profiled blocks a fast step runs under ``torch.utils.checkpoint`` (a span of an
        ``nn.Sequential``'s children as ``first..last``)."""
        if self._learned is None:
            return []
        names = self._blocks()
        spans = [
            s.children[0] if len(s.children) == 1 else f"{s.children[0]}..{s.children[-1]}"
            for s in self._learned.spans
        ]
        return [names[b] for b in self._learned.checkpointed] + spans

    def _blocks(self) -> list[str]:
        return list(dict.fromkeys(self.plan.instance.meta.get("block_modules", [])))

    # ----- the step ---------------------------------------------------------------------------
    @contextmanager
    def step(self) -> Iterator[RunStats]:
        """One forward and backward under the plan: the checked path the first time (and at
        every step when `fast` is False), saved-tensor hooks alone afterwards."""
        if self._learned is None or self._learned.reason:
            with self._checked_step() as stats:
                yield stats
        else:
            with _FastStep(self, self._learned).running() as stats:
                yield stats
        self.steps += 1

    @contextmanager
    def _checked_step(
        self, called: tuple[Sequence[Any], dict[str, Any]] | None = None
    ) -> Iterator[RunStats]:
        """The checked path (`apply`); the first time, it learns what later steps check and
        replay. ``called``: the model's inputs, when the step starts inside its call."""
        learning = self._learned is None
        packs: list[_Pack] = []
        inputs: list[list[tuple[Any, ...]]] = []
        tensors: list[list[torch.Tensor]] = []
        if called is not None:
            inputs.append(_signature(*called))
            tensors.append([x for x in (*called[0], *called[1].values()) if torch.is_tensor(x)])
        current = [-1]
        blocks = self._blocks()

        calls = _ModuleCalls(self.model)
        made: list[_LearningExecutor] = []

        def note_inputs(m: Any, a: Any, k: Any) -> None:
            if not tensors:
                tensors.append([x for x in (*a, *k.values()) if isinstance(x, torch.Tensor)])
                if not inputs:
                    inputs.append(_signature(a, k))

        def factory(*args: Any, **kwargs: Any) -> PlanExecutor:
            ex = _LearningExecutor(*args, **kwargs)
            ex.learned = packs if learning else None
            ex.block_now = current
            ex.kept = None
            ex.rng_free = set()
            ex.rng_at = {}
            ex.calls = calls
            made.append(ex)
            return ex

        with ExitStack() as stack:
            if learning:
                stack.enter_context(_block_tracking(self.model, blocks, current))
                stack.enter_context(calls.tracking())
                h = self.model.register_forward_pre_hook(note_inputs, with_kwargs=True)
                stack.callback(h.remove)
            with apply(
                self.plan,
                self.budget,
                model=self.model,
                runtime=self.runtime,
                schedule=self.schedule,
                _executor=factory,
            ) as stats:
                yield stats
        if learning:
            self._learned = _learn(
                self.plan,
                self.model,
                blocks,
                packs,
                inputs[0] if inputs else None,
                made[0].kept if made else None,
                tensors[0] if tensors else [],
            )

    def _replan(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Plan:
        """Profile the step again on the new inputs and solve it with the same solver."""
        if kwargs:
            raise ShapeChangeError(
                "replan=True: the model takes keyword inputs, which profiling cannot replay; "
                "prepare a plan for the new shapes instead"
            )
        inst = profile_step(self.model, tuple(args), self.loss_fn,
                            blocks=[self.model.get_submodule(b) for b in self._blocks()])  # fmt: skip
        assert self.solver is not None
        plan = self.solver(inst, self.budget)
        if not isinstance(plan, Plan):
            raise ShapeChangeError(
                f"replan: the solver found no plan at {self.budget} for the new shapes"
            )
        return plan


class _LearningExecutor(PlanExecutor):
    """The checked path's executor, noting each pack of the step for the fast steps."""

    learned: list[_Pack] | None
    block_now: list[int]
    kept: Any
    rng_free: set[int]
    rng_at: dict[int, tuple[str, int]]
    calls: _ModuleCalls

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        # An operator tagged random that drew nothing (attention with dropout_p = 0) can be
        # replayed without its RNG state: noted when its generators' state did not move.
        if self.learned is None or self._internal or self.phase != 0:
            return super().__torch_dispatch__(func, types, args, kwargs)
        if torch.Tag.nondeterministic_seeded not in func.tags:
            return super().__torch_dispatch__(func, types, args, kwargs)
        index = len(self.trace.ops)
        before = _rng_state(tensors_of((args, kwargs)))
        out = super().__torch_dispatch__(func, types, args, kwargs)
        after = _rng_state(tensors_of((args, kwargs)))
        if _same_rng(before, after):
            self.rng_free.add(index)
        elif self.calls.stack:
            # Drawn: a fast step can still replay it when the RNG state it started from is the
            # one at the start of the module call it ran in (a dropout module's bernoulli_).
            path, call, state = self.calls.stack[-1]
            if _same_rng(before, state):
                self.rng_at[index] = (path, call)
        return out

    def close(self) -> None:
        # The operator records outlive the step (a fast step replays them); the tensors go.
        if self.learned is not None:
            rb = self.rebuilder
            self.kept = (self.trace, dict(rb.records), dict(rb.allocs),
                         dict(self._entry_of_value), dict(rb.externals),
                         set(self.rng_free), dict(self.rng_at))  # fmt: skip
        super().close()

    def _pack(self, t: torch.Tensor) -> Any:
        out = super()._pack(t)
        if self.learned is not None and not self._internal:
            entry = out.entry.index if isinstance(out, Handle) else -1
            path = self.calls.stack[-1][0] if self.calls.stack else ""
            self.learned.append(
                _Pack(entry, tuple(t.shape), t.dtype, _storage_nbytes(t), self.block_now[0], path)
            )
        return out


def _same_rng(a: Any, b: Any) -> bool:
    """Whether RNG states ``a`` and ``b`` (`_rng_state`) agree on the CPU and on every device
    ``a`` holds."""
    if not torch.equal(a[0], b[0]):
        return False
    theirs = dict(b[1])
    return all(d in theirs and torch.equal(s, theirs[d]) for d, s in a[1])


class _ModuleCalls:
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
                self.stack.append((path, k, _rng_state(devices)))

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
def _block_tracking(
    model: torch.nn.Module, blocks: list[str], current: list[int]
) -> Iterator[None]:
    """Keep ``current[0]`` at the index of the block whose forward runs (-1: none)."""
    handles = []
    for b, name in enumerate(blocks):
        m = model.get_submodule(name) if name else model

        def pre(mod: Any, args: Any, b: int = b) -> None:
            if current[0] < 0:
                current[0] = b

        def post(mod: Any, args: Any, out: Any, b: int = b) -> None:
            if current[0] == b:
                current[0] = -1

        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post, always_call=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _learn(
    plan: Plan,
    model: torch.nn.Module,
    blocks: list[str],
    packs: list[_Pack],
    inputs: list[tuple[Any, ...]] | None,
    kept: Any,
    input_tensors: list[torch.Tensor],
) -> _Learned:
    """Which blocks a fast step checkpoints, what it must see, or why it cannot run."""
    inst = plan.instance
    actions = [int(a) for a in plan.actions]
    produced_in: dict[int, str] = {
        i: _module_of(inst.op_name[int(inst.tensor_producer[i])]) for i in range(inst.n_tensors)
    }
    by_block: dict[int, list[_Pack]] = {}
    for p in packs:
        if p.block >= 0:
            by_block.setdefault(p.block, []).append(p)
    checkpointed: list[int] = []
    for b, ps in sorted(by_block.items()):
        inside = [p for p in ps if p.entry >= 0 and _inside(produced_in[p.entry], blocks[b])]
        outside = [p for p in ps if p.entry >= 0 and not _inside(produced_in[p.entry], blocks[b])]
        if (
            inside
            and all(actions[p.entry] == RECOMP for p in inside)
            and all(actions[p.entry] == KEEP for p in outside)
        ):
            checkpointed.append(b)
    spans = _spans(model, blocks, packs, actions, produced_in)
    starts = {s.children[0] for s in spans}
    checkpointed = [b for b in checkpointed if blocks[b] not in starts]

    def in_checkpoint(p: _Pack) -> bool:
        return p.block in checkpointed or any(s.holds(p.path) for s in spans)

    # What a checkpointed call makes again; a tensor from outside it (its input, kept or
    # swapped) is the forward's own, wherever else it is saved.
    covered = {
        p.entry for p in packs if p.entry >= 0 and actions[p.entry] == RECOMP and in_checkpoint(p)
    }
    expected = [p for p in packs if not in_checkpoint(p)]
    seen = {p.entry for p in expected if p.entry >= 0}
    reason = ""
    for p in packs:
        if p.entry >= 0 and p.entry in covered and not in_checkpoint(p):
            reason = reason or (
                f"recomputed tensor {inst.tensor_name[p.entry]!r} is also saved outside its "
                "block: every step runs the checked path"
            )
    replayed = sorted({i for i in seen if actions[i] == RECOMP and i not in covered})
    replay = None
    if replayed and not reason:
        replay, reason = _replay_of(inst, model, actions, replayed, seen, covered, kept,
                                    input_tensors)  # fmt: skip
    swaps = sorted(
        {p.entry for p in expected if p.entry >= 0 and actions[p.entry] == SWAP},
        key=lambda i: (int(inst.tensor_first_bwd_reader[i]), i),
    )
    return _Learned(packs, checkpointed, expected, actions, inputs, reason, swaps, replay, spans)


def _spans(
    model: torch.nn.Module,
    blocks: list[str],
    packs: list[_Pack],
    actions: list[int],
    produced_in: dict[int, str],
) -> list[_Span]:
    """The profiled blocks whose recomputed tensors are saved by the modules after them, each
    with those modules: a block that is a child of an ``nn.Sequential`` (whose forward calls
    its children in order, so a run of them is one function of one tensor) and whose saved
    tensors are all recomputed, extended over the fewest siblings that save them all. Every
    saved tensor made inside the span is made again by the recomputation (a kept or swapped
    one the modules after the block make, such as batch-norm's saved statistics, comes from
    the operator that saves the recomputed tensor, which runs again anyway), and every one
    from outside it is kept, but for the span's input, which may be swapped: checkpoint saves
    it through the step's hooks."""
    by_entry: dict[int, list[_Pack]] = {}
    for p in packs:
        if p.entry >= 0:
            by_entry.setdefault(p.entry, []).append(p)
    out: list[_Span] = []
    for name in blocks:
        if any(s.holds(name) for s in out):
            continue
        parent_path, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        if (
            not isinstance(parent, torch.nn.Sequential)
            or type(parent).forward is not torch.nn.Sequential.forward
            or child not in parent._modules
        ):
            continue
        made = [i for i in by_entry if _inside(produced_in[i], name)]
        if not made or any(actions[i] != RECOMP for i in made):
            continue
        if all(_inside(p.path, name) for i in made for p in by_entry[i]):
            continue  # checkpointed as a block of its own
        names = list(parent._modules)
        paths = [f"{parent_path}.{n}" if parent_path else n for n in names]
        first = names.index(child)
        for last in range(first + 1, len(names)):
            span = _Span(parent_path, first, last, tuple(paths[first : last + 1]))
            fits = _span_fits(span, packs, by_entry, actions, produced_in)
            if fits is not None:
                if fits >= -1:
                    out.append(replace(span, swapped_input=fits))
                break
    return out


def _span_fits(
    span: _Span,
    packs: list[_Pack],
    by_entry: dict[int, list[_Pack]],
    actions: list[int],
    produced_in: dict[int, str],
) -> int | None:
    """Whether ``span`` can run under ``torch.utils.checkpoint`` as the plan says: -1 (yes,
    its input kept), the entry of its swapped input, -2 (no, however far it reaches) or None
    (not yet: a tensor it recomputes is saved after it). A swapped tensor from outside is taken
    for the span's input when it is the only one and the step saved it before the span, where
    a fast step learns its storage (and checks it is the tensor checkpoint saves)."""
    start = next(k for k, p in enumerate(packs) if span.holds(p.path))
    swapped: set[int] = set()
    for p in packs[start:]:
        if p.entry < 0 or not span.holds(p.path) or span.holds(produced_in[p.entry]):
            continue
        if actions[p.entry] == RECOMP:
            return -2
        if actions[p.entry] == SWAP:
            swapped.add(p.entry)
    for i, ps in by_entry.items():
        if actions[i] == RECOMP and span.holds(produced_in[i]):
            if not all(span.holds(p.path) for p in ps):
                return None
    if not swapped:
        return -1
    if len(swapped) > 1:
        return -2
    (i,) = swapped
    before = any(not span.holds(p.path) for p in packs[:start] if p.entry == i)
    return i if before else -2


def _replay_of(
    inst: Any,
    model: torch.nn.Module,
    actions: list[int],
    replayed: list[int],
    seen: set[int],
    covered: set[int],
    kept: Any,
    input_tensors: list[torch.Tensor],
) -> tuple[_Replay | None, str]:
    """How a fast step rebuilds ``replayed`` from the first step's operator records, or why it
    cannot (a random operator, whose RNG state only a dispatch mode could capture each step;
    a tensor that is neither a model input, a parameter nor a saved tensor it sees)."""
    if kept is None:
        return None, "the first step kept no operator records"
    trace, records, allocs, entry_of_value, externals, rng_free, rng_at = kept
    random: dict[int, tuple[str, int]] = {}
    ptrs = [x.untyped_storage().data_ptr() for x in input_tensors]
    ext_pos: dict[int, int] = {}
    for v, t in externals.items():
        ptr = t.untyped_storage().data_ptr()
        if ptr in ptrs:
            ext_pos[v] = ptrs.index(ptr)
    # Parameters and buffers (and views of them, such as a transposed weight) are updated in
    # place by an optimizer: the first step's tensors over their storages read today's values.
    persistent = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    buffers = {_storage_ptr(b): b for b in model.buffers()}
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
            return "" if value in ext_pos else "its rebuild reads a tensor that is no input"
        if value in allocs:
            return ""
        p = trace.values[value].producer
        rec = records.get(p)
        if rec is None:
            return "no operator record makes it"
        used.add(p)
        if rec.rng is not None and p not in rng_free:
            if p not in rng_at:
                return f"its rebuild runs the random operator {rec.func} inside a module call"
            random[p] = rng_at[p]
        for x in rec.args[1]:
            if isinstance(x, torch.Tensor) and _storage_ptr(x) not in persistent:
                return "its rebuild reads a tensor that is no input, parameter or buffer"
            if isinstance(x, torch.Tensor) and _storage_ptr(x) in buffers:
                touched[_storage_ptr(x)] = buffers[_storage_ptr(x)]
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
    return _Replay(_TraceOf(trace), records, allocs, entry_of_value, ext_pos, deps,
                   consumers, list(touched.values()), random), ""  # fmt: skip


class _FastStep:
    """One step with saved-tensor hooks alone (see `slackswap.runtime.training`)."""

    def __init__(self, owner: PlannedStep, learned: _Learned):
        self.owner = owner
        self.learned = learned
        self.expected = learned.expected
        self.actions = learned.actions
        self.inst = owner.plan.instance
        self.pos = 0
        self.entries = [
            Entry(i, int(a), int(n))
            for i, (a, n) in enumerate(zip(learned.actions, self.inst.tensor_bytes, strict=True))
        ]
        self.error: BaseException | None = None
        self.stats = RunStats(
            budget_bytes=owner._stats.budget_bytes,
            simulated_peak_bytes=owner._stats.simulated_peak_bytes,
            simulated_step_s=owner._stats.simulated_step_s,
            runtime=owner._stats.runtime,
        )
        self.cuda = owner._on_cuda()
        self.policy: RuntimePolicy = owner._policy(self.cuda)
        self._copy_stream: Any = None
        self._h2d_stream: Any = None
        self._prefetch = self.cuda and self.policy.overlap and self.policy.prefetch
        if self.cuda and self.policy.overlap:
            self._copy_stream = torch.cuda.Stream()
            self._h2d_stream = torch.cuda.Stream()
        self._admitted = 0
        self._cursor = 0  # deadline order: the first swapped tensor not yet fetched back
        self._base: Any = None
        self._transient: Any = None
        if self._prefetch:
            self._base, self._transient = owner._memory_model()
        self._inner: ExitStack | None = None  # the new plan's checked step, after a replan
        self._inner_stats: Any = None
        self._stack = ExitStack()
        # While checkpoint saves a call's inputs: -1, they are kept; an entry, the span's input
        # the plan swaps; None: it is not saving them.
        self._saving_inputs: list[int | None] = [None]
        self._span_inputs = {s.swapped_input for s in learned.spans if s.swapped_input >= 0}
        self._storage_of: dict[int, int] = {}  # a span's swapped input: its storage this step
        self.rebuilder: Rebuilder | None = None
        self._pending: dict[int, set[int]] = {}  # rebuild input -> recomputed ones still to come
        self._finished: set[int] = set()  # autograd is done with these; a rebuild is not
        rp = learned.replay
        if rp is not None:
            self.rebuilder = Rebuilder(
                rp.trace,
                self.inst,
                self.entries,
                rp.entry_of_value,
                materialise=self._materialise,
                quiet=nullcontext,
            )
            self.rebuilder.records = dict(rp.records)  # random ones get today's RNG state
            self.rebuilder.allocs = rp.allocs
            self._pending = {u: set(vs) for u, vs in rp.consumers.items()}

    @property
    def hooks_needed(self) -> bool:
        """False for a plan that keeps every saved tensor it covers, outside any checkpointed
        block: autograd's own handling is then the plan, so the step runs with no saved-tensor
        hook at all (no Python per saved tensor). The first step checked the operators; the
        inputs' shapes are still checked before each step."""
        return bool(
            self.learned.checkpointed
            or self.learned.spans
            or self.learned.replay is not None
            or any(int(a) != KEEP for a in self.actions)
        )

    @contextmanager
    def running(self) -> Iterator[RunStats]:
        owner = self.owner
        with ExitStack() as stack:
            for b in self.learned.checkpointed:
                stack.enter_context(
                    _checkpointed(owner.model, owner._blocks()[b], self._saving_inputs)
                )
            if self.learned.spans:
                stack.enter_context(
                    _checkpointed_spans(owner.model, self.learned.spans, self._saving_inputs)
                )
            h = owner.model.register_forward_pre_hook(self._check_inputs, with_kwargs=True)
            stack.callback(h.remove)
            if self.learned.replay is not None and self.learned.replay.random:
                stack.enter_context(self._capturing_rng(self.learned.replay))
            if self.hooks_needed:
                stack.enter_context(
                    torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
                )
            self._stack = stack
            try:
                yield self.stats
            except BaseException as exc:
                if self._inner is not None:
                    inner, self._inner = self._inner, None
                    inner.__exit__(type(exc), exc, exc.__traceback__)
                    raise
                if self.error is not None and exc is not self.error:
                    raise self.error from exc
                raise
            finally:
                self._drop_all()
            if self._inner is not None:
                inner, self._inner = self._inner, None
                inner.__exit__(None, None, None)
                self.stats.__dict__.update(self._inner_stats.__dict__)
                return
            if self.error is not None:
                raise self.error
            if self.hooks_needed and self.pos != len(self.expected):
                raise StepMismatchError(
                    f"the step saved {self.pos} tensors for autograd where the first step of "
                    f"the plan saved {len(self.expected)} (forward and backward must both run "
                    "inside the with block)"
                )

    @contextmanager
    def _capturing_rng(self, rp: _Replay) -> Iterator[None]:
        """At the start of each module call a random operator of a rebuild starts from, note
        the RNG state: that operator's replay runs from it (this step's dropout masks)."""
        wanted: dict[tuple[str, int], list[int]] = {}
        for p, at in rp.random.items():
            wanted.setdefault(at, []).append(p)
        counts: dict[str, int] = {}
        rb = self.rebuilder
        assert rb is not None
        devices: list[torch.Tensor] = [t.data for t in self.owner.model.parameters() if t.is_cuda][
            :1
        ]
        handles = []
        for path in {path for path, _ in wanted}:
            mod = self.owner.model.get_submodule(path) if path else self.owner.model

            def pre(m: Any, args: Any, path: str = path) -> None:
                k = counts.get(path, 0)
                counts[path] = k + 1
                for p in wanted.get((path, k), ()):
                    old = rp.records[p]
                    rb.records[p] = old.with_rng(_rng_state(devices))

            handles.append(mod.register_forward_pre_hook(pre))
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def _drop_all(self) -> None:
        for e in self.entries:
            e.device = e.host = e.event = None
        if self.rebuilder is not None:
            self.rebuilder.externals = {}

    # ----- shapes -----------------------------------------------------------------------------
    def _check_inputs(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._inner is not None:
            return
        if self.rebuilder is not None and self.learned.replay is not None:
            flat = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
            self.rebuilder.externals = {
                v: flat[k] for v, k in self.learned.replay.externals.items() if k < len(flat)
            }
        want = self.learned.inputs
        if want is None:
            return
        got = _signature(args, kwargs)
        if got == want:
            return
        if not self.owner.replan:
            self.error = ShapeChangeError(
                f"the model's inputs are {_fmt(got)}, the plan was made for {_fmt(want)} "
                "(another batch size or sequence length): prepare a plan for these shapes, "
                "or pass replan=True"
            )
            raise self.error
        self._switch_to_new_plan(args, kwargs)

    def _switch_to_new_plan(self, args: Any, kwargs: Any) -> None:
        """Profile and solve the step again, then run the rest of it as the checked first step
        of the new plan (its dispatch mode and hooks sit above this step's hooks)."""
        owner = self.owner
        self._stack.close()  # this step's checkpoint wrappers and hooks go first
        owner._use(owner._replan(args, kwargs))
        inner = ExitStack()
        self._inner_stats = inner.enter_context(owner._checked_step((args, kwargs)))
        self._inner = inner

    # ----- saved-tensor hooks -----------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        saving = self._saving_inputs[0]
        if saving is not None:
            if saving < 0:
                return t  # a checkpointed call's kept inputs, held by torch.utils.checkpoint
            return self._span_input(saving, t)
        k = self.pos
        self.pos = k + 1
        exp = self.expected
        if k >= len(exp):
            self._fail(
                StepMismatchError(
                    f"the step saves more tensors for autograd than the first step of the plan "
                    f"({len(exp)}): it is not the step the plan was made for"
                )
            )
        p = exp[k]
        if t.shape != p.shape or t.dtype != p.dtype or _storage_nbytes(t) != p.nbytes:
            self._mismatch(k, p, t)
        if p.entry < 0:
            return t
        e = self.entries[p.entry]
        action = e.action
        if action == KEEP:
            if p.entry in self._pending and e.device is None:
                e.device = t.untyped_storage()  # a rebuild reads it: held until then
            return t
        if not e.packed:
            e.to(EntryState.SAVED)
            if action == SWAP:
                if p.entry in self._span_inputs:
                    self._storage_of[p.entry] = _storage_ptr(t)
                self._offload(e, t)  # a rebuild that reads it fetches it back, as autograd does
            else:
                self.stats.recomputed_bytes += e.nbytes
        return Handle(e, t, keep=False, release=self._release)

    def _span_input(self, i: int, t: torch.Tensor) -> Any:
        """Checkpoint saves a span's input, which the plan swaps: one more handle on the
        entry the step swapped before the span (its copy back serves the recomputation)."""
        if self._storage_of.get(i) != _storage_ptr(t):
            self._fail(
                StepMismatchError(
                    f"the input of a checkpointed span is not {self.inst.tensor_name[i]!r}, as "
                    "in the first step of the plan: it is not the step the plan was made for"
                )
            )
        return Handle(self.entries[i], t, keep=False, release=self._release)

    def _mismatch(self, k: int, p: _Pack, t: torch.Tensor) -> None:
        name = self.inst.tensor_name[p.entry] if p.entry >= 0 else f"saved tensor #{k}"
        got = f"{t.dtype}, shape {list(t.shape)}, {_storage_nbytes(t)} storage bytes"
        want = f"{p.dtype}, shape {list(p.shape)}, {p.nbytes} storage bytes"
        # The model's inputs were checked before its first operator: with the same inputs, a
        # tensor of another shape means another step, not another batch size.
        other_shape = t.dtype == p.dtype and t.shape != p.shape and self.learned.inputs is None
        cls = ShapeChangeError if other_shape else StepMismatchError
        self._fail(
            cls(
                f"saved tensor {name!r} (pack {k}) is {got}; the plan's step has {want}: the "
                "step is not the one the plan was made for"
            )
        )

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        raise exc

    def _unpack(self, h: Any) -> torch.Tensor:
        if not isinstance(h, Handle):
            return h  # type: ignore[no-any-return]
        e = h.entry
        if self._prefetch:
            # The step is at this tensor's first backward reader: the copies back the
            # look-ahead admits from there start now.
            self._admit(int(self.inst.tensor_first_bwd_reader[e.index]))
        storage = self._materialise(e)
        if e.event is not None:
            torch.cuda.current_stream().wait_event(e.event)
        return view(storage, h.dtype, h.offset, h.size, h.stride)

    def _materialise(self, e: Entry) -> Any:
        if e.device is None:
            if e.action == SWAP:
                self._fetch(e)
            elif e.action == RECOMP and self.rebuilder is not None:
                self._rebuild(e)
                self.stats.rebuilds += 1
                self._done(e.index)
        if e.device is None:
            raise RuntimeError(f"tensor {self.inst.tensor_name[e.index]!r} was released")
        return e.device

    def _rebuild(self, e: Entry) -> None:
        """Rebuild ``e``; buffers its chain reads (batch-norm running statistics, which
        ``native_batch_norm`` updates in place without its schema saying so) are put back, so
        the model's state is that of one step."""
        assert self.rebuilder is not None and self.learned.replay is not None
        buffers = self.learned.replay.buffers
        saved = [b.detach().clone() for b in buffers]
        try:
            self.rebuilder.rebuild(e)
        finally:
            with torch.no_grad():
                for b, v in zip(buffers, saved, strict=True):
                    b.copy_(v)

    def _done(self, v: int) -> None:
        """Recomputed tensor ``v`` is rebuilt (or gone): its inputs need not wait for it."""
        for u in self.learned.replay.deps.get(v, ()) if self.learned.replay else ():
            waiting = self._pending.get(u)
            if waiting is None:
                continue
            waiting.discard(v)
            if not waiting:
                del self._pending[u]
                e = self.entries[u]
                if e.action == KEEP:
                    e.device = None  # autograd holds a kept one itself
                elif u in self._finished:
                    self._finished.discard(u)
                    self._release(e)

    # ----- copies -----------------------------------------------------------------------------
    def _offload(self, e: Entry, t: torch.Tensor) -> None:
        src = t.untyped_storage()
        self.stats.swapped_bytes += e.nbytes
        e.host, e.event = copy_to_host(src, self._copy_stream)

    def _fetch(self, e: Entry) -> None:
        host = e.host
        if self.cuda:
            if self._h2d_stream is not None:
                self._h2d_stream.wait_stream(torch.cuda.current_stream())
                if e.event is not None:  # its offload: the host copy must be complete
                    self._h2d_stream.wait_event(e.event)
                with torch.cuda.stream(self._h2d_stream):
                    buf = torch.empty(host.nbytes(), dtype=torch.uint8, device="cuda")
                    buf.untyped_storage().copy_(host, non_blocking=True)
                    e.event = torch.cuda.Event()
                    e.event.record(self._h2d_stream)
                buf.record_stream(torch.cuda.current_stream())
            else:
                buf = torch.empty(host.nbytes(), dtype=torch.uint8, device="cuda")
                buf.untyped_storage().copy_(host)
                e.event = None
        else:
            buf = torch.empty(host.nbytes(), dtype=torch.uint8)
            buf.untyped_storage().copy_(host)
        e.device = buf.untyped_storage()
        e.admitted = True
        self._admitted += e.nbytes
        self.stats.h2d_bytes += e.nbytes

    def _admit(self, o: int) -> None:
        """Start copies back in deadline order while the plan's memory before operator ``o``,
        the copies already admitted, the next one and the transient bytes of the runtime's
        look-ahead fit the budget (the simulator's rule, at the step's position ``o``)."""
        n = self.inst.n_ops
        end = min(o + self.policy.lookahead_ops, n)
        look = int(self._transient[end] - self._transient[min(o, end)])
        base = int(self._base[min(o, n - 1)])
        order = self.learned.swap_entries
        while self._cursor < len(order):  # the ones done with stay behind the cursor
            first = self.entries[order[self._cursor]]
            if not (first.released or first.admitted):
                break
            self._cursor += 1
        for i in order[self._cursor :]:
            e = self.entries[i]
            if e.device is not None or e.host is None or e.released:
                continue
            if base + self._admitted + e.nbytes + look > self.stats.budget_bytes:
                return
            self._fetch(e)

    def _release(self, e: Entry) -> None:
        """Autograd dropped the last handle: the tensor's last backward reader is done."""
        if e.admitted:
            self._admitted -= e.nbytes
            e.admitted = False
        if e.action == RECOMP:
            self._done(e.index)
        if e.index in self._pending:
            # A rebuild still to come reads it: it stays (its host copy, fetched back when
            # read) and counts as released only once that rebuild is done.
            self._finished.add(e.index)
            return
        e.to(EntryState.RELEASED)
        e.host = e.device = e.event = None


def _fmt(sig: list[tuple[Any, ...]] | None) -> str:
    return ", ".join(f"{list(s)} {str(d).replace('torch.', '')}" for s, d in sig or []) or "none"


def _checkpoint_call(
    fn: Callable[..., Any],
    buffers: list[torch.Tensor],
    saving_inputs: list[int | None],
    *args: Any,
    saving: int = -1,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)`` under non-reentrant ``torch.utils.checkpoint``; ``buffers`` it
    updates in place are put back after each recomputation (one update per step).
    ``saving_inputs[0]`` is ``saving`` while checkpoint saves the inputs (before the body),
    None otherwise."""
    calls = [0]

    def body(*a: Any, **k: Any) -> Any:
        saving_inputs[0] = None
        calls[0] += 1
        if calls[0] == 1 or not buffers:
            return fn(*a, **k)
        saved = [b.detach().clone() for b in buffers]
        try:
            return fn(*a, **k)
        finally:
            with torch.no_grad():
                for b, v in zip(buffers, saved, strict=True):
                    b.copy_(v)

    saving_inputs[0] = saving
    try:
        return checkpoint(body, *args, use_reentrant=False, **kwargs)
    finally:
        saving_inputs[0] = None


@contextmanager
def _checkpointed(
    model: torch.nn.Module, name: str, saving_inputs: list[int | None]
) -> Iterator[None]:
    """Run block ``name``'s forward under non-reentrant ``torch.utils.checkpoint``
    (`_checkpoint_call`)."""
    block = model.get_submodule(name) if name else model
    forward = block.forward
    buffers = list(block.buffers())

    def run_checkpointed(*args: Any, **kwargs: Any) -> Any:
        return _checkpoint_call(forward, buffers, saving_inputs, *args, **kwargs)

    with _forward_replaced(block, run_checkpointed):
        yield


@contextmanager
def _checkpointed_spans(
    model: torch.nn.Module, spans: list[_Span], saving_inputs: list[int | None]
) -> Iterator[None]:
    """Run each ``nn.Sequential`` holding ``spans`` with each span's children as one
    `_checkpoint_call` (the rest of its children as ``nn.Sequential`` calls them)."""
    with ExitStack() as stack:
        for parent_path in dict.fromkeys(s.parent for s in spans):
            seq = model.get_submodule(parent_path) if parent_path else model
            mods: list[Any] = list(seq._modules.values())
            ends = {s.first: s.last for s in spans if s.parent == parent_path}
            runs: dict[int, tuple[Callable[[Any], Any], list[torch.Tensor], int]] = {}
            for s in spans:
                if s.parent == parent_path:
                    part = mods[s.first : s.last + 1]
                    bufs = [b for m in part for b in m.buffers()]
                    runs[s.first] = (_chain(part), bufs, s.swapped_input)

            def forward(x: Any, mods: list[Any] = mods, ends: dict[int, int] = ends,
                        runs: dict[int, Any] = runs) -> Any:  # fmt: skip
                k = 0
                while k < len(mods):
                    if k in ends:
                        fn, buffers, swapped = runs[k]
                        x = _checkpoint_call(fn, buffers, saving_inputs, x, saving=swapped)
                        k = ends[k] + 1
                    else:
                        x = mods[k](x)
                        k += 1
                return x

            stack.enter_context(_forward_replaced(seq, forward))
        yield


def _chain(mods: list[Any]) -> Callable[[Any], Any]:
    def run(x: Any) -> Any:
        for m in mods:
            x = m(x)
        return x

    return run


@contextmanager
def _forward_replaced(module: torch.nn.Module, forward: Callable[..., Any]) -> Iterator[None]:
    had = "forward" in module.__dict__
    old = module.__dict__.get("forward")
    module.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had:
            module.forward = old  # type: ignore[method-assign,assignment]
        else:
            del module.forward


def prepare(
    model: torch.nn.Module,
    plan: Plan,
    budget: Budget | float | str,
    *,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    runtime: str | None = None,
    schedule: str | None = None,
    replan: bool = False,
    solver: Callable[[Instance, Budget], Plan | None] | None = None,
) -> PlannedStep:
    """A reusable `PlannedStep` running ``plan`` at ``budget`` on ``model``, step after step.

    The plan is refused here when it does not fit the budget in the simulator or ``runtime``
    cannot run it. ``runtime``/``schedule``: as for `slackswap.runtime.apply` (the checked
    step). ``replan``: when the model's inputs change shape, profile the step again (with
    ``loss_fn``, default the sum of the output, and the profiled blocks) and call
    ``solver(instance, budget)`` for the new plan, instead of raising `ShapeChangeError`;
    ``slackswap.runtime`` does not import the solvers, so the caller passes the one that made
    the plan, e.g. ``lambda inst, b: slackswap.solve(inst, b, "slackswap").plan``.
    """
    return PlannedStep(model, plan, budget, loss_fn=loss_fn, runtime=runtime,
                       schedule=schedule, replan=replan, solver=solver)  # fmt: skip
