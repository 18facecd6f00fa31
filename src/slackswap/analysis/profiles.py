"""Performance profiles (Dolan and More 2002) and ECDFs of runs reaching a gap (the COCO/BBOB
run-length form), from a results table.

Performance profile: a *case* is one (instance, budget). A solver's value on a case is the
median step time over its runs there, a run without a plan counting as infinite (never within
any factor); its *ratio* is that value over the best solver's on the case. The profile
rho_s(tau) is the share of cases whose ratio is at most tau. Cases no solver found a plan for
have no best and are left out (`ProfileData.unsolved` counts them); a solver that did not run a
case counts as never within a factor there.

ECDF: for each run (instance, budget, seed) and each target gap g, the planning time at which
the run first held a plan within g of the case's reference step (the fastest plan any solver
found, or the best lower bound); a search's history gives the time of each improvement, any
other run reaches the targets its final plan meets at its planning time. The curve at time t is
the share of (case, target) pairs reached by t, each case weighing the same for every solver
(a seed-independent solver's one run stands for all the seeds).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from slackswap.analysis.gapanalysis import case_bounds, gaps, solver_order
from slackswap.analysis.results import read_results
from slackswap.analysis.stats import CASE

#: Target gaps of the ECDF (fractions): 0.1%, 1% and 10% above the reference.
DEFAULT_TARGETS = (0.001, 0.01, 0.1)
REFERENCES = ("best", "bound")


def _frame(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    if isinstance(results, pd.DataFrame):
        return results

    return read_results(results)


@dataclass(frozen=True)
class ProfileData:
    """The performance ratios (rows: cases, columns: solvers; inf = no plan, solver order)
    and the number of cases left out because no solver found a plan."""

    ratios: pd.DataFrame
    unsolved: int

    @property
    def solvers(self) -> list[str]:
        return [str(c) for c in self.ratios.columns]

    def rho(self, tau: float) -> dict[str, float]:
        """Share of the cases where each solver is within a factor ``tau`` of the best."""
        n = len(self.ratios)
        if n == 0:
            return dict.fromkeys(self.solvers, math.nan)
        return {s: float((self.ratios[s] <= tau).sum()) / n for s in self.solvers}

    def curve(self, solver: str) -> tuple[np.ndarray, np.ndarray]:
        """The step function of ``solver``'s profile: the finite ratios in order, and the share
        of cases within each (the value from that tau on)."""
        r = np.sort(self.ratios[solver].to_numpy(float))
        r = r[np.isfinite(r)]
        n = len(self.ratios)
        return r, np.arange(1, len(r) + 1) / max(n, 1)


def performance_ratios(
    results: pd.DataFrame | str | os.PathLike[str], metric: str = "step_s"
) -> ProfileData:
    """The Dolan-More performance ratios of ``metric`` (lower is better) per case and solver."""
    df = _frame(results)
    d = df.assign(
        budget_fraction=df["budget_fraction"].astype("float64").round(6),
        _v=df[metric].astype("float64").fillna(math.inf),
    )
    values = d.groupby([*CASE, "solver"], sort=False)["_v"].median().unstack("solver")
    values = values[solver_order(values.columns)]
    values = values.fillna(math.inf)  # a solver that did not run a case: never within a factor
    best = values.min(axis=1)
    solved = np.isfinite(best)
    with np.errstate(invalid="ignore"):
        ratios = values[solved].div(best[solved], axis=0)
    return ProfileData(ratios=ratios, unsolved=int((~solved).sum()))


def run_reach_times(
    results: pd.DataFrame | str | os.PathLike[str],
    targets: tuple[float, ...] = DEFAULT_TARGETS,
    reference: str = "best",
) -> pd.DataFrame:
    """One row per run and target: ``instance``, ``budget_fraction``, ``solver``, ``seed``,
    ``target`` (fraction), ``time_s`` (seconds of planning until the run held a plan within the
    target; inf: never) and ``weight`` (1 / the solver's runs on the case)."""
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, not {reference!r}")
    df = _frame(results)
    bounds = case_bounds(gaps(df))
    ref_col = "best_known_s" if reference == "best" else "lower_bound_s"
    d = df.assign(budget_fraction=df["budget_fraction"].astype("float64").round(6))
    d = d.merge(
        bounds[[*CASE, ref_col]].rename(columns={ref_col: "reference_s"}), on=CASE, how="left"
    )
    d["solver_runs"] = d.groupby([*CASE, "solver"], sort=False)["seed"].transform("size")
    rows = []
    for r in d.itertuples(index=False):
        ref = float(r.reference_s)
        points = improvements(r)
        for g in targets:
            t = math.inf
            if math.isfinite(ref):
                t = next((s for s, step in points if step <= (1 + g) * ref * (1 + 1e-12)), math.inf)
            rows.append(
                {
                    "instance": r.instance,
                    "budget_fraction": r.budget_fraction,
                    "solver": r.solver,
                    "seed": r.seed,
                    "target": g,
                    "time_s": t,
                    "weight": 1.0 / float(r.solver_runs),
                }
            )
    return pd.DataFrame(rows)


def improvements(row: Any) -> list[tuple[float, float]]:
    """(seconds, best step s) whenever a run's best plan improved: a search's history, then its
    final plan at its planning time (the end of its run); one point for any other run with a
    plan; none without one."""
    out: list[tuple[float, float]] = []
    for t, _n, best in parse_history(getattr(row, "history", None)):
        if best is not None and math.isfinite(best):
            out.append((float(t), float(best)))
    step = getattr(row, "step_s", None)
    plan_s = getattr(row, "plan_s", None)
    if step is not None and not pd.isna(step) and plan_s is not None and not pd.isna(plan_s):
        # the history's times start at the search, the planning time at the solve: the final
        # plan counts from the later of the two
        end = max(float(plan_s), out[-1][0] if out else 0.0)
        out.append((end, float(step)))
    return out


def parse_history(cell: Any) -> list[tuple[float, int, float | None]]:
    """A results file's ``history`` cell (JSON text, checked when read) as tuples."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)) or cell is pd.NA:
        return []
    value = json.loads(str(cell)) if isinstance(cell, str) else cell
    return [(float(t), int(n), None if b is None else float(b)) for t, n, b in value]


def ecdf(reach: pd.DataFrame, times: np.ndarray) -> dict[str, np.ndarray]:
    """Per solver, the share of (case, target) pairs reached by each of ``times`` (seconds)."""
    cases = reach[CASE].drop_duplicates()
    n_pairs = len(cases) * reach["target"].nunique()
    out = {}
    for solver in solver_order(reach["solver"]):
        s = reach[reach["solver"] == solver]
        t = s["time_s"].to_numpy(float)
        w = s["weight"].to_numpy(float)
        out[solver] = np.array([w[t <= x].sum() for x in times]) / max(n_pairs, 1)
    return out
