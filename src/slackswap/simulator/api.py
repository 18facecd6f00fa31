"""`simulate` (one plan, optional timeline), `simulate_many` (a population, 1-2 threads) and
`score_many` (a population, only what a search ranks plans by)."""

from __future__ import annotations

from typing import Any

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import Budget, Plan, PlanError, check_actions
from slackswap.simulator.policies import get_runtime
from slackswap.simulator.result import BatchResult, SimResult


def _budget_bytes(inst: Instance, budget: Budget | float | str) -> int:
    return Budget.parse(budget).bytes_for(inst)


def _actions(inst: Instance, plan: Plan | Any, runtime: str | None) -> tuple[np.ndarray, str]:
    if isinstance(plan, Plan):
        if plan.instance is not inst and plan.instance_hash != inst.content_hash:
            raise PlanError(
                f"plan made for instance {plan.instance.name!r} "
                f"(hash {plan.instance_hash[:12]}), not for {inst.name!r} "
                f"(hash {inst.content_hash[:12]})"
            )
        return plan.actions, runtime or plan.runtime
    return check_actions(inst, plan), runtime or "barrier-free"


def simulate(
    instance: Instance,
    plan: Plan | Any,
    budget: Budget | float | str,
    runtime: str | None = None,
    timeline: bool = False,
) -> SimResult:
    """Simulate one training step of ``plan`` under ``budget`` (a `Budget` or a fraction of P).

    ``plan`` is a `Plan` or an actions array (tensor order; 0 keep, 1 swap, 2 recomp).
    ``runtime`` defaults to the plan's (``"barrier-free"`` for an array). Deterministic and pure;
    an infeasible plan gives ``feasible=False`` with a reason, never an exception. See
    `slackswap.simulator` for the semantics.
    """
    acts, runtime = _actions(instance, plan, runtime)
    rt = get_runtime(runtime)
    return rt.simulate(instance, acts, _budget_bytes(instance, budget), timeline)


def check_population(instance: Instance, actions_2d: Any) -> np.ndarray:
    """A population as a C-contiguous int8 (n_plans, n_tensors) array with values 0..2."""
    try:
        a = np.asarray(actions_2d)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"actions_2d: not an integer array ({exc})") from None
    if a.ndim != 2 or a.shape[1] != instance.n_tensors:
        raise PlanError(
            f"actions_2d: expected shape (n_plans, {instance.n_tensors}), got {a.shape}"
        )
    # As a single plan's actions (`check_actions`): NaN would cast to 0 (keep), 1.7 to 1 and
    # True to 1, each a plan nobody wrote.
    if a.size and not np.issubdtype(a.dtype, np.integer):
        whole = np.issubdtype(a.dtype, np.floating) and bool(np.all(a == np.round(a)))
        if not whole:
            at = np.argwhere(a != np.round(a))[0] if np.issubdtype(a.dtype, np.floating) else None
            where = (
                "" if at is None else f" (actions_2d[{at[0]}, {at[1]}] = {a[tuple(at)].item()!r})"
            )
            raise PlanError(
                "actions_2d: expected integers 0 (keep), 1 (swap), 2 (recomp), got "
                f"{a.dtype}{where}"
            )
    if a.size and (a.min() < 0 or a.max() > 2):
        bad = np.argwhere((a < 0) | (a > 2))[0]
        raise PlanError(
            f"actions_2d[{bad[0]}, {bad[1]}] = {a[bad[0], bad[1]].item()!r}: must be 0, 1 or 2"
        )
    out = np.ascontiguousarray(a, dtype=np.int8)
    return out if out.flags.writeable else out.copy()  # one kernel signature


def simulate_many(
    instance: Instance,
    actions_2d: Any,
    budget: Budget | float | str,
    runtime: str = "barrier-free",
    n_jobs: int = 1,
) -> BatchResult:
    """Simulate a population (n_plans x n_tensors actions) under one budget and runtime.

    The genetic search's fitness: the compiled kernel loops over plans with scratch arrays
    reused; ``n_jobs=2`` splits the population over two threads (the kernel releases the GIL).
    """
    acts = check_population(instance, actions_2d)
    rt = get_runtime(runtime)
    return rt.simulate_population(instance, acts, _budget_bytes(instance, budget), n_jobs)


def score_many(
    instance: Instance, actions_2d: Any, budget: Budget | float | str, runtime: str = "barrier-free"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A population's step seconds (inf when infeasible), bytes over the budget (0 when
    feasible) and whether each plan recomputes a tensor nothing can rebuild; the values
    `simulate_many` gives, bit for bit, in one thread.

    The genetic search's fitness calls this once per generation, so it does only what the
    search ranks by: it skips the other metrics' arrays and reads the unrebuildable case off the
    kernel's failure reason rather than a second pass over the plans (the saving is in
    benchmarks/README.md, "Figures from module docstrings")."""
    acts = check_population(instance, actions_2d)
    rt = get_runtime(runtime)
    return rt.score_population(instance, acts, _budget_bytes(instance, budget))
