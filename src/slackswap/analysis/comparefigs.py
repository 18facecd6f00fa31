"""The figures optimisation research compares solvers with: the Dolan-More performance
profile, the ECDF of runs reaching a gap against planning time, and anytime curves (median and
interquartile band over seeds). Each takes a results DataFrame and returns a matplotlib
`Figure` built without pyplot; every solver has its own colour, marker and line style.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from slackswap.analysis.anytime import anytime_curves
from slackswap.analysis.figures import GAP_LINTHRESH_PCT, _grid, _legend, _styles
from slackswap.analysis.profiles import DEFAULT_TARGETS, ecdf, performance_ratios, run_reach_times


def performance_profile(df: pd.DataFrame, metric: str = "step_s") -> Figure:
    """Share of the (instance, budget) cases where each solver's step time is within a factor
    tau of the best solver's, against tau (log); a run without a plan is never within."""
    prof = performance_ratios(df, metric)
    styles = _styles(df)
    fig = Figure(figsize=(7.0, 4.6), layout="constrained")
    ax = fig.subplots()
    finite = prof.ratios.to_numpy(float)
    finite = finite[np.isfinite(finite)]
    top = float(finite.max()) if finite.size else 1.0
    # The axis is tau - 1 in percent on a symmetric log scale: planners differ by 0.01-10%,
    # which a log axis of tau itself crams against 1. Past the largest finite ratio every curve
    # is flat: the axis ends a little to the right of it.
    x_max = max(100 * (top - 1) * 1.5, 10 * GAP_LINTHRESH_PCT)
    for solver in prof.solvers:
        r, share = prof.curve(solver)
        xs = np.concatenate([[0.0], 100 * (r - 1), [x_max]])
        ys = np.concatenate([[0.0], share, [share[-1] if len(share) else 0.0]])
        ax.step(xs, ys, where="post", label=solver, markevery=list(range(1, len(xs) - 1)),
                **styles[solver])  # fmt: skip
    ax.set_xscale("symlog", linthresh=GAP_LINTHRESH_PCT)
    ax.set_xlim(0.0, x_max)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("tau - 1: step time above the best solver's on the case (%, log)")
    ax.set_ylabel("share of cases within tau (higher is better)")
    ax.grid(alpha=0.3, which="both")
    n = len(prof.ratios)
    left = f"; {prof.unsolved} with no plan by any solver left out" if prof.unsolved else ""
    ax.set_title(f"Performance profile over {n} (instance, budget) cases{left}", fontsize="medium")
    _legend(fig, [ax])
    return fig


def ecdf_gap(
    df: pd.DataFrame, targets: tuple[float, ...] = DEFAULT_TARGETS, reference: str = "best"
) -> Figure:
    """Share of (run, target gap) pairs reached against planning time (log), one panel per
    target gap and one for all of them together (the COCO run-length form)."""
    reach = run_reach_times(df, targets, reference)
    styles = _styles(df)
    t = reach["time_s"].to_numpy(float)
    t = t[np.isfinite(t) & (t > 0)]
    lo = float(t.min()) / 1.5 if t.size else 1e-3
    hi = float(t.max()) * 1.5 if t.size else 1.0
    times = np.geomspace(lo, hi, 200)
    groups = [(f"gap <= {100 * g:g}%", reach[reach["target"] == g]) for g in targets]
    groups.append((f"all {len(targets)} targets", reach))
    fig, axes = _grid(len(groups), ncols=2, size=(5.4, 3.6))
    ref = "the fastest plan found" if reference == "best" else "the best lower bound"
    for ax, (title, sub) in zip(axes, groups, strict=True):
        for solver, ys in ecdf(sub, times).items():
            ax.step(times, ys, where="post", label=solver, markevery=20, **styles[solver])
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("planning time (s, log)")
        ax.set_ylabel("share of runs reached")
        ax.set_title(f"{title} of {ref}", fontsize="medium")
        ax.grid(alpha=0.3, which="both")
    _legend(fig, axes)
    fig.suptitle("Runs reaching a target gap against planning time (higher and earlier is better)")
    return fig


def _room_for_markers(ax: Any) -> None:
    """Axis limits a little beyond the data (a factor on the log axes), so markers at the
    edges are drawn whole (a point at a gap of 0 too)."""
    xs, ys = [], []
    for line in ax.get_lines():
        x = np.asarray(line.get_xdata(), float)
        y = np.asarray(line.get_ydata(), float)
        ok = np.isfinite(x) & np.isfinite(y)
        xs += list(x[ok & (x > 0)])
        ys += list(y[ok])
    if xs:
        ax.set_xlim(min(xs) / 1.6, max(xs) * 1.6)
    top = max(ys, default=1.0)
    ax.set_ylim(-0.3 * GAP_LINTHRESH_PCT, max(top * 2.5, 10 * GAP_LINTHRESH_PCT))


def anytime(df: pd.DataFrame) -> Figure:
    """Per (instance, budget): each search's gap to the fastest plan found (%, symmetric log)
    against planning time (log), median line and interquartile band over its seeds; solvers
    without a history as one marker per run at their planning time."""
    cases = anytime_curves(df)
    styles = _styles(df)
    fig, axes = _grid(max(1, len(cases)), ncols=2, size=(5.6, 3.7))
    for ax, case in zip(axes, cases, strict=False):
        for c in case.curves:
            st = styles[c.solver]
            if c.is_band:
                med = np.where(np.isfinite(c.median), 100 * c.median, np.nan)
                lo = np.where(np.isfinite(c.q25), 100 * c.q25, np.nan)
                hi = np.where(np.isfinite(c.q75), 100 * c.q75, np.nan)
                ax.plot(c.times, med, label=c.solver, markevery=10, **st)
                ax.fill_between(c.times, lo, hi, color=st["color"], alpha=0.18, linewidth=0)
            else:
                xs = [p[0] for p in c.points if math.isfinite(p[1])]
                ys = [100 * p[1] for p in c.points if math.isfinite(p[1])]
                ax.plot(xs, ys, linestyle="none", label=c.solver, color=st["color"],
                        marker=st["marker"], markersize=st["markersize"],
                        zorder=st["zorder"] + 1)  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=GAP_LINTHRESH_PCT)
        _room_for_markers(ax)
        ax.set_xlabel("planning time (s, log)")
        ax.set_ylabel("gap to fastest plan (%)")
        ax.set_title(f"{case.instance} at {100 * case.budget_fraction:g}% of P", fontsize="medium")
        ax.grid(alpha=0.3, which="both")
    _legend(fig, axes)
    fig.suptitle(
        "Anytime: best plan so far against planning time, searches as median and interquartile "
        "band over seeds (lower and earlier is better)"
    )
    return fig
