"""Run a `Plan` on the real PyTorch step its instance was profiled from (needs torch).

``with slackswap.runtime.apply(plan, budget="50%"): loss_fn(model(*inputs)).backward()`` runs
the step with each saved tensor kept, swapped to host memory or recomputed as the plan says,
with the simulator's barrier-free semantics (`slackswap.simulator`):

- keep: untouched (autograd holds the tensor as usual).
- swap: when the step first saves the tensor, its whole storage is copied to host memory
  (pinned, on a dedicated copy stream ordered after the producer, on CUDA; at once on CPU) and
  the runtime keeps no device reference, so the buffer is freed once the copy and the step's
  last use of it (its last forward reader) are done (CUDA: ``record_stream`` on the copy stream
  keeps the allocator from reusing it earlier). From the start of the backward pass, before
  each operator, copies back are started in deadline order (first backward reader) on a second
  stream while the head fits the budget with the transient bytes of the next three operators
  (the simulator's look-ahead, on the instance's memory model); a tensor needed before its copy
  was admitted is copied at once (the deadlock rule). Compute waits, through the copy's CUDA
  event, only when it unpacks that tensor. Without CUDA the same bookkeeping runs with
  synchronous copies.
- recompute: the runtime holds nothing, so the tensor is freed after its last forward reader;
  when autograd first unpacks it (right before its first backward reader) the forward operators
  that produced it are run again on its rebuild inputs (inputs that are themselves recomputed
  are rebuilt first and stay until their own last reader; swapped ones are fetched), random
  operators with the RNG state they first ran with, so dropout masks come out identical.
  Each operator is replayed in the grad mode it first ran in (nn.LSTM's CPU kernel returns
  more outputs with grad on). Buffers and other tensors of the caller's an operator updates in
  place (batch-norm running statistics, which ``native_batch_norm``'s schema does not mark as
  written) get a scratch copy, so the model's state is that of one step.

PyTorch pieces used and why: ``torch.autograd.graph.saved_tensors_hooks`` (what
``save_on_cpu`` and torchtune's offloading use) to hand autograd a handle instead of each
saved tensor and to learn the moment each one is needed again; a ``TorchDispatchMode`` (with
the profiler's value numbering) to number operators and values exactly as the profile did,
so each saved tensor is matched to the instance's by value, dtype, shape and producing
operator, and to record each forward operator's call so a chain can be replayed per tensor
(``torch.utils.checkpoint`` recomputes whole regions, not single tensors, so only its idea of
restoring the RNG state per random operator is borrowed); CUDA streams, events,
``record_stream`` and pinned memory for the overlapped copies.

The step must be the profiled one: the same operators in the same order (checked operator by
operator, the first difference named in a `StepMismatchError`), forward and backward inside
the ``with`` block. One backward pass: a second one over a graph kept with
``retain_graph=True``, inside the block or after it, is refused in one line naming
``retain_graph`` (the plan dropped what the first one needed). A plan for another instance
(``instance=``) or one that does not fit the budget in the simulator is refused before
anything is installed; every hook is removed on exit, also when the step raises.
`StorageTracker` measures the step's memory independently: `RunStats` carries its peak and how
far it ended above the budget, with a `BudgetWarning` when it did (naming, when autograd still
held saved tensors at the end, a graph kept with ``retain_graph=True``: it keeps each past its
last reader, where the plan frees it); saved tensors planned to swap or recompute that a
reference outside autograd kept alive are named (`HeldTensorWarning`) and not counted as
swapped or recomputed.

For a training loop, ``planned = prepare(model, plan, "50%")`` once and ``with planned.step():
loss_fn(model(x)).backward()`` each iteration: the first step is the checked one above, and it
learns every saved tensor's place in autograd's pack order; later steps run with
``saved_tensors_hooks`` alone (no dispatch mode, no per-operator Python): each saved tensor
checked by shape, dtype and storage size, kept ones handed back, swapped ones copied as above,
recomputed ones rebuilt by ``torch.utils.checkpoint`` over the profiled blocks whose saved tensors
are all recomputed, or by replaying the first step's operator records (dropout with the RNG state
of its module call). Other input shapes raise `ShapeChangeError` before the step's first
operator, or re-plan (``replan=True``). See `training`.

How copies run (side streams, prefetch, the look-ahead) is read from the simulator's runtime
registry (`policy.runtime_policy`); a runtime whose rules the live executor cannot follow is
refused before the step.

Where each part lives: `executor` (matching the step, the hooks), `copies` (swap), `rebuild`
(recompute), `entry` (the per-tensor state they share: its place in the step and where its
bytes are, each an explicit checked state machine), `schedule` (the simulator's copy times),
`policy` (a runtime's rules), `training` (`prepare`, the training path), `memory` and `measure`
(checking a run).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slackswap.console import format_bytes
from slackswap.instance import Instance
from slackswap.plan import RECOMP, SWAP, Budget, Plan, PlanError
from slackswap.runtime.policy import runtime_policy
from slackswap.runtime.schedule import simulated_schedule
from slackswap.simulator import simulate
from slackswap.simulator.policies import execution_modes
from slackswap.torchstep import require_torch

if TYPE_CHECKING:
    import torch

    from slackswap.runtime.memory import StorageTracker

__all__ = [
    "apply",
    "BudgetWarning",
    "HeldTensorWarning",
    "prepare",
    "PlannedStep",
    "RunStats",
    "RUNTIME_MODES",
    "ShapeChangeError",
    "StepMismatchError",
    "StorageTracker",
]


class BudgetWarning(UserWarning):
    """A planned step's measured peak (`StorageTracker`) ended above its budget."""


class HeldTensorWarning(BudgetWarning):
    """Saved tensors planned to swap or recompute stayed referenced outside autograd (a
    forward hook or a variable keeping activations), so their memory was never freed."""


@dataclass
class RunStats:
    """What the runtime did in one step (bytes); filled when the ``with`` block exits."""

    swapped_bytes: int = 0
    h2d_bytes: int = 0
    recomputed_bytes: int = 0
    rebuilds: int = 0
    unplanned_packs: int = 0
    budget_bytes: int = 0
    simulated_peak_bytes: int = 0
    simulated_step_s: float = 0.0
    runtime: str = ""
    #: The instance index of the operator the step is at (0 before the step starts).
    op_index: Any = None
    #: The tracker's peak of live activation bytes during the step (`StorageTracker`).
    measured_peak_bytes: int | None = None
    #: How far the measured peak ended above ``budget_bytes`` (0 when within).
    over_budget_bytes: int = 0
    #: CUDA: ``torch.cuda.max_memory_allocated`` over the step, above what was allocated
    #: before it: gradients, kernel workspace and allocator rounding the tracker does not see.
    #: None without CUDA (CPU kernel scratch is seen by neither).
    cuda_peak_bytes: int | None = None
    #: Saved tensors planned to swap or recompute that a reference outside autograd kept
    #: alive (names), and their bytes: not in ``swapped_bytes`` / ``recomputed_bytes``.
    held_tensors: list[str] = field(default_factory=list)
    held_bytes: int = 0
    #: The operator running when the measured peak was reached ("" when unknown).
    peak_op: str = ""
    #: Saved tensors autograd still held when the step ended, and their bytes: a graph kept
    #: with ``backward(retain_graph=True)`` (or an output still referenced whose graph the
    #: backward pass did not reach) holds each past its last reader, where the plan frees it.
    retained_tensors: int = 0
    retained_bytes: int = 0


def __getattr__(name: str) -> Any:
    # executor and memory import torch at the top: loaded on first use, so this package (and
    # check_plan) works without the torch extra.
    if name == "RUNTIME_MODES":
        # Simulator runtime -> how this package runs it (`ExecutionMode`): read from the one
        # runtime registry at each use, so the names are the registered ones.
        return execution_modes()
    # lazy (each below): the module imports torch, an optional dependency
    if name == "StepMismatchError":
        from slackswap.runtime.executor import StepMismatchError  # lazy: imports torch

        return StepMismatchError
    if name in ("prepare", "PlannedStep", "ShapeChangeError"):
        require_torch()  # one line saying how to install the extra, not an ImportError
        from slackswap.runtime import training  # lazy: imports torch

        return getattr(training, name)
    if name == "StorageTracker":
        from slackswap.runtime.memory import StorageTracker  # lazy: imports torch

        return StorageTracker
    raise AttributeError(f"module 'slackswap.runtime' has no attribute {name!r}")


def check_plan(
    plan: Plan,
    budget: Budget | float | str,
    *,
    instance: Instance | None = None,
    runtime: str | None = None,
) -> RunStats:
    """Refuse a plan for another instance, a runtime this package cannot run, or a plan that
    does not fit ``budget`` in the simulator; the stats the simulator predicts otherwise."""
    if not isinstance(plan, Plan):
        raise PlanError(f"plan: expected a slackswap Plan, got {type(plan).__name__}")
    inst = plan.instance
    if instance is not None and instance.content_hash != plan.instance_hash:
        raise PlanError(
            f"plan made for instance {inst.name!r} (hash {plan.instance_hash[:12]}), not for "
            f"{instance.name!r} (hash {instance.content_hash[:12]})"
        )
    rt = runtime or plan.runtime
    modes = execution_modes()
    if rt not in modes:
        raise PlanError(
            f"runtime = {rt!r}: slackswap.runtime runs {', '.join(modes)} "
            "(pass runtime='barrier-free' to run the plan's actions barrier-free)"
        )
    b = Budget.parse(budget)
    sim = simulate(inst, plan, b, runtime=rt)
    if not sim.feasible:
        raise PlanError(
            f"the plan does not fit the budget {b} ({format_bytes(sim.budget_bytes)}): {sim.reason}"
        )
    return RunStats(
        budget_bytes=sim.budget_bytes,
        simulated_peak_bytes=sim.peak_bytes,
        simulated_step_s=sim.step_s,
        runtime=rt,
    )


@contextmanager
def apply(
    plan: Plan,
    budget: Budget | float | str,
    *,
    model: torch.nn.Module | None = None,
    instance: Instance | None = None,
    runtime: str | None = None,
    schedule: str | None = None,
    tracker: StorageTracker | None = None,
    _executor: Any = None,
) -> Iterator[RunStats]:
    """Run the step inside the ``with`` block under ``plan`` (see `slackswap.runtime`).

    ``budget``: a `Budget`, a fraction of P or a string as ``--budget`` takes. ``model``: the
    step's module (default: the first module called inside the block). ``instance``: refuse a
    plan made for another instance. ``runtime``: run the actions under another runtime than
    the plan's (``barrier-free``, ``layer-prefetch`` or ``sync``). ``schedule``: when copies
    run; ``"live"`` (default on CUDA) starts each H2D copy by the look-ahead rule as the step
    runs; ``"simulated"`` (default without CUDA, where copies are synchronous and take no
    modelled link time) replays the simulator's copy times for this plan at operator
    granularity, so the measured memory checks the simulator's accounting; live copies follow
    the runtime's look-ahead from the registry (`policy.runtime_policy`), and a runtime whose
    rules cannot be followed live is refused before the step. ``tracker``: a `StorageTracker`
    the caller entered around the block, read instead of one of this function's own. Yields a
    `RunStats`, filled on exit. A step that ends above the budget by the tracker gets a
    `BudgetWarning`; saved tensors a reference outside autograd kept alive get a
    `HeldTensorWarning` naming them. (``_executor``: a `PlanExecutor` subclass, for the
    training path's checked step.)
    """
    require_torch()
    import torch

    from slackswap.runtime.executor import PlanExecutor  # lazy: imports torch, after the check

    stats = check_plan(plan, budget, instance=instance, runtime=runtime)
    if schedule is None:
        schedule = "live" if torch.cuda.is_available() else "simulated"
    if schedule not in ("live", "simulated"):
        raise PlanError(f"schedule = {schedule!r}: expected 'live' or 'simulated'")
    mode = runtime_policy(stats.runtime, live=schedule == "live")
    replay = None
    if schedule == "simulated":
        replay = simulated_schedule(plan.instance, plan.actions, stats.budget_bytes, stats.runtime)
    ex = (_executor or PlanExecutor)(
        plan.instance,
        plan.actions,
        stats.budget_bytes,
        model,
        lookahead_ops=mode.lookahead_ops,
        overlap=mode.overlap,
        prefetch=mode.prefetch,
        schedule=replay,
    )
    stats.op_index = ex.current_op
    own = tracker is None
    if tracker is None:
        from slackswap.runtime.memory import StorageTracker  # lazy: imports torch

        tracker = StorageTracker(() if model is None else model.parameters())
        tracker.op_index = ex.current_op
        if model is None:
            ex.on_adopt = lambda m: tracker.watch_params(m.parameters())
    try:
        with ExitStack() as stack:
            if own:
                stack.enter_context(tracker)  # outside the executor: it sees the runtime's own
            with ex.installed():
                try:
                    yield stats
                except BaseException as exc:
                    if ex.error is not None and exc is not ex.error:
                        raise ex.error from exc  # autograd may wrap the runtime's own error
                    raise
            ex.finish()
    finally:
        _fill(stats, ex, tracker, own)
        ex.close()
    _warn(stats)


def _fill(stats: RunStats, ex: Any, tracker: StorageTracker, own: bool) -> None:
    """What the runtime did and what the tracker measured, into ``stats``."""
    inst = ex.instance
    held_swap = sum(ex.entries[i].nbytes for i in ex.held if ex.entries[i].action == SWAP)
    held_recomp = sum(ex.entries[i].nbytes for i in ex.held if ex.entries[i].action == RECOMP)
    stats.swapped_bytes = ex.swapped_bytes - held_swap
    stats.h2d_bytes = ex.h2d_bytes
    stats.recomputed_bytes = ex.recomputed_bytes - held_recomp
    stats.rebuilds = ex.rebuilds
    stats.unplanned_packs = ex.unplanned_packs
    stats.held_tensors = [str(inst.tensor_name[i]) for i in ex.held]
    stats.held_bytes = held_swap + held_recomp
    stats.measured_peak_bytes = int(tracker.peak_bytes)
    stats.over_budget_bytes = max(0, stats.measured_peak_bytes - stats.budget_bytes)
    stats.cuda_peak_bytes = tracker.cuda_peak_bytes if own else tracker.cuda_peak_now()
    o = tracker.peak_op
    stats.peak_op = str(inst.op_name[o]) if o is not None and 0 <= o < inst.n_ops else ""
    retained = [e for e in ex.entries if e.packed and not e.released]
    stats.retained_tensors = len(retained)
    stats.retained_bytes = sum(e.nbytes for e in retained)


def _warn(stats: RunStats) -> None:
    if stats.held_tensors:
        names = ", ".join(repr(n) for n in stats.held_tensors[:3])
        more = f" and {len(stats.held_tensors) - 3} more" if len(stats.held_tensors) > 3 else ""
        warnings.warn(
            HeldTensorWarning(
                f"{len(stats.held_tensors)} saved tensor(s) planned to swap or recompute "
                f"({format_bytes(stats.held_bytes)}) stayed referenced outside autograd after "
                f"their last forward use, so their memory was never freed: {names}{more} (a "
                "forward hook or a variable keeping activations?)"
            ),
            stacklevel=4,
        )
    if stats.over_budget_bytes > 0:
        at = f" at {stats.peak_op!r}" if stats.peak_op else ""
        warnings.warn(
            BudgetWarning(
                f"the step peaked at {format_bytes(stats.measured_peak_bytes or 0)}{at} by the "
                f"tracker, {format_bytes(stats.over_budget_bytes)} over the budget "
                f"{format_bytes(stats.budget_bytes)} (simulated "
                f"{format_bytes(stats.simulated_peak_bytes)}){_retained(stats)}"
            ),
            stacklevel=4,
        )


def _retained(stats: RunStats) -> str:
    """Why a step may end above its budget that no plan can help: autograd held on."""
    if not stats.retained_tensors:
        return ""
    return (
        f"; autograd still held {stats.retained_tensors} saved tensor(s) "
        f"({format_bytes(stats.retained_bytes)}) when the step ended (backward(retain_graph="
        "True) keeps each until the graph goes; the plan frees it after its last reader)"
    )
