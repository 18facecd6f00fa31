"""`run`: solve one case, time it and score its plan in the simulator, as a flat `RunRecord`.

Solvers never time or score themselves: `run` starts the solve's `Deadline` from the time
limit, calls ``solve`` on a copy of the solver with it, simulates the plan and returns one row
with provenance. An exception inside a solver
becomes an ``error`` record, never a crash. `smallest_feasible_budget` bisects the budget of an
infeasible case for the smallest one the solver fits.

Statuses say what the run holds, ``stopped_by`` what ended it: a run that reaches its time
limit holding a plan that fits is ``feasible`` (``optimal`` when its own bound proves the plan)
with ``stopped_by = "time limit"``; ``timeout`` is only a run stopped by the clock with no plan
that fits. ``reason`` says why for every record that is not plainly feasible.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import reprlib
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from slackswap import __version__, rowschema
from slackswap.errors import MAX_SECONDS, MAX_SEED, ArgumentError, ArgumentTypeError, UserError
from slackswap.instance import Instance
from slackswap.instances.catalog import load
from slackswap.plan import Budget, Plan
from slackswap.simulator import SimResult, simulate
from slackswap.solvers.base import Solution, Solver, Status
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.registry import REGISTRY

#: The time limit, in seconds, `run` gives a solver tagged ``exact`` when none is named: the
#: driver owns the default (as Optuna's study owns its timeout), no solver has an option for
#: it. Other solvers get none and end by their own rules (a search by its evaluation or
#: generation budget, or its convergence). An exact solver handed no time limit directly
#: (``deadline=Deadline.never()``) ends too, when its loops converge or its proof closes.
EXACT_TIME_LIMIT_S = 60.0

#: A solver that overruns its time limit by more than this share is reported as a timeout.
TIME_LIMIT_SLACK = 0.10

#: What ends a run (the ``stopped_by`` column): the clock, a work budget, a plan at the proven
#: bound, a search that stopped improving by its own rule, its generation count or target, or a
#: one-pass heuristic that finished; ``error`` for a run that raised; ``wall-clock guard`` for a
#: sweep job stopped by its hard limit (``--job-timeout``).
STOPPED_BY = (
    "time limit", "evaluations", "bound reached", "converged", "generations", "target reached",
    "finished", "error", "wall-clock guard",
)  # fmt: skip

#: A search's ``info["stop"]`` words as ``stopped_by`` values (the genetic search says each;
#: the exact solvers say ``evaluations`` when their evaluation budget ended the search).
_SEARCH_STOPS = {
    "time": "time limit",
    "evaluations": "evaluations",
    "generations": "generations",
    "target": "target reached",
}

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
    stopped_by: str
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
        d["history"] = history_json(self.history)
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
    (a registered name or a `Solver`). ``time_limit`` in seconds; None: `EXACT_TIME_LIMIT_S`
    for a solver tagged ``exact``, no time limit for the others (the record's
    ``time_limit_s`` says which limit the solve had).
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
        # pymoo's rule: the solve works on a copy, so a solver object that keeps state (a cache,
        # a counter) never changes the caller's object nor, through it, the next run's result
        solver_obj, label = _copy_of(solver), repr(solver)
        _checked_options(solver_obj, label)
    budget_bytes = bud.bytes_for(inst)
    if time_limit is None and solver_obj.tags.exact:
        time_limit = EXACT_TIME_LIMIT_S
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

    deadline = Deadline.begin(time_limit)
    try:
        out = solver_obj.solve(inst, bud, deadline=deadline, seed=seed)
    except Exception as exc:  # a solver's failure is a result, not a crash
        plan_s = deadline.elapsed()
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        msg = f"{type(exc).__name__}: {exc} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"
        failed = {**empty, "error": msg, "reason": f"the solver raised {type(exc).__name__}"}
        return RunRecord(**base, **failed, status=Status.ERROR, stopped_by="error", plan_s=plan_s)
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
        failed = {**empty, "error": msg, "reason": "the solver's plan could not be scored"}
        return RunRecord(**base, **failed, status=Status.ERROR, stopped_by="error", plan_s=plan_s)

    fields: dict[str, Any] = dict(empty)
    fields.update(
        lower_bound_s=sol.lower_bound_s,
        claimed_step_s=sol.claimed_step_s,
        min_budget_bytes=sol.min_budget_bytes,
        evaluations=sol.evaluations,
    )
    overran = time_limit is not None and plan_s > time_limit * (1 + TIME_LIMIT_SLACK)
    stopped_by = _stopped_by(sol, solver_obj, sol.timed_out or overran)
    # the clock ended the run (a search says so by its stop rule): without a plan, a timeout
    timed_out = stopped_by == "time limit"
    if sol.plan is None or sim is None:
        status = Status.TIMEOUT if timed_out and not sol.proven_infeasible else Status.INFEASIBLE
        fields["reason"] = str(sol.info.get("reason", "the solver found no plan"))
        if status is Status.TIMEOUT:
            fields["reason"] = f"no plan by {_limit_text(time_limit)}: " + fields["reason"]
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
            # A run the clock stopped still holds its plan: feasible (or optimal), never a
            # timeout; ``stopped_by`` says the clock ended it.
            status = Status.OPTIMAL if sol.proven_optimal else Status.FEASIBLE
            if sol.lower_bound_s is not None and sol.lower_bound_s > 0:
                fields["gap"] = (sim.step_s - sol.lower_bound_s) / sol.lower_bound_s
            fields["reason"] = _feasible_reason(
                status, stopped_by, time_limit, plan_s, fields["gap"], sol.evaluations
            )
            lb = sol.lower_bound_s
            if lb is not None and lb > sim.step_s * (1 + BOUND_REL_TOL):
                # the solver's own plan refutes its bound: a defect in the bound, never capped
                status = Status.ERROR
                fields["error"] = (
                    f"invalid lower bound: {lb!r} s is above the plan's simulated step "
                    f"{sim.step_s!r} s"
                )
                fields["reason"] = "the solver's lower bound is above its own plan's step"
        else:
            status = Status.TIMEOUT if timed_out else Status.INFEASIBLE
            if status is Status.TIMEOUT:
                fields["reason"] = f"no plan that fits by {_limit_text(time_limit)}: {sim.reason}"
    if status is Status.INFEASIBLE and fields["min_budget_bytes"] is None and find_min_budget:
        fields["min_budget_bytes"] = smallest_feasible_budget(solver_obj, inst, seed=seed)
    return RunRecord(
        **base,
        **fields,
        status=status,
        stopped_by=stopped_by,
        plan_s=plan_s,
        plan=sol.plan,
        sim=sim,
        history=list(sol.history),
        info=dict(sol.info),
    )


def _stopped_by(sol: Solution, solver: Solver, timed_out: bool) -> str:
    """What ended the run (one of `STOPPED_BY`), from the solution and the solver's options."""
    if sol.proven_optimal:
        return "bound reached"
    if timed_out:
        return "time limit"
    stop = sol.info.get("stop")
    if isinstance(stop, str) and stop in _SEARCH_STOPS:
        return _SEARCH_STOPS[stop]
    if not solver.tags.uses_time_limit:
        return "finished"
    return "converged"


def _feasible_reason(
    status: Status,
    stopped_by: str,
    time_limit: float | None,
    plan_s: float,
    gap: float | None,
    evaluations: int | None,
) -> str:
    """Why a run with a plan that fits ended as it did; empty when it is plainly feasible (a
    heuristic that finished, a search that stopped by its own rule)."""
    if status is Status.OPTIMAL:
        return "optimal: the plan's simulated step equals the solver's proven lower bound"
    proof = "" if gap is None else f"; {100 * gap:.3g}% above its proven bound, not optimal"
    if stopped_by == "time limit":
        over = 0.0 if time_limit is None else plan_s / time_limit - 1
        late = f", overran it by {100 * over:.0f}%" if over > TIME_LIMIT_SLACK else ""
        return f"stopped by {_limit_text(time_limit)} holding a plan{late}{proof}"
    if stopped_by == "evaluations":
        return f"stopped after {evaluations or 0:,} plans evaluated (its work budget){proof}"
    return proof.removeprefix("; ")


def _limit_text(time_limit: float | None) -> str:
    return "its time limit" if time_limit is None else f"its {time_limit:g} s time limit"


def history_json(history: list[tuple[float, int, float]]) -> str | None:
    """A search's history as the results file's ``history`` cell: JSON ``[[seconds, plans
    evaluated, best step s or null], ...]`` (null: no plan that fits yet); None when empty."""
    if not history:
        return None
    return json.dumps(
        [
            [round(float(t), 6), int(n), float(b) if math.isfinite(b) else None]
            for t, n, b in history
        ]
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
        try:  # each probe on a fresh copy, as `run`'s own solve: no probe sees another's state
            out = _copy_of(solver).solve(instance, b, deadline=Deadline.never(), seed=seed)
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


def _copy_of(solver: Solver) -> Solver:
    """A deep copy of ``solver`` for one solve; a solver that cannot be copied is the caller's
    error (`ArgumentTypeError`), named before any work."""
    try:
        return copy.deepcopy(solver)
    except Exception as exc:  # noqa: BLE001 - whatever deepcopy raises, the one line says why
        raise ArgumentTypeError(
            f"solver {solver!r}: cannot be copied ({type(exc).__name__}: {exc}); run() solves "
            "on a copy, so a solver's attributes must be options that deepcopy can copy"
        ) from None


def _checked_options(solver: Solver, label: str) -> None:
    """`Solver.check_options` before the clock starts: a bad value is the caller's error (one
    line, exit 2 at the CLI), not an ``error`` row after the run."""
    check = getattr(solver, "check_options", None)  # a duck-typed solver may not have it
    if check is None:
        return
    try:
        check()
    except UserError:
        raise
    except ValueError as exc:
        raise ArgumentError(f"solver {label}: {exc}") from None


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
    """Run one registered solver on one instance and budget; the plan is on ``record.plan``.

    ``time_limit`` in seconds; None (the default): `EXACT_TIME_LIMIT_S` for an exact solver
    (``milp``, ``cpsat``), none for the others, which end by their own rules.

    A solver's first solve in a process loads its numba code from the cache (or compiles it),
    inside its time limit and ``plan_s``: call ``slackswap.warm_up([solver])`` first, as the
    command line does, to leave that out."""
    return run(instance, budget, solver, time_limit=time_limit, seed=seed, options=options)
