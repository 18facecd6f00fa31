"""Gap analysis on hand-made results: best known plan, best bound, per-solver gaps."""

from __future__ import annotations

import pandas as pd
import pytest

from slackswap.analysis.gapanalysis import format_gaps, gaps
from slackswap.analysis.results import rows_to_frame
from slackswap.rowschema import COLUMNS


def r(solver: str, b: float, step: float | None, seed: int = 0, **kw) -> dict:
    d = dict.fromkeys(COLUMNS)
    d.update(
        instance="i",
        budget_fraction=b,
        solver=solver,
        seed=seed,
        status="feasible" if step else "infeasible",
        step_s=step,
        throughput=None if step is None else 1.0 / step,
        ideal_s=1.0,
        plan_s=0.002 * (seed + 1),
    )
    d.update(kw)
    return d


def frame() -> pd.DataFrame:
    return rows_to_frame(
        [
            r("a", 0.5, 1.10),
            r("b", 0.5, 1.32),
            r("ga", 0.5, 1.21, seed=0),
            r("ga", 0.5, 1.10, seed=1),
            r("exact", 0.5, 1.155, lower_bound_s=1.05, status="timeout"),
            r("a", 0.2, 1.5),
            r("b", 0.2, None, min_budget_bytes=300),
            r("b", 0.2, None, seed=1, status="error", min_budget_bytes=None),
        ]
    )


def test_best_known_bound_and_gaps() -> None:
    g = gaps(frame()).set_index(["budget_fraction", "solver"])
    half = g.loc[0.5]
    assert (half["best_known_s"] == 1.10).all()
    assert half.loc["a", "gap_to_best"] == pytest.approx(0.0)
    assert half.loc["b", "gap_to_best"] == pytest.approx(0.2)
    # the exact solver's bound (1.05) beats the ideal step (1.0)
    assert (half["lower_bound_s"] == 1.05).all() and half.loc["a", "bound_source"] == "exact"
    assert half.loc["b", "gap_to_bound"] == pytest.approx(1.32 / 1.05 - 1)
    assert half.loc["a", "certified_gap"] == pytest.approx(1.10 / 1.05 - 1)
    # seeds: best over seeds, mean, median planning time
    assert half.loc["ga", "step_s"] == 1.10 and half.loc["ga", "step_s_mean"] == pytest.approx(
        1.155
    )
    assert half.loc["ga", "runs"] == 2 and half.loc["ga", "plan_s"] == pytest.approx(0.003)
    low = g.loc[0.2]
    assert low.loc["a", "bound_source"] == "ideal" and low.loc["a", "lower_bound_s"] == 1.0
    assert pd.isna(low.loc["b", "step_s"]) and pd.isna(low.loc["b", "gap_to_best"])
    assert low.loc["b", "status"] == "infeasiblex1 errorx1"
    assert low.loc["b", "min_budget_bytes"] == 300


def test_gap_table_text() -> None:
    text = format_gaps(gaps(frame()))
    table, key = text.split("\n\n")
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["instance", "budget", "solver"]
    assert len(lines) == 2 + 6
    assert "lower is better" in key and "higher is better" in key
    # ga's two seeds: mean 1.155 s, std sqrt(((1.21-1.155)^2 + (1.10-1.155)^2) / 1) = 77.78 ms
    assert "1155.00 +- 77.78" in table
    assert any("20.00%" in line and " b " in f" {line} " for line in lines)


def test_empty_results() -> None:
    assert gaps(rows_to_frame([])).empty


def test_package_level_gaps_is_the_function() -> None:
    import slackswap.analysis as analysis
    import slackswap.analysis.figures  # noqa: F401 - imports the gap module too

    assert callable(analysis.gaps) and analysis.gaps is gaps
