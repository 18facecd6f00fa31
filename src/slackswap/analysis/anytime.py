"""Anytime curves from a results table: per case, each search's best gap to the fastest known
plan against planning time, as the median and interquartile range over its seeds; a solver
without a history (a heuristic, an exact solver) is one point per run at its planning time.

The gap at time t of one run is its best plan so far over the case's best known step, minus 1
(infinite before its first plan that fits); the curve is drawn where it is finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from slackswap.analysis.gapanalysis import case_bounds, gaps, solver_order
from slackswap.analysis.profiles import improvements, parse_history
from slackswap.analysis.stats import CASE

#: Points of an anytime curve's time grid (log-spaced over the case's planning times).
GRID_POINTS = 80


@dataclass
class Curve:
    """One solver on one case: a search's band (``times`` s; ``median``, ``q25``, ``q75`` as
    fractions, inf before a plan) or, for a solver without a history, its runs as points."""

    solver: str
    runs: int
    times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    median: np.ndarray = field(default_factory=lambda: np.zeros(0))
    q25: np.ndarray = field(default_factory=lambda: np.zeros(0))
    q75: np.ndarray = field(default_factory=lambda: np.zeros(0))
    points: list[tuple[float, float]] = field(default_factory=list)  # (plan s, gap)

    @property
    def is_band(self) -> bool:
        return len(self.times) > 0


@dataclass
class CaseCurves:
    instance: str
    budget_fraction: float
    best_known_s: float
    curves: list[Curve]


def best_at(points: list[tuple[float, float]], times: np.ndarray) -> np.ndarray:
    """A run's best step at each of ``times``: the last improvement at or before it (inf
    before the first)."""
    out = np.full(len(times), math.inf)
    if not points:
        return out
    t = np.array([p[0] for p in points])
    best = np.minimum.accumulate(np.array([p[1] for p in points]))
    idx = np.searchsorted(t, times, side="right") - 1
    ok = idx >= 0
    out[ok] = best[idx[ok]]
    return out


def _quantiles(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median and quartiles over axis 0, an infinite value (no plan yet) ranked above all
    finite ones: a quantile that falls on or between infinite values is infinite."""
    finite_max = (
        np.nanmax(np.where(np.isfinite(values), values, np.nan))
        if np.isfinite(values).any()
        else 0.0
    )
    stand_in = 2.0 * abs(finite_max) + 1.0  # above every finite value, so order is kept
    v = np.where(np.isfinite(values), values, stand_in)
    q = np.quantile(v, [0.5, 0.25, 0.75], axis=0)
    q[q > finite_max] = math.inf
    return q[0], q[1], q[2]


def anytime_curves(results: pd.DataFrame, grid_points: int = GRID_POINTS) -> list[CaseCurves]:
    """The curves of every case in ``results``, in the results' order of instances and
    budgets, largest budget first; solvers in the registry's display order."""
    bounds = case_bounds(gaps(results))
    d = results.assign(budget_fraction=results["budget_fraction"].astype("float64").round(6))
    out = []
    for (inst, b), case in d.groupby(CASE, sort=False):
        ref_row = bounds[(bounds["instance"] == inst) & (bounds["budget_fraction"] == b)]
        ref = float(ref_row["best_known_s"].iloc[0]) if len(ref_row) else math.nan
        runs = {
            s: [improvements(r) for r in grp.itertuples(index=False)]
            for s, grp in case.groupby("solver", sort=False)
        }
        searched = {
            s: any(parse_history(h) for h in case.loc[case["solver"] == s, "history"])
            for s in runs
        } if "history" in case else dict.fromkeys(runs, False)  # fmt: skip
        times = [p[0] for pts in runs.values() for run in pts for p in run if p[0] > 0]
        lo = min(times, default=1e-3)
        hi = max(times, default=1.0)
        grid = np.geomspace(lo, max(hi, lo * 1.01), grid_points)
        curves = []
        for solver in solver_order(runs):
            pts = runs[solver]
            if searched[solver] and math.isfinite(ref):
                steps = np.array([best_at(run, grid) for run in pts])
                gap = steps / ref - 1.0
                med, q25, q75 = _quantiles(gap)
                curves.append(Curve(solver, len(pts), grid, med, q25, q75))
            else:
                points = [(run[-1][0], run[-1][1] / ref - 1.0) for run in pts if run]
                curves.append(Curve(solver, len(pts), points=points))
        out.append(CaseCurves(str(inst), float(b), ref, curves))
    out.sort(key=lambda c: -c.budget_fraction)
    order = {n: i for i, n in enumerate(dict.fromkeys(d["instance"].astype(str)))}
    out.sort(key=lambda c: order[c.instance])  # stable: budgets stay largest first
    return out
