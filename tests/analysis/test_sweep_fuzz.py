"""Sweep files (TOML and YAML): every bad one is one line, exit 2, within seconds.

YAML aliases are measured before they are expanded (a "billion laughs" file is refused, not
built), keys of any type are named as they are (never sorted against each other), integers are
bounded. The fuzz draws documents of mixed key and value types and random anchors.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slackswap.analysis.sweepfile import load_sweep
from slackswap.errors import UserError
from slackswap.userdoc import MAX_YAML_NODES, parse_yaml
from tests.support.userinput import refused


def laughs(levels: int = 9, fan: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\nbudgets: [0.5]\nsolvers: [vdnn]\n"


SWEEPS = {
    "billion laughs.yaml": laughs(),
    "recursive alias.yaml": "budgets: &a [*a]\nsolvers: [vdnn]\n",
    "mixed key types.yaml": "1: a\nb: c\nbudgets: [0.5]\n",
    "null key.yaml": "~: a\nb: c\nbudgets: [0.5]\n",
    "mixed solver keys.yaml": "budgets: [0.5]\nsolvers: [{name: vdnn, 1: x, b: y}]\n",
    "mixed grid keys.yaml": "budgets: [0.5]\nsolvers: [vdnn]\ngrid: {model: gpt2-xl, 1: x, ~: y}\n",
    "5,000-digit seed.yaml": "budgets: [0.5]\nsolvers: [vdnn]\nseeds: [" + "1" * 5000 + "]\n",
    "5,000-digit seed.toml": 'budgets = [0.5]\nsolvers = ["vdnn"]\nseeds = [' + "1" * 5000 + "]\n",
    "deep.yaml": "budgets: " + "[" * 10_000 + "]" * 10_000 + "\n",
    "deep.toml": "budgets = " + "[" * 10_000 + "]" * 10_000 + "\n",
    "huge time limit.toml": 'budgets = [0.5]\nsolvers = ["vdnn"]\ntime_limit = 1e6\n',
}


@pytest.mark.parametrize("case", sorted(SWEEPS))
def test_bad_sweep_files_are_one_line(tmp_path, capsys, case) -> None:
    path = tmp_path / case.replace(" ", "_")
    path.write_text(SWEEPS[case])
    line = refused(["compare", "--sweep", str(path), "-o", str(tmp_path / "r.csv")], capsys)
    assert str(path) in line


def test_unknown_keys_are_named_in_file_order(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("b: c\n1: a\nbudgets: [0.5]\n")
    with pytest.raises(UserError, match="unknown key 'b'"):
        load_sweep(path)
    path.write_text("1: a\nb: c\nbudgets: [0.5]\n")
    with pytest.raises(UserError, match="unknown key 1 "):
        load_sweep(path)


def test_aliases_within_bounds_still_load() -> None:
    doc = parse_yaml("o: &o {pop_size: 20}\nsolvers: [{name: ga, options: *o}, "
                     "{name: ga-random, options: *o}]\n", "s.yaml")  # fmt: skip
    assert doc["solvers"][1]["options"] == {"pop_size": 20}
    t0 = time.monotonic()
    with pytest.raises(UserError, match=f"more than {MAX_YAML_NODES:,} values"):
        parse_yaml(laughs(levels=30, fan=2), "s.yaml")  # 2**30 once expanded
    assert time.monotonic() - t0 < 2.0


# ---- fuzz -----------------------------------------------------------------------------------
KEYS = st.one_of(
    st.sampled_from(["instances", "grid", "budgets", "seeds", "solvers", "time_limit",
                     "job_timeout", "min_budget", "output", "model", "name", "options"]),
    st.integers(-5, 5), st.none(), st.booleans(), st.floats(allow_nan=False),
    st.text(max_size=5),
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**50), 10**50),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["vdnn", "0.5", "50%", "1.0:0.1:-0.1", "11GB", "gpt2-xl", "nope"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def _yaml_text(doc: dict, anchors: int) -> str:
    text = yaml.safe_dump(doc, default_flow_style=True, sort_keys=False)
    # Point some values at an anchored list: aliases of every kind the fuzz can reach.
    if anchors:
        head = "x_anchor: &x [" + ", ".join(["*y"] * anchors) + "]\n"
        return "y_anchor: &y [1, 2, 3]\n" + head + text.replace("null", "*x", anchors)
    return text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    doc=st.dictionaries(KEYS, VALUES, max_size=6),
    anchors=st.integers(0, 3),
    suffix=st.sampled_from([".yaml", ".toml"]),
)
def test_fuzzed_sweep_files_load_or_are_one_line(tmp_path_factory, doc, anchors, suffix) -> None:
    doc.pop("instances", None)  # the catalog's instances take seconds to build; not the point
    doc.pop("grid", None)
    path: Path = tmp_path_factory.mktemp("sweep") / f"s{suffix}"
    if suffix == ".yaml":
        path.write_text(_yaml_text(doc, anchors))
    else:
        import json

        path.write_text(
            "\n".join(f"{json.dumps(str(k))} = {json.dumps(v)}" for k, v in doc.items())
        )  # fmt: skip  (TOML-ish, often bad)
    t0 = time.monotonic()
    try:
        load_sweep(path)
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)
    assert time.monotonic() - t0 < 5.0
