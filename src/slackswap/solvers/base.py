"""The solver contract and the registry of solvers by name.

A solver is a class with keyword-only constructor options (stored as attributes of the same
name, nothing else) and one method::

    solve(instance, budget, *, deadline, seed) -> Plan | Solution

``deadline`` is the `Deadline` `run` made from the time limit: the solver asks it what time
is left and never times itself against a limit of its own; a class whose work needs room after
its last step sets ``margin``, the share of the time limit its deadline keeps free. It returns a `Plan` (whose ``runtime`` names the runtime it is meant for), or a `Solution` when
it has more to say: a proven lower bound, its own claimed step time, proof of optimality or
infeasibility, a search history. Solvers never time or score themselves:
`slackswap.solvers.running.run` does, and turns a solver's exception into an ``error`` record.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from slackswap.errors import ArgumentError, ArgumentTypeError, UserError
from slackswap.instance import Instance
from slackswap.plan import DEFAULT_RUNTIME, Budget, Plan
from slackswap.solvers.deadline import Deadline


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
    #: ``Instance.meta`` entries the solver reads; it refuses (one line) an instance without
    #: them, so the conformance suite runs it on instances that carry them, not the catalog's
    needs_meta: tuple[str, ...] = ()


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
    #: Share of the time limit that `run` keeps free in the deadline it hands to ``solve``.
    margin: ClassVar[float] = 0.0

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
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
        value its constructor refuses) is a `UserError` naming solver, option and value. A list
        of names is passed as a tuple, whether given as a list or as one text."""
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
        given = {k: as_names(v) if types[k][0] == (tuple,) else v for k, v in options.items()}
        try:
            return self.cls(**{**self.fixed, **given})
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
        in `slackswap.simulator.policies`, which solver names may repeat (``barriers``)."""
        named = self.defaults.get("runtime") or getattr(self.cls, "runtime", "")
        return str(named or DEFAULT_RUNTIME)

    def label(self, options: dict[str, Any]) -> str:
        """``ga`` or ``ga(pop_size=50)``: the name plus the options given that differ from the
        defaults."""
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


def as_names(value: Any) -> Any:
    """A list of names as a tuple: ``"a, b"`` or ``["a", "b"]`` -> ``("a", "b")`` (None and
    other values unchanged). The form a list option is given in (one text on the command line,
    a JSON list in a file) then never decides how the solver is constructed or recorded."""
    if isinstance(value, str):
        return tuple(n.strip() for n in value.split(",") if n.strip())
    if isinstance(value, list | tuple):
        return tuple(value)
    return value


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
    """Solvers by name; registering a name twice is an error.

    ``loader`` completes the registry before a lookup by name or a listing; the package sets it
    to `slackswap.solvers.load_solver_modules`, which imports every family (the contract cannot
    import the families it is the contract of)."""

    def __init__(self) -> None:
        self._entries: dict[str, RegisteredSolver] = {}
        self.loader: Callable[[], None] | None = None

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
    if REGISTRY.loader is not None:
        REGISTRY.loader()


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
