"""Gap analysis: per instance and budget, the best known plan, the best bound, each solver's gaps.

The best lower bound on the step time is the largest of the ideal step (every tensor kept with
unlimited memory: no plan is faster) and every bound an exact solver proved in the results.
``gap_to_best`` compares a solver's best step with the fastest plan any solver found;
``gap_to_bound`` compares it with the bound, and ``certified_gap`` is how far the best known
plan itself may be from optimal.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from slackswap.analysis.results import read_results
from slackswap.console import format_table
from slackswap.solvers.registry import REGISTRY

GAP_COLUMNS = (
    "instance", "budget_fraction", "solver", "status", "runs", "feasible_runs", "step_s",
    "step_s_mean", "step_s_std", "throughput", "best_known_s", "best_solver", "lower_bound_s",
    "bound_source", "gap_to_best", "gap_to_bound", "certified_gap", "plan_s", "plan_s_max",
    "min_budget_bytes",
)  # fmt: skip

_STATUS_ORDER = ("optimal", "feasible", "timeout", "infeasible", "error")


def _frame(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    if isinstance(results, pd.DataFrame):
        return results

    return read_results(results)


def gaps(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    """One row per (instance, budget, solver): best step over seeds, gaps, planning time, status.

    ``results`` is a results DataFrame (from `run_sweep` or `read_results`) or a file path.
    Steps and bounds are seconds; gaps are fractions (0.05 = 5% slower).
    """
    df = _frame(results)
    if df.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS))
    d = pd.DataFrame(
        {
            "instance": df["instance"].astype(object),
            "budget_fraction": df["budget_fraction"].astype("float64").round(6),
            "solver": df["solver"].astype(object),
            "status": df["status"].astype(object),
            "step_s": df["step_s"].astype("float64"),
            "throughput": df["throughput"].astype("float64"),
            "ideal_s": df["ideal_s"].astype("float64"),
            "lower_bound_s": df["lower_bound_s"].astype("float64"),
            "plan_s": df["plan_s"].astype("float64"),
            "min_budget_bytes": df["min_budget_bytes"].astype("float64"),
        }
    )
    case = ["instance", "budget_fraction"]
    keys = [*case, "solver"]
    grp = d.groupby(keys, sort=False, dropna=False)
    g = grp.agg(
        runs=("status", "size"),
        feasible_runs=("step_s", "count"),
        step_s=("step_s", "min"),
        step_s_mean=("step_s", "mean"),
        step_s_std=("step_s", "std"),
        plan_s=("plan_s", "median"),
        plan_s_max=("plan_s", "max"),
        min_budget_bytes=("min_budget_bytes", "min"),
    ).reset_index()
    g["status"] = grp["status"].agg(_status_summary).to_numpy()
    ok = d[d["step_s"].notna()]
    fastest = ok.loc[ok.groupby(keys, sort=False)["step_s"].idxmin(), [*keys, "throughput"]]
    g = g.merge(fastest, on=keys, how="left")
    # per case: the fastest plan any solver found, and the best bound
    best = ok.loc[ok.groupby(case, sort=False)["step_s"].idxmin(), [*case, "step_s", "solver"]]
    best = best.rename(columns={"step_s": "best_known_s", "solver": "best_solver"})
    g = g.merge(best, on=case, how="left")
    ideal = d.groupby(case, sort=False)["ideal_s"].max().rename("ideal_bound")
    lb = d[d["lower_bound_s"].notna()]
    proven = lb.loc[
        lb.groupby(case, sort=False)["lower_bound_s"].idxmax(), [*case, "lower_bound_s", "solver"]
    ]
    proven = proven.rename(columns={"lower_bound_s": "proven_s", "solver": "proven_by"})
    g = g.merge(ideal.reset_index(), on=case, how="left").merge(proven, on=case, how="left")
    use_proven = g["proven_s"].notna() & ~(g["proven_s"] <= g["ideal_bound"])
    g["lower_bound_s"] = np.where(use_proven, g["proven_s"], g["ideal_bound"])
    g["bound_source"] = np.where(
        use_proven, g["proven_by"], np.where(g["ideal_bound"].notna(), "ideal", "none")
    )
    g["gap_to_best"] = g["step_s"] / g["best_known_s"] - 1.0
    bound = g["lower_bound_s"].where(g["lower_bound_s"] > 0)
    g["gap_to_bound"] = g["step_s"] / bound - 1.0
    g["certified_gap"] = g["best_known_s"] / bound - 1.0
    g["min_budget_bytes"] = g["min_budget_bytes"].round().astype("Int64")
    g["best_solver"] = g["best_solver"].astype(object).where(g["best_solver"].notna(), None)
    inst_rank = {n: i for i, n in enumerate(dict.fromkeys(d["instance"]))}
    solver_rank = {n: i for i, n in enumerate(solver_order(d["solver"]))}
    g = g.sort_values(
        ["instance", "budget_fraction", "solver"],
        key=lambda c: (
            c.map(inst_rank) if c.name == "instance"
            else -c if c.name == "budget_fraction"
            else c.map(solver_rank)
        ),
    )  # fmt: skip
    return g[list(GAP_COLUMNS)].reset_index(drop=True)


def case_bounds(g: pd.DataFrame) -> pd.DataFrame:
    """Per (instance, budget) of a gap table (`gaps`): the fastest plan found
    (``best_known_s``, ``best_solver``) and the best lower bound (``lower_bound_s``,
    ``bound_source``)."""
    cols = ["instance", "budget_fraction", "best_known_s", "best_solver", "lower_bound_s",
            "bound_source"]  # fmt: skip
    return g[cols].drop_duplicates(["instance", "budget_fraction"]).reset_index(drop=True)


def solver_order(solvers: Any) -> list[str]:
    """Solver labels by their registry entry's ``Display.order`` (the paper's order for the
    built-ins), then the others (unordered or unknown here) in order of appearance."""

    seen = list(dict.fromkeys(str(s) for s in solvers))

    def rank(label: str) -> float:
        entry = REGISTRY.get(label.split("(", 1)[0])
        order = None if entry is None else entry.display.order
        return float("inf") if order is None else float(order)

    return sorted(seen, key=lambda s: (rank(s), seen.index(s)))


def _status_summary(statuses: pd.Series) -> str:
    counts = Counter(str(s) for s in statuses)
    if len(counts) == 1:
        return next(iter(counts))
    order = {s: i for i, s in enumerate(_STATUS_ORDER)}
    parts = sorted(counts.items(), key=lambda kv: order.get(kv[0], 99))
    return " ".join(f"{s}x{n}" for s, n in parts)


def format_gaps(g: pd.DataFrame) -> str:
    """The gap table for a terminal (ms, %, GB): each solver's best step over its runs, and
    with more than one run per case its mean +- std, then a line on the seeds and the
    direction of every column."""

    def pct(x: Any, digits: int = 1) -> str:
        return "-" if pd.isna(x) else f"{100 * float(x):.{digits}f}%"

    def ms(x: Any) -> str:
        return "-" if pd.isna(x) else f"{1e3 * float(x):.1f}"

    def spread(r: Any) -> str:
        if pd.isna(r.step_s_mean) or r.feasible_runs < 2:
            return "-" if pd.isna(r.step_s_mean) else f"{1e3 * float(r.step_s_mean):.2f}"
        return f"{1e3 * float(r.step_s_mean):.2f} +- {1e3 * float(r.step_s_std):.2f}"

    many = bool((g["runs"] > 1).any()) if len(g) else False
    rows = [
        [
            r.instance,
            f"{100 * r.budget_fraction:g}%",
            r.solver,
            r.status,
            str(r.runs),
            ms(r.step_s),
            *([spread(r)] if many else []),
            pct(r.throughput),
            pct(r.gap_to_best, 2),
            pct(r.gap_to_bound, 2),
            r.bound_source,
            f"{1e3 * r.plan_s:.1f}",
        ]
        for r in g.itertuples(index=False)
    ]
    header = [
        "instance", "budget", "solver", "status", "runs", "best step ms",
        *(["mean +- std ms"] if many else []), "thr", "gap best", "gap bound", "bound", "plan ms",
    ]  # fmt: skip
    most = int(g["runs"].max()) if len(g) else 0
    key = (
        f"runs: runs per case (up to {most}; a seed-independent solver runs once for all "
        "seeds); best step: fastest run, lower is better; thr: ideal / best step, higher is "
        "better; gap best / gap bound: best step above the fastest plan any solver found / "
        "above the best lower bound (ideal step or a proven bound), lower is better; plan ms: "
        "median planning time"
    )
    return format_table(rows, header) + "\n\n" + "\n".join(textwrap.wrap(key, 100))
