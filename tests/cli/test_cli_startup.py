"""A quick command line: ``--help``/``--version`` import no command module, nor numba, scipy,
pandas or matplotlib; ``slackswap help [COMMAND]``; "did you mean" for every name a user types.

Timing lives in ``benchmarks/bench_startup.py`` (figures in benchmarks/README.md), not here.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

from slackswap import cli
from slackswap.commands.lazy import LazyCommands
from slackswap.commands.parser import Parser
from slackswap.errors import UserError

HEAVY = ("numba", "scipy", "pandas", "matplotlib", "torch", "pyarrow", "ortools", "highspy")


def test_help_and_version_import_nothing_heavy() -> None:
    code = textwrap.dedent(
        f"""
        import json, sys
        from slackswap.cli import main
        codes = []
        for argv in (["--version"], ["--help"], ["help"], []):
            try:
                codes.append(main(argv))
            except SystemExit as done:
                codes.append(done.code)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        commands = sorted(m for m in sys.modules if m.startswith("slackswap.commands."))
        print(json.dumps([codes, heavy, commands]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    codes, heavy, commands = json.loads(proc.stdout.splitlines()[-1])
    assert codes == [0, 0, 0, 2]  # no command: the help, and the usage status
    assert heavy == []
    assert commands == ["slackswap.commands.lazy", "slackswap.commands.parser"]
    assert "slackswap 0.1.0" in proc.stdout and "COMMAND" in proc.stdout


def test_the_summaries_are_the_commands_own() -> None:
    """The one line ``--help`` shows without importing a command is the line its module
    registers (so the table in cli.py cannot drift from the modules)."""
    for name, (module, summary) in cli.COMMANDS.items():
        scratch = LazyCommands(option_strings=[], prog="slackswap", parser_class=Parser)
        importlib.import_module(module).register(scratch)
        helps = {a.dest: a.help for a in scratch._choices_actions}
        assert helps[name] == summary, name
    # and every command a module registers is in the table
    registered = set()
    for module in {m for m, _ in cli.COMMANDS.values()}:
        scratch = LazyCommands(option_strings=[], prog="slackswap", parser_class=Parser)
        importlib.import_module(module).register(scratch)
        registered |= set(scratch._name_parser_map)
    assert registered == set(cli.COMMANDS)


def test_a_command_loads_only_its_module() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, LazyCommands))
    before = sub.lazy_names()
    args = parser.parse_args(["linkbudget"])
    assert args.func.__module__ == "slackswap.commands.instance"
    # linkbudget loaded; instance and offload (the same module) stay stubs until chosen
    assert set(before) - set(sub.lazy_names()) == {"linkbudget"}


@pytest.mark.parametrize(
    "topic", [["solve"], ["reproduce"], ["reproduce", "fig4"], ["instance", "build"]]
)
def test_help_command_is_the_commands_help(
    topic: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["help", *topic]) == 0
    via_help = capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        cli.main([*topic, "--help"])
    assert done.value.code == 0
    assert via_help == capsys.readouterr().out
    assert via_help.startswith(f"usage: slackswap {' '.join(topic)}")


def test_help_alone_is_the_top_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["help"]) == 0
    out = capsys.readouterr().out
    assert "slackswap help [COMMAND]" in out and "reproduce" in out


@pytest.mark.parametrize(
    "argv,suggested",
    [
        (["slove"], "'solve'"),
        (["help", "simualte"], "'simulate'"),
        (["reproduce", "fgi4"], "'fig4'"),
        (["instance", "biuld"], "'build'"),
        (["profile", "m.py:f", "-o", "x.json", "--timing", "rooflin"], "'roofline'"),
    ],
)
def test_a_misspelt_choice_names_the_closest(
    argv: list[str], suggested: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = cli.main(argv)  # `help NAME` returns argparse's status
    except SystemExit as done:  # argparse's own error exit
        code = done.code
    assert code == 2
    err = capsys.readouterr().err
    assert f"did you mean {suggested}" in err, err


def test_a_name_nothing_is_close_to_gets_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["zzzzzz"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "(choose from instance, linkbudget" in err


@pytest.mark.parametrize(
    "argv,suggested",
    [
        (["solve", "gpt2-xl", "--budget", "0.5", "--solver", "slakswap"], "'slackswap'"),
        (["instance", "info", "gtp2-xl"], "'gpt2-xl'"),
        (["instance", "info", "gpt2-xl@h10-pcie5"], "'h100'"),
        (["instance", "info", "gpt2-xl@h100-pcei5"], "'pcie5'"),
        (["instance", "build", "lama-7b", "-o", "never-written.json"], "'llama-7b'"),
        (["instance", "build", "gpt2-xl", "--gpu", "a10", "-o", "x.json"], "'a100'"),
        (["instance", "build", "gpt2-xl", "--link", "pcei5", "-o", "x.json"], "'pcie5'"),
    ],
)
def test_misspelt_names_get_a_did_you_mean(
    argv: list[str], suggested: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("slackswap: error: ") and err.count("\n") == 1, err
    assert f"did you mean {suggested}" in err, err


def test_the_budget_message_lists_every_form(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("1.5", "lots", "-1", "0%"):
        assert cli.main(["solve", "gpt2-xl", "--budget", bad]) == 2
        err = capsys.readouterr().err
        for form in ("0.5", "50%", "150%", "11GB"):
            assert form in err, (bad, err)


def test_did_you_mean_in_the_library() -> None:
    from slackswap.instances.catalog import build_model
    from slackswap.solvers import REGISTRY

    with pytest.raises(UserError, match="did you mean 'slackswap'"):
        REGISTRY["slackswp"]
    with pytest.raises(UserError, match="did you mean 'gpt2-xl'"):
        build_model("gpt2-x1")
