"""Write every figure a results table supports (PNG and SVG) into one directory.

From the rows alone: throughput against budget (Fig. 4, with the gap to the fastest plan
beside it), where the time goes (Table 2 bars), the gap heat map, planning time against
instance size, the performance profile, the ECDF of runs reaching a gap, the anytime curves,
and the sensitivity figures (Fig. 6) when the results sweep link bandwidth or sequence length.
Nothing is rerun by default. With ``rerun=True`` it also reruns
one case to draw its plan (Fig. 3) and the timelines of two policies (Fig. 5), whose Chrome
traces (``timeline_SOLVER.trace.json``, open them in Perfetto) it writes too; that needs an
instance that can be rebuilt (catalog name, file or model-grid point) and a registered solver.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from slackswap.analysis import comparefigs as CF
from slackswap.analysis import figures as F
from slackswap.analysis import planfigs as PF
from slackswap.analysis.jobs import resolve_spec
from slackswap.analysis.results import read_results
from slackswap.console import format_percent
from slackswap.errors import UserError
from slackswap.plan import Budget
from slackswap.simulator import simulate
from slackswap.simulator.chrome_trace import write_chrome_trace
from slackswap.solvers import run
from slackswap.solvers.registry import REGISTRY

#: Every figure a report may draw (each as NAME.FORMAT), and the pattern of its trace files.
FIGURE_NAMES = (
    "throughput_vs_budget", "time_breakdown", "gap_heatmap", "plan_time_vs_size",
    "performance_profile", "ecdf_gap", "anytime",
    "sensitivity_link", "sensitivity_seq", "plan_by_recompute_cost", "timeline",
)  # fmt: skip
TRACE_PATTERN = "timeline_*.trace.json"


@dataclass
class Report:
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # figures skipped, and why


def write_report(
    results: pd.DataFrame | str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    breakdown_budget: float = 0.4,
    plan_budget: float = 0.3,
    timeline_budget: float = 0.5,
    instance: str | None = None,
    rerun: bool = False,
    formats: tuple[str, ...] = ("png", "svg"),
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Draw the figures into ``directory``; returns the files written and notes on skips.
    ``progress(what)`` hears of each case rerun for the plan and timeline figures (a search
    reruns for its whole time limit).

    Raises ValueError when ``instance`` names none of the results' instances.
    """

    df = results if isinstance(results, pd.DataFrame) else read_results(results)
    rep = Report()
    if df.empty:
        rep.notes.append("no rows: nothing to draw")
        return rep
    if instance is not None:
        names = list(dict.fromkeys(df["instance"].astype(str)))
        if instance not in names:
            raise ValueError(
                f"instance {instance!r} is not in the results (they have {', '.join(names)})"
            )
    d = Path(directory)
    if rerun:
        _check_rebuildable(df, instance)

    def emit(fig: Any, name: str) -> None:
        with _counting_failure(rep):
            rep.files.extend(F.save(fig, d, name, formats))

    emit(F.throughput_vs_budget(df), "throughput_vs_budget")
    if df["step_s"].notna().any():
        emit(F.time_breakdown(df, breakdown_budget), "time_breakdown")
    else:
        rep.notes.append("time_breakdown: no feasible run")
    emit(F.gap_heatmap(df), "gap_heatmap")
    emit(F.plan_time_vs_size(df), "plan_time_vs_size")
    if df["step_s"].notna().any():
        emit(CF.performance_profile(df), "performance_profile")
        emit(CF.ecdf_gap(df), "ecdf_gap")
        emit(CF.anytime(df), "anytime")
    else:
        rep.notes.append("performance_profile, ecdf_gap, anytime: no run found a plan")
    for by, name in (("link_bw_Bps", "sensitivity_link"), ("seq", "sensitivity_seq")):
        if F.has_sensitivity(df, by):
            emit(F.sensitivity(df, by), name)
        else:
            rep.notes.append(f"{name}: the results do not sweep {by}")
    if rerun:
        _rerun_figures(df, rep, d, emit, plan_budget, timeline_budget, instance, progress)
    else:
        rep.notes.append(
            "plan_by_recompute_cost, timeline: not drawn (they rerun one case: pass --rerun)"
        )
    return rep


@contextmanager
def _counting_failure(rep: Report) -> Iterator[None]:
    """A file that cannot be written (a full disk) is one line that says what was written."""
    try:
        yield
    except UserError as exc:
        raise UserError(f"{exc}; {len(rep.files)} files written before it (kept)") from None


def _check_rebuildable(df: pd.DataFrame, wanted: str | None) -> None:
    """Rebuild the instance the rerun will use now, before the figures: a spec that cannot be
    rebuilt (a file gone, or not a regular file) is answered in seconds, not after the drawing."""
    name = _pick_instance(df, wanted)
    if name is not None:
        specs = df.loc[(df["instance"] == name) & df["solver_name"].notna(), "instance_spec"]
        for spec in dict.fromkeys(specs.dropna()):
            resolve_spec(json.loads(str(spec)))


def _pick_instance(df: pd.DataFrame, wanted: str | None) -> str | None:
    rebuildable = df[df["instance_spec"].fillna("{}") != "{}"]
    names = list(dict.fromkeys(rebuildable["instance"]))
    if wanted is not None:
        return wanted if wanted in names else None
    for pref in ("gpt2-xl",):
        if pref in names:
            return pref
    return names[0] if names else None


def _solver_rows(sub: pd.DataFrame, budget: float, k: int) -> list[pd.Series]:
    """Up to ``k`` feasible rows at the budget nearest ``budget`` that has any, preferred first."""
    ok = sub[sub["step_s"].notna()]
    if ok.empty:
        return []
    b = F.nearest_budget(ok, budget)
    at = ok[ok["budget_fraction"].round(6) == b]
    at = at.sort_values("step_s").drop_duplicates("solver")
    names = [str(s) for s in at["solver"]]
    return [at[at["solver"] == n].iloc[0] for n in featured_first(names)[:k]]


def featured_first(labels: list[str]) -> list[str]:
    """The labels of featured solvers (``Display.featured``: SlackSwap and the paper's four
    baselines), lowest first, then the others in the order given (fastest first here)."""

    def featured(label: str) -> int | None:
        entry = REGISTRY.get(label)  # a plain name only: a run with changed options is not it
        return None if entry is None else entry.display.featured

    ranked = sorted((f, i) for i, n in enumerate(labels) if (f := featured(n)) is not None)
    return [labels[i] for _, i in ranked] + [n for n in labels if featured(n) is None]


def _stored_budget(key: str) -> Budget:
    """A results row's budget key: as ``--budget`` reads it, except that a bare number is a
    fraction of P even above 1 (files written before such keys became percentages)."""
    try:
        return Budget.fraction(float(key))
    except ValueError:
        return Budget.parse(key)


def rerun_row(row: pd.Series, timeline: bool = False) -> tuple[Any, Any, Any]:
    """Rerun one results row: (instance, RunRecord, SimResult with a timeline if asked)."""

    inst = resolve_spec(json.loads(str(row["instance_spec"])))
    budget = (
        _stored_budget(str(row["budget"]))
        if pd.notna(row["budget"])
        else Budget.fraction(float(row["budget_fraction"]))
    )
    opts = json.loads(str(row["solver_options"])) if pd.notna(row["solver_options"]) else {}
    tl = row["time_limit_s"]
    rec = run(
        inst,
        budget,
        str(row["solver_name"]),
        time_limit=None if pd.isna(tl) else float(tl),
        seed=int(row["seed"]),
        options=opts or None,
        find_min_budget=False,
    )
    sim = None
    if timeline and rec.plan is not None:
        sim = simulate(inst, rec.plan, budget, timeline=True)
    return inst, rec, sim


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in label).strip("_")


def _rerun_figures(
    df: pd.DataFrame,
    rep: Report,
    rep_dir: Path,
    emit: Any,
    plan_budget: float,
    timeline_budget: float,
    wanted: str | None,
    progress: Callable[[str], None] | None = None,
) -> None:
    def rerun(row: pd.Series, figure: str, timeline: bool = False) -> tuple[Any, Any, Any]:
        if progress is not None:
            limit = row["time_limit_s"]
            up_to = "" if pd.isna(limit) else f", up to {float(limit):g} s"
            progress(
                f"rerunning {row['solver']} on {row['instance']} at "
                f"{format_percent(float(row['budget_fraction']))} of P for the {figure}{up_to}"
            )
        return rerun_row(row, timeline=timeline)

    name = _pick_instance(df, wanted)
    if name is None:
        which = f"{wanted} cannot" if wanted is not None else "no instance in the results can"
        rep.notes.append(f"plan and timeline: {which} be rebuilt (no instance_spec recorded)")
        return
    sub = df[(df["instance"] == name) & df["solver_name"].notna()]
    rows = _solver_rows(sub, plan_budget, 1)
    if rows:
        inst, rec, _ = rerun(rows[0], "plan figure")
        if rec.plan is not None:
            title = (f"{rec.solver} plan for {name} at {100 * rec.budget_fraction:.0f}% of P "
                     f"(throughput {100 * (rec.throughput or 0):.1f}%)")  # fmt: skip
            emit(PF.plan_by_recompute_cost(inst, rec.plan, title), "plan_by_recompute_cost")
        else:
            rep.notes.append(f"plan: {rec.solver} found no plan on rerun ({rec.status})")
    else:
        rep.notes.append(f"plan: no feasible run on {name}")
    runs = []
    for row in _solver_rows(sub, timeline_budget, 2):
        inst, rec, sim = rerun(row, "timeline figure", timeline=True)
        if sim is not None and sim.feasible:
            runs.append((str(rec.solver), sim))
    if runs:
        b = F.nearest_budget(sub[sub["step_s"].notna()], timeline_budget)
        emit(PF.timeline(inst, runs, f"One training step of {name} at {100 * b:g}% of P"),
             "timeline")  # fmt: skip
        for label, sim in runs:
            path = Path(rep_dir) / f"timeline_{_safe(label)}.trace.json"
            with _counting_failure(rep):
                write_chrome_trace(path, inst, sim)
            rep.files.append(path)
    else:
        rep.notes.append(f"timeline: no feasible run on {name}")
