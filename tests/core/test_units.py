"""Bytes at the command line: one formatter, B, KB, MB or GB with 3 significant digits."""

from __future__ import annotations

import pytest

import slackswap
from slackswap.cli import main
from slackswap.console import format_bytes, format_percent


@pytest.mark.parametrize(
    ("nbytes", "shown"),
    [
        (0, "0 B"), (5, "5 B"), (999, "999 B"), (999.6, "1.00 KB"), (1234, "1.23 KB"),
        (99_949, "99.9 KB"), (999_700, "1.00 MB"), (4e6, "4.00 MB"), (74.41e9, "74.4 GB"),
        (123.4e9, "123 GB"), (1234.5e9, "1234 GB"), (-2e6, "-2.00 MB"),
    ],
)  # fmt: skip
def test_bytes_show_three_significant_digits_in_the_unit_that_fits(nbytes: float, shown: str):
    assert format_bytes(nbytes) == shown


def test_percentages_show_three_significant_digits() -> None:
    assert [format_percent(f) for f in (0.744113, 1.0, 0.005, 1.5)] == [
        "74.4%", "100%", "0.5%", "150%",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A one-layer GPT-2 XL at 16 tokens: a few MB, which 2-decimal GB showed as 0.00 GB."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.json"
    slackswap.build_model("gpt2-xl", layers=1, seq=16, batch=1).save(path)
    return str(path)


def test_a_tiny_instance_shows_its_sizes_in_mb(tiny: str, capsys) -> None:
    assert main(["instance", "info", tiny]) == 0
    out = capsys.readouterr().out
    assert "saved activations A       2.61 MB" in out and "0.00 GB" not in out
    assert "no-swap peak P            4.22 MB" in out


def test_a_tiny_infeasible_solve_names_its_need_and_budget_in_mb(tiny: str, capsys) -> None:
    assert main(["solve", tiny, "--budget", "0.3", "--solver", "checkpoint"]) == 1
    out = capsys.readouterr().out
    assert "budget 1.26 MB (30% of P)" in out
    assert "still needs 3.40 MB > budget 1.26 MB" in out
    assert "smallest    3.40 MB fits this solver (80.5% of P)" in out


def test_an_infeasible_simulate_shows_bytes_over_the_budget_with_a_unit(tmp_path, capsys) -> None:
    plan = tmp_path / "plan.json"
    assert main(["solve", "vgg16", "--budget", "1", "--solver", "slackswap", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["simulate", "vgg16", str(plan), "--budget", "0.3"]) == 1
    out = capsys.readouterr().out
    reason = out.splitlines()[-1]
    assert reason.startswith("infeasible: out of memory") and "bytes over" not in reason
    assert reason.endswith(" GB over the budget)") or reason.endswith(" MB over the budget)")
