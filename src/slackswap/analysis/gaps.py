"""Gap analysis: per instance and budget, the best known plan, the best bound, each solver's gaps.

The best lower bound on the step time is the largest of the ideal step (every tensor kept with
unlimited memory: no plan is faster) and every bound an exact solver proved in the results.
``gap_to_best`` compares a solver's best step with the fastest plan any solver found;
``gap_to_bound`` compares it with the bound, and ``certified_gap`` is how far the best known
plan itself may be from optimal.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

GAP_COLUMNS = (
    "instance", "budget_fraction", "solver", "status", "runs", "feasible_runs", "step_s",
    "step_s_mean", "throughput", "best_known_s", "best_solver", "lower_bound_s",
    "bound_source", "gap_to_best", "gap_to_bound", "certified_gap", "plan_s", "plan_s_max",
    "min_budget_bytes",
)  # fmt: skip

_STATUS_ORDER = ("optimal", "feasible", "timeout", "infeasible", "error")


def _frame(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    if isinstance(results, pd.DataFrame):
        return results
    from slackswap.analysis.results import read_results

    return read_results(results)


def gaps(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    """One row per (instance, budget, solver): best step over seeds, gaps, planning time, status.

    ``results`` is a results DataFrame (from `run_sweep` or `read_results`) or a file path.
    Steps and bounds are seconds; gaps are fractions (0.05 = 5% slower).
    """
    df = _frame(results).copy()
    if df.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS))
    df["_b"] = df["budget_fraction"].astype("float64").round(6)
    df["step_s"] = df["step_s"].astype("float64")
    out: list[dict[str, Any]] = []
    for (inst, b), case in df.groupby(["instance", "_b"], sort=False, dropna=False):
        feasible = case[case["step_s"].notna()]
        best_known = float(feasible["step_s"].min()) if len(feasible) else np.nan
        best_solver = (
            str(feasible.loc[feasible["step_s"].idxmin(), "solver"]) if len(feasible) else None
        )
        bound, source = _best_bound(case)
        for solver, runs in case.groupby("solver", sort=False):
            ok = runs[runs["step_s"].notna()]
            step = float(ok["step_s"].min()) if len(ok) else np.nan
            thr = float(ok.loc[ok["step_s"].idxmin(), "throughput"]) if len(ok) else np.nan
            mins = runs["min_budget_bytes"].dropna()
            out.append(
                {
                    "instance": inst,
                    "budget_fraction": float(b),
                    "solver": solver,
                    "status": _status_summary(runs["status"]),
                    "runs": len(runs),
                    "feasible_runs": len(ok),
                    "step_s": step,
                    "step_s_mean": float(ok["step_s"].mean()) if len(ok) else np.nan,
                    "throughput": thr,
                    "best_known_s": best_known,
                    "best_solver": best_solver,
                    "lower_bound_s": bound,
                    "bound_source": source,
                    "gap_to_best": step / best_known - 1.0 if len(ok) else np.nan,
                    "gap_to_bound": step / bound - 1.0 if len(ok) and bound > 0 else np.nan,
                    "certified_gap": best_known / bound - 1.0 if bound > 0 else np.nan,
                    "plan_s": float(runs["plan_s"].median()),
                    "plan_s_max": float(runs["plan_s"].max()),
                    "min_budget_bytes": int(mins.min()) if len(mins) else pd.NA,
                }
            )
    g = pd.DataFrame(out, columns=list(GAP_COLUMNS))
    g["min_budget_bytes"] = g["min_budget_bytes"].astype("Int64")
    return g


def _best_bound(case: pd.DataFrame) -> tuple[float, str]:
    ideal = case["ideal_s"].dropna()
    bound, source = (float(ideal.max()), "ideal") if len(ideal) else (np.nan, "none")
    proven = case[case["lower_bound_s"].notna()]
    if len(proven):
        i = proven["lower_bound_s"].astype("float64").idxmax()
        lb = float(proven.loc[i, "lower_bound_s"])
        if not np.isfinite(bound) or lb > bound:
            bound, source = lb, str(proven.loc[i, "solver"])
    return bound, source


def _status_summary(statuses: pd.Series) -> str:
    counts = Counter(str(s) for s in statuses)
    if len(counts) == 1:
        return next(iter(counts))
    order = {s: i for i, s in enumerate(_STATUS_ORDER)}
    parts = sorted(counts.items(), key=lambda kv: order.get(kv[0], 99))
    return " ".join(f"{s}x{n}" for s, n in parts)


def format_gaps(g: pd.DataFrame) -> str:
    """The gap table for a terminal (ms, %, GB)."""
    from slackswap.commands.common import format_table

    def pct(x: Any, digits: int = 1) -> str:
        return "-" if pd.isna(x) else f"{100 * float(x):.{digits}f}%"

    def ms(x: Any) -> str:
        return "-" if pd.isna(x) else f"{1e3 * float(x):.1f}"

    rows = [
        [
            r.instance,
            f"{100 * r.budget_fraction:g}%",
            r.solver,
            r.status,
            ms(r.step_s),
            pct(r.throughput),
            pct(r.gap_to_best, 2),
            pct(r.gap_to_bound, 2),
            r.bound_source,
            f"{1e3 * r.plan_s:.1f}",
        ]
        for r in g.itertuples(index=False)
    ]
    header = [
        "instance", "budget", "solver", "status", "step ms", "thr", "gap best", "gap bound",
        "bound", "plan ms",
    ]  # fmt: skip
    return format_table(rows, header)
