"""Statistics over seeds: per (instance, budget, solver) the mean, standard deviation, median,
minimum and a 95% bootstrap confidence interval of the step time, the gaps and the planning
time; and a paired comparison of two solvers over the cases (Wilcoxon signed-rank).

Every run is one row of a results file. A seed-independent solver (``seed_independent = 1``:
the seed never changes its plan) has one run per case that stands for every seed: its standard
deviation and interval are undefined (NaN), never a made-up zero. Steps and gaps are over the
runs that found a plan; ``feasible_runs`` says how many of ``runs`` those are.
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from slackswap.analysis.gapanalysis import case_bounds, gaps
from slackswap.analysis.results import read_results

#: The confidence level of every interval, and the bootstrap's resamples and random stream
#: (fixed: the same results file gives the same intervals).
CONFIDENCE = 0.95
N_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

#: The metrics `seed_stats` summarises, per run: seconds, fractions, seconds.
METRICS = ("step_s", "gap_to_best", "gap_to_bound", "plan_s")
STATISTICS = ("mean", "std", "median", "min", "ci_low", "ci_high")
CASE = ["instance", "budget_fraction"]


def bootstrap_ci(
    values: Any,
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """The percentile bootstrap confidence interval of the mean of ``values``
    (`scipy.stats.bootstrap`, ``n_resamples`` resamples from ``seed``'s stream).

    NaN values are dropped; fewer than two values give (nan, nan): one run says nothing about
    the spread. Equal values give (value, value), which is every resample's mean (SciPy refuses
    such degenerate data rather than return it).
    """
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return (math.nan, math.nan)
    if np.all(x == x[0]):
        return (float(x[0]), float(x[0]))
    res = sps.bootstrap(
        (x,),
        np.mean,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        **_rng_argument(seed),
    )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def _rng_argument(seed: int) -> dict[str, Any]:
    """SciPy 1.15 renamed ``random_state`` to ``rng``; the oldest SciPy allowed has only the
    first."""
    name = "rng" if "rng" in inspect.signature(sps.bootstrap).parameters else "random_state"
    return {name: np.random.default_rng(seed)}


def describe(values: Any) -> dict[str, float]:
    """mean, std (n-1), median, min and the bootstrap interval of the non-NaN ``values``."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return dict.fromkeys(STATISTICS, math.nan)
    low, high = bootstrap_ci(x)
    return {
        "mean": float(np.mean(x)),
        "std": float(np.std(x, ddof=1)) if len(x) > 1 else math.nan,
        "median": float(np.median(x)),
        "min": float(np.min(x)),
        "ci_low": low,
        "ci_high": high,
    }


def run_gaps(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    """The results rows with each run's ``gap_to_best`` (its step over the fastest plan any
    solver found in its case, ``case_best_s``, minus 1) and ``gap_to_bound`` (over the case's
    best lower bound ``case_bound_s``: the ideal step or the largest bound an exact solver
    proved), as fractions; NaN without a plan."""
    g = gaps(results)
    df = results if isinstance(results, pd.DataFrame) else _read(results)
    d = df.copy()
    d["budget_fraction"] = d["budget_fraction"].astype("float64").round(6)
    bounds = case_bounds(g).rename(
        columns={"best_known_s": "case_best_s", "lower_bound_s": "case_bound_s",
                 "best_solver": "case_best_solver", "bound_source": "case_bound_source"}
    )  # fmt: skip
    d = d.drop(columns=[c for c in bounds.columns if c in d and c not in CASE])
    d = d.merge(bounds, on=CASE, how="left")
    step = d["step_s"].astype("float64")
    d["gap_to_best"] = step / d["case_best_s"] - 1.0
    d["gap_to_bound"] = step / d["case_bound_s"].where(d["case_bound_s"] > 0) - 1.0
    return d


def _read(path: str | os.PathLike[str]) -> pd.DataFrame:

    return read_results(path)


def seed_stats(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    """One row per (instance, budget, solver): ``runs``, ``feasible_runs``, ``seeds`` (how many
    seeds the runs stand for), ``seed_independent``, and for each of `METRICS` its
    `STATISTICS` as ``METRIC_STAT`` columns (seconds or fractions)."""
    d = run_gaps(results)
    rows = []
    seeds_asked = int(d["seed"].nunique()) if len(d) else 0
    for (inst, b, solver), grp in d.groupby([*CASE, "solver"], sort=False):
        once = "seed_independent" in grp and bool((grp["seed_independent"].fillna(0) == 1).all())
        row: dict[str, Any] = {
            "instance": inst,
            "budget_fraction": b,
            "solver": solver,
            "runs": len(grp),
            "feasible_runs": int(grp["step_s"].notna().sum()),
            "seed_independent": once,
            "seeds": seeds_asked if once else int(grp["seed"].nunique()),
        }
        for metric in METRICS:
            for stat, value in describe(grp[metric].astype("float64")).items():
                row[f"{metric}_{stat}"] = value
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class PairedComparison:
    """Two solvers over the cases both found a plan in: how often each was faster (by its mean
    step over seeds), and the Wilcoxon signed-rank test of the paired differences."""

    a: str
    b: str
    metric: str
    cases: int  # cases where both have a value
    a_better: int
    b_better: int
    ties: int
    median_ratio: float  # median over cases of a's value / b's value
    statistic: float
    p_value: float
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in
                asdict(self).items()}  # fmt: skip

    def text(self) -> str:
        p = "n/a" if math.isnan(self.p_value) else f"{self.p_value:.3g}"
        return (
            f"{self.a} vs {self.b} on {self.metric} over {self.cases} cases: {self.a} lower in "
            f"{self.a_better}, {self.b} lower in {self.b_better}, {self.ties} ties; median "
            f"ratio {self.median_ratio:.4g}; Wilcoxon signed-rank p = {p}"
            + (f" ({self.note})" if self.note else "")
        )


def paired_comparison(
    results: pd.DataFrame | str | os.PathLike[str], a: str, b: str, metric: str = "step_s"
) -> PairedComparison:
    """Compare solvers ``a`` and ``b`` case by case on ``metric`` (mean over seeds; lower is
    better) with `scipy.stats.wilcoxon` (two-sided). Cases where either has no value are left
    out; ties (equal means) are counted and dropped by the test (``zero_method="wilcox"``).
    Raises ValueError when ``a`` or ``b`` is not in the results."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    d = run_gaps(results)
    solvers = set(d["solver"].astype(str))
    for name in (a, b):
        if name not in solvers:
            raise ValueError(
                f"solver {name!r} is not in the results ({', '.join(sorted(solvers))})"
            )
    means = d.groupby([*CASE, "solver"])[metric].mean().unstack("solver")
    pair = means[[a, b]].dropna()
    x, y = pair[a].to_numpy(float), pair[b].to_numpy(float)
    diff = x - y
    a_better, b_better = int((diff < 0).sum()), int((diff > 0).sum())
    ties = int((diff == 0).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(np.median(x / y)) if len(x) else math.nan
    note = ""
    if a_better + b_better == 0:
        stat, p = math.nan, math.nan
        note = "no case where they differ: nothing to test"
    else:
        res = sps.wilcoxon(x, y, zero_method="wilcox")
        stat, p = float(res.statistic), float(res.pvalue)
        if a_better + b_better < 6:
            note = "fewer than 6 differing cases: no p-value below 0.05 is possible"
    return PairedComparison(a, b, metric, len(x), a_better, b_better, ties, ratio, stat, p, note)
