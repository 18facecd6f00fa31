"""Figures drawn from a results table: Fig. 4, Table 2 as bars, Fig. 6, gap heat map, plan time
(the comparison forms of optimisation research are in `comparefigs`).

Every function takes a results DataFrame (`run_sweep` / `read_results`), except `convergence`,
which takes run records (a search's history is not a column of the table), and returns a
matplotlib `Figure` built without pyplot (no global state, any backend); `save` writes it as
PNG and SVG. Units on the axes: % of the no-swap peak P, % of the ideal step, ms, GB, GB/s.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from slackswap.analysis.gapanalysis import gaps, solver_order
from slackswap.analysis.stats import run_gaps
from slackswap.analysis.styles import scatter_style, solver_styles
from slackswap.analysis.styles import solver_style as solver_style  # re-exported for callers
from slackswap.textfile import write_output


def _styles(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Every solver's style in a results table (the same in each figure of one report)."""
    return solver_styles(solver_order(df["solver"].astype(str)))


def save(
    fig: Figure, directory: str | Path, name: str, formats: Sequence[str] = ("png", "svg")
) -> list[Path]:
    """Write ``fig`` as ``DIR/NAME.png`` and ``DIR/NAME.svg``; returns the paths."""
    d = Path(directory)
    out = []
    for fmt in formats:
        p = d / f"{name}.{fmt}"
        buf = io.BytesIO()  # drawn whole, then written as any output file is
        fig.savefig(buf, format=fmt, dpi=130, bbox_inches="tight")
        write_output(p, buf.getvalue())
        out.append(p)
    return out


def _grid(
    n: int, ncols: int = 2, size: tuple[float, float] = (5.2, 3.6)
) -> tuple[Figure, list[Any]]:
    ncols = max(1, min(ncols, n))
    nrows = max(1, math.ceil(n / ncols))
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _best(df: pd.DataFrame) -> pd.DataFrame:
    """Best run over seeds per (instance, budget, solver), via the gap table."""

    return gaps(df)


def _solvers(df: pd.DataFrame) -> list[str]:
    return solver_order(df["solver"])


def _plain_log_ticks(axis: Any, values: Any) -> None:
    """Ticks at the swept values, written plainly (12, 25, 200; not 2 x 10^1)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    v = sorted({float(x) for x in values if np.isfinite(x) and x > 0})
    if not v:
        return
    if len(v) > 10:
        v = v[:: math.ceil(len(v) / 10)]
    axis.set_major_locator(FixedLocator(v))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def _legend(fig: Figure, axes: list[Any], title: str | None = None) -> None:
    """One legend for the figure: each label once, in the order first drawn."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(
            list(handles.values()), list(handles), loc="outside lower center",
            ncols=min(6, len(handles)), frameon=False, fontsize="small", title=title,
            title_fontsize="small",
        )  # fmt: skip


def _seed_means(df: pd.DataFrame) -> pd.DataFrame:
    """Per (instance, budget, solver) over the runs with a plan: mean and std of throughput
    and of the gap to the case's fastest plan, and the runs counted."""

    d = run_gaps(df)
    d = d.assign(throughput=d["throughput"].astype("float64"))
    grp = d[d["step_s"].notna()].groupby(["instance", "budget_fraction", "solver"], sort=False)
    return grp.agg(
        throughput=("throughput", "mean"),
        throughput_std=("throughput", "std"),
        gap=("gap_to_best", "mean"),
        gap_std=("gap_to_best", "std"),
        runs=("step_s", "size"),
    ).reset_index()


#: The gap panels' linear range (percent) of their symmetric-log axis: 0 shows, and 0.01% to
#: 100% each get their own decade.
GAP_LINTHRESH_PCT = 0.01


def throughput_vs_budget(df: pd.DataFrame, title: str | None = None) -> Figure:
    """Fig. 4: throughput (% of ideal) against the budget (% of P), one row per instance:
    absolute throughput on the left, the gap to the fastest plan found at that budget (%,
    symmetric log) on the right, where differences of 0.01-2% show. Points are means over the
    seeds with a plan, error bars one standard deviation (none for one run); every solver has
    its own colour, marker and line style (`slackswap.analysis.styles`)."""
    m = _seed_means(df)
    instances = list(dict.fromkeys(m["instance"])) or list(dict.fromkeys(df["instance"]))
    styles = _styles(df)
    fig = Figure(figsize=(11.0, 3.9 * max(1, len(instances))), layout="constrained")
    axes = fig.subplots(max(1, len(instances)), 2, squeeze=False)
    lo, hi = 100 * df["budget_fraction"].min(), 100 * df["budget_fraction"].max()
    pad = max(2.0, 0.04 * (hi - lo))
    for (ax, gx), inst in zip(axes, instances, strict=False):
        sub = m[m["instance"] == inst]
        for solver, st in styles.items():
            s = sub[sub["solver"] == solver].sort_values("budget_fraction")
            if s.empty:
                continue
            x = 100 * s["budget_fraction"].to_numpy(float)

            ax.errorbar(x, _pct(s, "throughput"), yerr=_pct(s, "throughput_std"), label=solver,
                        capsize=3, **st)  # fmt: skip
            gx.errorbar(x, _pct(s, "gap"), yerr=_pct(s, "gap_std"), label=solver, capsize=3,
                        **st)  # fmt: skip
        ax.set_title(f"{inst}: throughput", fontsize="medium")
        ax.set_ylabel("throughput (% of ideal)")
        gx.set_title(f"{inst}: gap to the fastest plan found", fontsize="medium")
        gx.set_yscale("symlog", linthresh=GAP_LINTHRESH_PCT)
        gx.set_ylim(bottom=-0.3 * GAP_LINTHRESH_PCT)  # a point at 0 drawn whole
        gx.set_ylabel("gap to fastest plan (%, lower is better)")
        for a in (ax, gx):
            a.set_xlabel("memory budget (% of no-swap peak P)")
            a.set_xlim(hi + pad, lo - pad)  # every panel spans the whole sweep, largest left
            a.grid(alpha=0.3, which="both")
    _legend(fig, [a for row in axes for a in row])
    seeds = int(df["seed"].nunique()) if "seed" in df else 1
    spread = f"; mean and std over {seeds} seeds" if seeds > 1 else ""
    fig.suptitle(title or f"Throughput against memory budget (missing points: no plan{spread})")
    return fig


def _pct(rows: pd.DataFrame, col: str) -> np.ndarray:
    """A fraction column in percent as floats (a missing spread: none drawn)."""
    return 100 * rows[col].astype("float64").fillna(0).to_numpy(float)


def nearest_budget(df: pd.DataFrame, budget: float) -> float:
    """The budget fraction in ``df`` closest to ``budget``."""
    b = df["budget_fraction"].dropna().round(6).unique()
    if len(b) == 0:
        raise ValueError("no budgets in the results")
    return float(b[np.argmin(np.abs(b - budget))])


def time_breakdown(df: pd.DataFrame, budget: float = 0.4) -> Figure:
    """Table 2 as stacked bars: step time per policy split into compute, recompute and stalls.

    Bars are multiples of the ideal step at the budget nearest ``budget``; a policy without a
    plan there is marked "no plan".
    """
    b = nearest_budget(df, budget)
    at = df[df["budget_fraction"].round(6) == b]
    instances = list(dict.fromkeys(at["instance"]))
    parts = (
        ("compute (ideal)", "#9ecae1"), ("recompute", "#fd8d3c"),
        ("forward stall", "#d62728"), ("backward stall", "#7b4173"), ("other", "#bdbdbd"),
    )  # fmt: skip
    fig, axes = _grid(len(instances), ncols=2, size=(6.0, 3.8))
    for ax, inst in zip(axes, instances, strict=True):
        sub = at[at["instance"] == inst]
        solvers = _solvers(sub)
        ok = sub[sub["step_s"].notna()].sort_values("step_s").drop_duplicates("solver")
        rows = {str(r.solver): r for r in ok.itertuples(index=False)}
        x = np.arange(len(solvers))
        bottom = np.zeros(len(solvers))
        for name, colour in parts:
            vals = np.zeros(len(solvers))
            for i, s in enumerate(solvers):
                r = rows.get(s)
                if r is None:
                    continue
                ideal = float(r.ideal_s)
                comp = {
                    "compute (ideal)": 1.0,
                    "recompute": _f(r.recompute_s) / ideal,
                    "forward stall": _f(r.fwd_stall_s) / ideal,
                    "backward stall": _f(r.bwd_stall_s) / ideal,
                }
                comp["other"] = max(0.0, float(r.step_s) / ideal - sum(comp.values()))
                vals[i] = comp[name]
            ax.bar(x, vals, bottom=bottom, color=colour, label=name, width=0.7)
            bottom += vals
        top = max(1.2, float(bottom.max()) * 1.1)
        for i, s in enumerate(solvers):
            if s in rows:
                ax.text(i, bottom[i], f"{bottom[i]:.2f}", ha="center", va="bottom", fontsize=7)
            else:
                ax.text(i, 0.04 * top, "no plan", ha="center", va="bottom", rotation=90, fontsize=8)
        ax.set_ylim(0, top)
        ax.set_xticks(x, solvers, rotation=35, ha="right", fontsize="small")
        ax.set_ylabel("step time (x ideal step)")
        ax.set_title(f"{inst} at {100 * b:g}% of P", fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    _legend(fig, axes[:1])
    fig.suptitle("Where the time goes (Table 2)")
    return fig


def _f(x: Any) -> float:
    return 0.0 if x is None or pd.isna(x) else float(x)


def gap_text(percent: float) -> str:
    """A heat-map cell: the gap in % to two significant digits (0.13, 2.4, 27, 512); "0" only
    for no gap, "<0.01" for a gap too small to print, "-" for no plan."""
    if np.isnan(percent):
        return "-"
    if percent == 0:
        return "0"
    if percent < 0.01:
        return "<0.01"
    if percent < 1:
        return f"{percent:.2f}"
    if percent < 10:
        return f"{percent:.1f}"
    return f"{percent:.0f}"


#: Size of the numbers in the heat map's cells (points): readable at the saved 130 dpi.
HEATMAP_FONT_PT = 9


def gap_heatmap(df: pd.DataFrame) -> Figure:
    """Gap to the best known plan (%), solver x budget, one panel per instance, on one scale."""
    g = _best(df)
    instances = list(dict.fromkeys(g["instance"]))
    n_solvers = max((g[g["instance"] == i]["solver"].nunique() for i in instances), default=1)
    n_budgets = max(g["budget_fraction"].nunique(), 1)
    # Cells sized for a 9-point number (0.7 x 0.36 inch); labels and title around them.
    size = (2.0 + 0.7 * n_budgets, 1.3 + 0.36 * n_solvers)
    fig, axes = _grid(len(instances), ncols=2, size=size)
    panels = []
    for inst in instances:
        sub = g[g["instance"] == inst]
        solvers = _solvers(sub)
        budgets = sorted(sub["budget_fraction"].unique(), reverse=True)
        m = np.full((len(solvers), len(budgets)), np.nan)
        for r in sub.itertuples(index=False):
            m[solvers.index(str(r.solver)), budgets.index(r.budget_fraction)] = 100 * _nan(
                r.gap_to_best
            )
        panels.append((solvers, budgets, m))
    # One colour scale for every panel (the colour bar is shared), symmetric-log: linear below
    # 0.01% (so 0 has a colour) and one decade per colour step above, so 0.03% and 0.2% differ
    # as much as 3% and 20%; it spans the largest gap, whatever it is.
    import matplotlib.colors as mcolors

    cells = np.concatenate([m.ravel() for _, _, m in panels]) if panels else np.array([])
    vmax = max(1.0, float(np.nanmax(cells)) if np.isfinite(cells).any() else 1.0)
    norm = mcolors.SymLogNorm(linthresh=GAP_LINTHRESH_PCT, linscale=0.5, vmin=0, vmax=vmax)
    cmap = _cmap()
    image = None
    for ax, inst, (solvers, budgets, m) in zip(axes, instances, panels, strict=True):
        image = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, norm=norm, aspect="auto")
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                dark = np.isfinite(m[i, j]) and norm(m[i, j]) > 0.5  # viridis_r: dark at the top
                ax.text(j, i, gap_text(m[i, j]), ha="center", va="center",
                        fontsize=HEATMAP_FONT_PT, color="white" if dark else "black")  # fmt: skip
        ax.set_xticks(range(len(budgets)), [f"{100 * b:g}" for b in budgets], fontsize=9)
        ax.set_yticks(range(len(solvers)), solvers, fontsize=9)
        ax.set_xlabel("memory budget (% of P)")
        ax.set_title(str(inst), fontsize="medium")
    if image is not None:
        fig.colorbar(image, ax=axes, label="gap to best known plan (%, log)  [- : no plan]")
    fig.suptitle("Optimality gap to the best known plan")
    return fig


def _nan(x: Any) -> float:
    return float("nan") if x is None or pd.isna(x) else float(x)


def _cmap() -> Any:
    import matplotlib as mpl

    return mpl.colormaps["viridis_r"].with_extremes(bad="#e0e0e0")


def _natural(text: str) -> list[Any]:
    """A sort key that orders the numbers in names by value (link-gbps=12 before =200)."""
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)
    ]


def _wrap_name(name: str) -> str:
    """An instance name on lines of its own parameters (``gpt2-xl@a100-pcie4,layers=8``)."""
    return str(name).replace(",", ",\n")


def plan_time_vs_size(df: pd.DataFrame) -> Figure:
    """Planning time (ms, log) of every run, one column per instance, smallest instance (fewest
    saved tensors) first; within a column each solver has its own fixed slot, left to right in
    the legend's order, so the points of one instance stay one column whatever their number."""
    d = df[df["plan_s"].notna()]
    sizes = d.groupby("instance", sort=False)["n_tensors"].first()
    instances = sorted(sizes.index, key=lambda i: (float(sizes[i]), _natural(str(i))))
    styles = _styles(df)
    solvers = [s for s in _solvers(df) if (d["solver"] == s).any()]
    slot = 0.8 / max(1, len(solvers))  # the column is 0.8 wide; each solver one slot of it
    fig = Figure(figsize=(max(6.4, 2.4 + 1.4 * len(instances)), 4.6), layout="constrained")
    ax = fig.subplots()
    for k, solver in enumerate(solvers):
        s = d[d["solver"] == solver]
        column = s["instance"].map({name: i for i, name in enumerate(instances)})
        ax.scatter(
            column + (k - (len(solvers) - 1) / 2) * slot, 1e3 * s["plan_s"], label=solver, s=16,
            alpha=0.75, **scatter_style(styles[solver]),
        )  # fmt: skip
    ax.set_yscale("log")
    ax.set_xticks(
        range(len(instances)),
        [f"{_wrap_name(name)}\n{int(sizes[name]):,} tensors" for name in instances],
        fontsize="small", rotation=30 if len(instances) > 6 else 0,
    )  # fmt: skip
    for edge in range(len(instances) - 1):
        ax.axvline(edge + 0.5, color="grey", lw=0.6, alpha=0.5)
    ax.set_xlim(-0.5, len(instances) - 0.5)
    ax.set_xlabel("instance, fewest saved tensors first")
    ax.set_ylabel("planning time (ms)")
    ax.grid(alpha=0.3, which="both", axis="y")
    fig.legend(
        loc="outside right upper", fontsize="small", frameon=False,
        title="solver (left to right\nin each column)", title_fontsize="small",
    )  # fmt: skip
    ax.set_title("Planning time of every run, by instance")
    return fig


#: Columns a sensitivity figure may sweep, with axis labels and scales.
SENSITIVITY = {
    "link_bw_Bps": ("link bandwidth per direction (GB/s)", 1e-9, "log"),
    "seq": ("sequence length (tokens)", 1.0, "log"),
}


#: The workload-model parameters a sensitivity case holds fixed, unless it sweeps them.
_CASE_COLUMNS = ("model", "layers", "seq", "batch", "link_bw_Bps")


def _sensitivity_cases(df: pd.DataFrame, by: str) -> list[pd.DataFrame]:
    """The rows of each case a sensitivity figure draws: one model configuration (layers,
    and seq and batch or link bandwidth, whichever is not swept) at one budget, run at two or
    more values of ``by``. A sequence sweep keeps tokens per batch, so its batch varies too."""
    if by not in df or df[by].isna().all():
        return []
    d = df.dropna(subset=[by]).copy()
    d["_b"] = d["budget_fraction"].round(6)
    varying = {by, "batch"} if by == "seq" else {by}
    keys = [c for c in _CASE_COLUMNS if c in d and c not in varying] + ["_b"]
    groups = d.groupby([d[k].astype(str) for k in keys], sort=False)
    return [grp for _, grp in groups if grp[by].nunique() > 1]


def has_sensitivity(df: pd.DataFrame, by: str) -> bool:
    """True when some model configuration and budget were run at two or more values of ``by``."""
    return bool(_sensitivity_cases(df, by))


def _case_title(grp: pd.DataFrame, by: str) -> str:
    """The model as run, e.g. "gpt2-xl, 8 layers, seq 1,024, batch 8 at 30% of P": the name
    alone would pass a cut-down model off as the catalog's."""

    def one(col: str) -> Any:
        v = grp[col].dropna().unique() if col in grp else []
        return v[0] if len(v) == 1 else None

    parts = [str(grp["model"].iloc[0])]
    if one("layers") is not None:
        parts.append(f"{int(one('layers'))} layers")
    if by != "seq" and one("seq") is not None:
        parts.append(f"seq {int(one('seq')):,}")
    if one("batch") is not None:
        parts.append(f"batch {int(one('batch'))}")
    elif by == "seq" and "batch" in grp and grp["batch"].notna().any():
        tokens = (grp["seq"] * grp["batch"]).dropna().unique()
        batches = grp.sort_values("seq")["batch"].dropna().astype(int).unique()
        if len(tokens) == 1:
            parts.append(f"{int(tokens[0]):,} tokens per batch")
        else:  # the sweep's batches, shortest sequence first
            parts.append(f"batch {batches[0]} to {batches[-1]}")
    if by != "link_bw_Bps" and one("link_bw_Bps") is not None:
        parts.append(f"{float(one('link_bw_Bps')) / 1e9:g} GB/s")
    budget = float(grp["budget_fraction"].iloc[0])
    return f"{', '.join(parts)} at {100 * budget:g}% of P"


def sensitivity(df: pd.DataFrame, by: str = "link_bw_Bps", focus: str = "slackswap") -> Figure:
    """Fig. 6: throughput against link bandwidth or sequence length, per model and budget.

    A second panel per case shows what ``focus`` (SlackSwap) does: GB swapped and recomputed
    against link bandwidth, or the hideable fraction f (Eq. 1) against sequence length.
    """
    label, scale, xscale = SENSITIVITY[by]
    cases = _sensitivity_cases(df, by)
    styles = _styles(df)
    fig = Figure(figsize=(11.0, 3.8 * max(1, len(cases))), layout="constrained")
    axes = fig.subplots(max(1, len(cases)), 2, squeeze=False)
    for grp, (ax, ax2) in zip(cases, axes, strict=False):
        solvers = _solvers(grp)
        best = grp[grp["step_s"].notna()].sort_values("step_s").drop_duplicates(["solver", by])
        for solver in solvers:
            s = best[best["solver"] == solver].sort_values(by)
            if s.empty:
                continue
            ax.plot(
                scale * s[by].astype(float), 100 * s["throughput"].astype(float), label=solver,
                **styles[solver],
            )  # fmt: skip
        ax.set_xscale(xscale)
        _plain_log_ticks(ax.xaxis, scale * grp[by].astype(float).unique())
        ax.set_xlabel(label)
        ax.set_ylabel("throughput (% of ideal)")
        ax.set_title(_case_title(grp, by), fontsize="medium")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small", ncols=2)
        else:
            ax.text(0.5, 0.5, "no solver found a plan at any point", ha="center", va="center",
                    transform=ax.transAxes)  # fmt: skip
        f = best[best["solver"].str.split("(").str[0] == focus].sort_values(by)
        x = scale * f[by].astype(float)
        if by == "link_bw_Bps":
            ax2.plot(
                x, f["swap_bytes"].astype(float) / 1e9, marker="o", color="#1f77b4", label="swapped"
            )
            ax2.plot(
                x,
                f["recompute_bytes"].astype(float) / 1e9,
                marker="s",
                color="#fd8d3c",
                label="recomputed",
            )
            ax2.set_ylabel(f"{focus} plan (GB)")
            if f.empty:
                ax2.text(0.5, 0.5, f"no {focus} plan", ha="center", va="center",
                         transform=ax2.transAxes)  # fmt: skip
        else:
            fr = grp.drop_duplicates(by).sort_values(by)
            ax2.plot(scale * fr[by].astype(float), 100 * fr["hideable_fraction"].astype(float), marker="o",
                     color="#2ca02c", label="hideable fraction f (Eq. 1)")  # fmt: skip
            ax2.set_ylabel("f (% of saved bytes)")
        ax2.set_xscale(xscale)
        _plain_log_ticks(ax2.xaxis, scale * grp[by].astype(float).unique())
        ax2.set_xlabel(label)
        ax2.grid(alpha=0.3, which="both")
        if len(x) or by != "link_bw_Bps":
            ax2.legend(fontsize="small")
    what = "link bandwidth" if by == "link_bw_Bps" else "sequence length"
    fig.suptitle(f"Sensitivity to {what} (Fig. 6)")
    return fig


def _field(record: Any, key: str) -> Any:
    """``record.key`` or ``record[key]``: a `RunRecord` or its JSON (``slackswap solve --json``)."""
    return record[key] if isinstance(record, dict) else getattr(record, key)


def convergence_points(record: Any, x: str = "evaluations") -> tuple[list[float], list[float]]:
    """A search's history as (x, best throughput in % of ideal) points, feasible ones only.

    ``x`` is ``"evaluations"`` (plans scored so far) or ``"seconds"`` (since the solve began).
    The history lists the points where the best feasible step improved, then the run's end.
    """
    if x not in ("evaluations", "seconds"):
        raise ValueError(f"x must be 'evaluations' or 'seconds', not {x!r}")
    ideal_s = float(_field(record, "ideal_s"))
    xs: list[float] = []
    ys: list[float] = []
    for seconds, evaluations, best_step_s in _field(record, "history") or ():
        if best_step_s is None or not math.isfinite(best_step_s):
            continue  # no feasible plan yet
        xs.append(float(evaluations if x == "evaluations" else seconds))
        ys.append(100.0 * ideal_s / float(best_step_s))
    return xs, ys


def convergence(
    records: Sequence[Any], x: str = "evaluations", references: Sequence[Any] = ()
) -> Figure:
    """Best throughput found (% of ideal) against plans evaluated (log) or seconds, one line
    per run: the records of searches (`ga`, `ga-random`), as `RunRecord`s or their JSON.
    ``references`` (say, SlackSwap's record on the same case) are drawn as dashed levels."""
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    cases = {
        (_field(r, "instance"), round(float(_field(r, "budget_fraction")), 6)) for r in records
    }
    for i, record in enumerate(records):
        xs, ys = convergence_points(record, x)
        if not xs:
            continue
        label = f"{_field(record, 'solver')} seed {_field(record, 'seed')}"
        if len(cases) > 1:
            budget = 100 * float(_field(record, "budget_fraction"))
            label = f"{_field(record, 'instance')} {budget:.0f}%: {label}"
        # One colour per run, not per solver: the lines are often runs of one solver. The best
        # only changes where a point is, so the line holds its value until the next.
        st = solver_styles([str(k) for k in range(len(records))])[str(i)]
        ax.step(xs, ys, where="post", color=st["color"], linestyle=st["linestyle"],
                linewidth=1.6, label=label)  # fmt: skip
    for record in references:
        step_s = _field(record, "step_s")
        if step_s is not None and math.isfinite(step_s):
            level = 100.0 * float(_field(record, "ideal_s")) / float(step_s)
            ax.axhline(level, color="black", linestyle="--", linewidth=1.0,
                       label=str(_field(record, "solver")))  # fmt: skip
    if x == "evaluations":
        ax.set_xscale("log")
        ax.set_xlabel("plans evaluated")
    else:
        ax.set_xlabel("planning time (s)")
    ax.set_ylabel("best throughput found (% of ideal)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no feasible plan found", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
    if len(cases) == 1:
        ((name, b),) = cases
        ax.set_title(f"Search convergence: {name} at {100 * b:g}% of P")
    else:
        ax.set_title("Search convergence")
    return fig
