"""What the figures say is what the data are: one instance is one column, the solvers compared
stand out from the rest, a title names the model as run, the legends use the docs' words and
sizes a reader can see, and the heat map's numbers are readable."""

from __future__ import annotations

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest

from slackswap.analysis import figures as F
from slackswap.analysis import planfigs as PF
from slackswap.analysis.jobs import SolverSpec, Sweep, ref_from_grid_point
from slackswap.analysis.runner import run_sweep
from slackswap.instances.catalog import build_model
from slackswap.simulator import simulate
from slackswap.solvers import run

SOLVERS = (
    "slackswap", "swap-first", "recompute-only", "barriers", "vdnn", "superneurons",
    "swapadvisor", "checkpoint", "offload-sync", "offload-overlap",
)  # fmt: skip


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    """Ten solvers on GPT-2 XL cut to 1 and 2 layers, each on a 12 and a 50 GB/s link."""
    refs = [
        ref_from_grid_point(
            {"model": "gpt2-xl", "layers": n, "seq": 64, "batch": 1, "link_bw_GBps": bw}
        )
        for n in (1, 2)
        for bw in (12, 50)
    ]
    sweep = Sweep(refs, ["1", "0.8"], [SolverSpec.of(s) for s in SOLVERS])
    return run_sweep(sweep, progress=False)


def test_plan_time_puts_each_instance_in_one_column(results: pd.DataFrame) -> None:
    fig = F.plan_time_vs_size(results)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    columns = {}
    for i, text in enumerate(labels):
        name, size = text.replace(",\n", ",").rsplit("\n", 1)
        columns[name] = i
        n_tensors = int(results[results["instance"] == name]["n_tensors"].iloc[0])
        assert size == f"{n_tensors:,} tensors"
    assert set(columns) == set(results["instance"])
    by_column = sorted(columns, key=columns.get)  # same size: the smaller number first
    assert by_column[0].endswith("layers=1,seq=64,batch=1,link-gbps=12")
    assert by_column[1].endswith("layers=1,seq=64,batch=1,link-gbps=50")
    slots = []
    for collection, solver in zip(ax.collections, SOLVERS, strict=True):
        x = collection.get_offsets()[:, 0]
        runs = results[(results["solver"] == solver) & results["plan_s"].notna()]
        column = runs["instance"].map(columns).to_numpy()
        assert np.all(np.abs(x - column) < 0.5)  # inside its instance's column
        slots.append(set(np.round(x - column, 9)))
    assert all(len(s) == 1 for s in slots)  # one fixed slot per solver ...
    assert len(set().union(*slots)) == len(SOLVERS)  # ... its own


def test_throughput_colours_every_solver_and_shows_the_gap_beside(results) -> None:
    """Ten solvers: each in its own colour (none grey, none lumped into one legend entry), with
    the gap to the fastest plan in its own panel beside the throughput."""
    fig = F.throughput_vs_budget(results)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == list(SOLVERS)
    colours = {mcolors.to_hex(c[0].get_color()) for c in fig.axes[0].containers}
    assert len(colours) == len(SOLVERS) and "#b8b8b8" not in colours
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.endswith("gap to the fastest plan found") for t in titles)
    assert fig.axes[1].get_yscale() == "symlog"


def test_sensitivity_titles_name_the_model_as_run(results: pd.DataFrame) -> None:
    fig = F.sensitivity(results, "link_bw_Bps")
    titles = sorted(ax.get_title() for ax in fig.axes if ax.get_title())
    assert titles == [
        f"gpt2-xl, {n} layers, seq 64, batch 1 at {b}% of P" for n in (1, 2) for b in (100, 80)
    ]  # and the 1- and 2-layer models are separate cases, not one line


def test_timeline_legend_says_recompute() -> None:
    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1)
    plan = run(inst, 0.8, "recompute-only", find_min_budget=False).plan
    assert plan is not None and plan.recompute_bytes > 0
    sim = simulate(inst, plan, 0.8, timeline=True)
    fig = PF.timeline(inst, [("recompute-only", sim)])
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "recompute" in labels and "rebuild" not in labels


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1234, "1.23 KB"),
        (52_450_000, "52.5 MB"),
        (0.05e9, "50.0 MB"),
        (3.3e9, "3.30 GB"),
        (12.94e9, "12.9 GB"),
        (999_600, "1.00 MB"),
    ],
)
def test_size_text_has_three_significant_digits(nbytes: float, text: str) -> None:
    assert PF.size_text(nbytes) == text


def test_plan_legend_sizes_are_readable() -> None:
    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1)
    plan = run(inst, 0.8, "slackswap", find_min_budget=False).plan
    assert plan is not None
    fig = PF.plan_by_recompute_cost(inst, plan)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    for name, code in (("keep", 0), ("swap", 1), ("recompute", 2)):
        total = float(inst.tensor_bytes[np.asarray(plan.actions) == code].sum())
        assert f"{name}: {PF.size_text(total)}" in labels
    assert not any(label.endswith(": 0.0 GB") for label in labels)


def test_heatmap_numbers_are_readable(results: pd.DataFrame) -> None:
    fig = F.gap_heatmap(results)
    cells = [t for ax in fig.axes for t in ax.texts]
    assert cells and min(t.get_fontsize() for t in cells) >= 9
