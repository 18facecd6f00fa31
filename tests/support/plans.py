"""Every static solver's plan of an instance, as the runtime tests train them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from slackswap.plan import Plan
from slackswap.simulator import simulate
from slackswap.solvers import run
from slackswap.solvers.registry import REGISTRY


def static_solver_plans(
    inst: Any, budgets: Sequence[float] = (0.5, 0.3), time_limit: float = 0.3
) -> dict[str, tuple[Plan, float]]:
    """Every registered static solver's plan at each of ``budgets`` (fractions of P) that
    fits there barrier-free, as run barrier-free (the runtime's way), by ``solver@budget``;
    identical plans at one budget once."""
    out: dict[str, tuple[Plan, float]] = {}
    seen: set[tuple[bytes, float]] = set()
    for b in budgets:
        for entry in REGISTRY:
            if not entry.tags.static_plan:
                continue
            rec = run(inst, b, entry.name, time_limit=time_limit, find_min_budget=False)
            if rec.plan is None:
                continue
            acts = np.asarray(rec.plan.actions)
            if not simulate(inst, acts, b).feasible:  # e.g. offload plans meant for "sync"
                continue
            key = (acts.tobytes(), b)
            if key not in seen:
                seen.add(key)
                out[f"{entry.name}@{b:.0%}"] = (Plan(inst, acts), b)
    return out
