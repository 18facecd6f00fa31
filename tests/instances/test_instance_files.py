"""Instance files: exact round trip, every bad-file case, derived quantities obey definitions."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

import slackswap
from slackswap.errors import InstanceError
from slackswap.instance import LINK_GUARD
from slackswap.instances.format import instance_to_dict, load_instance
from tests.support.strategies import small_instances


def _write(tmp_path: Path, d: object, name: str = "bad.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(d) if not isinstance(d, str) else d)
    return p


@pytest.fixture(scope="module")
def small() -> slackswap.Instance:
    return slackswap.build_model("gpt2-xl", layers=2, seq=128, batch=1)


def test_round_trip_is_exact(tmp_path: Path, small: slackswap.Instance) -> None:
    path = tmp_path / "i.json"
    small.save(path)
    back = load_instance(path)
    assert instance_to_dict(back) == instance_to_dict(small)
    assert back.content_hash == small.content_hash
    assert back.summary() == small.summary()


@given(small_instances())
def test_random_instances_round_trip(inst: slackswap.Instance) -> None:
    d = json.loads(json.dumps(instance_to_dict(inst)))
    from slackswap.instances.format import instance_from_dict

    back = instance_from_dict(d)
    assert instance_to_dict(back) == instance_to_dict(inst)
    assert back.content_hash == inst.content_hash


@given(small_instances())
def test_derived_quantities_obey_definitions(inst: slackswap.Instance) -> None:
    fwd = inst.op_phase == 0
    assert inst.forward_s == pytest.approx(inst.op_duration_s[fwd].sum())
    assert inst.ideal_step_s == pytest.approx(inst.op_duration_s.sum())
    assert inst.saved_bytes == int(inst.tensor_bytes.sum())
    w = inst.hardware.link_bw_Bps
    assert inst.hideable_fraction == pytest.approx(min(1.0, w * inst.forward_s / inst.saved_bytes))
    assert inst.link_budget_bytes == pytest.approx((1 - LINK_GUARD) * w * inst.forward_s)
    # P by brute force: at each op, the tensors alive (producer <= op <= last backward reader).
    peak = 0
    for op in range(inst.n_ops):
        alive = (inst.tensor_producer <= op) & (inst.tensor_last_bwd_reader >= op)
        peak = max(peak, int(inst.tensor_bytes[alive].sum() + inst.op_transient_bytes[op]))
    assert inst.peak_bytes == peak
    assert inst.peak_bytes >= inst.tensor_bytes.max()
    if inst.forward_flops > 0:
        assert inst.intensity == pytest.approx(inst.forward_flops / inst.saved_bytes)
        assert inst.beta == pytest.approx(inst.forward_flops / inst.forward_s / w)


def test_arrays_are_read_only(small: slackswap.Instance) -> None:
    with pytest.raises(ValueError):
        small.tensor_bytes[0] = 1
    with pytest.raises(AttributeError):
        small.name = "x"  # type: ignore[misc]


GOLDEN = {
    # name: (saved_bytes, peak_bytes, n_ops, n_tensors); regenerate deliberately on model changes
    "bert-large": (13964408264, 14114454416, 544, 247),
    "gpt2-xl": (22319218688, 23142629376, 1066, 484),
    "llama-7b": (35186016256, 35710304256, 712, 291),
    "vgg16": (3900827648, 3924164608, 75, 22),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_catalog_golden_values(name: str) -> None:
    inst = slackswap.load(name)
    assert (inst.saved_bytes, inst.peak_bytes, inst.n_ops, inst.n_tensors) == GOLDEN[name]


def _bad_cases(good: dict) -> dict[str, tuple[object, str]]:
    def edit(fn):  # type: ignore[no-untyped-def]
        d = json.loads(json.dumps(good))
        fn(d)
        return d

    t0, op0 = good["tensors"][0]["name"], good["ops"][0]["name"]
    return {
        "not json": ("{ not json", "not valid JSON"),
        "missing field": (edit(lambda d: d["tensors"][1].pop("bytes")), "tensors[1].bytes"),
        "negative size": (edit(lambda d: d["tensors"][2].update(bytes=-5)), "tensors[2].bytes"),
        "reader before producer": (
            edit(lambda d: d["tensors"][3].update(last_fwd_reader=op0)),
            "tensors[3].last_fwd_reader",
        ),
        "unknown tensor name": (
            edit(lambda d: d["ops"][4]["reads"].append("no-such-tensor")),
            "ops[4].reads",
        ),
        "unknown schema version": (edit(lambda d: d.update(schema_version=99)), "schema_version"),
        "NaN duration": (
            json.dumps(good).replace(
                '"duration_s": ' + json.dumps(good["ops"][5]["duration_s"]), '"duration_s": NaN', 1
            ),
            "ops[5].duration_s",
        ),  # fmt: skip
        "unknown producer": (
            edit(lambda d: d["tensors"][0].update(producer="nope")),
            "tensors[0].producer",
        ),
        "negative transient": (
            edit(lambda d: d["ops"][1].update(transient_bytes=-1)),
            "ops[1].transient_bytes",
        ),
        "wrong type": (edit(lambda d: d["ops"][2].update(duration_s="fast")), "ops[2].duration_s"),
        "duplicate tensor": (
            edit(lambda d: d["tensors"][1].update(name=t0)),
            "tensors[1].name",
        ),
    }


@pytest.fixture(scope="module")
def good_dict(small: slackswap.Instance) -> dict:
    return instance_to_dict(small)


@pytest.mark.parametrize(
    "case",
    ["not json", "missing field", "negative size", "reader before producer",
     "unknown tensor name", "unknown schema version", "NaN duration", "unknown producer",
     "negative transient", "wrong type", "duplicate tensor"],
)  # fmt: skip
def test_bad_file_library_error(tmp_path: Path, good_dict: dict, case: str) -> None:
    content, field = _bad_cases(good_dict)[case]
    path = _write(tmp_path, content)
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    msg = str(info.value)
    assert str(path) in msg and field in msg and "\n" not in msg


@pytest.mark.parametrize(
    "case",
    ["not json", "negative size", "NaN duration", "unknown tensor name", "unknown schema version"],
)
def test_bad_file_cli_exit_2_one_line(tmp_path: Path, good_dict: dict, case: str) -> None:
    content, field = _bad_cases(good_dict)[case]
    path = _write(tmp_path, content)
    proc = subprocess.run(
        [sys.executable, "-m", "slackswap.cli", "instance", "info", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and field in lines[0]
    assert "Traceback" not in proc.stderr


def test_infinite_recompute_written_as_null(small: slackswap.Instance) -> None:
    d = instance_to_dict(small)
    block_inputs = [t for t in d["tensors"] if t["category"] == "block_input"]
    assert block_inputs and all(t["recompute_s"] is None for t in block_inputs)
    idx = small.tensor_index[block_inputs[0]["name"]]
    assert math.isinf(small.tensor_recompute_s[idx])
    assert np.isfinite(small.tensor_recompute_s).any()


# ----- values outside a physical range, and every malformed file, are InstanceErrors ----------
def _edited(good: dict, fn) -> dict:  # type: ignore[no-untyped-def]
    d = json.loads(json.dumps(good))
    fn(d)
    return d


def _all(d: dict, group: str, key: str, value: object, only=None) -> None:  # type: ignore[no-untyped-def]
    for row in d[group]:
        if only is None or only(row):
            row[key] = value


# The six files that hung a solver before (a denormal link, 1e308 latency, durations, costs).
HANGS = {
    "denormal link": lambda d: d["hardware"].update(link_bw_Bps=5e-324),
    "latency 1e308": lambda d: d["hardware"].update(copy_latency_s=1e308),
    "durations 1e308": lambda d: _all(d, "ops", "duration_s", 1e308),
    "two durations 1e308": lambda d: [d["ops"][i].update(duration_s=1e308) for i in (3, 9)],
    "recompute 1e308": lambda d: _all(
        d, "tensors", "recompute_s", 1e308, only=lambda t: t["recompute_s"] is not None
    ),
}
HANG_FIELDS = {
    "denormal link": "hardware.link_bw_Bps = 5e-324",
    "latency 1e308": "hardware.copy_latency_s = 1e+308",
    "durations 1e308": "ops[0].duration_s = 1e+308",
    "two durations 1e308": "ops[3].duration_s = 1e+308",
    "recompute 1e308": ".recompute_s = 1e+308",
}


@pytest.mark.parametrize("case", sorted(HANGS))
def test_values_outside_the_physical_range_are_refused(
    tmp_path: Path, good_dict: dict, case: str
) -> None:
    path = _write(tmp_path, _edited(good_dict, HANGS[case]))
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    msg = str(info.value)
    assert HANG_FIELDS[case] in msg and "outside the physical range [" in msg, msg


def _set_field(good: dict, key: str, value: object) -> dict:
    """``good`` with the field of `RANGES` key ``key`` set to ``value`` (on row 1 of a list)."""
    d = json.loads(json.dumps(good))
    if key.startswith("hardware."):
        d["hardware"][key.split(".", 1)[1]] = value
    else:
        group, field = key.split("_", 1)
        d["ops" if group == "op" else "tensors"][1][field] = value
    return d


def _file_name(key: str) -> str:
    if key.startswith("hardware."):
        return key
    group, field = key.split("_", 1)
    return f"{'ops' if group == 'op' else 'tensors'}[i].{field}"


def test_every_numeric_field_has_a_documented_range(tmp_path: Path, good_dict: dict) -> None:
    from slackswap.instances import format as fmt
    from slackswap.validation import RANGES

    assert set(RANGES) >= {f"hardware.{k}" for k in ("link_bw_Bps", "copy_latency_s",
                           "duplex_factor", "gpu_flops", "gpu_mem_Bps")}  # fmt: skip
    numeric = {"block", "layer", "duration_s", "flops", "transient_bytes", "bytes", "recompute_s",
               "rebuild_workspace_bytes"}  # fmt: skip
    assert {k.split("_", 1)[1] for k in RANGES if not k.startswith("hardware.")} == numeric
    for key, (lo, hi) in RANGES.items():
        assert _file_name(key) in (fmt.__doc__ or ""), f"{key}: range not documented"
        above = hi + 1 if isinstance(hi, int) else hi * 1.5
        below = lo - 1 if isinstance(lo, int) else (lo / 2 if lo > 0 else -1e-6)
        for value in (above, below):
            path = _write(tmp_path, _set_field(good_dict, key, value), "out.json")
            with pytest.raises(InstanceError) as info:
                load_instance(path)
            field = _file_name(key).replace("[i]", "[1]")
            assert f"{field} = " in str(info.value), str(info.value)
            assert "outside the physical range" in str(info.value), str(info.value)
        for value in (lo, hi):  # the bounds themselves are physical
            load_instance(_write(tmp_path, _set_field(good_dict, key, value), "edge.json"))


def _tensor_read_early(good: dict) -> dict:
    # ops[1] reads a tensor whose producer comes later; its latest forward reader is unchanged,
    # so only the earliest reader shows the error.
    d = json.loads(json.dumps(good))
    t = next(t for t in d["tensors"] if t["producer"] != d["ops"][0]["name"]
             and t["producer"] != d["ops"][1]["name"])  # fmt: skip
    d["ops"][1]["reads"].append(t["name"])
    return d


def _no_tensors(d: dict) -> None:
    d["tensors"] = []
    _all(d, "ops", "reads", [])


def _nested_file(good: dict) -> str:
    return "[" * 1000 + json.dumps(good) + "]" * 1000


# case: (an edit of the good document, or the file's text / bytes; what the message names)
MALFORMED = {
    "int past int32": (lambda d: d["ops"][0].update(block=2**31), "ops[0].block"),
    "int past int64": (lambda d: d["tensors"][0].update(bytes=2**63), "tensors[0].bytes"),
    "1e308 bytes": (lambda d: d["tensors"][0].update(bytes=1e308), "tensors[0].bytes"),
    "400-digit int": (lambda d: d["ops"][2].update(duration_s=10**400), "ops[2].duration_s"),
    "2**63-1 bytes": (lambda d: d["tensors"][0].update(bytes=2**63 - 1), "tensors[0].bytes"),
    "sum past 2**53": (lambda d: _all(d, "tensors", "bytes", 2**50), "tensors.bytes"),
    "list as a name": (lambda d: d["ops"][0].update(name=["x"]), "ops[0].name"),
    "dict as producer": (
        lambda d: d["tensors"][0].update(producer={"a": 1}),
        "tensors[0].producer",
    ),
    "list as a read": (lambda d: d["ops"][3].update(reads=[["x"]]), "ops[3].reads"),
    "meta a list": (lambda d: d.update(meta=[1, 2]), "meta"),
    "meta a string": (lambda d: d.update(meta="x"), "meta"),
    "meta nested deep": (lambda d: d.update(meta={"a": json.loads("[" * 100 + "]" * 100)}), "meta"),
    "all durations 0": (lambda d: _all(d, "ops", "duration_s", 0.0), "ops.duration_s"),
    "no tensors": (_no_tensors, "tensors.name"),
    "no saved bytes": (lambda d: _all(d, "tensors", "bytes", 0), "tensors.bytes"),
    "lone surrogate": (lambda d: d["tensors"][0].update(name="\ud800"), "tensors[0].name"),
    "surrogate in meta": (lambda d: d.update(meta={"note": "\udfff"}), "meta"),
    "reader before producer": (_tensor_read_early, "reads a tensor before its producer"),
    "non-UTF-8": (b'{"name": "caf\xe9"}', "not UTF-8"),
    "raw surrogate bytes": (b'{"name": "\xed\xa0\x80"}', "not UTF-8"),
    "nesting 1000 deep": (_nested_file, "nested too deeply"),
    "5000-digit int": ('{"schema_version": 1' + "0" * 5000 + "}", "not readable JSON"),
}


def _malformed_file(tmp_path: Path, good: dict, case: str) -> tuple[Path, str]:
    edit, field = MALFORMED[case]
    path = tmp_path / "bad.json"
    if isinstance(edit, bytes):
        path.write_bytes(edit)
    elif isinstance(edit, str):
        path.write_text(edit)
    elif edit is _nested_file or edit is _tensor_read_early:
        content = edit(good)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    else:
        path.write_text(json.dumps(_edited(good, edit)))
    return path, field


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_every_malformed_file_is_an_instance_error(
    tmp_path: Path, good_dict: dict, case: str
) -> None:
    path, field = _malformed_file(tmp_path, good_dict, case)
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and field in msg and "\n" not in msg, msg


@pytest.mark.parametrize(
    "case", ["int past int64", "dict as producer", "meta a list", "all durations 0", "no tensors",
             "no saved bytes",
             "lone surrogate", "non-UTF-8", "nesting 1000 deep", "reader before producer"],
)  # fmt: skip
def test_malformed_file_cli_one_line_exit_2(
    tmp_path: Path, good_dict: dict, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from slackswap.cli import main

    path, field = _malformed_file(tmp_path, good_dict, case)
    assert main(["instance", "info", "--json", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"slackswap: error: {path}: ") and field in err


def test_json_output_writes_non_finite_numbers_as_null(capsys: pytest.CaptureFixture[str]) -> None:
    from slackswap.console import print_json

    print_json({"a": math.inf, "b": [np.float64("nan"), -math.inf, 1.5], "c": np.int64(3)})
    assert json.loads(capsys.readouterr().out) == {"a": None, "b": [None, None, 1.5], "c": 3}


def test_instance_info_json_is_valid_json(capsys: pytest.CaptureFixture[str]) -> None:
    from slackswap.cli import main

    assert main(["instance", "info", "--json", "vgg16"]) == 0
    out = capsys.readouterr().out
    s = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert s["name"] == "vgg16" and all(
        math.isfinite(v) for v in s.values() if isinstance(v, float)
    )


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_bundled_instances_lie_inside_the_physical_ranges(name: str) -> None:
    # The ranges refuse nonsense, not the catalog: the bundled files load (above) and sit well
    # inside every bound.
    from slackswap.validation import RANGES

    inst = slackswap.load(name)
    for key, (lo, hi) in RANGES.items():
        if key.startswith("hardware."):
            values = np.array([getattr(inst.hardware, key.split(".", 1)[1])])
        else:
            values = getattr(inst, key)
            values = values[np.isfinite(values)]
        assert ((values >= lo) & (values <= hi)).all(), key


# ----- the optional rebuild workspace of a multi-operator rebuild --------------------------------
def test_rebuild_workspace_round_trips_and_is_written_only_when_not_zero(
    tmp_path: Path, small: slackswap.Instance
) -> None:
    from dataclasses import replace

    # Builder instances have none: their files carry no such key (bundled files keep their bytes).
    assert not small.tensor_rebuild_workspace_bytes.any()
    assert all("rebuild_workspace_bytes" not in t for t in instance_to_dict(small)["tensors"])
    k = int(np.flatnonzero(np.isfinite(small.tensor_recompute_s))[0])
    workspace = np.zeros(small.n_tensors, dtype=np.int64)
    workspace[k] = 98_304
    inst = replace(small, tensor_rebuild_workspace_bytes=workspace)
    d = instance_to_dict(inst)
    assert [i for i, t in enumerate(d["tensors"]) if "rebuild_workspace_bytes" in t] == [k]
    assert d["tensors"][k]["rebuild_workspace_bytes"] == 98_304
    inst.save(tmp_path / "w.json")
    back = load_instance(tmp_path / "w.json")
    assert back.tensor_rebuild_workspace_bytes.tolist() == workspace.tolist()
    assert back.content_hash == inst.content_hash != small.content_hash
    assert back.summary()["max_rebuild_workspace_bytes"] == 98_304


@pytest.mark.parametrize("value", [-1, 2**50 + 1, 1.5, "1", True])
def test_bad_rebuild_workspace_names_the_field(tmp_path: Path, good_dict: dict, value) -> None:  # type: ignore[no-untyped-def]
    d = _edited(good_dict, lambda d: d["tensors"][2].update(rebuild_workspace_bytes=value))
    path = _write(tmp_path, d)
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    msg = str(info.value)
    assert f"{path}: tensors[2].rebuild_workspace_bytes = " in msg and "\n" not in msg


def test_rebuild_workspace_of_the_wrong_length_is_refused(small: slackswap.Instance) -> None:
    from dataclasses import replace

    with pytest.raises(InstanceError, match="tensor_rebuild_workspace_bytes"):
        replace(small, tensor_rebuild_workspace_bytes=[0] * (small.n_tensors + 1))
    with pytest.raises(InstanceError, match=r"tensor_rebuild_workspace_bytes\[0\] = -5"):
        replace(small, tensor_rebuild_workspace_bytes=[-5] + [0] * (small.n_tensors - 1))
