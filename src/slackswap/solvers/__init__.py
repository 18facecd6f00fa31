"""Interchangeable solvers behind one contract (`base.Solver`), registered by name.

The package is grouped by family: ``planner/`` (SlackSwap and its passes), ``exact/`` (the LP,
MILP and CP-SAT solvers, their bounds and searches), ``genetic/`` (the genetic search) and
``baselines/`` (the published policies). `base` holds the contract, `registry` the solvers by
name (with `options`, the checks of their options, and `display`, their look in figures),
`running` the `run` that wraps every solve. A plug-in imports what it needs from here:
``from slackswap.solvers import Display, Solver, Tags, register``.

``REGISTRY`` fills itself on first use: it imports the built-in modules in `SOLVER_MODULES`
(their order is the order ``slackswap solvers`` lists), then every other public module of this
package and of its family folders (a new solver is one new module here or in a family that
registers itself with ``@register(name)``), then the ``slackswap.solvers`` entry points of other
packages (`slackswap.plugins`). A module that cannot be imported is an error, never skipped.
The built-ins are found in the source tree, not through this package's own entry points, so a
source checkout (``PYTHONPATH=src``) finds every solver whatever metadata an older install left
behind.
"""

from __future__ import annotations

import importlib

from slackswap import interrupts, plugins
from slackswap.solvers.base import Solution, Solver, Status, Tags
from slackswap.solvers.display import Display
from slackswap.solvers.registry import REGISTRY, describe_solvers, register
from slackswap.solvers.running import RunRecord, run, solve

SOLVER_MODULES = (
    "slackswap.solvers.planner.slackswap_planner",  # slackswap, swap-first, recompute-only, barriers
    "slackswap.solvers.baselines.vdnn",
    "slackswap.solvers.baselines.superneurons",
    "slackswap.solvers.baselines.swapadvisor",
    "slackswap.solvers.baselines.checkpoint",
    "slackswap.solvers.baselines.offload",  # offload-sync, offload-overlap
    "slackswap.solvers.exact.milp",
    "slackswap.solvers.exact.cpsat",
    "slackswap.solvers.genetic.ga",  # ga, ga-random
)

_loaded = False


def load_solver_modules() -> None:
    """Import every solver module once, then the plug-ins, so the registry is complete.

    A built-in module that cannot be imported, or a bad plug-in entry, raises: a solver that
    silently went missing would shrink every comparison without a word."""
    global _loaded
    if not _loaded:
        interrupts.window("registry")  # the OR-Tools import comes next (a test may sleep here)
        # A Ctrl-C ends the process at once while these import: the registry is often first
        # completed inside the command (a sweep's solver names), and a KeyboardInterrupt raised
        # in an extension's initialisation comes out as a traceback, not an exception (OR-Tools'
        # C++ calls protobuf's descriptor_pool.Default and prints what it raised).
        interrupts.begin_ending_at_once()
        try:
            for name in SOLVER_MODULES:
                importlib.import_module(name)
            plugins.import_modules(
                __name__,
                skip={"base", "running", "registry", "options", "display", "deadline"},
                recurse=True,
            )
        finally:
            interrupts.end_ending_at_once()
        _loaded = True
    plugins.load_group(plugins.SOLVERS, REGISTRY.registered_names)


REGISTRY.loader = load_solver_modules


__all__ = [
    "REGISTRY",
    "Display",
    "RunRecord",
    "Solution",
    "Solver",
    "Status",
    "Tags",
    "describe_solvers",
    "load_solver_modules",
    "register",
    "run",
    "solve",
]
