"""Sweep description: budgets, grids, sweep files (TOML and YAML), job keys."""

from __future__ import annotations

import pytest

from slackswap.analysis.jobs import (
    SolverSpec,
    Sweep,
    default_job_timeout,
    grid_points,
    parse_budgets,
    ref_from_arg,
    ref_from_grid_point,
)
from slackswap.analysis.sweepfile import load_sweep, parse_solvers
from slackswap.errors import UserError


def test_budgets_lists_ranges_and_percent() -> None:
    assert parse_budgets("1.0,0.5,0.2") == ["1", "0.5", "0.2"]
    assert parse_budgets("100%,15%") == ["1", "0.15"]
    # the range includes its stop and has no float noise (0.30000000000000004 -> 0.3)
    assert parse_budgets("1.0:0.1:-0.1") == [f"{x / 10:g}" for x in range(10, 0, -1)]
    assert parse_budgets([1.0, 0.5, "0.5"]) == ["1", "0.5"]  # duplicates dropped, order kept
    assert parse_budgets("11GB") == ["11GB"]


@pytest.mark.parametrize("bad", ["0", "-0.5", "1.0:0.1:0.1", "abc%", "", "1:2:0"])
def test_bad_budgets_name_the_value(bad: str) -> None:
    with pytest.raises(UserError):
        parse_budgets(bad)


def test_grid_is_a_cartesian_product() -> None:
    pts = grid_points({"model": "gpt2-xl", "layers": [1, 2], "link_bw_GBps": [12, 25, 50]})
    assert len(pts) == 6
    assert {(p["layers"], p["link_bw_GBps"]) for p in pts} == {
        (a, b) for a in (1, 2) for b in (12, 25, 50)
    }
    with pytest.raises(UserError, match="unknown key 'width'"):
        grid_points({"model": "gpt2-xl", "width": 3})


def test_grid_point_builds_labelled_instance_with_link_override() -> None:
    ref = ref_from_grid_point(
        {"model": "gpt2-xl", "layers": 1, "seq": 128, "tokens": 512, "link_bw_GBps": 12}
    )
    inst = ref.load()
    assert inst.name == ref.label == "gpt2-xl@a100-pcie4,layers=1,seq=128,batch=4,link-gbps=12"
    assert inst.hardware.link_bw_Bps == pytest.approx(12e9)
    assert ref.columns["batch"] == 4 and ref.columns["n_tensors"] == inst.n_tensors
    assert inst.content_hash == ref.content_hash  # the worker rebuilds the same instance


def test_job_ids_are_stable_and_distinct() -> None:
    ref = ref_from_arg("vgg16")
    sweep = Sweep([ref], ["1", "0.5"], [SolverSpec.of("a"), SolverSpec.of("b", {"k": 1})], [0, 1])
    jobs = sweep.jobs()
    assert len(jobs) == 8 and len({j.job_id for j in jobs}) == 8
    assert [j.job_id for j in jobs] == [j.job_id for j in sweep.jobs()]
    assert jobs[2].solver.label == "b(k=1)"
    assert jobs[0].key == ("vgg16", "1", "a", 0)
    # a different time limit is a different job (its result may differ)
    sweep.time_limit = 5.0
    assert {j.job_id for j in sweep.jobs()}.isdisjoint({j.job_id for j in jobs})
    assert sweep.jobs()[0].job_timeout == default_job_timeout(5.0) == 40.0


def test_solver_lists_tables_and_mappings() -> None:
    specs = parse_solvers(["a,b", {"name": "ga", "options": {"pop": 4}, "time_limit": 2}])
    assert [s.label for s in specs] == ["a", "b", "ga(pop=4)"]
    assert specs[2].time_limit == 2.0
    assert [s.label for s in parse_solvers({"x": {}, "y": {"n": 1}})] == ["x", "y(n=1)"]
    with pytest.raises(UserError, match="expected name, options, time_limit"):
        parse_solvers([{"name": "ga", "opts": {}}])


TOML = """
instances = ["vgg16"]
budgets = "1.0:0.5:-0.25"
seeds = [0, 1]
time_limit = 3
output = "out.csv"
solvers = ["keep", {name = "ga", options = {pop = 8}}]

[[grid]]
model = "gpt2-xl"
layers = [1, 2]
seq = 128
batch = 1
"""

YAML = """
instances: [vgg16]
budgets: "1.0:0.5:-0.25"
seeds: [0, 1]
time_limit: 3
output: out.csv
solvers:
  - keep
  - {name: ga, options: {pop: 8}}
grid:
  - {model: gpt2-xl, layers: [1, 2], seq: 128, batch: 1}
"""


@pytest.mark.parametrize(("suffix", "text"), [(".toml", TOML), (".yaml", YAML)])
def test_sweep_file(tmp_path, suffix: str, text: str) -> None:
    p = tmp_path / f"sweep{suffix}"
    p.write_text(text)
    sweep = load_sweep(p)
    assert [r.label for r in sweep.instances] == [
        "vgg16",
        "gpt2-xl@a100-pcie4,layers=1,seq=128,batch=1",
        "gpt2-xl@a100-pcie4,layers=2,seq=128,batch=1",
    ]
    assert sweep.budgets == ["1", "0.75", "0.5"]
    assert [s.label for s in sweep.solvers] == ["keep", "ga(pop=8)"]
    assert sweep.seeds == [0, 1] and sweep.time_limit == 3.0
    assert sweep.output == str(tmp_path / "out.csv")
    assert len(sweep.jobs()) == 3 * 3 * 2 * 2


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('budgets = [1.0]\nsolvers = ["a"]\nbudget = 3\n', "unknown key 'budget'"),
        ('solvers = ["a"]\n', "'budgets' is required"),
        ('budgets = [1.0]\nsolvers = ["a"]\ntime_limit = -1\n', "time_limit"),
        ('budgets = [1.0]\nsolvers = ["a"]\ninstances = ["nope-model"]\n', "nope-model"),
        ("budgets = [1.0\n", "invalid TOML"),
    ],
)
def test_bad_sweep_files_name_file_and_key(tmp_path, text: str, match: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(UserError, match=match) as err:
        load_sweep(p)
    assert str(p) in str(err.value)


def test_job_columns_are_the_row_schemas_job_columns() -> None:
    # rowschema is the one definition of a results row; a job fills its JOB columns (execute adds
    # wall_s after the run), so a column added to one and not the other fails here.
    from slackswap import rowschema

    job = Sweep([ref_from_arg("vgg16")], ["0.5"], [SolverSpec.of("a")], [0]).jobs()[0]
    assert (*job.columns(), "wall_s") == rowschema.JOB_KEYS
    assert set(rowschema.RECORD_KEYS).isdisjoint(rowschema.JOB_KEYS)
