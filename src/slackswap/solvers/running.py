"""`run`: solve one case, time it and score its plan in the simulator, as a flat `RunRecord`.

Solvers never time or score themselves: `run` starts the solve's `Deadline` from the time
limit (less the solver's ``margin``), calls the solver's ``solve`` with it, simulates the plan and returns one row with provenance. An exception inside a solver
becomes an ``error`` record, never a crash. `smallest_feasible_budget` bisects the budget of an
infeasible case for the smallest one the solver fits.
"""

from __future__ import annotations

import json
import math
import numbers
import reprlib
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from slackswap import __version__, rowschema
from slackswap.errors import MAX_SECONDS, MAX_SEED, ArgumentError, ArgumentTypeError
from slackswap.instance import Instance
from slackswap.instances.catalog import load
from slackswap.plan import Budget, Plan
from slackswap.simulator import SimResult, simulate
from slackswap.solvers.base import REGISTRY, Solution, Solver, Status
from slackswap.solvers.deadline import Deadline

#: A solver that overruns its time limit by more than this share is reported as a timeout.
TIME_LIMIT_SLACK = 0.10

#: A lower bound above its plan's simulated step by more than this share (floating-point noise
#: between the bound engine's sums and the simulator's) makes the record an ``error``.
BOUND_REL_TOL = 1e-9


@dataclass
class RunRecord:
    """One (instance, budget, solver, seed) result: a flat row with provenance."""

    instance: str
    instance_hash: str
    solver: str
    solver_config: dict[str, Any]
    seed: int
    time_limit_s: float | None
    budget_fraction: float
    budget_bytes: int
    status: Status
    runtime: str
    step_s: float | None
    ideal_s: float
    throughput: float | None
    recompute_s: float | None
    fwd_stall_s: float | None
    bwd_stall_s: float | None
    d2h_bytes: float | None
    h2d_bytes: float | None
    peak_bytes: float | None
    swap_bytes: int | None
    recompute_bytes: int | None
    plan_s: float
    lower_bound_s: float | None
    gap: float | None
    claimed_step_s: float | None
    min_budget_bytes: int | None
    evaluations: int | None
    error: str | None
    reason: str
    version: str = __version__
    plan: Plan | None = field(default=None, repr=False, compare=False)
    sim: SimResult | None = field(default=None, repr=False, compare=False)
    history: list[tuple[float, int, float]] = field(default_factory=list, repr=False)
    #: The solver's ``Solution.info`` (e.g. ``found_by``: where the exact solvers' plan came
    #: from); not part of the flat row.
    info: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    #: Keys of the flat row (``compare --json``, CSV columns), in order.
    ROW_KEYS: ClassVar[tuple[str, ...]] = rowschema.RECORD_KEYS

    def to_row(self) -> dict[str, Any]:
        """The flat dict: JSON-ready, one DataFrame row (solver_config as a JSON string)."""
        d = {k: getattr(self, k) for k in self.ROW_KEYS}
        d["status"] = self.status.value
        d["solver_config"] = json.dumps(self.solver_config, sort_keys=True, default=str)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
        return d


def run(
    instance: Instance | str,
    budget: Budget | float | str,
    solver: str | Solver,
    *,
    time_limit: float | None = None,
    seed: int = 0,
    options: dict[str, Any] | None = None,
    find_min_budget: bool = True,
) -> RunRecord:
    """Solve, time, and score one case in the simulator; never raises for a solver's failure.

    The arguments come in the order of `solve` and `simulate`: instance, budget, then the solver
    (a registered name or a `Solver`).
    """
    _check_arguments(instance, solver, time_limit, seed)
    if not isinstance(find_min_budget, bool):
        raise ArgumentTypeError(
            f"find_min_budget: expected True or False, got {reprlib.repr(find_min_budget)}"
        )
    if options is not None and not isinstance(options, Mapping):
        raise ArgumentTypeError(
            f"options: expected a dict of solver options, got {reprlib.repr(options)}"
        )
    inst = load(instance) if isinstance(instance, str) else instance
    bud = budget if isinstance(budget, Budget) else Budget.parse(budget)
    if isinstance(solver, str):
        entry = REGISTRY[solver]
        solver_obj = entry.make(**(options or {}))
        label = entry.label(options or {})
    else:
        solver_obj, label = solver, repr(solver)
    budget_bytes = bud.bytes_for(inst)
    base: dict[str, Any] = dict(
        instance=inst.name,
        instance_hash=inst.content_hash,
        solver=label,
        solver_config={"key": solver_obj.key, **solver_obj.get_params()},
        seed=seed,
        time_limit_s=time_limit,
        budget_fraction=budget_bytes / inst.peak_bytes,
        budget_bytes=budget_bytes,
        ideal_s=inst.ideal_step_s,
    )
    empty: dict[str, Any] = dict(
        step_s=None, throughput=None, recompute_s=None, fwd_stall_s=None, bwd_stall_s=None,
        d2h_bytes=None, h2d_bytes=None, peak_bytes=None, swap_bytes=None, recompute_bytes=None,
        lower_bound_s=None, gap=None, claimed_step_s=None, min_budget_bytes=None,
        evaluations=None, error=None, reason="", runtime=getattr(solver_obj, "runtime", ""),
    )  # fmt: skip

    deadline = Deadline.begin(time_limit, margin=getattr(solver_obj, "margin", 0.0))
    try:
        out = solver_obj.solve(inst, bud, deadline=deadline, seed=seed)
    except Exception as exc:  # a solver's failure is a result, not a crash
        plan_s = deadline.elapsed()
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        msg = f"{type(exc).__name__}: {exc} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"
        return RunRecord(**base, **{**empty, "error": msg}, status=Status.ERROR, plan_s=plan_s)
    plan_s = deadline.elapsed()
    sol = out if isinstance(out, Solution) else Solution(plan=out)
    bad: Exception | None = None
    sim: SimResult | None = None
    if sol.plan is not None and not isinstance(sol.plan, Plan):
        bad = TypeError(f"{label}.solve returned {type(sol.plan).__name__}, not a Plan")
    elif sol.plan is not None:
        try:
            sim = simulate(inst, sol.plan, bud)
        except Exception as exc:  # e.g. a plan for a runtime the simulator does not know
            bad = exc
    if bad is not None:
        msg = f"{type(bad).__name__}: {bad}"
        return RunRecord(**base, **{**empty, "error": msg}, status=Status.ERROR, plan_s=plan_s)

    fields: dict[str, Any] = dict(empty)
    fields.update(
        lower_bound_s=sol.lower_bound_s,
        claimed_step_s=sol.claimed_step_s,
        min_budget_bytes=sol.min_budget_bytes,
        evaluations=sol.evaluations,
    )
    timed_out = sol.timed_out or (
        time_limit is not None and plan_s > time_limit * (1 + TIME_LIMIT_SLACK)
    )
    if sol.plan is None or sim is None:
        status = Status.TIMEOUT if timed_out and not sol.proven_infeasible else Status.INFEASIBLE
        fields["reason"] = str(sol.info.get("reason", "the solver found no plan"))
    else:
        plan = sol.plan
        fields.update(
            runtime=plan.runtime,
            swap_bytes=plan.swap_bytes,
            recompute_bytes=plan.recompute_bytes,
            peak_bytes=sim.peak_bytes,
            reason=sim.reason,
        )
        if sim.feasible:
            fields.update(
                step_s=sim.step_s,
                throughput=sim.throughput,
                recompute_s=sim.recompute_s,
                fwd_stall_s=sim.fwd_stall_s,
                bwd_stall_s=sim.bwd_stall_s,
                d2h_bytes=sim.d2h_bytes,
                h2d_bytes=sim.h2d_bytes,
            )
            if timed_out:
                status = Status.TIMEOUT
            elif sol.proven_optimal:
                status = Status.OPTIMAL
            else:
                status = Status.FEASIBLE
            if sol.lower_bound_s is not None and sol.lower_bound_s > 0:
                fields["gap"] = (sim.step_s - sol.lower_bound_s) / sol.lower_bound_s
            lb = sol.lower_bound_s
            if lb is not None and lb > sim.step_s * (1 + BOUND_REL_TOL):
                # the solver's own plan refutes its bound: a defect in the bound, never capped
                status = Status.ERROR
                fields["error"] = (
                    f"invalid lower bound: {lb!r} s is above the plan's simulated step "
                    f"{sim.step_s!r} s"
                )
        else:
            status = Status.TIMEOUT if timed_out else Status.INFEASIBLE
    if status is Status.INFEASIBLE and fields["min_budget_bytes"] is None and find_min_budget:
        fields["min_budget_bytes"] = smallest_feasible_budget(solver_obj, inst, seed=seed)
    return RunRecord(
        **base,
        **fields,
        status=status,
        plan_s=plan_s,
        plan=sol.plan,
        sim=sim,
        history=list(sol.history),
        info=dict(sol.info),
    )


def smallest_feasible_budget(
    solver: Solver,
    instance: Instance,
    *,
    seed: int = 0,
    rel_tol: float = 0.005,
    max_seconds: float = 5.0,
) -> int | None:
    """Bisect the budget (bytes) for the smallest one at which ``solver``'s plan simulates.

    Only for deterministic solvers that are not searches (others would need their full time
    limit per probe); returns None when the solver fits nothing up to P or the search runs out of
    ``max_seconds``. Assumes feasibility is monotone in the budget, which holds for the
    heuristics here up to the bisection's tolerance.
    """

    if solver.tags.uses_time_limit or not solver.tags.deterministic:
        return None
    clock = Deadline.begin(max_seconds)

    def fits(nbytes: int) -> bool:
        b = Budget.bytes(nbytes)
        try:
            out = solver.solve(instance, b, deadline=Deadline.never(), seed=seed)
        except Exception:
            return False
        plan = out.plan if isinstance(out, Solution) else out
        return plan is not None and simulate(instance, plan, b).feasible

    hi = int(instance.peak_bytes)
    if not fits(hi):
        return None
    lo = 0
    while hi - lo > rel_tol * instance.peak_bytes:
        if clock.expired():
            break
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _check_arguments(instance: Any, solver: Any, time_limit: Any, seed: Any) -> None:
    """Refuse, before any work, what would fail later or be recorded wrongly: the CLI's
    wording, as a `ValueError` (out of range) or `TypeError` (wrong type) that is a UserError."""
    if not isinstance(instance, Instance | str):
        raise ArgumentTypeError(
            f"instance: expected an Instance or a catalog name or file, got {instance!r}"
        )
    if not isinstance(solver, str) and not callable(getattr(solver, "solve", None)):
        raise ArgumentTypeError(f"solver: expected a solver name or a Solver, got {solver!r}")
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real):
            raise ArgumentTypeError(
                f"time_limit: expected a positive number of seconds, got {reprlib.repr(time_limit)}"
            )
        try:
            seconds = float(time_limit)
        except OverflowError:  # an integer past any float (10**400)
            seconds = math.inf
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
            raise ArgumentError(
                f"time_limit: expected a positive number of seconds (at most {MAX_SECONDS:g}), "
                f"got {reprlib.repr(time_limit)}"
            )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ArgumentTypeError(
            f"seed: expected an integer seed from 0 to {MAX_SEED}, got {reprlib.repr(seed)}"
        )
    if not 0 <= int(seed) <= MAX_SEED:
        raise ArgumentError(
            f"seed: expected an integer seed from 0 to {MAX_SEED}, got {reprlib.repr(seed)}"
        )


def solve(
    instance: Instance | str,
    budget: Budget | float | str,
    solver: str = "slackswap",
    *,
    time_limit: float | None = None,
    seed: int = 0,
    **options: Any,
) -> RunRecord:
    """Run one registered solver on one instance and budget; the plan is on ``record.plan``."""
    return run(instance, budget, solver, time_limit=time_limit, seed=seed, options=options)
