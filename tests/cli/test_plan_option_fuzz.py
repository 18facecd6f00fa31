"""Plan files and solver options (``--option KEY=VALUE``): every bad one is one line, exit 2.

The readers share `slackswap.userdoc`: regular files only, at most 64 levels of nesting and
40-digit integers. Fixed examples are the fuzz campaign's reproductions; the fuzz mutates a good
plan file's text and draws option values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slackswap
from slackswap.commands.solve import parse_options
from slackswap.errors import UserError
from slackswap.plan import Plan, PlanError
from slackswap.textfile import MAX_INPUT_BYTES
from slackswap.userdoc import MAX_DEPTH, json_depth, parse_option_value
from tests.support.userinput import refused


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, slackswap.Instance]:
    d = tmp_path_factory.mktemp("plan")
    inst = slackswap.build_model("gpt2-xl", layers=1, seq=16, batch=1)
    inst.save(d / "inst.json")
    Plan.keep_all(inst).save(d / "plan.json")
    return d / "inst.json", d / "plan.json", inst


PLAN_TEXTS = {
    "nested 100,000 levels": "[" * 100_000 + "]" * 100_000,
    "nested 100,000 levels, unclosed": '{"actions": ' + "[" * 100_000,
    "5,000-digit integer": '{"actions": ' + "1" * 5000 + "}",
    "4,301-digit negative integer": '{"schema_version": -' + "9" * 4301 + "}",
}


@pytest.mark.parametrize("case", sorted(PLAN_TEXTS))
def test_bad_plan_texts_are_one_line(tmp_path, files, capsys, case) -> None:
    inst, _, _ = files
    plan = tmp_path / "plan.json"
    plan.write_text(PLAN_TEXTS[case])
    refused(["simulate", str(inst), str(plan), "--budget", "0.7", "--json"], capsys)


@pytest.mark.parametrize("node", ["fifo", "/dev/zero", "dir"])
def test_plan_path_that_is_not_a_regular_file(tmp_path, files, capsys, node) -> None:
    inst, _, _ = files
    if node == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)  # opened without a writer: must not block
    elif node == "dir":
        path = tmp_path
    else:
        path = Path(node)
    line = refused(["simulate", str(inst), str(path), "--budget", "0.7"], capsys)
    assert str(path) in line


def test_instance_path_that_is_a_fifo_or_endless(tmp_path, capsys) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "FIFO" in refused(["instance", "info", str(fifo)], capsys)
    assert "character device" in refused(["instance", "info", "/dev/zero"], capsys)


def test_files_over_the_size_bound_are_refused_unread(tmp_path, files, capsys) -> None:
    inst, _, _ = files
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_INPUT_BYTES + 1)  # sparse: nothing is written or read
    assert "at most" in refused(["instance", "info", str(big)], capsys)
    assert "at most" in refused(["simulate", str(inst), str(big), "--budget", "0.7"], capsys)


OPTIONS = {
    "deep list": "max_rounds=" + "[" * 100_000,
    "deep closed list": "max_rounds=" + "[" * 5000 + "]" * 5000,
    "5,000-digit integer": "max_rounds=" + "1" * 5000,
}


@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_bad_option_values_are_one_line(files, capsys, case) -> None:
    inst, _, _ = files
    line = refused(["solve", str(inst), "--budget", "0.7", "--option", OPTIONS[case]], capsys)
    assert "--option max_rounds" in line
    line = refused(["compare", str(inst), "--budgets", "0.7", "--solvers", "slackswap",
                    "--option", "slackswap." + OPTIONS[case]], capsys)  # fmt: skip
    assert "--option slackswap.max_rounds" in line


def test_time_limits_are_bounded(files, capsys) -> None:
    inst, _, _ = files
    for bad in ("1e6", "nan", "inf", "-1", "0", "86401"):
        line = refused(["solve", str(inst), "--budget", "0.5", "--solver", "ga",
                        "--time-limit", bad], capsys)  # fmt: skip
        assert "at most 86400" in line
        line = refused(["run", "train.py:make", "--budget", "0.5", "--time-limit", bad], capsys)
        assert "at most 86400" in line


def test_option_values_keep_their_meaning() -> None:
    assert parse_options(["max_rounds=3", "order=production", "x=[1, [2]]", "y=1e3"]) == {
        "max_rounds": 3, "order": "production", "x": [1, [2]], "y": 1000.0,
    }  # fmt: skip
    assert parse_option_value("[" * MAX_DEPTH + "]" * MAX_DEPTH, "v") is not None


# ---- fuzz -----------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60) | st.from_regex(r"\[{60,70}\]{0,70}|-?\d{30,60}", fullmatch=True))
def test_fuzzed_option_values_parse_or_are_refused(text: str) -> None:
    try:
        value = parse_options([f"k={text}"])["k"]
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--option k")
        return
    json.dumps(value)  # a plain JSON value, or the text


def _mutations() -> st.SearchStrategy[tuple[str, int, str]]:
    edits = st.sampled_from(["cut", "insert", "replace"])
    junk = st.sampled_from(["[", "]", "{", "}", '"', ",", ":", "\\", "1" * 50, "[" * 80,
                            "[" * 3000, "9" * 4400, "-", "e999", "NaN", "\x00", "\ud800",
                            "null", "true"])  # fmt: skip
    return st.tuples(edits, st.integers(0, 10_000), junk)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_mutations(), min_size=1, max_size=4))
def test_fuzzed_plan_files_load_or_are_one_plan_error(tmp_path_factory, files, edits) -> None:
    _, plan_path, inst = files
    text = plan_path.read_text()
    for kind, at, junk in edits:
        at %= len(text) + 1
        if kind == "cut":
            text = text[:at]
        elif kind == "insert":
            text = text[:at] + junk + text[at:]
        else:
            text = text[:at] + junk + text[at + len(junk) :]
    path = tmp_path_factory.mktemp("p") / "plan.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        Plan.load(path, inst)
    except PlanError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ax,:'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text('[]{}"\\a'), inner, max_size=3)
    ),  # fmt: skip
    max_leaves=15,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_json_depth_counts_only_structure(value: object, indent: bool) -> None:
    """Brackets and quotes inside strings (escaped or not) never count."""
    text = json.dumps(value, indent=1 if indent else None, ensure_ascii=False)
    assert json_depth(text) == _depth(value)
