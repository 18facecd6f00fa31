"""Instance files are checked for shape before they are built: the top level's fields are found
by a scan that builds nothing (`json_members`, checked here against `json.loads` as the oracle),
a missing field is refused at once, and operators and tensors are parsed one at a time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slackswap import userdoc
from slackswap.instances.catalog import build_model
from slackswap.instances.format import InstanceFileError, load_instance
from slackswap.userdoc import json_members

_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8)
_values = st.recursive(
    _scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=20,
)
#: Keys and strings that stress the scan: quotes, backslashes, brackets, colons and commas.
_tricky = st.text(alphabet='ab"\\{}[]:, \n\u00e9\U0001f600', max_size=8)


def _check(doc: dict, text: str) -> None:
    raw = text.encode("utf-8")
    found = json_members(raw)
    assert found is not None, text
    members, deepest = found
    keys = [k for k, _, _ in members]
    assert keys == list(doc)  # json keeps a key's first position and its last value
    for key, start, end in members:
        assert json.loads(raw[start:end]) == doc[key]
    assert deepest >= 1


@given(
    doc=st.dictionaries(_tricky, _values | _tricky, max_size=6),
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
    chunk=st.sampled_from([1, 2, 3, 7, 64, 4 << 20]),
)
def test_members_agree_with_json_loads(doc, indent, ascii_only, chunk) -> None:
    # Tiny chunks put every boundary inside strings, escapes and brackets.
    with pytest.MonkeyPatch.context() as m:
        m.setattr(userdoc, "_SCAN_CHUNK", chunk)
        _check(doc, json.dumps(doc, indent=indent, ensure_ascii=ascii_only))


@given(
    ops=st.lists(st.dictionaries(_tricky, _tricky, max_size=3), min_size=1, max_size=30),
    chunk=st.sampled_from([1, 5, 16, 4 << 20]),
)
def test_members_of_a_deep_list_found_past_many_chunks(ops, chunk) -> None:
    # A long list deep in the document: its chunks take the reduced path.
    doc = {"a": 1, "ops": [[op] for op in ops], "z": {"k": ops[:2]}}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(userdoc, "_SCAN_CHUNK", chunk)
        _check(doc, json.dumps(doc))


@given(st.binary(max_size=60) | st.text(alphabet='{}[]":,\\ a1', max_size=40).map(str.encode))
def test_any_bytes_give_members_or_none_never_an_error(raw: bytes) -> None:
    found = json_members(raw)
    if found is not None:
        try:
            doc = json.loads(raw)
        except ValueError:
            return  # a bad token inside a value: left to that value's parser
        assert [k for k, _, _ in found[0]] == list(doc)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "[1, 2]",
        '"x"',
        "{",
        '{"a": 1',
        '{"a": 1}}',
        '{"a": 1} x',
        "{1: 2}",
        '{"a" 1}',
        '{"a": 1,, "b": 2}',
    ],  # fmt: skip
)
def test_not_one_well_formed_object_is_none(text: str) -> None:
    assert json_members(text.encode()) is None


@pytest.fixture(scope="module")
def instance_dict() -> dict:
    return build_model("gpt2-xl", layers=1, seq=16, batch=1).to_dict()


def test_the_scanned_load_builds_what_the_whole_parser_builds(tmp_path, instance_dict) -> None:
    for indent, ascii_only in ((None, True), (1, False)):
        d = json.loads(json.dumps(instance_dict))
        d["meta"]["note"] = 'caf\u00e9 \U0001f600 "quoted" {not: [structure]}'
        path = tmp_path / "x.json"
        path.write_text(json.dumps(d, indent=indent, ensure_ascii=ascii_only), encoding="utf-8")
        from slackswap.instances.format import instance_from_dict

        assert load_instance(path).content_hash == instance_from_dict(d).content_hash


@pytest.mark.parametrize("field", ["name", "hardware", "ops", "tensors"])
def test_a_missing_field_is_named(tmp_path, instance_dict, field) -> None:
    d = {k: v for k, v in instance_dict.items() if k != field}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InstanceFileError, match=rf"{field} = None: missing field"):
        load_instance(path)


def test_a_bad_operator_is_named_with_its_index(tmp_path, instance_dict) -> None:
    d = json.loads(json.dumps(instance_dict))
    del d["ops"][3]["kind"]
    path = tmp_path / "x.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InstanceFileError, match=r"ops\[3\]\.kind = None: missing field"):
        load_instance(path)
    d["ops"] = {"not": "a list"}
    path.write_text(json.dumps(d))
    with pytest.raises(InstanceFileError, match=r"ops = .*expected a list"):
        load_instance(path)


def test_bad_json_inside_the_operators_names_the_line(tmp_path, instance_dict) -> None:
    text = json.dumps(instance_dict, indent=1).replace('"kind": "gemm"', '"kind": gemm', 1)
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(InstanceFileError, match=r"not valid JSON \(line \d+, column \d+"):
        load_instance(path)


_BIG = textwrap.dedent(
    """
    import json, resource, sys, time
    from slackswap.instances.format import InstanceFileError, load_instance
    path, mode = sys.argv[1], sys.argv[2]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()
    try:
        load_instance(path)
    except InstanceFileError as exc:
        message = str(exc)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    print(json.dumps({"message": message, "grown": grown, "cpu_s": time.process_time() - t0}))
    """
)


def _big_file(path: Path, instance_dict: dict, n_bytes: int, mode: str) -> int:
    """An instance file of about ``n_bytes``, its operators repeated; ``missing``: no
    ``tensors`` field; ``badop``: operator 1,000 lacks its kind."""
    head = {k: v for k, v in instance_dict.items() if k not in ("ops", "tensors", "meta")}
    op = instance_dict["ops"][0]
    with open(path, "w") as fh:
        fh.write(json.dumps(head)[:-1] + ', "ops": [')
        size = n = 0
        while size < n_bytes:
            item = dict(op, name=f"op{n}")
            if mode == "badop" and n == 1000:
                del item["kind"]
            s = ("," if n else "") + json.dumps(item)
            fh.write(s)
            size, n = size + len(s), n + 1
        fh.write("]" + (', "tensors": []' if mode == "badop" else "") + "}")
    return path.stat().st_size


def _load_in_child(path: Path, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _BIG, str(path), mode],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


@pytest.mark.parametrize("mode", ["missing", "badop"])
def test_a_large_file_is_refused_holding_about_its_own_bytes(tmp_path, instance_dict, mode):
    # 24 MB: the whole parser held ~4.7x the file (the fuzz's 250 MiB file took 1.4 GB) and
    # built every operator before the refusal; the scan holds the bytes (and, to parse the
    # operators, their text): at most 2.5x, whatever the operators after the bad one.
    size = _big_file(tmp_path / "big.json", instance_dict, 24 << 20, mode)
    got = _load_in_child(tmp_path / "big.json", mode)
    want = "tensors = None: missing field" if mode == "missing" else "ops[1000].kind = None"
    assert want in got["message"]
    assert got["grown"] < 2.5 * size, (got, size)


@pytest.mark.slow
def test_a_250_mib_file_is_refused_holding_little_more_than_its_bytes(
    tmp_path, instance_dict
) -> None:
    # The case: 250 MiB under the 256 MiB cap. Before: 33 s and 1.4 GB (load 6-10).
    size = _big_file(tmp_path / "big.json", instance_dict, 250 << 20, "missing")
    got = _load_in_child(tmp_path / "big.json", "missing")
    assert "tensors = None: missing field" in got["message"]
    assert got["grown"] < 1.3 * size, (got, size)  # its time: benchmarks/README.md
