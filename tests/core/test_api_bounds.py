"""Sizes have an upper bound checked before building, options that multiply the work are bounded
(and the genetic search watches the clock while it sets up), and the Python API refuses bad
arguments up front with the CLI's wording, as ValueError / TypeError subclasses of UserError."""

from __future__ import annotations

import math

import numpy as np
import pytest

import slackswap
from slackswap.cli import main
from slackswap.errors import UserError
from slackswap.instances import catalog
from slackswap.instances.catalog import MAX_LAYERS, build_model


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("slackswap: error: "), err
    return err[0]


# ---- sizes ----------------------------------------------------------------------------------
def test_instance_build_refuses_too_many_layers_before_building(tmp_path, capsys) -> None:
    out = tmp_path / "big.json"
    line = _refused(["instance", "build", "gpt2-xl", "--layers", "100000", "-o", str(out)], capsys)
    assert "100000" in line and str(MAX_LAYERS) in line
    assert not out.exists()


def test_the_layer_bound_itself_builds() -> None:
    with pytest.raises(ValueError, match=str(MAX_LAYERS)):
        build_model("gpt2-xl", layers=MAX_LAYERS + 1)
    assert isinstance(catalog.LayersError("x"), UserError)


def test_a_sweep_grid_with_too_many_layers_is_refused_before_any_job(tmp_path, capsys) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        'budgets = [0.5]\nsolvers = ["vdnn"]\n[[grid]]\nmodel = "gpt2-xl"\nlayers = [2, 1000000]\n'
    )
    out = tmp_path / "r.csv"
    line = _refused(["compare", "--sweep", str(sweep), "-o", str(out), "--no-progress"], capsys)
    assert "1000000" in line and str(MAX_LAYERS) in line
    assert not out.exists()


@pytest.mark.parametrize(
    "option", ["islands=1000", "pop_size=1000000", "local_mutants=100000", "n_jobs=100000"]
)
def test_ga_options_that_multiply_the_work_are_bounded(capsys, option) -> None:
    line = _refused(
        ["solve", "gpt2-xl", "--budget", "0.5", "--solver", "ga", "--time-limit", "1",
         "--option", option],
        capsys,
    )  # fmt: skip
    assert option.split("=")[0] in line and "at most" in line


def test_the_genetic_search_watches_the_clock_while_it_sets_up() -> None:
    # 256 islands of 400 genomes each: scoring them all before the first generation is
    # 102,400 simulations of gpt2-xl, minutes; the time limit stops the set-up too.
    rec = slackswap.solve(
        "gpt2-xl", 0.5, "ga", time_limit=0.3, islands=256, pop_size=400, processes=False
    )
    assert rec.plan is not None
    assert rec.evaluations is not None and rec.evaluations < 256 * 400 // 4


# ---- the Python API -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inst():
    return slackswap.load("gpt2-xl")


@pytest.mark.parametrize("bad", [np.nan, 1.7, True])
def test_simulate_many_refuses_actions_that_are_not_integers(inst, bad) -> None:
    acts = np.zeros((2, inst.n_tensors), dtype=type(bad) if bad is True else float)
    acts[1, 3] = bad
    with pytest.raises(ValueError, match="expected integers"):
        slackswap.simulate_many(inst, acts, 0.5)


def test_simulate_many_still_takes_whole_floats(inst) -> None:
    acts = np.ones((2, inst.n_tensors), dtype=float)
    ints = np.ones((2, inst.n_tensors), dtype=np.int8)
    a = slackswap.simulate_many(inst, acts, 0.5)
    b = slackswap.simulate_many(inst, ints, 0.5)
    assert np.array_equal(a.step_s, b.step_s)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"time_limit": math.nan}, ValueError, "time_limit"),
        ({"time_limit": math.inf}, ValueError, "time_limit"),
        ({"time_limit": 0}, ValueError, "time_limit"),
        ({"time_limit": -1.0}, ValueError, "time_limit"),
        ({"time_limit": "5"}, TypeError, "time_limit"),
        ({"seed": "x"}, TypeError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"seed": True}, TypeError, "seed"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 2**64}, ValueError, "seed"),
        ({"solver": None}, TypeError, "solver"),
        ({"instance": None}, TypeError, "instance"),
        ({"budget": 10**29}, ValueError, "budget"),
    ],
)
def test_solve_refuses_bad_arguments_up_front(inst, kwargs, error, words) -> None:
    args = {"instance": inst, "budget": 0.5, "solver": "vdnn", **kwargs}
    with pytest.raises(error) as exc:
        slackswap.solve(**args)
    assert isinstance(exc.value, UserError)
    message = str(exc.value)
    assert "\n" not in message and (words in message or "a budget is" in message), message


def test_run_refuses_a_seed_beyond_the_bound(capsys) -> None:
    line = _refused(["run", "x.py:make", "--budget", "0.5", "--seed", "99999999999999999999"],
                    capsys)  # fmt: skip
    assert "--seed" in line


def test_a_bad_option_value_is_refused_before_the_job(tmp_path, capsys) -> None:
    line = _refused(["solve", "gpt2-xl", "--budget", "0.5", "--option", "order=nope"], capsys)
    assert "order" in line and "nope" in line
    out = tmp_path / "r.csv"
    line = _refused(
        ["compare", "gpt2-xl", "--budgets", "0.5", "--solvers", "slackswap",
         "--option", "slackswap.order=nope", "-o", str(out), "--no-progress"],
        capsys,
    )  # fmt: skip
    assert "order" in line
    assert not out.exists()


def test_a_catalog_name_with_too_many_layers_is_refused(capsys) -> None:
    line = _refused(["instance", "info", "gpt2-xl,layers=100000"], capsys)
    assert str(MAX_LAYERS) in line
