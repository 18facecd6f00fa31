"""Checks of a solver's constructor options as the CLI, sweep files and the API give them.

An option's accepted type comes from its constructor annotation (else its default's type); a
value of another type is a `UserError` worded for the command line (``expected a non-negative
integer, got 'x'``). Ranges beyond these types are each solver's own, checked in its ``solve``.
"""

from __future__ import annotations

import math
import typing
from typing import TYPE_CHECKING, Any

from slackswap.errors import UserError

if TYPE_CHECKING:
    from slackswap.solvers.base import Solver

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
