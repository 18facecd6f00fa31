"""Tables for papers from a results table: per case (instance, budget) and solver the mean and
standard deviation over seeds of the step time, the gaps to the fastest plan found and to the
best lower bound, the planning time, and what the runs ended as; as Markdown, LaTeX (booktabs,
the best value of each case in bold), CSV or one JSON object.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any

import pandas as pd

from slackswap.analysis.gapanalysis import case_bounds, gaps, solver_order
from slackswap.analysis.profiles import performance_ratios
from slackswap.analysis.results import read_results
from slackswap.analysis.stats import CASE, seed_stats

TABLE_FORMATS = ("markdown", "latex", "csv", "json")
#: Columns where the lowest mean is the best of a case (bold in Markdown and LaTeX).
LOWER_IS_BETTER = ("step_s_mean", "gap_to_best_mean", "gap_to_bound_mean", "plan_s_mean")


def _frame(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    if isinstance(results, pd.DataFrame):
        return results

    return read_results(results)


def _counts(values: pd.Series) -> str:
    """``3 feasible`` or ``2 feasible, 1 timeout``: what a case's runs ended as."""
    c = Counter(str(v) for v in values.dropna())
    return ", ".join(f"{n} {k}" for k, n in sorted(c.items(), key=lambda kv: -kv[1]))


def summary(results: pd.DataFrame | str | os.PathLike[str]) -> pd.DataFrame:
    """One row per (instance, budget, solver): `seed_stats`' columns plus ``statuses`` and
    ``stopped_by`` (counts as text) and the case's ``best_known_s``, ``best_solver``,
    ``lower_bound_s`` and ``bound_source``; cases in the results' order, largest budget first,
    solvers in display order."""
    df = _frame(results)
    st = seed_stats(df)
    d = df.assign(budget_fraction=df["budget_fraction"].astype("float64").round(6))
    keys = [*CASE, "solver"]
    counts = d.groupby(keys, sort=False).agg(
        statuses=("status", _counts),
        stopped_by=("stopped_by", _counts) if "stopped_by" in d else ("status", lambda s: ""),
    )
    out = st.merge(counts.reset_index(), on=keys, how="left")
    out = out.merge(case_bounds(gaps(df)), on=CASE, how="left")
    inst_rank = {n: i for i, n in enumerate(dict.fromkeys(d["instance"]))}
    solver_rank = {n: i for i, n in enumerate(solver_order(d["solver"]))}
    out = out.assign(
        _i=out["instance"].map(inst_rank), _b=-out["budget_fraction"],
        _s=out["solver"].map(solver_rank),
    ).sort_values(["_i", "_b", "_s"]).drop(columns=["_i", "_b", "_s"])  # fmt: skip
    return out.reset_index(drop=True)


def _best_rows(s: pd.DataFrame, column: str) -> set[int]:
    """Index of the rows holding the lowest value of ``column`` in their case."""
    best: set[int] = set()
    for _, grp in s.groupby(CASE, sort=False):
        v = grp[column].astype("float64")
        if v.notna().any():
            best |= set(grp.index[v == v.min()])
    return best


def _cells(s: pd.DataFrame, r: pd.Series) -> dict[str, tuple[str, str | None]]:
    """Each column's text and, for mean-and-spread columns, the std text (None: one value)."""

    def num(col: str, scale: float, digits: int) -> tuple[str, str | None]:
        mean = r[f"{col}_mean"]
        if pd.isna(mean):
            return ("-", None)
        std = r[f"{col}_std"]
        sd = None if pd.isna(std) else f"{scale * float(std):.{digits}f}"
        return (f"{scale * float(mean):.{digits}f}", sd)

    seeds = int(r["seeds"])
    runs = f"1 (all {seeds} seeds)" if r["seed_independent"] and seeds > 1 else str(int(r["runs"]))
    return {
        "step_s": num("step_s", 1e3, 2),
        "gap_to_best": num("gap_to_best", 100, 3),
        "gap_to_bound": num("gap_to_bound", 100, 3),
        "plan_s": num("plan_s", 1.0, 3),
        "runs": (runs, None),
        "statuses": (str(r["statuses"] or "-"), None),
        "stopped_by": (str(r["stopped_by"] or "-"), None),
    }


HEADERS = {
    "step_s": "step (ms)",
    "gap_to_best": "gap to best (%)",
    "gap_to_bound": "gap to bound (%)",
    "plan_s": "planning (s)",
    "runs": "runs",
    "statuses": "status",
    "stopped_by": "stopped by",
}


def _seeds_note(s: pd.DataFrame) -> str:
    seeds = int(s["seeds"].max()) if len(s) else 0
    if seeds <= 1:
        return "one run per case and solver"
    return (
        f"mean ± std over {seeds} seeds (runs with a plan); a seed-independent solver ran once "
        "per case; lower is better in every numeric column; best of each case in bold"
    )


def to_markdown(s: pd.DataFrame) -> str:
    """A Markdown (GitHub) table, the best mean of each case in bold."""
    best = {c: _best_rows(s, f"{c}_mean") for c in ("step_s", "gap_to_best", "gap_to_bound",
                                                    "plan_s")}  # fmt: skip
    head = ["instance", "budget", "solver", *HEADERS.values()]
    lines = [
        f"<!-- {_seeds_note(s)} -->",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * 3 + ["---:"] * 4 + ["---"] * 3) + "|",
    ]
    for i, r in s.iterrows():
        cells = _cells(s, r)
        row = [str(r["instance"]), f"{100 * float(r['budget_fraction']):g}%", str(r["solver"])]
        for col in HEADERS:
            text, sd = cells[col]
            text = text if sd is None else f"{text} ± {sd}"
            if col in best and i in best[col] and text != "-":
                text = f"**{text}**"
            row.append(text.replace("|", "\\|"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}"}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(c, c) for c in text)


def to_latex(s: pd.DataFrame) -> str:
    """A LaTeX tabular with booktabs rules (``\\usepackage{booktabs}``), a rule between cases,
    mean $\\pm$ std, and the best mean of each case in bold."""
    best = {c: _best_rows(s, f"{c}_mean") for c in ("step_s", "gap_to_best", "gap_to_bound",
                                                    "plan_s")}  # fmt: skip
    head = ["instance", "budget", "solver", *HEADERS.values()]
    lines = [
        f"% {_seeds_note(s).replace('±', '+-')}",
        r"\begin{tabular}{lll" + "r" * 4 + "lll}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in head) + r" \\",
        r"\midrule",
    ]
    last_case = None
    for i, r in s.iterrows():
        case = (r["instance"], r["budget_fraction"])
        if last_case is not None and case != last_case:
            lines.append(r"\midrule")
        last_case = case
        cells = _cells(s, r)
        row = [
            latex_escape(str(r["instance"])),
            latex_escape(f"{100 * float(r['budget_fraction']):g}%"),
            latex_escape(str(r["solver"])),
        ]
        for col in HEADERS:
            text, sd = cells[col]
            body = latex_escape(text) if sd is None else f"{text} $\\pm$ {sd}"
            if col in best and i in best[col] and text != "-":
                body = r"\textbf{" + body + "}"
            row.append(body)
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def _jsonable(v: Any) -> Any:
    if v is None or v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def to_json(s: pd.DataFrame, results: pd.DataFrame, source: str | None = None) -> str:
    """One JSON object: the summary rows (seconds and fractions, null for none), the cases with
    their best plan and bound, and the performance profile's share of cases within 1, 1.01,
    1.1 and 2 x the best step per solver."""
    prof = performance_ratios(results)
    cases = case_bounds(gaps(results))
    obj = {
        "source": source,
        "seeds": sorted(int(x) for x in results["seed"].dropna().unique()),
        "solvers": solver_order(results["solver"]),
        "units": "seconds in columns ending _s or starting step_s/plan_s; gaps as fractions "
        "(0.01 = 1%); lower is better for every metric",
        "cases": [{k: _jsonable(v) for k, v in r.items()} for r in cases.to_dict("records")],
        "rows": [{k: _jsonable(v) for k, v in r.items()} for r in s.to_dict("records")],
        "performance_profile": {
            "cases": len(prof.ratios),
            "unsolved_cases": prof.unsolved,
            "share_within": {f"{t:g}": prof.rho(t) for t in (1.0, 1.01, 1.1, 2.0)},
        },
    }
    return json.dumps(obj, indent=1, allow_nan=False)


def format_table(
    results: pd.DataFrame | str | os.PathLike[str], fmt: str, source: str | None = None
) -> str:
    """The summary of ``results`` as ``fmt`` (one of `TABLE_FORMATS`)."""
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"table format must be one of {', '.join(TABLE_FORMATS)}, not {fmt!r}")
    df = _frame(results)
    s = summary(df)
    if fmt == "markdown":
        return to_markdown(s)
    if fmt == "latex":
        return to_latex(s)
    if fmt == "csv":
        return s.to_csv(index=False).rstrip("\n")
    return to_json(s, df, source)
