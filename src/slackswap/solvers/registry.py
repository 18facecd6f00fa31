"""The registry of solvers by name: what ``slackswap solvers`` lists, the CLI, sweep files and
`run` look solvers up in, and `register`, the class decorator a solver (a plug-in too) uses.

``REGISTRY.loader`` completes the registry before a lookup by name or a listing; the package
sets it to `slackswap.solvers.load_solver_modules`, which imports every family (this module
cannot import the families it registers).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from slackswap.didyoumean import did_you_mean
from slackswap.errors import ArgumentError, ArgumentTypeError, UserError
from slackswap.plan import DEFAULT_RUNTIME
from slackswap.solvers.display import Display
from slackswap.solvers.options import as_names, check_option, option_types
from slackswap.validation import control_character

if TYPE_CHECKING:
    from slackswap.solvers.base import Solver, Tags


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
        value its `Solver.check_options` refuses) is a `UserError` naming solver, option and
        value. A list of names is passed as a tuple, whether given as a list or as one text."""
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
            solver = self.cls(**{**self.fixed, **given})
            # The constructor only stores; the values are checked here too (solve checks them
            # again), so a bad option is refused before any run, not an error row after it.
            solver.check_options()
        except TypeError as exc:  # the family kept: Python callers catch TypeError / ValueError
            raise ArgumentTypeError(f"solver {self.name!r}: {exc}") from None
        except UserError:
            raise
        except ValueError as exc:
            raise ArgumentError(f"solver {self.name!r}: {exc}") from None
        return solver

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


class Registry:
    """Solvers by name; registering a name twice is an error."""

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
        if not isinstance(name, str) or not name.strip():
            raise ArgumentTypeError(f"solver name {name!r}: expected a non-empty string")
        bad = control_character(name)
        if bad is not None:  # it would reach results files, tables and labels as it is
            raise ArgumentError(f"solver name {name!r}: holds the control character {bad}")
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
        self._complete()
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
            raise UserError(self.unknown(name)) from None

    def unknown(self, name: object) -> str:
        """The message for a name that is not registered: the closest names, then every one."""
        names = self.names()
        return (
            f"unknown solver {name!r}{did_you_mean(name, names)} (registered: {', '.join(names)})"
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.canonical(name) in self._entries

    def __iter__(self) -> Iterator[RegisteredSolver]:
        self._complete()
        return iter(list(self._entries.values()))

    def names(self) -> list[str]:
        self._complete()
        return list(self._entries)

    def _complete(self) -> None:
        if self.loader is not None:
            self.loader()


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


def describe_solvers() -> list[dict[str, Any]]:
    """Registered solvers with their tags and options (for ``slackswap solvers``)."""
    return [
        {
            "name": entry.name,
            "description": entry.description,
            "tags": asdict(entry.tags),
            "runtime": entry.runtime,
            "options": entry.defaults,
        }
        for entry in REGISTRY
    ]
