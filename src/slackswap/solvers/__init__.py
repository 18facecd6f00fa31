"""Interchangeable solvers behind one contract (`base.Solver`), registered by name.

``REGISTRY`` fills itself on first use by importing the modules below; each registers its
solvers with ``@register(name)``.
"""

from __future__ import annotations

import importlib

from slackswap.solvers.base import (
    REGISTRY,
    RunRecord,
    Solution,
    Solver,
    Status,
    Tags,
    describe_solvers,
    register,
    run,
    solve,
)

SOLVER_MODULES = (
    "slackswap.solvers.slackswap_planner",  # slackswap, swap-first, recompute-only, barriers
    "slackswap.solvers.vdnn",
    "slackswap.solvers.superneurons",
    "slackswap.solvers.swapadvisor",
    "slackswap.solvers.checkpoint",
    "slackswap.solvers.offload",  # offload-sync, offload-overlap
    "slackswap.solvers.milp",
    "slackswap.solvers.cpsat",
    "slackswap.solvers.genetic",  # ga, ga-random
)

_loaded = False


def load_solver_modules() -> None:
    """Import every solver module once, so the registry is complete."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in SOLVER_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency inside the module: surface it
                raise


__all__ = [
    "REGISTRY",
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
