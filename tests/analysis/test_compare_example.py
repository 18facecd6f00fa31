"""The comparison example (examples/compare_sweep.toml and compare_solvers.py) runs and draws
the profile, the ECDF and the anytime curves."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from examples.compare_solvers import main


def test_compare_example_runs_and_draws(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    files = main(["--out", str(tmp_path), "--time-limit", "0.3"])
    assert sorted(p.name for p in files) == ["anytime.png", "ecdf_gap.png",
                                             "performance_profile.png"]  # fmt: skip
    for p in files:
        with Image.open(p) as im:
            assert im.format == "PNG" and im.size[0] > 300
    out = capsys.readouterr().out
    assert "| instance | budget | solver |" in out and "Wilcoxon signed-rank p =" in out
    # slackswap, swap-first and milp once per case; ga once per seed: 6 cases x (3 + 3) runs
    assert (tmp_path / "results.csv").read_text().count("\n") == 1 + 6 * 6
