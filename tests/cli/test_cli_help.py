"""The CLI's voice: every option documented with its default, one name per concept (the old
spellings are gone), tables that fit a 100-column terminal, files written named."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from slackswap.cli import build_parser, main

SKIP = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command and nested subcommand, by its command line ("reproduce gaps")."""
    out: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        out.append((path or "slackswap", parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}".strip())

    walk(build_parser(every_command=True), "")
    return out


PARSERS = _parsers()


def _visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, SKIP) and a.help != argparse.SUPPRESS]


@pytest.mark.parametrize("path,parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_every_option_has_help(path: str, parser: argparse.ArgumentParser) -> None:
    documented = {a.dest for a in _visible(parser)}
    for action in parser._actions:
        if isinstance(action, SKIP):
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help != argparse.SUPPRESS, f"{path} {name}: a hidden option"
        assert action.dest in documented and action.help.strip(), f"{path} {name}: no help text"


@pytest.mark.parametrize("path,parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_help_shows_defaults_and_marks_required(path: str, parser: argparse.ArgumentParser) -> None:
    formatter = parser._get_formatter()
    for action in _visible(parser):
        if not action.option_strings:
            continue
        text = formatter._expand_help(action)
        name = "/".join(action.option_strings)
        if action.required:
            assert "(required)" in text, f"{path} {name}: required but not marked: {text!r}"
        elif action.nargs != 0 and action.default not in (None, []):
            assert "default" in text and str(action.default) in text, (
                f"{path} {name}: default {action.default!r} not shown: {text!r}"
            )


def test_one_name_per_concept() -> None:
    """The catalog names of a reproduce sweep are --instances everywhere; the min-budget and
    progress switches are spelled the same in every command that has them."""
    seen: dict[str, set[str]] = {}
    for path, parser in PARSERS:
        for action in _visible(parser):
            for opt in action.option_strings:
                seen.setdefault(opt, set()).add(path)
    assert "--workloads" not in seen and "--models" not in seen
    assert seen["--instances"] == {"reproduce fig4", "reproduce gaps"}
    assert seen["--min-budget"] == seen["--no-min-budget"] == {"compare", "reproduce fig4"}
    assert seen["--progress"] == seen["--no-progress"]


@pytest.mark.parametrize(
    "argv,dest,value",
    [
        (["reproduce", "fig4", "--instances", "vgg16"], "workloads", "vgg16"),
        (["reproduce", "fig4"], "workloads", "bert-large,gpt2-xl,llama-7b,vgg16"),
        (["reproduce", "gaps", "--instances", "vgg16"], "models", "vgg16"),
        (["reproduce", "fig4"], "min_budget", False),
        (["reproduce", "fig4", "--min-budget"], "min_budget", True),
        (["reproduce", "fig4", "--no-min-budget"], "min_budget", False),
        (["compare", "x"], "no_min_budget", False),
        (["compare", "x", "--no-min-budget"], "no_min_budget", True),
        (["compare", "x", "--min-budget"], "no_min_budget", False),
        (["compare", "x"], "progress", None),
        (["reproduce", "fig6", "--progress"], "progress", True),
        (["reproduce", "fig6", "--no-progress"], "progress", False),
    ],
)
def test_spellings_parse(argv: list[str], dest: str, value: object) -> None:
    assert getattr(build_parser().parse_args(argv), dest) == value


@pytest.mark.parametrize("report,old", [("fig4", "--workloads"), ("gaps", "--models")])
def test_the_old_spellings_are_gone(
    report: str, old: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["reproduce", report, old, "vgg16"])
    assert done.value.code == 2
    assert f"unrecognized arguments: {old} vgg16" in capsys.readouterr().err


def test_solvers_table_fits_100_columns(capsys: pytest.CaptureFixture[str]) -> None:
    from slackswap.solvers import REGISTRY, describe_solvers

    assert main(["solvers"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    for entry in describe_solvers():  # nothing dropped to make it fit
        assert entry["name"] in out
        for key in entry["options"]:
            assert f"{key}=" in out
    assert len(REGISTRY.names()) == len(describe_solvers())


def test_solve_and_simulate_name_the_file_they_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from slackswap.instances.catalog import build_model

    ipath, ppath, tpath = tmp_path / "i.json", tmp_path / "p.json", tmp_path / "t.json"
    build_model("gpt2-xl", layers=2, seq=128, batch=1).save(ipath)
    assert main(["solve", str(ipath), "--budget", "1.0", "-o", str(ppath), "--json"]) == 0
    out, err = capsys.readouterr()
    assert ppath.is_file() and f"wrote plan: {ppath}" in err
    assert json.loads(out)["solver"] == "slackswap"  # stdout stays one JSON object
    assert main(["simulate", str(ipath), str(ppath), "--budget", "1.0", "--trace", str(tpath)]) == 0
    assert tpath.is_file() and f"wrote trace: {tpath}" in capsys.readouterr().err


@pytest.mark.parametrize("path,parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_every_command_documents_its_exit_statuses(path: str, parser: argparse.ArgumentParser):
    text = parser.format_help()
    assert "Exit status: 0 done; 2 bad input" in " ".join(text.split()), path


@pytest.mark.parametrize("command", ["linkbudget", "solvers", "offload", "runtimes", "solve"])
def test_commands_describe_themselves(command: str) -> None:
    parser = dict(PARSERS)[command]
    assert parser.description and len(parser.description) > 60, command


def test_solve_and_simulate_say_when_they_exit_1() -> None:
    helps = {path: " ".join(p.format_help().split()) for path, p in PARSERS}
    assert "1 when no plan fits the budget" in helps["solve"]
    assert "1 when the plan does not fit the budget" in helps["simulate"]
    assert "1 when --check finds" in helps["run"]


def test_jobs_default_is_the_same_in_every_command() -> None:
    defaults = {
        path: action.default
        for path, parser in PARSERS
        for action in parser._actions
        if "--jobs" in action.option_strings
    }
    assert {"compare", "reproduce fig4", "reproduce fig6", "reproduce gaps"} <= set(defaults)
    assert set(defaults.values()) == {1}, defaults


def test_solver_names_are_case_insensitive_like_catalogue_names(capsys) -> None:
    from slackswap.analysis.jobs import SolverSpec
    from slackswap.solvers import REGISTRY

    assert REGISTRY["SlackSwap"] is REGISTRY["slackswap"] and "CPSAT" in REGISTRY
    assert SolverSpec.of("Swap-First").name == "swap-first"
    assert main(["solve", "VGG16", "--budget", "1", "--solver", "SlackSwap"]) == 0
    assert "solver slackswap" in capsys.readouterr().out
    argv = ["compare", "vgg16", "--budgets", "1", "--solvers", "CHECKPOINT", "--no-progress"]
    assert main(argv) == 0
    assert " checkpoint " in capsys.readouterr().out
