"""The README's commands fit together: a file one command reads is a file an earlier one writes,
of the right kind, and a file of the wrong kind is refused in one line that says what it is."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from slackswap.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"


def _commands() -> list[list[str]]:
    """Every ``slackswap ...`` command in the README's bash blocks, as argument lists."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            words = shlex.split(line) if line else []
            if words and words[0].endswith("slackswap") and len(words) > 1:
                out.append(words[1:])
    return out


def _option(words: list[str], *names: str) -> str | None:
    for i, w in enumerate(words[:-1]):
        if w in names:
            return words[i + 1]
    return None


def test_files_the_readme_reads_are_written_before_as_that_kind() -> None:
    written: dict[str, str] = {}  # file -> what wrote it ("profile", "instance build", "solve")
    plan_of: dict[str, str] = {}  # plan file -> the instance argument it was solved for
    checked = 0
    for words in _commands():
        command = " ".join(words[:2]) if words[0] == "instance" else words[0]
        if command == "run":
            instance, plan = _option(words, "--instance"), _option(words, "--plan")
            if instance is not None:
                assert written.get(instance) in ("profile", "instance build"), (
                    f"run --instance {instance}: no earlier README command writes that instance "
                    f"file (written by: {written.get(instance)})"
                )
                checked += 1
            if plan is not None:
                assert written.get(plan) == "solve", f"run --plan {plan}: not an earlier solve -o"
                assert plan_of[plan] == instance, f"{plan} is a plan for {plan_of[plan]}"
        output = _option(words, "-o", "--output")
        if output is not None:
            written[output] = command
            if command == "solve":
                plan_of[output] = words[1]
        trace = _option(words, "--trace")
        if trace is not None:
            written[trace] = "simulate --trace"
    assert checked >= 1  # the README does show `run --instance`


def test_a_trace_or_plan_given_as_an_instance_names_what_it_is(tmp_path, capsys) -> None:
    trace, plan = tmp_path / "step.json", tmp_path / "plan.json"
    assert (
        main(["solve", "gpt2-xl", "--budget", "0.5", "--solver", "slackswap", "-o", str(plan)]) == 0
    )
    assert main(["simulate", "gpt2-xl", str(plan), "--budget", "0.5", "--trace", str(trace)]) == 0
    capsys.readouterr()
    for path, what in ((trace, "a Chrome trace of a simulated step"), (plan, "a plan file")):
        assert main(["instance", "info", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0
        assert f"{path}: {what}" in err and "not an instance file" in err


@pytest.mark.torch
def test_run_given_a_trace_as_its_instance_says_so(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    trace, plan = tmp_path / "step.json", tmp_path / "plan.json"
    main(["solve", "gpt2-xl", "--budget", "0.5", "--solver", "slackswap", "-o", str(plan)])
    main(["simulate", "gpt2-xl", str(plan), "--budget", "0.5", "--trace", str(trace)])
    capsys.readouterr()
    factory = f"{Path(__file__).parent.parent.parent / 'examples' / 'models.py'}:gpt"
    argv = ["run", factory, "--budget", "0.5", "--instance", str(trace), "--plan", str(plan)]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = "\n".join(x for x in lines if not x.endswith(" ..."))  # progress lines aside
    assert err.count("\n") == 0 and "a Chrome trace of a simulated step" in err
