"""The checked path: `check_plan` (a plan refused before anything runs) and `apply` (one step
under a plan, every operator matched to the profile; see `slackswap.runtime`). No torch import
at module level: `check_plan` works without the torch extra."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from slackswap.console import format_bytes
from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan, PlanError
from slackswap.runtime.observer import StepObserver
from slackswap.runtime.policy import runtime_policy
from slackswap.runtime.schedule import simulated_schedule
from slackswap.runtime.stats import RunStats, forward_hooked_modules, warn_about
from slackswap.simulator import simulate
from slackswap.simulator.policies import execution_modes
from slackswap.torchstep import require_torch

if TYPE_CHECKING:
    import torch

    from slackswap.runtime.memory import StorageTracker

__all__ = ["apply", "check_plan"]


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
    observer: StepObserver | None = None,
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
    `HeldTensorWarning` naming them. ``observer``: a `StepObserver` told of the step as it
    runs (the training path's first step learns from it).
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
    ex = PlanExecutor(
        plan.instance,
        plan.actions,
        stats.budget_bytes,
        model,
        lookahead_ops=mode.lookahead_ops,
        overlap=mode.overlap,
        prefetch=mode.prefetch,
        schedule=replay,
        observer=observer,
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
    warn_about(stats)


def _fill(stats: RunStats, ex: Any, tracker: StorageTracker, own: bool) -> None:
    """What the runtime did and what the tracker measured, into ``stats``."""
    inst = ex.instance
    held = list(ex.held)
    hooked = forward_hooked_modules(ex.model) if held else []
    if not hooked:
        # A kept tensor alive after its last backward reader with no forward hook to blame: a
        # variable of the caller's (the model's output, say), the caller's own memory.
        held = [i for i in held if ex.entries[i].action != KEEP]
    held_swap = sum(ex.entries[i].nbytes for i in held if ex.entries[i].action == SWAP)
    held_recomp = sum(ex.entries[i].nbytes for i in held if ex.entries[i].action == RECOMP)
    stats.swapped_bytes = ex.swapped_bytes - held_swap
    stats.h2d_bytes = ex.h2d_bytes
    stats.recomputed_bytes = ex.recomputed_bytes - held_recomp
    stats.rebuilds = ex.rebuilds
    stats.unplanned_packs = ex.unplanned_packs
    stats.held_tensors = [str(inst.tensor_name[i]) for i in held]
    stats.held_bytes = sum(ex.entries[i].nbytes for i in held)
    stats.autocast_cache = ex.autocast_cache
    closure = ex.resaved_after_release | ex.freed_in_backward
    stats.checkpoint_closure = bool(closure.intersection(held))
    if held:
        stats.hooked_modules = hooked
    stats.measured = "operator outputs"
    stats.measured_peak_bytes = int(tracker.peak_bytes)
    stats.over_budget_bytes = max(0, stats.measured_peak_bytes - stats.budget_bytes)
    stats.cuda_peak_bytes = tracker.cuda_peak_bytes if own else tracker.cuda_peak_now()
    o = tracker.peak_op
    stats.peak_op = str(inst.op_name[o]) if o is not None and 0 <= o < inst.n_ops else ""
    retained = [e for e in ex.entries if e.packed and not e.released]
    stats.retained_tensors = len(retained)
    stats.retained_bytes = sum(e.nbytes for e in retained)
