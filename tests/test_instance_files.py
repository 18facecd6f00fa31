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
from slackswap.instances.format import instance_to_dict, load_instance
from slackswap.problem import LINK_GUARD, InstanceError
from tests.strategies import small_instances


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
