"""The solver contract, the registry of solvers by name, and `run`, which wraps every solve.

A solver is a class with keyword-only constructor options (stored as attributes of the same
name, nothing else) and one method::

    solve(instance, budget, *, time_limit, seed) -> Plan | Solution

It returns a `Plan` (whose ``runtime`` names the runtime it is meant for), or a `Solution` when
it has more to say: a proven lower bound, its own claimed step time, proof of optimality or
infeasibility, a search history. Solvers never time or score themselves: `run` seeds, times the
planning, calls `solve`, scores the plan in the simulator and returns a flat `RunRecord`. An
exception inside a solver becomes an ``error`` record, never a crash.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import time
import traceback
import typing
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from slackswap import __version__, rowschema
from slackswap.errors import MAX_SECONDS, MAX_SEED, ArgumentError, ArgumentTypeError
from slackswap.instances.catalog import load
from slackswap.plan import DEFAULT_RUNTIME, Budget, Plan
from slackswap.problem import Instance, UserError
from slackswap.simulator import SimResult, simulate

#: A solver that overruns its time limit by more than this share is reported as a timeout.
TIME_LIMIT_SLACK = 0.10

#: A lower bound above its plan's simulated step by more than this share (floating-point noise
#: between the bound engine's sums and the simulator's) makes the record an ``error``.
BOUND_REL_TOL = 1e-9


class Status(StrEnum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Tags:
    """Declared capabilities; tests and the CLI select solvers by these."""

    exact: bool = False  # proves lower bounds / optimality
    deterministic: bool = True  # same instance, budget, options and seed -> same plan
    needs: tuple[str, ...] = ()  # importable modules the solver requires
    honours_time_limit: bool = True  # returns within time_limit (+10%)
    uses_time_limit: bool = False  # quality depends on the time limit (searches, exact solvers)
    static_plan: bool = True  # the plan alone decides (no run-time policy in the simulator)


@dataclass
class Solution:
    """What a solver may return beyond a plan (all optional)."""

    plan: Plan | None
    lower_bound_s: float | None = None  # no plan can simulate faster than this
    claimed_step_s: float | None = None  # the solver's own objective value, checked by tests
    proven_optimal: bool = False
    proven_infeasible: bool = False
    timed_out: bool = False
    min_budget_bytes: int | None = None  # smallest budget the solver could fit, when known
    evaluations: int | None = None  # plans scored (searches)
    history: list[tuple[float, int, float]] = field(default_factory=list)  # (s, evals, best step)
    info: dict[str, Any] = field(default_factory=dict)


class Solver:
    """Base class: subclasses set ``key``/``tags``, take keyword-only options, implement solve."""

    key: ClassVar[str] = ""
    tags: ClassVar[Tags] = Tags()

    def solve(
        self, instance: Instance, budget: Budget, *, time_limit: float | None, seed: int
    ) -> Plan | Solution:
        raise NotImplementedError

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        """Constructor options and their defaults, read from the signature."""
        sig = inspect.signature(cls.__init__)
        return {
            n: p.default
            for n, p in sig.parameters.items()
            if n != "self" and p.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def get_params(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.option_defaults()}

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.get_params().items() if self.option_defaults().get(k) != v}
        args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"{self.key}({args})" if args else self.key


@dataclass(frozen=True)
class Display:
    """How figures and reports show a solver: its registry entry carries this, so a new solver
    (a plug-in too) needs no edit of the analysis code.

    ``colour``/``marker``: a matplotlib colour and marker; None picks a palette colour after the
    ones registered solvers set. ``emphasis``: drawn as the wide black reference line beneath
    the others. ``order``: figures and tables list solvers by it (lower first; None after those
    that set one, in order of appearance). ``label``: the policy's name in prose and tables
    (``vDNN``); figures label a line by the run's label (name and changed options) so two
    configurations stay apart. ``featured``: the report reruns the featured solvers first (lower
    first) for its plan and timeline figures.
    """

    colour: str | None = None
    marker: str | None = None
    emphasis: bool = False
    order: float | None = None
    label: str | None = None
    featured: int | None = None


@dataclass(frozen=True)
class RegisteredSolver:
    name: str
    cls: type[Solver]
    fixed: dict[str, Any]
    description: str
    display: Display = Display()

    @property
    def title(self) -> str:
        """The name a table or prose uses: the display label, else the registry name."""
        return self.display.label or self.name

    def make(self, **options: Any) -> Solver:
        """The solver with ``options``; an unknown option or a value of the wrong type (or a
        value its constructor refuses) is a `UserError` naming solver, option and value."""
        defaults = self.cls.option_defaults()
        unknown = set(options) - set(defaults)
        if unknown:
            raise ArgumentError(
                f"solver {self.name!r} has no option {sorted(unknown)[0]!r} "
                f"(options: {', '.join(defaults) or 'none'})"
            )
        types = option_types(self.cls)
        for key, value in options.items():
            check_option(self.name, key, value, *types[key])
        try:
            return self.cls(**{**self.fixed, **options})
        except TypeError as exc:  # the family kept: Python callers catch TypeError / ValueError
            raise ArgumentTypeError(f"solver {self.name!r}: {exc}") from None
        except ValueError as exc:
            raise ArgumentError(f"solver {self.name!r}: {exc}") from None

    @property
    def tags(self) -> Tags:
        return self.cls.tags

    @property
    def defaults(self) -> dict[str, Any]:
        """Every option's value when none is given (the registered fixed ones included)."""
        return {**self.cls.option_defaults(), **self.fixed}

    @property
    def runtime(self) -> str:
        """The simulator runtime this solver's plans are for when no option changes it: a name
        in `slackswap.simulator.runtimes`, which solver names may repeat (``barriers``)."""
        named = self.defaults.get("runtime") or getattr(self.cls, "runtime", "")
        return str(named or DEFAULT_RUNTIME)

    def label(self, options: dict[str, Any]) -> str:
        """``ga`` or ``ga(pop_size=50)``: the name plus the options given that differ from the
        defaults. The given ones, not the solver's resolved parameters: a default that depends
        on another option (``ga``'s ``repair``) would otherwise show as if it had been given."""
        defaults = self.defaults
        changed = {k: v for k, v in options.items() if defaults.get(k) != v}
        if not changed:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in sorted(changed.items()))})"


_WANT = {
    bool: "true or false",
    int: "a non-negative integer",
    float: "a non-negative finite number",
    str: "a name",
    tuple: "a list of names (or one comma-separated text)",
}


def option_types(cls: type[Solver]) -> dict[str, tuple[tuple[type, ...], bool]]:
    """Each option's accepted types (from its annotation, else its default's type) and whether
    it may be None."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: use the defaults
        hints = {}
    out: dict[str, tuple[tuple[type, ...], bool]] = {}
    for key, default in cls.option_defaults().items():
        hint = hints.get(key)
        args = typing.get_args(hint) if typing.get_args(hint) else (hint,)
        if typing.get_origin(hint) is tuple:  # ``tuple[str, ...]``: a list of names
            args = (tuple,)
        types = tuple(t for t in args if t in _WANT)
        none_ok = type(None) in args or default is None
        if not types and default is not None and type(default) in _WANT:
            types = (type(default),)
        out[key] = (types, none_ok)
    return out


def check_option(solver: str, key: str, value: Any, types: tuple[type, ...], none_ok: bool) -> None:
    """A `UserError` unless ``value`` is one of ``types`` (a flag true/false, a count a
    non-negative integer, a number non-negative and finite, a name text, a list of names a list
    of texts or one comma-separated text) or None where allowed. An option of no known type
    takes anything; ranges beyond these are each solver's own."""
    if not types or (value is None and none_ok):
        return
    ok = False
    if isinstance(value, bool):
        ok = bool in types
    elif isinstance(value, int) and (int in types or float in types):
        ok = value >= 0
    elif isinstance(value, float) and float in types:
        ok = math.isfinite(value) and value >= 0
    elif isinstance(value, str):
        ok = str in types or tuple in types
    elif isinstance(value, list | tuple):
        ok = tuple in types and all(isinstance(v, str) for v in value)
    if not ok:
        want = " or ".join(_WANT[t] for t in types) + (" or null" if none_ok else "")
        raise UserError(f"solver {solver!r} option {key}: expected {want}, got {value!r}")


class Registry:
    """Solvers by name; registering a name twice is an error."""

    def __init__(self) -> None:
        self._entries: dict[str, RegisteredSolver] = {}

    def register(
        self,
        name: str,
        cls: type[Solver],
        description: str = "",
        display: Display | None = None,
        **fixed: Any,
    ) -> None:
        if name in self._entries:
            raise ValueError(f"solver {name!r} is already registered")
        doc = description or (inspect.getdoc(cls) or "").split("\n")[0]
        self._entries[name] = RegisteredSolver(name, cls, dict(fixed), doc, display or Display())

    def registered_names(self) -> list[str]:
        """The names registered so far, without loading the solver modules and plug-ins."""
        return list(self._entries)

    def canonical(self, name: str) -> str:
        """The registered spelling of ``name``: names are matched without regard to case, as
        catalogue names are (``SlackSwap`` is ``slackswap``); an unknown name comes back as
        given, for the lookup's error to name it."""
        _load_all()
        if name in self._entries or not isinstance(name, str):
            return name
        folded = [n for n in self._entries if n.casefold() == name.casefold()]
        return folded[0] if len(folded) == 1 else name

    def get(self, name: str) -> RegisteredSolver | None:
        """The entry for ``name``, or None (no error): for labels read back from results."""
        return self._entries.get(self.canonical(name))

    def __getitem__(self, name: str) -> RegisteredSolver:
        try:
            return self._entries[self.canonical(name)]
        except KeyError:
            raise UserError(
                f"unknown solver {name!r} (registered: {', '.join(self.names())})"
            ) from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.canonical(name) in self._entries

    def __iter__(self) -> Iterator[RegisteredSolver]:
        _load_all()
        return iter(list(self._entries.values()))

    def names(self) -> list[str]:
        _load_all()
        return list(self._entries)


REGISTRY = Registry()


def register(
    name: str, description: str = "", *, display: Display | None = None, **fixed: Any
) -> Callable[[type[Solver]], type[Solver]]:
    """Class decorator: ``@register("slackswap")``; ``display`` says how figures show it, extra
    keywords fix constructor options."""

    def deco(cls: type[Solver]) -> type[Solver]:
        REGISTRY.register(name, cls, description, display, **fixed)
        return cls

    return deco


def _load_all() -> None:
    from slackswap.solvers import load_solver_modules

    load_solver_modules()


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
    (a registered name or a `Solver`). The order before, ``run(solver, instance, budget)``, still
    works and warns (DeprecationWarning).
    """
    if _solver_first(instance, solver):
        warnings.warn(
            "run(solver, instance, budget) is deprecated: use run(instance, budget, solver)",
            DeprecationWarning,
            stacklevel=2,
        )
        instance, budget, solver = budget, solver, instance  # type: ignore[assignment]

    _check_arguments(instance, solver, time_limit, seed)
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

    t0 = time.perf_counter()
    try:
        out = solver_obj.solve(inst, bud, time_limit=time_limit, seed=seed)
    except Exception as exc:  # a solver's failure is a result, not a crash
        plan_s = time.perf_counter() - t0
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        msg = f"{type(exc).__name__}: {exc} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"
        return RunRecord(**base, **{**empty, "error": msg}, status=Status.ERROR, plan_s=plan_s)
    plan_s = time.perf_counter() - t0
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
    t0 = time.perf_counter()

    def fits(nbytes: int) -> bool:
        b = Budget.bytes(nbytes)
        try:
            out = solver.solve(instance, b, time_limit=None, seed=seed)
        except Exception:
            return False
        plan = out.plan if isinstance(out, Solution) else out
        return plan is not None and simulate(instance, plan, b).feasible

    hi = int(instance.peak_bytes)
    if not fits(hi):
        return None
    lo = 0
    while hi - lo > rel_tol * instance.peak_bytes:
        if time.perf_counter() - t0 > max_seconds:
            break
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _solver_first(first: object, third: object) -> bool:
    """Whether a `run` call uses the old order: a solver first and none third."""

    def is_solver(x: object) -> bool:
        return isinstance(x, Solver) or (isinstance(x, str) and x in REGISTRY)

    return is_solver(first) and not is_solver(third)


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
                f"time_limit: expected a positive number of seconds, got {time_limit!r}"
            )
        seconds = float(time_limit)
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
            raise ArgumentError(
                f"time_limit: expected a positive number of seconds (at most {MAX_SECONDS:g}), "
                f"got {time_limit!r}"
            )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ArgumentTypeError(
            f"seed: expected an integer seed from 0 to {MAX_SEED}, got {seed!r}"
        )
    if not 0 <= int(seed) <= MAX_SEED:
        raise ArgumentError(f"seed: expected an integer seed from 0 to {MAX_SEED}, got {seed!r}")


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


def describe_solvers() -> list[dict[str, Any]]:
    """Registered solvers with their tags and options (for ``slackswap solvers``)."""
    out = []
    for entry in REGISTRY:
        opts = entry.defaults
        out.append(
            {
                "name": entry.name,
                "description": entry.description,
                "tags": asdict(entry.tags),
                "runtime": entry.runtime,
                "options": opts,
            }
        )
    return out
