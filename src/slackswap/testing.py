"""A conformance kit for solvers and runtimes: the checks slackswap's own suite runs, for your tests.

In the spirit of scikit-learn's ``check_estimator``: a solver's tests call ``check_solver``, a
runtime's ``check_runtime``; each raises AssertionError naming solver, instance, budget and what
broke. The individual checks are public too (``check_plans``, ``check_deterministic``, ...), so
a suite can parametrize them. A solver is a registry name or a `Solver` subclass.

The contract checked (see `slackswap.solvers.base`): a status that claims a plan comes with a
plan of one action per saved tensor that the simulator finds feasible within the budget, and
the record's figures are the simulator's; a lower bound never exceeds the simulated step, a
claimed step never undercuts it (exact solvers) or equals it (others); the instance is left
untouched; the same seed gives the same plan; options are stored as given, and the options a
solver reports construct one that gives the same plan; the time limit is honoured; a budget
below every plan's reach is an ``infeasible`` (or ``timeout``) record, never an exception, with
the smallest budget that fits for deterministic non-search solvers; records pickle, and a fresh
process repeats the run exactly.

``check_solver`` reruns the solver in a freshly spawned process: a script that calls it needs
the ``if __name__ == "__main__":`` guard (pytest needs nothing).

Settings: a solver with a ``max_evaluations`` option (a search) stops on a fixed work budget of
`SEARCH_EVALUATIONS` plans, so reruns repeat exactly; other solvers tagged ``uses_time_limit``
get `SEARCH_SECONDS`; the rest run without a limit.
"""

from __future__ import annotations

import math
import multiprocessing
import pickle
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model
from slackswap.instances.format import instance_to_dict
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan, PlanError
from slackswap.simulator import RUNTIMES, simulate, simulate_many
from slackswap.simulator.policies import get_runtime
from slackswap.solvers.base import Solver, Status, Tags
from slackswap.solvers.registry import REGISTRY
from slackswap.solvers.running import TIME_LIMIT_SLACK, RunRecord, run

#: Time limit (seconds) for solvers whose quality depends on it.
SEARCH_SECONDS = 0.5
#: Plans a search with a ``max_evaluations`` option may score (its time limit is then only a cap).
SEARCH_EVALUATIONS = 400
#: Cap (seconds) for searches stopped by their evaluation budget.
WORK_CAP_SECONDS = 60.0
#: Budgets (fractions of the no-swap peak P) every plan check runs at.
BUDGETS = (1.0, 0.7, 0.4)
#: Seconds allowed beyond the time limit for the runner's own bookkeeping (process noise on a
#: loaded machine), on top of the 10% the runner itself tolerates.
OVERHEAD_S = 0.25
#: Time limit (seconds) of the time-limit check for solvers that do not use one.
PLAIN_LIMIT_S = 5.0
#: Budget fraction far below any plan's reach.
TINY_BUDGET = 1e-4
_SAME = 1e-9  # relative tolerance between a record's figures and the simulator's


@cache
def small_instances() -> tuple[Instance, Instance]:
    """Two small instances every check defaults to: 2-layer GPT-2 XL and Llama-7B blocks."""

    return (
        build_model("gpt2-xl", layers=2, seq=256, batch=2, name="conf-gpt2"),
        build_model("llama-7b", layers=2, seq=256, batch=1, name="conf-llama"),
    )


@dataclass(frozen=True)
class SolverUnderTest:
    """A solver as the kit runs it: registry name or class, time limit and options."""

    name: str
    cls: type[Solver] | None = None  # None: the registry entry ``name``
    time_limit: float | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def tags(self) -> Tags:
        return self.cls.tags if self.cls is not None else REGISTRY[self.name].tags

    def option_defaults(self) -> dict[str, Any]:
        if self.cls is not None:
            return self.cls.option_defaults()
        return REGISTRY[self.name].defaults

    def solve(
        self,
        instance: Instance,
        budget: float | Budget,
        *,
        seed: int = 0,
        time_limit: float | None | str = "default",
        options: dict[str, Any] | None = None,
    ) -> RunRecord:
        """One run through `slackswap.solvers.run` (it times, scores and never raises)."""
        limit = self.time_limit if time_limit == "default" else time_limit
        if isinstance(limit, str):
            raise TypeError(f"time_limit={limit!r}: seconds, None or 'default'")
        opts = self.options if options is None else options
        if self.cls is not None:
            return run(instance, budget, self.cls(**opts), time_limit=limit, seed=seed)
        return run(instance, budget, self.name, time_limit=limit, seed=seed, options=opts or None)


def solver_under_test(
    solver: str | type[Solver] | SolverUnderTest,
    *,
    time_limit: float | None | str = "default",
    options: dict[str, Any] | None = None,
) -> SolverUnderTest:
    """Resolve a registry name or `Solver` subclass with the kit's settings (see the module
    docstring); ``time_limit``/``options`` given here win."""
    if isinstance(solver, SolverUnderTest):
        return solver
    if isinstance(solver, str):
        cls, name = None, solver
        REGISTRY[name]  # an unknown name fails here, naming the registered ones
    else:
        cls, name = solver, solver.key or solver.__name__
    probe = SolverUnderTest(name, cls)
    defaults = probe.option_defaults()
    if "max_evaluations" in defaults:
        limit: float | None = WORK_CAP_SECONDS
        opts: dict[str, Any] = {"max_evaluations": SEARCH_EVALUATIONS}
    else:
        limit, opts = (SEARCH_SECONDS if probe.tags.uses_time_limit else None), {}
    if isinstance(time_limit, str):
        if time_limit != "default":
            raise TypeError(f"time_limit={time_limit!r}: seconds, None or 'default'")
    else:
        limit = time_limit
    return SolverUnderTest(name, cls, limit, {**opts, **(options or {})})


def _where(s: SolverUnderTest, inst: Instance, budget: float | Budget) -> str:
    b = f"{100 * budget:g}% of P" if isinstance(budget, float | int) else str(budget)
    return f"solver {s.name!r} on {inst.name!r} at {b}"


def check_plans(
    solver: str | type[Solver] | SolverUnderTest,
    instance: Instance,
    budgets: Sequence[float] = BUDGETS,
    *,
    seed: int = 0,
) -> list[RunRecord]:
    """Every budget: the record agrees with its status, the plan with the simulator, bounds and
    claims with the simulated step; the instance is left untouched. Returns the records."""

    s = solver_under_test(solver)
    before = instance_to_dict(instance)
    records = []
    for frac in budgets:
        where = _where(s, instance, frac)
        rec = s.solve(instance, Budget.fraction(frac), seed=seed)
        records.append(rec)
        assert rec.status is not Status.ERROR, f"{where}: error record: {rec.error}"
        assert rec.instance_hash == instance.content_hash, f"{where}: record of another instance"
        if rec.status in (Status.FEASIBLE, Status.OPTIMAL):
            plan = rec.plan
            assert isinstance(plan, Plan), f"{where}: status {rec.status} without a plan"
            assert plan.actions.shape == (instance.n_tensors,), (
                f"{where}: the plan has {plan.actions.shape} actions for "
                f"{instance.n_tensors} saved tensors"
            )
            assert plan.instance_hash == instance.content_hash, f"{where}: plan of another instance"
            assert rec.runtime == plan.runtime, f"{where}: record runtime {rec.runtime!r}"
            sim = simulate(instance, plan, Budget.fraction(frac))
            assert sim.feasible, f"{where}: status {rec.status} but the simulator: {sim.reason}"
            assert sim.peak_bytes <= rec.budget_bytes, (
                f"{where}: peak {sim.peak_bytes} bytes above the budget {rec.budget_bytes}"
            )
            assert rec.step_s == sim.step_s, (
                f"{where}: record step {rec.step_s} s, simulator {sim.step_s} s"
            )
            assert rec.throughput is not None and math.isclose(
                rec.throughput, instance.ideal_step_s / sim.step_s, rel_tol=1e-6
            ), f"{where}: throughput {rec.throughput} is not ideal / step"
            assert rec.step_s >= instance.ideal_step_s * (1 - 1e-12), (
                f"{where}: step {rec.step_s} s below the ideal step {instance.ideal_step_s} s"
            )
            if rec.claimed_step_s is not None:
                if s.tags.exact:  # the model's own value for its plan: never above the truth
                    ok = rec.claimed_step_s <= sim.step_s * (1 + _SAME)
                else:  # a heuristic's claim is the simulator's value of its plan
                    ok = math.isclose(rec.claimed_step_s, sim.step_s, rel_tol=_SAME)
                assert ok, (
                    f"{where}: claimed step {rec.claimed_step_s} s against simulated {sim.step_s} s"
                )
        elif rec.status is Status.INFEASIBLE:
            assert rec.step_s is None and rec.throughput is None, (
                f"{where}: infeasible with a step time"
            )
            assert rec.reason, f"{where}: infeasible without a reason"
        if rec.lower_bound_s is not None and rec.step_s is not None:
            assert rec.lower_bound_s <= rec.step_s * (1 + _SAME), (
                f"{where}: lower bound {rec.lower_bound_s} s above the step {rec.step_s} s"
            )
            assert rec.gap is not None and rec.gap >= -_SAME, f"{where}: gap {rec.gap}"
        row = rec.to_row()
        assert set(RunRecord.ROW_KEYS) == set(row), f"{where}: row keys {sorted(row)}"
    assert instance_to_dict(instance) == before, f"solver {s.name!r} changed {instance.name!r}"
    for arr in (instance.op_duration_s, instance.tensor_bytes, instance.tensor_recompute_s):
        assert not arr.flags.writeable, f"{instance.name!r}: an array became writeable"
    return records


def check_deterministic(
    solver: str | type[Solver] | SolverUnderTest,
    instance: Instance,
    budget: float = 0.7,
    *,
    seed: int = 3,
) -> None:
    """The same instance, budget, options and seed give the same status, plan and step (for a
    solver tagged ``deterministic``, as the contract's default)."""
    s = solver_under_test(solver)
    if not s.tags.deterministic:
        return  # the solver declares otherwise; nothing to hold it to
    where = _where(s, instance, budget)
    a = s.solve(instance, budget, seed=seed)
    b = s.solve(instance, budget, seed=seed)
    assert a.status == b.status, f"{where}, seed {seed}: status {a.status} then {b.status}"
    assert a.plan == b.plan, f"{where}, seed {seed}: two runs gave different plans"
    assert a.step_s == b.step_s, f"{where}, seed {seed}: step {a.step_s} then {b.step_s}"
    if not getattr(s.tags, "uses_seed", True):  # a sweep runs it once for all seeds: hold it
        c = s.solve(instance, budget, seed=seed + 1)
        assert c.plan == a.plan, (
            f"{where}: tagged uses_seed=False, but seeds {seed} and {seed + 1} gave different plans"
        )


def check_time_limit(
    solver: str | type[Solver] | SolverUnderTest,
    instance: Instance,
    budget: float = 0.4,
    *,
    limit: float | None = None,
) -> None:
    """The solve returns within ``limit`` (default `SEARCH_SECONDS` for solvers that use it,
    else `PLAIN_LIMIT_S`) + 10% + `OVERHEAD_S`, without an error; a search's work budget is
    dropped so that the clock must stop it. Skipped for a solver tagged
    ``honours_time_limit=False``.

    The timed solve is the second of two alike: the first, untimed, loads (or compiles) the
    numba code the solver runs, as the command line and the sweeps do before they time a solve
    (`slackswap.warm_up`). Loading one kernel from numba's cache takes about 0.26 s on the
    2-core development VM (the genetic search's repair), and a 0.5 s ``ga-random`` solve that
    compiles it took 0.85 s: time the solver's own clock cannot see coming, which this check
    is not about."""
    s = solver_under_test(solver)
    if not s.tags.honours_time_limit:
        return
    if limit is None:
        limit = SEARCH_SECONDS if s.tags.uses_time_limit else PLAIN_LIMIT_S
    options = {k: v for k, v in s.options.items() if k != "max_evaluations"}
    s.solve(instance, budget, time_limit=limit, options=options)
    rec = s.solve(instance, budget, time_limit=limit, options=options)
    where = _where(s, instance, budget)
    assert rec.plan_s <= limit * (1 + TIME_LIMIT_SLACK) + OVERHEAD_S, (
        f"{where}: planned for {rec.plan_s:.3f} s under a {limit} s time limit"
    )
    assert rec.status is not Status.ERROR, f"{where}: error record: {rec.error}"


def check_budget_below_reach(
    solver: str | type[Solver] | SolverUnderTest, instance: Instance
) -> None:
    """A budget of `TINY_BUDGET` x P is an ``infeasible`` (or ``timeout``) record, not an
    error; a deterministic non-search solver also reports the smallest budget that fits, and
    fits it."""
    s = solver_under_test(solver)
    where = _where(s, instance, TINY_BUDGET)
    rec = s.solve(instance, TINY_BUDGET)
    assert rec.status in (Status.INFEASIBLE, Status.TIMEOUT), (
        f"{where}: status {rec.status} ({rec.error or rec.reason})"
    )
    assert rec.error is None and rec.step_s is None, f"{where}: {rec.error}, step {rec.step_s}"
    if s.tags.deterministic and not s.tags.uses_time_limit:
        assert rec.min_budget_bytes is not None, f"{where}: no smallest feasible budget"
        assert rec.min_budget_bytes > rec.budget_bytes, (
            f"{where}: smallest feasible budget {rec.min_budget_bytes} bytes is not above the "
            f"budget {rec.budget_bytes}"
        )
        fits = s.solve(instance, Budget.bytes(rec.min_budget_bytes))
        assert fits.status in (Status.FEASIBLE, Status.OPTIMAL), (
            f"{where}: no plan at its own smallest feasible budget {rec.min_budget_bytes} bytes "
            f"({fits.status}: {fits.error or fits.reason})"
        )


def check_options_round_trip(
    solver: str | type[Solver] | SolverUnderTest,
    instance: Instance,
    budget: float = 0.7,
    *,
    seed: int = 0,
) -> None:
    """Options are stored exactly as given (scikit-learn's ``clone`` check): the solver reports
    (``get_params``) each option it was constructed with as that very value, of the same type,
    and the default for every other; and a solver constructed with the options it reports gives
    the same status and plan. Resolving an option (a default that depends on another, names
    given as one text) belongs in ``solve``, where it cannot leak into the reported options."""
    s = solver_under_test(solver)
    if s.cls is not None:
        cls, given = s.cls, dict(s.options)
        made = cls(**given)
    else:
        entry = REGISTRY[s.name]
        cls, given = entry.cls, {**entry.fixed, **s.options}
        made = entry.make(**s.options)
    reported = made.get_params()
    where = f"solver {s.name!r}"
    for key, value in {**cls.option_defaults(), **given}.items():
        got = reported.get(key)
        assert type(got) is type(value) and got == value, (
            f"{where}: option {key} was given (or defaults to) {value!r} but is stored as {got!r}"
        )
    again = cls(**reported)
    assert again.get_params() == reported, (
        f"{where}: constructed with its own options {reported!r} it reports {again.get_params()!r}"
    )
    runs = [
        run(instance, budget, obj, time_limit=s.time_limit, seed=seed, find_min_budget=False)
        for obj in (made, again)
    ]
    at = f"{_where(s, instance, budget)}, seed {seed}"
    assert runs[0].status == runs[1].status, (
        f"{at}: status {runs[0].status}, with the options it reports {runs[1].status}"
    )
    assert runs[0].plan == runs[1].plan, (
        f"{at}: constructed with the options it reports, it gives a different plan"
    )


def _rerun(payload: bytes) -> list[tuple[str, bytes | None, float | None]]:
    """In a fresh process: unpickle (solver, instance, record) cases and rerun each one."""
    cases: list[tuple[SolverUnderTest, Instance, RunRecord]] = pickle.loads(payload)
    out = []
    for s, inst, rec in cases:
        assert inst.content_hash == rec.instance_hash
        again = s.solve(inst, Budget.bytes(rec.budget_bytes), seed=rec.seed)
        plan = None if again.plan is None else again.plan.actions.tobytes()
        out.append((again.status.value, plan, again.step_s))
    return out


def check_reruns_in_fresh_process(
    solvers: Sequence[str | type[Solver] | SolverUnderTest],
    instance: Instance,
    budget: float = 0.7,
    *,
    seed: int = 1,
) -> None:
    """Each solver's record pickles whole, and a freshly spawned process (its compiled kernels
    loaded anew) repeats each run exactly: one process for all of ``solvers``."""
    subjects = [solver_under_test(s) for s in solvers]
    cases = [(s, instance, s.solve(instance, budget, seed=seed)) for s in subjects]
    payload = pickle.dumps(cases)
    for (s, _, a), (_, _, b) in zip(cases, pickle.loads(payload), strict=True):
        where = _where(s, instance, budget)
        assert a.to_row() == b.to_row(), f"{where}: the record's row changed through pickle"
        assert a.plan == b.plan, f"{where}: the record's plan changed through pickle"
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        results = pool.submit(_rerun, payload).result(timeout=600)
    for (s, _, rec), (status, plan, step) in zip(cases, results, strict=True):
        where = f"{_where(s, instance, budget)}, seed {seed}, in a fresh process"
        assert status == rec.status.value, f"{where}: status {status}, here {rec.status}"
        here = None if rec.plan is None else rec.plan.actions.tobytes()
        assert plan == here, f"{where}: a different plan"
        assert (step is None and rec.step_s is None) or (
            step is not None and rec.step_s is not None and math.isclose(step, rec.step_s)
        ), f"{where}: step {step}, here {rec.step_s}"


def check_solver(
    solver: str | type[Solver],
    *,
    instances: Sequence[Instance] | None = None,
    budgets: Sequence[float] = BUDGETS,
    time_limit: float | None | str = "default",
    options: dict[str, Any] | None = None,
    fresh_process: bool = True,
) -> None:
    """Every check above on ``instances`` (default `small_instances`); raises AssertionError
    at the first broken rule. ``time_limit``/``options``: as the solver runs in the plan,
    determinism and rerun checks (default: the kit's settings, see the module docstring)."""
    s = solver_under_test(solver, time_limit=time_limit, options=options)
    insts = tuple(instances) if instances is not None else small_instances()
    assert insts, "check_solver needs at least one instance"
    for inst in insts:
        check_plans(s, inst, budgets)
    check_deterministic(s, insts[0])
    check_time_limit(s, insts[-1])
    check_budget_below_reach(s, insts[0])
    if s.tags.deterministic:
        check_options_round_trip(s, insts[0])
    if fresh_process:
        check_reruns_in_fresh_process([s], insts[0])


def runtime_plans(instance: Instance, runtime: str, *, n_random: int = 4) -> list[Plan]:
    """Plans a runtime check simulates: keep all, swap all, recompute every rebuildable tensor,
    and ``n_random`` seeded random mixes."""
    rebuildable = np.isfinite(instance.tensor_recompute_s)
    n = instance.n_tensors
    acts = [
        np.full(n, KEEP, dtype=np.int8),
        np.full(n, SWAP, dtype=np.int8),
        np.where(rebuildable, RECOMP, KEEP).astype(np.int8),
    ]
    rng = np.random.default_rng(0)
    for _ in range(n_random):
        a = rng.choice(np.array([KEEP, SWAP, RECOMP], dtype=np.int8), size=n)
        acts.append(np.where((a == RECOMP) & ~rebuildable, SWAP, a).astype(np.int8))
    return [Plan(instance, a, runtime) for a in acts]


def check_runtime(
    runtime: str,
    *,
    instances: Sequence[Instance] | None = None,
    budgets: Sequence[float] = (1.5, 1.0, 0.7, 0.4, 0.2),
) -> None:
    """A runtime (compiled or Python) keeps the simulator's contract on a few plans per
    instance: keep-all at or above the peak gives exactly the ideal step with no stall, copy or
    recompute; every result is consistent (peak within budget, step >= ideal + recompute,
    throughput = ideal / step, D2H bytes at most the swapped bytes: a runtime copies out
    only tensors the plan swaps, each once; an infeasible one has an infinite
    step and a reason); a plan feasible at a budget stays feasible at every larger one; results
    are deterministic and `simulate_many` agrees with `simulate` bit for bit."""

    assert _known(runtime) or runtime in RUNTIMES, f"runtime {runtime!r} is not registered"
    for inst in tuple(instances) if instances is not None else small_instances():
        where = f"runtime {runtime!r} on {inst.name!r}"
        for frac in (1.0, 1.5):
            r = simulate(inst, Plan.keep_all(inst, runtime), Budget.fraction(frac))
            at = f"{where}, keep-all at {100 * frac:g}% of P"
            assert r.feasible, f"{at}: infeasible ({r.reason})"
            assert r.step_s == r.ideal_s == inst.ideal_step_s, f"{at}: step {r.step_s} s"
            assert r.fwd_stall_s == r.bwd_stall_s == r.recompute_s == 0.0, f"{at}: stalls"
            assert r.d2h_bytes == r.h2d_bytes == 0, f"{at}: copies"
            assert r.peak_bytes == inst.peak_bytes, f"{at}: peak {r.peak_bytes} bytes"
        for k, plan in enumerate(runtime_plans(inst, runtime)):
            feasible_at: list[bool] = []
            for frac in sorted(budgets):
                at = f"{where}, plan {k} at {100 * frac:g}% of P"
                budget = Budget.fraction(frac)  # a fraction of P, above 1 too
                r = simulate(inst, plan, budget)
                assert r == simulate(inst, plan, budget), f"{at}: two runs differ"
                m = simulate_many(inst, plan.actions[None, :], budget, runtime=runtime)
                assert m.step_s[0] == r.step_s and m.feasible[0] == r.feasible, (
                    f"{at}: simulate_many gives step {m.step_s[0]}, simulate {r.step_s}"
                )
                feasible_at.append(r.feasible)
                if r.feasible:
                    assert r.peak_bytes <= r.budget_bytes, f"{at}: peak above the budget"
                    assert r.step_s >= r.ideal_s + r.recompute_s - 1e-12 * r.ideal_s, (
                        f"{at}: step {r.step_s} s below ideal + recompute"
                    )
                    assert math.isfinite(r.step_s), f"{at}: feasible with step {r.step_s}"
                    assert math.isclose(r.throughput, r.ideal_s / r.step_s, rel_tol=1e-12), (
                        f"{at}: throughput {r.throughput} is not ideal / step"
                    )
                    swapped = int(inst.tensor_bytes[plan.actions == SWAP].sum())
                    assert 0 <= r.d2h_bytes <= swapped, (
                        f"{at}: D2H {r.d2h_bytes} bytes, the plan swaps {swapped}"
                    )
                else:
                    assert r.step_s == math.inf and r.reason, f"{at}: infeasible, {r.reason!r}"
            first = feasible_at.index(True) if True in feasible_at else len(feasible_at)
            assert all(feasible_at[first:]), (
                f"{where}, plan {k}: feasible at {100 * sorted(budgets)[first]:g}% of P but not "
                f"at every larger budget ({feasible_at})"
            )


def _known(runtime: str) -> bool:
    """Whether the compiled kernel knows ``runtime`` (plug-ins loaded; a bad one raises)."""

    try:
        get_runtime(runtime)
    except PlanError:
        return False
    return True
