"""The last inputs the issue-34 fuzz campaign got through: each is one line and exit 2 at the
command line, or a `UserError` subclass (a ValueError or TypeError) from the Python API, and
nothing is written. Beside each refusal, the nearest accepted value still works."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

import slackswap
from slackswap.errors import ArgumentError, ArgumentTypeError, UserError
from slackswap.instances.catalog import build_model
from slackswap.models.offload_calculator import MAX_GPUS, estimate
from slackswap.models.transformer import transformer_config
from slackswap.plan import MIN_BUDGET_FRACTION, Budget, Plan, PlanError
from slackswap.solvers.base import Solver
from slackswap.solvers.registry import REGISTRY
from tests.support.userinput import refused

HUGE = 10**400  # an int no float holds: float(HUGE) raises OverflowError


@pytest.fixture(scope="module")
def tiny() -> slackswap.Instance:
    return build_model("gpt2-xl", layers=1, seq=16, batch=1)


def _user_error(exc: pytest.ExceptionInfo[BaseException], kind: type[Exception]) -> str:
    assert isinstance(exc.value, UserError) and isinstance(exc.value, kind), exc.value
    text = str(exc.value)
    assert "\n" not in text and len(text) < 300, text
    return text


# ---- the Python API -------------------------------------------------------------------------
def test_solve_with_a_budget_past_any_float_is_a_user_error(tiny) -> None:
    with pytest.raises(PlanError) as exc:
        slackswap.solve(tiny, HUGE)
    assert "finite" in _user_error(exc, ValueError)


def test_simulate_with_a_budget_past_any_float_is_a_user_error(tiny) -> None:
    with pytest.raises(PlanError) as exc:
        slackswap.simulate(tiny, Plan.keep_all(tiny), HUGE)
    assert "finite" in _user_error(exc, ValueError)


def test_solve_with_a_time_limit_past_any_float_is_a_user_error(tiny) -> None:
    with pytest.raises(ArgumentError) as exc:
        slackswap.solve(tiny, 0.5, time_limit=HUGE)
    assert "time_limit" in _user_error(exc, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "kind", "words"),
    [
        ({"gpu": None}, TypeError, "gpu"),
        ({"gpu": 5}, TypeError, "gpu"),
        ({"link": 4}, TypeError, "link"),
        ({"name": b"x"}, TypeError, "name"),
        ({"seq": 1.5}, TypeError, "seq"),
        ({"batch": True}, TypeError, "batch"),
        ({"layers": "2"}, TypeError, "layers"),
        ({"seq": 0}, ValueError, "seq"),
        ({"batch": -1}, ValueError, "batch"),
        ({"link_bw_Bps": math.nan}, ValueError, "link_bw_Bps"),
        ({"link_bw_Bps": HUGE}, ValueError, "link_bw_Bps"),
        ({"link_bw_Bps": "12e9"}, TypeError, "link_bw_Bps"),
    ],
)
def test_build_model_refuses_wrong_types_and_values(kwargs, kind, words) -> None:
    with pytest.raises(UserError) as exc:
        build_model("gpt2-xl", **{"layers": 1, **kwargs})
    assert words in _user_error(exc, kind)


def test_build_model_refuses_a_model_that_is_not_text() -> None:
    with pytest.raises(ArgumentTypeError) as exc:
        build_model(None)  # type: ignore[arg-type]
    assert "model" in _user_error(exc, TypeError)


def test_build_model_still_takes_numpy_integers_and_whole_numbers() -> None:
    import numpy as np

    a = build_model("gpt2-xl", layers=np.int64(1), seq=16, batch=1)
    b = build_model("gpt2-xl", layers=1, seq=16, batch=1)
    assert a.content_hash == b.content_hash


@pytest.mark.parametrize("runtime", [5, None, "", b"barrier-free"])
def test_plan_refuses_a_runtime_that_is_not_a_name(tiny, runtime) -> None:
    with pytest.raises(ArgumentTypeError) as exc:
        Plan(tiny, [0] * tiny.n_tensors, runtime=runtime)
    assert "runtime" in _user_error(exc, TypeError)


def test_a_budget_below_one_byte_is_refused() -> None:
    for value in (0.5, 0.999, 1e-300):
        with pytest.raises(PlanError) as exc:
            Budget("bytes", value)
        assert "less than one byte" in _user_error(exc, ValueError)
    with pytest.raises(PlanError, match="less than one byte"):
        Budget.parse("0.5B")
    assert Budget.bytes(1).value == 1.0  # one byte is a budget (the simulator judges it)


def test_a_fraction_below_one_byte_of_any_instance_is_refused(tiny) -> None:
    # P is at most 2**53 bytes (the instance checks), so a fraction below 2**-53 is < 1 byte.
    assert MIN_BUDGET_FRACTION * 2**53 == 1.0
    for spec in ("1e-320", 1e-320, "1e-18%", MIN_BUDGET_FRACTION / 2):
        with pytest.raises(PlanError) as exc:
            Budget.parse(spec)
        assert "less than one byte" in _user_error(exc, ValueError)
    assert Budget.parse(MIN_BUDGET_FRACTION).value == MIN_BUDGET_FRACTION


@pytest.mark.parametrize("flag", ["no", 0, 1, None])
def test_run_refuses_a_find_min_budget_that_is_not_a_bool(tiny, flag) -> None:
    with pytest.raises(ArgumentTypeError) as exc:
        slackswap.run(tiny, 0.5, "vdnn", find_min_budget=flag)
    assert "find_min_budget" in _user_error(exc, TypeError)


def test_run_refuses_options_that_are_not_a_mapping(tiny) -> None:
    with pytest.raises(ArgumentTypeError) as exc:
        slackswap.run(tiny, 0.5, "vdnn", options=[("x", 1)])  # type: ignore[arg-type]
    assert "options" in _user_error(exc, TypeError)


@pytest.mark.parametrize("name", ["a\x00b", "tab\there", "esc\x1b[31m", "del\x7f"])
def test_a_solver_name_with_a_control_character_is_not_registered(name) -> None:
    class Named(Solver):
        pass

    with pytest.raises(ArgumentError) as exc:
        REGISTRY.register(name, Named)
    assert "control character" in _user_error(exc, ValueError)
    assert name not in REGISTRY.registered_names()


@pytest.mark.parametrize("name", ["a\x00b", "line\nbreak", "c1\x85"])
def test_an_instance_name_with_a_control_character_is_refused(name) -> None:
    with pytest.raises(slackswap.InstanceError) as exc:
        build_model("gpt2-xl", layers=1, name=name)
    assert "control character" in _user_error(exc, ValueError)


# ---- the offload calculator -----------------------------------------------------------------
def test_the_calculator_refuses_a_checkpoint_beyond_the_physical_range() -> None:
    cfg = transformer_config("qwen3-8b", seq=999_999_999_999_999)
    with pytest.raises(ArgumentError) as exc:
        estimate(cfg, link_Bps=55.43e9)
    assert "checkpoint" in _user_error(exc, ValueError)
    # By hand: 1e15 tokens x 4096 hidden x 2 bytes = 8.2e18 bytes, over 2**50 (1.1e15).
    assert 999_999_999_999_999 * 4096 * 2 > 2**50


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"link_Bps": 1e18}, "link bandwidth"),
        ({"link_Bps": 0.5}, "link bandwidth"),
        ({"link_Bps": math.nan}, "link bandwidth"),
        ({"sustained_flops": 1e30}, "FLOP/s"),
        ({"sustained_flops": 0.0}, "FLOP/s"),
        ({"gpus_per_node": MAX_GPUS + 1}, "GPUs per node"),
        ({"gpus_per_link": 0}, "GPUs per link"),
    ],
)
def test_the_calculator_refuses_inputs_outside_their_range(kwargs, words) -> None:
    cfg = transformer_config("qwen3-8b", seq=4096)
    with pytest.raises(ArgumentError) as exc:
        estimate(cfg, **{"link_Bps": 55.43e9, **kwargs})
    assert words in _user_error(exc, ValueError)


def test_the_calculator_still_answers_in_range() -> None:
    cfg = transformer_config("qwen3-8b", seq=4096)
    e = estimate(cfg, link_Bps=55.43e9)
    # By hand: 4096 tokens x 4096 hidden x 2 bytes per layer, over 55.43 GB/s.
    assert e.checkpoint_bytes_per_layer == 4096 * 4096 * 2
    assert e.copy_s == pytest.approx(4096 * 4096 * 2 / 55.43e9)


# ---- the command line -----------------------------------------------------------------------
def test_offload_with_a_sequence_past_the_physical_range_exits_2(capsys) -> None:
    line = refused(["offload", "qwen3-8b", "--seq", "999999999999999"], capsys)
    assert "checkpoint" in line and "physical range" in line


@pytest.mark.parametrize("budget", ["1e-320", "1e-300%", "0.5B"])
def test_solve_refuses_a_budget_below_one_byte(tmp_path, capsys, budget) -> None:
    out = tmp_path / "plan.json"
    line = refused(["solve", "gpt2-xl", "--budget", budget, "-o", str(out)], capsys)
    assert "less than one byte" in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--budgets", "1.0,,0.5"),
        ("--budgets", "1.0,0.5,"),
        ("--budgets", ",0.5"),
        ("--seeds", "0,,1"),
        ("--seeds", "0,1,"),
        ("--solvers", "vdnn,,checkpoint"),
    ],
)
def test_compare_refuses_an_empty_list_entry(tmp_path, capsys, option, value) -> None:
    args = {"--budgets": "0.5", "--solvers": "vdnn", "--seeds": "0", option: value}
    out = tmp_path / "r.csv"
    argv = ["compare", "gpt2-xl", "-o", str(out), "--no-progress"]
    for k, v in args.items():
        argv += [k, v]
    line = refused(argv, capsys)
    assert "is empty" in line and value in line
    assert not out.exists()


def test_compare_refuses_more_seeds_than_budgets_may_be(tmp_path, capsys) -> None:
    from slackswap.analysis.checks import MAX_BUDGETS, MAX_SEEDS

    assert MAX_SEEDS == MAX_BUDGETS
    out = tmp_path / "r.csv"
    seeds = ",".join(str(i) for i in range(MAX_SEEDS + 1))
    line = refused(["compare", "gpt2-xl", "--budgets", "0.5", "--solvers", "vdnn", "--seeds",
                    seeds, "-o", str(out), "--no-progress"], capsys)  # fmt: skip
    assert f"{MAX_SEEDS + 1:,} seeds" in line
    assert not out.exists()


def test_a_sweep_file_with_more_seeds_is_refused(tmp_path, capsys) -> None:
    from slackswap.analysis.checks import MAX_SEEDS

    sweep = tmp_path / "s.toml"
    sweep.write_text(
        f'instances = ["gpt2-xl"]\nbudgets = [0.5]\nsolvers = ["vdnn"]\n'
        f"seeds = [{', '.join(str(i) for i in range(MAX_SEEDS + 1))}]\n"
    )
    line = refused(["compare", "--sweep", str(sweep), "--no-progress"], capsys)
    assert "seeds" in line and "at most" in line


def _instance_file(tmp_path: Path) -> Path:
    path = tmp_path / "x.json"
    build_model("gpt2-xl", layers=1, seq=16, batch=1).save(path)
    return path


def test_solve_refuses_to_write_its_plan_over_its_instance(tmp_path, capsys) -> None:
    path = _instance_file(tmp_path)
    before = path.read_bytes()
    line = refused(["solve", str(path), "--budget", "0.5", "-o", str(path), "--overwrite"], capsys)
    assert "is the instance this command reads" in line
    # the same file under another name: a symbolic link, a path through ".."
    os.symlink(path, tmp_path / "link.json")
    refused(["solve", str(path), "--budget", "0.5", "-o", str(tmp_path / "link.json"),
             "--overwrite"], capsys)  # fmt: skip
    other = tmp_path / "sub" / ".." / "x.json"
    (tmp_path / "sub").mkdir()
    refused(["solve", str(path), "--budget", "0.5", "-o", str(other), "--overwrite"], capsys)
    assert path.read_bytes() == before


def test_simulate_refuses_a_trace_over_its_plan(tmp_path, capsys) -> None:
    path = _instance_file(tmp_path)
    plan = tmp_path / "plan.json"
    from slackswap.cli import main

    assert main(["solve", str(path), "--budget", "1.0", "--solver", "vdnn", "-o", str(plan)]) == 0
    before = plan.read_bytes()
    line = refused(["simulate", str(path), str(plan), "--budget", "1.0", "--trace", str(plan),
                    "--overwrite"], capsys)  # fmt: skip
    assert "is the plan this command reads" in line
    assert plan.read_bytes() == before


def test_compare_refuses_results_over_an_instance_file(tmp_path, capsys) -> None:
    path = tmp_path / "x.csv"  # an instance file may carry any name
    build_model("gpt2-xl", layers=1, seq=16, batch=1).save(path)
    before = path.read_bytes()
    line = refused(["compare", str(path), "--budgets", "0.5", "--solvers", "vdnn", "-o",
                    str(path), "--overwrite", "--no-progress"], capsys)  # fmt: skip
    assert "is the instance file" in line
    assert path.read_bytes() == before


def test_instance_build_refuses_a_name_with_a_control_character(tmp_path, capsys) -> None:
    out = tmp_path / "x.json"
    line = refused(["instance", "build", "gpt2-xl", "--layers", "1", "--name", "a\x1bb", "-o",
                    str(out)], capsys)  # fmt: skip
    assert "control character" in line
    assert not out.exists()
