"""``slackswap solvers`` and ``slackswap solve``: output, plan files, exit statuses."""

from __future__ import annotations

import json

import pytest

from slackswap.cli import main
from slackswap.commands.solve import parse_options
from slackswap.errors import UserError
from slackswap.instances.catalog import build_model
from slackswap.plan import Plan
from slackswap.solvers import REGISTRY


@pytest.fixture(scope="module")
def inst_path(tmp_path_factory):  # type: ignore[no-untyped-def]
    inst = build_model("gpt2-xl", layers=12, seq=128, batch=2, name="cli-gpt2")
    path = tmp_path_factory.mktemp("inst") / "gpt2.json"
    inst.save(path)
    return path, inst


def test_solvers_lists_registry(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["solvers"]) == 0
    out = capsys.readouterr().out
    for name in REGISTRY.names():
        assert name in out
    assert main(["solvers", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    by_name = {e["name"]: e for e in entries}
    assert by_name["swap-first"]["options"]["order"] == "production"
    assert by_name["slackswap"]["tags"]["deterministic"] is True


def test_solve_summary_and_plan_file(inst_path, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path, inst = inst_path
    plan_path = tmp_path / "plan.json"
    assert main(["solve", str(path), "--budget", "40%", "-o", str(plan_path)]) == 0
    out = capsys.readouterr().out
    assert "status      feasible" in out and "throughput" in out and "planning" in out
    plan = Plan.load(plan_path, inst)
    assert plan.runtime == "barrier-free" and plan.swap_bytes > 0


def test_solve_json_row(inst_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path, inst = inst_path
    code = main(["solve", str(path), "--budget", "0.4", "--solver", "barriers", "--json",
                 "--option", "max_rounds=2"])  # fmt: skip
    assert code == 0
    row = json.loads(capsys.readouterr().out)
    for key in ("instance", "budget_fraction", "budget_bytes", "solver", "seed", "status",
                "step_s", "ideal_s", "throughput", "plan_s", "lower_bound_s", "gap", "error"):  # fmt: skip
        assert key in row
    assert row["solver"] == "barriers(max_rounds=2)"
    assert row["runtime"] == "barriers"
    assert row["budget_bytes"] == int(0.4 * inst.peak_bytes)


def test_infeasible_exit_status(inst_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path, _ = inst_path
    assert main(["solve", str(path), "--budget", "0.01", "--solver", "recompute-only"]) == 1
    out = capsys.readouterr().out
    assert "infeasible" in out and "smallest" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--budget", "0.5", "--solver", "nope"], "unknown solver 'nope'"),
        (["--budget", "half"], "budget 'half': expected a fraction of P"),
        (["--budget", "0.5", "--option", "colour=red"], "no option 'colour'"),
        (["--budget", "0.5", "--option", "novalue"], "expected KEY=VALUE"),
    ],
)
def test_bad_input_one_line_exit_2(inst_path, capsys, argv, needle) -> None:  # type: ignore[no-untyped-def]
    path, _ = inst_path
    assert main(["solve", str(path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_unknown_instance_exit_2(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["solve", "no-such-model", "--budget", "0.5"]) == 2
    assert "no-such-model" in capsys.readouterr().err


def test_bad_time_limit_is_one_line_exit_2(inst_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path, _ = inst_path
    assert main(["solve", str(path), "--budget", "0.5", "--time-limit", "-1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "slackswap: error: --time-limit: expected a positive number of seconds "
        "(at most 86400), got '-1'\n"
    )


def test_parse_options() -> None:
    assert parse_options(["max_rounds=3", "order=production", "pass1=false"]) == {
        "max_rounds": 3,
        "order": "production",
        "pass1": False,
    }
    with pytest.raises(UserError):
        parse_options(["=3"])


def _subcommand_paths() -> list[list[str]]:
    """Every command and nested subcommand of the CLI, as argv prefixes."""
    import argparse

    from slackswap.cli import build_parser

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
        out = [prefix]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out += walk(sub, [*prefix, name])
        return out

    return walk(build_parser(every_command=True), [])


@pytest.mark.parametrize("argv", _subcommand_paths(), ids=lambda a: " ".join(a) or "slackswap")
def test_every_help_page_renders(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # argparse %-formats help strings, so a bare "40%" in one crashes --help of its parent.
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out
