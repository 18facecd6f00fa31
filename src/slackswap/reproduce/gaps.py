"""``slackswap reproduce gaps``: each solver's certified optimality gap, per workload and budget.

The paper bounds SlackSwap's distance from the optimum with a genetic search, which proves
nothing. Here the exact solvers (``milp``, ``cpsat``) report lower bounds that no plan can beat
in the simulator; the best of them certifies every solver's plan:
``gap = (simulated step - best lower bound) / best lower bound``. A budget the relaxation proves
infeasible shows as such (no plan of any solver can fit it).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any

from slackswap.console import format_table
from slackswap.errors import UserError
from slackswap.plan import Budget, PlanError
from slackswap.reproduce._batch import add_batch_arguments, run_cases
from slackswap.solvers import REGISTRY, RunRecord

DEFAULT_MODELS = ("bert-large", "gpt2-xl", "llama-7b", "vgg16")
DEFAULT_BUDGETS = (0.5, 0.2)
DEFAULT_SOLVERS = ("slackswap", "milp", "cpsat")


def certified_gaps(
    models: Sequence[str],
    budgets: Sequence[float],
    solvers: Sequence[str],
    *,
    time_limit: float | None = 60.0,
    seed: int = 0,
    args: argparse.Namespace | None = None,
) -> list[dict[str, Any]]:
    """One row per (model, budget, solver): its record's row plus ``best_lower_bound_s`` (the
    largest bound any solver proved for that case, seconds) and ``certified_gap`` (its step's
    distance to that bound, a fraction; None without a plan or a bound).

    The solves run as batch jobs (`run_cases`; ``args`` gives ``--jobs``, ``--backend`` and the
    progress mode, else one after another, silently); searches and exact solvers get
    ``time_limit``, the others none."""

    exact = {name: REGISTRY[name].tags.exact for name in solvers}
    cases = [
        (model, frac, name, time_limit if REGISTRY[name].tags.uses_time_limit else None)
        for model in models
        for frac in budgets
        for name in solvers
    ]
    done = run_cases(cases, seed=seed, args=args, desc="gaps")
    rows: list[dict[str, Any]] = []
    for model in models:
        for frac in budgets:
            case = []
            for name in solvers:
                got = done[model, frac, name]
                row = {k: got.get(k) for k in RunRecord.ROW_KEYS}
                row["model"] = model
                # An exact solver's proof of infeasibility is an infinite bound, which a results
                # row stores as None; every other planless exit leaves a finite bound.
                row["proven_infeasible"] = (
                    exact[name] and row["status"] == "infeasible" and row["lower_bound_s"] is None
                )
                case.append(row)
            bounds = [r["lower_bound_s"] for r in case if r["lower_bound_s"] is not None]
            infeasible = any(r["proven_infeasible"] for r in case)
            best = max(bounds) if bounds else None
            for r in case:
                r["best_lower_bound_s"] = math.inf if infeasible else best
                step = r["step_s"]
                r["certified_gap"] = (
                    (step - best) / best if step is not None and best and not infeasible else None
                )
            rows += case
    return rows


def _pct(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{100 * v:.{digits}f}"


def render(rows: list[dict[str, Any]], solvers: Sequence[str]) -> str:
    """A table: per case, the best bound as a throughput ceiling, then each solver's
    throughput and certified gap (percent)."""

    header = ["workload", "budget", "ceiling %"]
    for s in solvers:
        header += [f"{s} thr %", f"{s} gap %"]
    header += ["best bound by"]  # the solver, not seconds
    out = []
    cases: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        cases.setdefault((r["model"], r["budget_fraction"]), []).append(r)
    for (model, frac), case in cases.items():
        best = case[0]["best_lower_bound_s"]
        ideal = case[0]["ideal_s"]
        if best is not None and math.isinf(best):
            line = [model, f"{frac:.0%}", "infeasible"]
            line += ["-", "-"] * len(solvers)
            out.append(line + ["proof"])
            continue
        line = [model, f"{frac:.0%}", _pct(ideal / best) if best else "-"]
        by = {r["solver"].split("(")[0]: r for r in case}
        for s in solvers:
            got = by.get(s)
            line += [_pct(got["throughput"]), _pct(got["certified_gap"], 3)] if got else ["-", "-"]
        best_solver = max(
            (r for r in case if r["lower_bound_s"] is not None),
            key=lambda r: r["lower_bound_s"],
            default=None,
        )
        line.append(best_solver["solver"] if best_solver else "-")
        out.append(line)
    return format_table(out, header)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--instances",
        dest="models",
        default=",".join(DEFAULT_MODELS),
        metavar="NAMES",
        help="catalog names, comma separated",
    )
    p.add_argument(
        "--budgets",
        default=",".join(str(b) for b in DEFAULT_BUDGETS),
        help="fractions of the peak P, comma separated",
    )
    p.add_argument(
        "--solvers", default=",".join(DEFAULT_SOLVERS), help="registered solvers, comma separated"
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=20.0,
        help="seconds per exact solve (the benchmark uses 60)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every solve")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    add_batch_arguments(p)


def main(args: argparse.Namespace) -> int:
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    solvers = [REGISTRY.canonical(s.strip()) for s in args.solvers.split(",") if s.strip()]
    budgets = []
    for spec in (b.strip() for b in args.budgets.split(",") if b.strip()):
        try:
            budget = Budget.parse(spec)  # read as every other command reads a budget
        except PlanError as exc:
            raise UserError(f"--budgets: {exc}") from None
        if budget.kind != "fraction" or budget.value > 1.5:
            raise UserError(f"--budgets: {spec} is not a fraction of the peak in (0, 1.5]")
        budgets.append(budget.value)
    for s in solvers:
        REGISTRY[s]  # a UserError naming the registered solvers
    if args.time_limit is not None and args.time_limit <= 0:
        raise UserError(f"--time-limit {args.time_limit}: must be positive")
    rows = certified_gaps(models, budgets, solvers, time_limit=args.time_limit, seed=args.seed,
                          args=args)  # fmt: skip
    if args.json:  # one object per line
        for r in rows:
            clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v
                     for k, v in r.items()}  # fmt: skip
            print(json.dumps(clean, allow_nan=False, default=str))
        return 0
    print("Certified optimality gaps: (simulated step - best lower bound) / best lower bound")
    print(render(rows, solvers))
    print(
        "ceiling % = ideal / best bound: no plan can beat this throughput in the simulator; "
        "best bound by = the solver that proved the best bound."
    )
    return 0
