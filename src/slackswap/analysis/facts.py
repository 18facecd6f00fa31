"""Figure facts: a statement from the paper, what the toolkit measured, whether it holds.

Figures are checked against the paper's stated facts (ranges, orderings, "no plan fits") rather
than cell by cell; each fact prints the paper's wording, the toolkit's numbers and a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from slackswap.analysis.gapanalysis import gaps
from slackswap.console import format_table


@dataclass(frozen=True)
class Fact:
    what: str  # the statement checked
    paper: str  # the paper's value(s), as text
    toolkit: str  # the toolkit's value(s), as text
    holds: bool | None  # None: not checkable with these results
    why: str = ""  # where it does not hold (or cannot be checked): the reason

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def render(facts: Sequence[Fact], title: str = "") -> str:
    """The facts as a terminal table, then the reasons for those that do not hold."""

    rows = [
        (f.what, f.paper, f.toolkit, {True: "holds", False: "DIFFERS", None: "n/a"}[f.holds])
        for f in facts
    ]
    out = [title] if title else []
    out.append(format_table(rows, ("fact", "paper", "toolkit", "")))
    n_ok = sum(f.holds is True for f in facts)
    n_checked = sum(f.holds is not None for f in facts)
    out.append(f"\n{n_ok} of {n_checked} checkable facts hold.")
    for f in facts:
        if f.holds is False or (f.holds is None and f.why):
            out.append(f"- {f.what}: {f.why or 'cause not established by this report'}")
    return "\n".join(out)


def best_table(df: pd.DataFrame) -> pd.DataFrame:
    """Throughput (fraction, NaN when no plan) indexed by (instance, budget), one column per solver."""

    g = gaps(df)
    t = g.pivot_table(
        index=["instance", "budget_fraction"], columns="solver", values="throughput", aggfunc="max"
    )
    # keep solvers that ran but found no plan anywhere as all-NaN columns
    for s in g["solver"].unique():
        if s not in t.columns:
            t[s] = np.nan
    return t


def pct(x: float | None, digits: int = 1) -> str:
    return "no plan" if x is None or not np.isfinite(x) else f"{100 * x:.{digits}f}%"


def span(values: Sequence[float], digits: int = 1, unit: str = "%") -> str:
    """``lo-hi`` of the finite values (``x`` when equal), noting how many had no plan."""
    v = [x for x in values if x is not None and np.isfinite(x)]
    missing = len(values) - len(v)
    if not v:
        return "no plan"
    scale = 100 if unit == "%" else 1
    lo, hi = min(v) * scale, max(v) * scale
    text = f"{lo:.{digits}f}{unit}"
    if abs(hi - lo) >= 10 ** (-digits):
        text = f"{lo:.{digits}f}-{hi:.{digits}f}{unit}"
    return text + (f" (no plan in {missing} of {len(values)})" if missing else "")


def no_plan_reasons(
    df: pd.DataFrame, cases: Sequence[tuple[str, float, str]], limit: int = 2
) -> str:
    """Why the runs of (instance, budget fraction, solver) cases have no plan, from their rows."""
    seen: dict[str, list[str]] = {}
    b = df["budget_fraction"].round(6)
    for inst, frac, solver in cases:
        rows = df[(df["instance"] == inst) & (b == round(frac, 6)) & (df["solver"] == solver)]
        for r in rows.itertuples(index=False):
            if pd.notna(r.step_s):
                continue
            detail = r.error if isinstance(r.error, str) else r.reason
            text = f"{r.status}" + (f" ({str(detail)[:110]})" if isinstance(detail, str) else "")
            seen.setdefault(text, []).append(f"{inst} {100 * frac:g}% {solver}")
    parts = [f"{', '.join(w[:3])}{' ...' if len(w) > 3 else ''}: {t}" for t, w in seen.items()]
    return "; ".join(parts[:limit]) + (
        f"; +{len(parts) - limit} more" if len(parts) > limit else ""
    )
