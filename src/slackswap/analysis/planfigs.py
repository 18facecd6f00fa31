"""Figures of one run: the plan sorted by recompute cost (Fig. 3) and its timeline (Fig. 5).

A results row holds metrics, not the plan, so these rerun the solver (deterministic solvers
give the same plan) and, for the timeline, the simulator with ``timeline=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from slackswap.instance import Instance
from slackswap.simulator.result import COMPUTE_KINDS, ENGINES

ACTION_STYLE = (("keep", "#4daf4a"), ("swap", "#377eb8"), ("recompute", "#ff7f00"))


def plan_by_recompute_cost(instance: Instance, plan: Any, title: str = "") -> Figure:
    """Fig. 3: every saved tensor, most expensive to recompute per byte first.

    x: cumulative size (GB); bar height: recompute cost per byte (ms per GB, log scale; tensors
    no single operator rebuilds sit above the top line); colour: the plan's action.
    """
    actions = np.asarray(plan.actions if hasattr(plan, "actions") else plan, dtype=np.int64)
    size = instance.tensor_bytes.astype(float)
    rho = instance.tensor_recompute_s / np.maximum(size, 1.0) * 1e3 * 1e9  # ms per GB
    finite = np.isfinite(rho)
    top = float(rho[finite].max()) * 3 if finite.any() else 1.0
    shown = np.where(finite, np.maximum(rho, 1e-6), top)
    order = np.lexsort((-size, -shown))
    left = np.concatenate([[0.0], np.cumsum(size[order])[:-1]]) / 1e9
    fig = Figure(figsize=(9.0, 4.2), layout="constrained")
    ax = fig.subplots()
    for a, (name, colour) in enumerate(ACTION_STYLE):
        m = actions[order] == a
        ax.bar(
            left[m], shown[order][m], width=size[order][m] / 1e9, align="edge", color=colour,
            edgecolor="none", label=f"{name}: {size_text(size[order][m].sum())}",
        )  # fmt: skip
    if (~finite).any():
        ax.axhline(top, color="grey", lw=0.8, ls="--")
        ax.text(0.0, top, "  no single-op rebuild (c = inf)", va="bottom", fontsize=8, color="grey")
    ax.set_yscale("log")
    ax.set_xlabel("saved tensors, cumulative size (GB), most expensive to recompute first")
    ax.set_ylabel("recompute cost per byte (ms/GB)")
    ax.legend(fontsize="small")
    ax.set_title(title or f"Plan for {instance.name}", fontsize="medium")
    return fig


def size_text(nbytes: float) -> str:
    """Bytes to 3 significant digits in B, KB, MB or GB (powers of 1000), the unit chosen by
    size: 0.0525 GB reads "52.5 MB", not "0.1 GB" or "0.0 GB"."""
    value, unit = float(nbytes), "B"
    for next_unit in ("KB", "MB", "GB"):
        if float(f"{value:.3g}") < 1000:
            break
        value, unit = value / 1000, next_unit
    if value == 0 or unit == "B":
        return f"{value:.0f} B"
    digits = max(0, 2 - int(np.floor(np.log10(float(f"{value:.3g}")))))
    return f"{value:,.{digits}f} {unit}"


#: The timeline's names for the simulator's compute kinds: the docs' words.
KIND_LABELS = {
    "forward": "forward",
    "backward": "backward",
    "rebuild": "recompute",
    "stall_copy": "copy stall",
    "stall_mem": "memory stall",
}

_KIND_COLOURS = {
    "forward": "#6baed6",
    "backward": "#2171b5",
    "rebuild": "#fd8d3c",
    "stall_copy": "#d62728",
    "stall_mem": "#7b4173",
    "evict": "black",
}


def timeline(instance: Instance, runs: Sequence[tuple[str, Any]], title: str = "") -> Figure:
    """Fig. 5: compute, D2H and H2D lanes plus device memory for each ``(label, SimResult)``.

    Every panel shares one time axis (ms) so steps compare at a glance; the memory line is in
    GB against the budget.
    """

    n = len(runs)
    fig = Figure(figsize=(11.0, 2.9 * n), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False, sharex=True)[:, 0]
    phase = instance.op_phase
    for ax, (label, sim) in zip(axes, runs, strict=True):
        tl = sim.timeline
        if tl is None:
            raise ValueError(f"{label}: simulate(..., timeline=True) is needed for a timeline")
        kinds = np.asarray(tl.compute_kind)
        for kname in ("op", "rebuild", "stall_copy", "stall_mem"):
            k = COMPUTE_KINDS.index(kname)
            m = kinds == k
            if kname == "op":
                ops = np.asarray(tl.compute_op)[m]
                for ph, pname in ((0, "forward"), (1, "backward")):
                    mm = np.flatnonzero(m)[phase[ops] == ph]
                    _bars(
                        ax,
                        tl.compute_start_s[mm],
                        tl.compute_end_s[mm],
                        2,
                        _KIND_COLOURS[pname],
                        KIND_LABELS[pname],
                    )
            else:
                _bars(ax, tl.compute_start_s[m], tl.compute_end_s[m], 2, _KIND_COLOURS[kname],
                      KIND_LABELS[kname])  # fmt: skip
        eng = np.asarray(tl.copy_engine)
        for e, lane, colour in (
            (ENGINES.index("D2H"), 1, "#31a354"),
            (ENGINES.index("H2D"), 0, "#756bb1"),
        ):
            m = eng == e
            _bars(ax, tl.copy_start_s[m], tl.copy_end_s[m], lane, colour, ENGINES[e], edge=True)
        ax.set_yticks([0, 1, 2], ["H2D", "D2H", "compute"])
        ax.set_ylim(-0.5, 3.6)
        mem = ax.twinx()
        mem.step(1e3 * np.asarray(tl.mem_time_s), np.asarray(tl.mem_bytes) / 1e9, where="post",
                 color="black", lw=0.8, alpha=0.7, label="device memory")  # fmt: skip
        mem.axhline(sim.budget_bytes / 1e9, color="red", lw=0.8, ls="--", label="budget")
        mem.set_ylabel("memory (GB)")
        mem.set_ylim(0, max(sim.budget_bytes, int(np.max(tl.mem_bytes, initial=0))) / 1e9 * 1.9)
        ax.set_title(
            f"{label}: step {1e3 * sim.step_s:.1f} ms (ideal {1e3 * sim.ideal_s:.1f} ms, "
            f"{100 * sim.throughput:.1f}%)", fontsize="medium",
        )  # fmt: skip
        handles, labels = ax.get_legend_handles_labels()
        h2, l2 = mem.get_legend_handles_labels()
        ax.legend(handles + h2, labels + l2, fontsize="x-small", ncols=5, loc="upper right")
    axes[-1].set_xlabel("time (ms)")
    fig.suptitle(title or f"Timeline of one step: {instance.name}")
    return fig


def _bars(
    ax: Any, start: Any, end: Any, lane: int, colour: str, label: str, edge: bool = False
) -> None:
    start = 1e3 * np.asarray(start, dtype=float)
    end = 1e3 * np.asarray(end, dtype=float)
    if start.size == 0:
        return
    ax.broken_barh(
        list(zip(start, np.maximum(end - start, 1e-4), strict=True)), (lane - 0.4, 0.8),
        facecolors=colour, edgecolors="white" if edge else "none", linewidth=0.2, label=label,
    )  # fmt: skip
