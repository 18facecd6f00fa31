"""What `slackswap report` and the result objects show: small gaps printed as they are, curves
that tie both visible, one clear error for nothing to report, short reprs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slackswap.analysis import figures as F
from slackswap.cli import main


def _rows() -> pd.DataFrame:
    """Two budgets of one instance: ga best, slackswap 0.12% and 0.1% behind, checkpoint 8%."""
    ideal = 0.1
    steps = {
        (1.0, "slackswap"): 0.1,
        (1.0, "ga"): 0.1,
        (1.0, "checkpoint"): 0.1,
        (0.5, "slackswap"): 0.125 * 1.0012,
        (0.5, "ga"): 0.125,
        (0.5, "checkpoint"): 0.125 * 1.08,
        (0.3, "slackswap"): 0.2 * 1.001,
        (0.3, "ga"): 0.2,
        (0.3, "checkpoint"): np.nan,
    }
    return pd.DataFrame(
        [
            {
                "instance": "toy",
                "budget_fraction": b,
                "solver": s,
                "seed": 0,
                "status": "feasible" if np.isfinite(t) else "infeasible",
                "step_s": t,
                "throughput": ideal / t if np.isfinite(t) else np.nan,
                "ideal_s": ideal,
                "lower_bound_s": np.nan,
                "plan_s": 0.01,
                "min_budget_bytes": np.nan,
            }  # fmt: skip
            for (b, s), t in steps.items()
        ]
    )


@pytest.mark.parametrize(
    "percent,text",
    [(0.0, "0"), (0.004, "<0.01"), (0.1, "0.10"), (0.13, "0.13"), (2.44, "2.4"),
     (27.4, "27"), (512.0, "512"), (float("nan"), "-")],
)  # fmt: skip
def test_gap_text(percent: float, text: str) -> None:
    assert F.gap_text(percent) == text


def test_gap_heatmap_prints_small_gaps() -> None:
    fig = F.gap_heatmap(_rows())
    texts = [t.get_text() for t in fig.axes[0].texts]
    # rows slackswap, checkpoint, ga (solver order) x budgets 100, 50, 30 %
    assert "0.12" in texts and "0.10" in texts and "8.0" in texts and "-" in texts
    assert texts.count("0") == 5  # the exact ties only: 3 at 100%, ga at 50% and 30%


def test_tied_curve_is_drawn_over_slackswap() -> None:
    """ga ties SlackSwap: its line lies on top of SlackSwap's wider one, so both show."""
    fig = F.throughput_vs_budget(_rows())
    lines = {str(c.get_label()): c[0] for c in fig.axes[0].containers}  # the error bars' lines
    ss, ga = lines["slackswap"], lines["ga"]
    assert ss.get_zorder() < ga.get_zorder()
    assert ss.get_linewidth() > ga.get_linewidth() and ss.get_markersize() > ga.get_markersize()
    np.testing.assert_allclose(ss.get_ydata(), ga.get_ydata(), rtol=2e-3)  # they do tie


def _results_file(tmp_path: Path) -> Path:
    path = tmp_path / "r.csv"
    code = main(["compare", "vgg16", "--budgets", "1.0", "--solvers", "checkpoint",
                 "--no-min-budget", "--no-progress", "-o", str(path)])  # fmt: skip
    assert code == 0
    return path


@pytest.mark.parametrize("what", ["empty", "header only", "unknown instance"])
def test_report_nothing_to_report_is_exit_2(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if what == "unknown instance":
        argv = [
            "report",
            str(_results_file(tmp_path)),
            "--instance",
            "gpt3",
            "-o",
            str(tmp_path / "figs"),
        ]
        needle = "--instance 'gpt3': not in"
    else:
        path = tmp_path / "e.csv"
        header = _results_file(tmp_path).read_text().splitlines()[0] + "\n"
        path.write_text("" if what == "empty" else header)
        argv, needle = ["report", str(path)], "no result rows"
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert captured.out == "" and not (tmp_path / "figs").exists()


def test_write_report_refuses_an_unknown_instance(tmp_path: Path) -> None:
    from slackswap.analysis.report import write_report

    with pytest.raises(ValueError, match="'gpt3' is not in the results"):
        write_report(_rows(), tmp_path, instance="gpt3")


def test_reprs_are_short() -> None:
    import slackswap
    from slackswap.simulator import simulate_many

    inst = slackswap.build_model("gpt2-xl", layers=4, seq=128, batch=1)
    res = slackswap.simulate(inst, slackswap.Plan.keep_all(inst), 1.0, timeline=True)
    assert res.timeline is not None and res.timeline.compute_start_s.size > 50
    text = repr(res)
    assert len(text) < 700 and "Timeline(" in text and "compute records" in text
    batch = simulate_many(inst, np.zeros((300, inst.n_tensors), np.int8), 1.0)
    assert repr(batch).startswith("BatchResult(300 plans, 300 feasible") and len(repr(batch)) < 200
