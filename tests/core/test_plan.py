"""Plan: validation, bytes per action, JSON round trip, refusal for another instance; Budget."""

import json
from pathlib import Path

import numpy as np
import pytest

import slackswap
from slackswap.errors import UserError
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan, PlanError
from tests.support.simhelpers import chain


def test_actions_are_read_only_int8_and_copied() -> None:
    inst = chain(c_bytes=1e6)
    raw = np.array([SWAP, KEEP])
    plan = Plan(inst, raw)
    raw[0] = RECOMP
    assert plan.actions.dtype == np.int8 and list(plan.actions) == [SWAP, KEEP]
    with pytest.raises(ValueError):
        plan.actions[0] = KEEP
    assert plan.swap_bytes == 500_000 and plan.keep_bytes == 1_000_000
    assert plan.recompute_bytes == 0
    assert plan.counts() == {"keep": 1, "swap": 1, "recomp": 0}


@pytest.mark.parametrize(
    "actions,match",
    [([0], "expected 2 entries"), ([0, 3], r"actions\[1\] = 3"), ([0, -1], r"actions\[1\]")],
)
def test_bad_actions_are_user_errors(actions: list[int], match: str) -> None:
    with pytest.raises(UserError, match=match):
        Plan(chain(), actions)


def test_equality_by_hash_runtime_actions() -> None:
    a, b = chain(), chain()  # equal content, different objects
    assert Plan(a, [1, 0]) == Plan(b, [1, 0])
    assert hash(Plan(a, [1, 0])) == hash(Plan(b, [1, 0]))
    assert Plan(a, [1, 0]) != Plan(a, [0, 0])
    assert Plan(a, [1, 0]) != Plan(a, [1, 0], runtime="barriers")
    assert Plan.keep_all(a) == Plan(a, [0, 0])


def test_save_load_round_trip(tmp_path: Path) -> None:
    inst = slackswap.build_model("gpt2-xl", layers=2, seq=128, batch=1)
    rng = np.random.default_rng(3)
    plan = Plan(inst, rng.integers(0, 2, inst.n_tensors), runtime="barriers")
    path = tmp_path / "plan.json"
    plan.save(path)
    d = json.loads(path.read_text())
    assert d["instance_hash"] == inst.content_hash and d["runtime"] == "barriers"
    assert set(d["actions"]) == set(inst.tensor_name)  # tensors by name
    back = Plan.load(path, inst)
    assert back == plan and back.runtime == "barriers"


def test_load_refuses_plan_for_another_instance(tmp_path: Path) -> None:
    a = slackswap.build_model("gpt2-xl", layers=2, seq=128, batch=1)
    b = slackswap.build_model("gpt2-xl", layers=2, seq=256, batch=1)
    path = tmp_path / "plan.json"
    Plan.keep_all(a).save(path)
    with pytest.raises(UserError) as err:
        Plan.load(path, b)
    msg = str(err.value)
    assert str(path) in msg and a.content_hash[:12] in msg and b.content_hash[:12] in msg


def test_load_bad_files(tmp_path: Path) -> None:
    inst = chain()
    missing = tmp_path / "none.json"
    with pytest.raises(UserError, match="no such plan file"):
        Plan.load(missing, inst)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        Plan.load(bad, inst)
    d = Plan.keep_all(inst).to_dict()
    d["actions"]["a"] = "teleport"
    bad.write_text(json.dumps(d))
    with pytest.raises(UserError, match="teleport"):
        Plan.load(bad, inst)
    del d["actions"]["a"]
    bad.write_text(json.dumps(d))
    with pytest.raises(UserError, match="no action for tensor 'a'"):
        Plan.load(bad, inst)


@pytest.mark.parametrize(
    "spec,kind,value",
    [
        (0.5, "fraction", 0.5),
        ("0.5", "fraction", 0.5),
        ("50%", "fraction", 0.5),
        ("11GB", "bytes", 11e9),
        ("11e9B", "bytes", 11e9),
        ("2GiB", "bytes", 2.0**31),
        ("512 MB", "bytes", 512e6),
    ],
)
def test_budget_parse(spec: object, kind: str, value: float) -> None:
    b = Budget.parse(spec)  # type: ignore[arg-type]
    assert b.kind == kind and b.value == pytest.approx(value)


@pytest.mark.parametrize("spec", ["", "abc", "-0.5", "0", "5XB", "nan", "inf%"])
def test_bad_budget_is_user_error(spec: str) -> None:
    with pytest.raises(UserError, match="budget"):
        Budget.parse(spec)


BARE_ABOVE_ONE = (
    "a bare number above 1 is not a budget: write a fraction of P up to 1 (0.5), a percentage "
    "(50%, or 150% above P) or bytes (11GB, 11e9B, 16GiB)"
)


@pytest.mark.parametrize(
    ("spec", "shown"), [(50, "50"), ("50", "50"), (1.5, "1.5"), (" 2 ", "2"), (np.int64(16), "16")]
)
def test_a_bare_number_above_one_is_refused_not_a_multiple_of_p(spec: object, shown: str) -> None:
    with pytest.raises(PlanError) as err:
        Budget.parse(spec)  # type: ignore[arg-type]
    assert str(err.value) == f"{shown}: {BARE_ABOVE_ONE}"


def test_above_p_is_written_as_a_percentage() -> None:
    assert Budget.parse("150%") == Budget.fraction(1.5)
    assert Budget.parse(1) == Budget.parse("1.0") == Budget.fraction(1.0)


def test_budget_bytes_and_fraction() -> None:
    inst = chain(c_bytes=1e6)
    p = inst.peak_bytes
    assert Budget.fraction(1.0).bytes_for(inst) == p
    assert Budget.fraction(0.5).bytes_for(inst) == p // 2
    assert Budget.bytes(p / 4).fraction_of(inst) == pytest.approx(0.25)
    assert Budget.fraction(0.3).fraction_of(inst) == 0.3
    assert str(Budget.fraction(0.5)) == "50%" and str(Budget.bytes(11e9)) == "11GB"
    assert Budget.parse(Budget.fraction(0.5)) == Budget.fraction(0.5)


def test_plan_error_is_value_error_too() -> None:
    assert issubclass(PlanError, ValueError) and issubclass(PlanError, UserError)
