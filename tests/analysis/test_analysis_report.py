"""Figures and ``slackswap report``: every report file exists and is a valid PNG or SVG."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from slackswap.analysis.jobs import SolverSpec, Sweep, ref_from_grid_point
from slackswap.analysis.report import write_report
from slackswap.analysis.results import ResultsWriter
from slackswap.analysis.runner import run_sweep
from slackswap.cli import main
from tests.support.analysis_toys import ToyKeep, ToyRecompute, registered

FIGURES = (
    "throughput_vs_budget", "time_breakdown", "gap_heatmap", "plan_time_vs_size",
    "performance_profile", "ecdf_gap", "anytime",
    "sensitivity_link", "sensitivity_seq", "plan_by_recompute_cost", "timeline",
)  # fmt: skip


def check_image(path: Path) -> None:
    assert path.exists() and path.stat().st_size > 1000, path
    if path.suffix == ".png":
        with Image.open(path) as im:
            im.verify()
            assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200
    else:
        root = ET.parse(path).getroot()
        assert root.tag.endswith("svg")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A small sweep over link bandwidth and sequence length with two toy solvers."""
    refs = [
        ref_from_grid_point({"model": "gpt2-xl", "layers": 2, "seq": 128, "batch": 1, "link_bw_GBps": bw})
        for bw in (12, 50)
    ] + [
        ref_from_grid_point({"model": "llama-7b", "layers": 1, "seq": s, "tokens": 512})
        for s in (128, 256)
    ]  # fmt: skip
    solvers = [
        SolverSpec("toy-keep", (), None),
        SolverSpec("toy-recompute", (("share", 1.0),), None),
    ]
    path = tmp_path_factory.mktemp("rep") / "r.parquet"
    with registered():
        df = run_sweep(Sweep(refs, ["1", "0.8", "0.6"], solvers), results=path, progress=False)
    assert (df["status"] == "feasible").sum() >= 8
    return path


def test_report_command_draws_every_figure(results: Path, tmp_path, capsys) -> None:
    out = tmp_path / "cli"
    with registered():
        assert main(["report", str(results), "-o", str(out), "--rerun"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].split()[:3] == ["instance", "budget", "solver"]
    assert "wrote 23 files" in captured.err, captured.err
    # each case rerun for a figure is said before it runs (a search reruns for its time limit)
    assert f"report: drawing the figures into {out} ..." in captured.err.splitlines()
    reruns = [line for line in captured.err.splitlines() if line.startswith("report: rerunning")]
    assert any(line.endswith("for the timeline figure ...") for line in reruns), captured.err
    for name in FIGURES:
        for suffix in (".png", ".svg"):
            check_image(out / f"{name}{suffix}")
    traces = sorted(out.glob("timeline_*.trace.json"))
    # at the budget nearest 50% that has a plan only toy-recompute fits: one timeline and trace
    assert [t.name for t in traces] == ["timeline_toy-recompute_share_1_0.trace.json"]
    for t in traces:
        doc = json.loads(t.read_text())
        assert {e["ph"] for e in doc["traceEvents"]} >= {"X", "C"}


def test_report_without_reruns_or_sweeps(tmp_path) -> None:
    """Hand-built instances cannot be rebuilt: the row figures still come, with notes."""
    from slackswap.analysis.jobs import ref_from_instance
    from slackswap.instances.catalog import build_model

    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1)
    df = run_sweep(
        Sweep(
            [ref_from_instance(inst)],
            ["1", "0.5"],
            [SolverSpec.of_object(ToyKeep()), SolverSpec.of_object(ToyRecompute(share=1.0))],
        ),  # fmt: skip
        progress=False,
    )
    rep = write_report(df, tmp_path, formats=("png",), rerun=True)
    assert {p.name for p in rep.files} == {f"{n}.png" for n in FIGURES[:7]}
    for p in rep.files:
        check_image(p)
    assert any("no instance in the results can be rebuilt" in n for n in rep.notes)
    assert any("do not sweep link_bw_Bps" in n for n in rep.notes)


def test_report_reruns_nothing_unless_asked(results: Path, tmp_path, capsys) -> None:
    out = tmp_path / "norerun"
    with registered():
        assert main(["report", str(results), "-o", str(out), "--format", "png"]) == 0
    err = capsys.readouterr().err
    assert "rerunning" not in err and "pass --rerun" in err
    assert {p.name for p in out.iterdir()} == {f"{n}.png" for n in FIGURES[:9]}


def test_report_tables_and_paired_comparison(results: Path, capsys) -> None:
    with registered():
        assert main(["report", str(results), "--table", "json"]) == 0
        obj = json.loads(capsys.readouterr().out)
        assert {r["solver"] for r in obj["rows"]} == {"toy-keep", "toy-recompute(share=1.0)"}
        assert main(["report", str(results), "--table", "latex"]) == 0
        tex = capsys.readouterr().out
        assert r"\toprule" in tex and r"\bottomrule" in tex
        argv = ["report", str(results), "--compare", "toy-keep,toy-recompute(share=1.0)"]
        assert main(argv) == 0
        assert "Wilcoxon signed-rank p =" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--format", "latex"], "--format: 'latex' is not png, svg or pdf (for a table: --table"),
        (["--compare", "toy-keep"], "--compare: expected two solver labels"),
        (["--compare", "toy-keep,nope"], "--compare: solver 'nope' is not in"),
    ],
)
def test_report_refuses_bad_table_options(results: Path, argv, needle, capsys) -> None:
    assert main(["report", str(results), *argv]) == 2
    assert needle in capsys.readouterr().err


def test_report_bad_input(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path / "missing.csv")]) == 2
    assert "no such results file" in capsys.readouterr().err
    empty = tmp_path / "e.csv"
    ResultsWriter(empty).close()
    assert main(["report", str(empty), "-o", str(tmp_path / "o"), "--format", "gif"]) == 2
    assert "--format" in capsys.readouterr().err


def test_empty_results_draw_nothing(tmp_path) -> None:
    from slackswap.analysis.results import rows_to_frame

    rep = write_report(rows_to_frame([]), tmp_path)
    assert rep.files == [] and rep.notes


def test_gap_table_sorted_in_paper_order() -> None:
    from slackswap.analysis.gapanalysis import solver_order

    assert solver_order(["zeta", "vdnn", "ga(pop=4)", "slackswap", "vdnn"]) == [
        "slackswap", "vdnn", "ga(pop=4)", "zeta",
    ]  # fmt: skip
    assert isinstance(pd.__version__, str)
