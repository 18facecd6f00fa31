"""Solvers that another solver runs by name (the GA's seeds, the exact solvers' hint), checked.

A solver that uses another one's plans names it in an option with a fixed default, never by
looking through the registry, so that registering a new solver changes no other solver's
results. The names are checked when the solver is made: a misspelt one is the user's error
(one line naming the option and the name), never a seed or hint silently skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

from slackswap.errors import UserError
from slackswap.solvers.registry import REGISTRY


def solver_names(value: str | Iterable[str]) -> tuple[str, ...]:
    """``("a", "b")``, ``["a", "b"]`` or ``"a,b"`` -> ``("a", "b")``; ``"none"`` or ``""`` -> ``()``."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(str(n).strip() for n in items)
    return tuple(n for n in names if n and n != "none")


def check_solver_names(
    owner: str, option: str, names: tuple[str, ...], *, static_only: bool
) -> None:
    """A `UserError` unless every name is a registered solver other than ``owner``; with
    ``static_only``, one whose plan alone decides and that does not search (a seed must come
    back at once, without the time limit the search itself needs)."""
    for name in names:
        where = f"solver {owner!r} option {option}"
        if name == owner:
            raise UserError(f"{where}: {name!r} cannot use its own plans")
        if name not in REGISTRY:
            raise UserError(f"{where}: {REGISTRY.unknown(name)}")
        tags = REGISTRY[name].tags
        if static_only and (not tags.static_plan or tags.uses_time_limit):
            raise UserError(
                f"{where}: {name!r} is a search or a run-time policy, not a static planner"
            )


def check_hint(owner: str, hint: str) -> None:
    """An exact solver's ``hint`` option: one registered solver other than ``owner``, or
    ``none`` (a `UserError` otherwise). One solver by name, never looked up by what is
    registered: a new solver changes no exact solver's starts."""
    hints = solver_names(hint)
    if len(hints) > 1:
        raise UserError(f"solver {owner!r} option hint: one solver or none, got {hint!r}")
    check_solver_names(owner, "hint", hints, static_only=False)
