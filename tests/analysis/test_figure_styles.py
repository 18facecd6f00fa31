"""Every figure of `report` (and the notebook's) tells every solver apart: one legend entry per
solver, each with its own (colour, marker, line style); no solver lumped into a grey entry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import matplotlib.colors as mcolors
import pandas as pd
import pytest
from matplotlib.figure import Figure

from slackswap.analysis import comparefigs as CF
from slackswap.analysis import figures as F
from slackswap.analysis.results import rows_to_frame
from slackswap.analysis.styles import PALETTE, solver_styles

#: Ten registered solvers, two configurations of one, and one no registry knows.
SOLVERS = (
    "slackswap", "swap-first", "recompute-only", "barriers", "vdnn", "superneurons",
    "swapadvisor", "checkpoint", "milp", "ga", "ga(pop_size=8)", "offload-sync", "zeta",
)  # fmt: skip


def results() -> pd.DataFrame:
    """Every solver on two instances x two budgets x two seeds, several of them tied (the
    drawing must keep ties visible); the searches with a history."""
    rows = []
    for inst, n_tensors in (("a", 100), ("b", 400)):
        for b in (0.8, 0.4):
            for i, solver in enumerate(SOLVERS):
                for seed in (0, 1):
                    step = 1.0 + 0.001 * (i % 4) + 0.0005 * seed
                    search = solver.startswith("ga")
                    hist = json.dumps([[0.01, 5, step * 1.1], [0.5, 50, step]]) if search else None
                    rows.append(
                        {
                            "instance": inst, "budget_fraction": b, "solver": solver,
                            "seed": seed, "status": "feasible", "stopped_by": "finished",
                            "step_s": step, "throughput": 0.9 / step, "ideal_s": 0.9,
                            "recompute_s": 0.01, "fwd_stall_s": 0.02, "bwd_stall_s": 0.0,
                            "plan_s": 0.02 * (i + 1), "n_tensors": n_tensors, "history": hist,
                            "seed_independent": 0,
                        }
                    )  # fmt: skip
    return rows_to_frame(rows)


def legend_styles(fig: Figure) -> dict[str, tuple[Any, ...]]:
    """Each legend label's (colour, marker, line style), read from the artists drawn with that
    label (a line, an error bar's data line, a scatter's points); every drawing of one label
    must look alike."""
    labels: set[str] = set()
    for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]:
        texts = [t.get_text() for t in leg.get_texts()]
        assert len(texts) == len(set(texts)), texts  # each label once in a legend
        labels |= set(texts)
    drawn: dict[str, set[tuple[Any, ...]]] = {}
    for ax in fig.axes:
        artists: list[tuple[str, Any]] = [(str(c.get_label()), c[0]) for c in ax.containers]
        artists += [(str(ln.get_label()), ln) for ln in ax.get_lines()]
        artists += [(str(c.get_label()), c) for c in ax.collections]
        for label, art in artists:
            if label not in labels:
                continue
            if hasattr(art, "get_marker"):
                style = (mcolors.to_hex(art.get_color()), art.get_marker(), art.get_linestyle())
            else:  # a scatter's points
                path = art.get_paths()[0].vertices.round(3).tolist()
                style = (mcolors.to_hex(art.get_facecolor()[0]), str(path), "")
            drawn.setdefault(label, set()).add(style)
    for label, styles in drawn.items():
        assert len(styles) == 1, (label, styles)  # one look per solver across the panels
    return {label: next(iter(styles)) for label, styles in drawn.items()}


FIGURES: dict[str, Callable[[pd.DataFrame], Figure]] = {
    "throughput_vs_budget": F.throughput_vs_budget,
    "plan_time_vs_size": F.plan_time_vs_size,
    "performance_profile": CF.performance_profile,
    "ecdf_gap": CF.ecdf_gap,
    "anytime": CF.anytime,
}


@pytest.mark.parametrize("name", FIGURES)
def test_every_solver_has_its_own_legend_style(name: str) -> None:
    fig = FIGURES[name](results())
    styles = legend_styles(fig)
    assert sorted(styles) == sorted(SOLVERS), name  # one entry per solver, none lumped
    assert len(set(styles.values())) == len(SOLVERS), styles
    assert not any(label.startswith("grey") for label in styles)


def test_time_breakdown_and_heat_map_name_every_solver() -> None:
    df = results()
    ticks = [t.get_text() for t in F.time_breakdown(df, 0.8).axes[0].get_xticklabels()]
    assert sorted(ticks) == sorted(SOLVERS)
    heat = F.gap_heatmap(df)
    rows = [t.get_text() for t in heat.axes[0].get_yticklabels()]
    assert sorted(rows) == sorted(SOLVERS)


def test_sensitivity_legend_is_distinct() -> None:
    df = results().assign(link_bw_Bps=lambda d: d["instance"].map({"a": 12e9, "b": 50e9}),
                          model="m", layers=1, seq=64, batch=1)  # fmt: skip
    styles = legend_styles(F.sensitivity(df, "link_bw_Bps"))
    solvers = {k: v for k, v in styles.items() if k in SOLVERS}
    assert sorted(solvers) == sorted(SOLVERS) and len(set(solvers.values())) == len(SOLVERS)


def test_styles_are_colour_blind_safe_and_distinct_far_past_the_palette() -> None:
    names = [f"s{i}" for i in range(48)]
    st = solver_styles(names)
    assert len({(s["color"], s["marker"], s["linestyle"]) for s in st.values()}) == 48
    assert len({(s["color"], s["marker"]) for s in st.values()}) == 48  # points alone too
    assert {s["color"] for s in st.values()} == set(PALETTE)
    assert "#b8b8b8" not in PALETTE  # the old grey of "the others"
    # drawn first = widest and at the bottom, so a tied line on top stays visible
    first, second = st["s0"], st["s1"]
    assert first["linewidth"] > second["linewidth"] and first["zorder"] < second["zorder"]
