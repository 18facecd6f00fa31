"""Plug-ins from other packages: solvers, runtimes and workload models found through entry points.

A package adds one by naming it in its metadata, e.g. in its ``pyproject.toml``::

    [project.entry-points."slackswap.solvers"]
    my-solver = "my_package.solver"

The name on the left is the name the plug-in registers; the value is the module (or
``module:object``) whose import registers it (``@register("my-solver")`` for a solver,
``register_runtime(...)`` for a runtime, ``register_model(...)`` for a workload model). Loading
is lazy: each group is read the first time its registry is looked up. An entry that fails to
import, names a missing object, registers nothing under its name or takes a name already taken
is a `PluginError` naming the distribution, the entry and the cause; it is never skipped.

Inside slackswap the same registries fill themselves from the modules of a package
(`import_modules`): a new solver is a new module in ``slackswap/solvers/`` or one of its family
folders (``planner/``, ``exact/``, ``genetic/``, ``baselines/``), a new runtime a
``runtime_*.py`` module in ``slackswap/simulator/``, a new workload model a module in
``slackswap/models/``; a module there that fails to import is an error, never skipped.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import threading
from collections.abc import Callable, Collection, Iterable
from importlib.metadata import EntryPoint, entry_points

from slackswap.errors import UserError

SOLVERS = "slackswap.solvers"
RUNTIMES = "slackswap.runtimes"
MODELS = "slackswap.models"


class PluginError(UserError):
    """An entry point that cannot be loaded; the message names distribution, entry and cause."""


_lock = threading.RLock()
#: (group, name) -> distribution, for every name a plug-in's import registered in this process.
_owner: dict[tuple[str, str], str] = {}
#: (group, entry name, distribution) of the entries loaded so far.
_entries: set[tuple[str, str, str]] = set()
_done: set[str] = set()
#: Packages whose modules `import_modules` has imported.
_scanned: set[str] = set()
_loading: set[str] = set()
_KIND = {SOLVERS: "solver", RUNTIMES: "runtime", MODELS: "workload model"}


def import_modules(
    package: str, *, prefix: str = "", skip: Collection[str] = (), recurse: bool = False
) -> None:
    """Import every public module of ``package`` whose name starts with ``prefix`` (except
    ``skip``), in name order, so that a module added there registers what it defines; once per
    process and package. With ``recurse`` the public subpackages are walked too (the solver
    families: a new solver may be a new module in one of them). An import error propagates, and
    the next call tries again."""
    if package in _scanned:
        return
    pkg = importlib.import_module(package)
    found = sorted((m.name, m.ispkg) for m in pkgutil.iter_modules(pkg.__path__))
    for name, ispkg in found:
        if name.startswith("_") or not name.startswith(prefix) or name in skip:
            continue
        importlib.import_module(f"{package}.{name}")
        if ispkg and recurse:
            import_modules(f"{package}.{name}", prefix=prefix, recurse=True)
    _scanned.add(package)


def describe(ep: EntryPoint) -> str:
    """``entry point name = 'value' of distribution 'dist' (group)``, for messages."""
    return f"entry point {ep.name} = {ep.value!r} of distribution {_dist(ep)!r} ({ep.group})"


def _dist(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "?"


def load_group(group: str, registered: Callable[[], Collection[str]]) -> None:
    """Load every entry point of ``group`` once per process; ``registered()`` gives the names
    the group's registry holds. Raises `PluginError` on the first bad entry; the next call tries
    the entries not yet loaded again (so a bad entry keeps failing, never goes quiet)."""
    if group in _done:
        return
    with _lock:
        if group in _done or group in _loading:  # a plug-in's import looked its registry up
            return
        _loading.add(group)
        try:
            load_entries(entry_points(group=group), registered)
            _done.add(group)
        finally:
            _loading.discard(group)


def load_entries(eps: Iterable[EntryPoint], registered: Callable[[], Collection[str]]) -> None:
    """Load the entries ``eps`` (of one group, in name order) that are not loaded yet; raises
    `PluginError` at the first bad one. `load_group` passes the installed ones."""
    for ep in sorted(eps, key=lambda e: (e.name, e.value)):
        _load_one(ep, registered)


def _load_one(ep: EntryPoint, registered: Callable[[], Collection[str]]) -> None:
    dist = _dist(ep)
    if (ep.group, ep.name, dist) in _entries:
        return
    before = set(registered())
    if ep.name in before:
        # Taken already. Fine when the entry's own module has been imported (by an earlier
        # entry, say the one module that registers a solver and a runtime, or by the plug-in's
        # own tests) and no other plug-in took the name; else another registration holds it.
        owner = _owner.get((ep.group, ep.name))
        if ep.module not in sys.modules or owner not in (None, dist):
            by = f"distribution {owner!r}" if owner else "slackswap or code imported before"
            raise PluginError(f"{describe(ep)}: name {ep.name!r} is already registered by {by}")
    else:
        try:
            ep.load()
        except Exception as exc:  # noqa: BLE001 - any failure of a plug-in's import is reported
            raise PluginError(
                f"{describe(ep)} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        after = set(registered())
        for name in after - before:
            _owner[(ep.group, name)] = dist
        if ep.name not in after:
            got = ", ".join(sorted(after - before)) or "nothing"
            raise PluginError(
                f"{describe(ep)}: loading it registered no {_KIND.get(ep.group, 'plug-in')} "
                f"named {ep.name!r} "
                f"(it registered {got}; an entry's name must be the name it registers)"
            )
    _owner.setdefault((ep.group, ep.name), dist)
    _entries.add((ep.group, ep.name, dist))
