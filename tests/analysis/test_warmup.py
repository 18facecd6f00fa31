"""The warm-up: compiled code is compiled or loaded before any job is timed, and a real compile
is announced once."""

from __future__ import annotations

import pytest

from tests.support.numba_loads import run_counting

# A fresh process (nothing loaded yet) runs the Quick start's sweep and counts numba's compiles
# and cache loads (`tests.support.numba_loads`) after the runner's warm-up, i.e. inside jobs.
SCRIPT = """
import json, sys
from slackswap.analysis import runner
from slackswap.analysis.jobs import Sweep, SolverSpec, ref_from_arg

after_warm_up = []
real = getattr(runner, "warm_up", None)
if real is not None:
    def warm_up(solvers, **kw):
        real(solvers, **kw)
        after_warm_up.append(count[0])
    runner.warm_up = warm_up
sweep = Sweep([ref_from_arg("gpt2-xl")], ["1", "0.5", "0.2"],
              [SolverSpec.of(s) for s in sys.argv[1].split(",")])
per_row = []
df = runner.run_sweep(sweep, progress=False, on_row=lambda row: per_row.append(count[0]))
print(json.dumps({"warm_up": after_warm_up, "per_row": per_row,
                  "plan_s": df["plan_s"].tolist(), "status": df["status"].tolist()}))
"""


def run_script(solvers: str, env: dict[str, str] | None = None) -> tuple[dict, str]:  # type: ignore[type-arg]
    return run_counting(SCRIPT, solvers, env=env)


def test_no_compile_or_cache_load_happens_inside_a_timed_job() -> None:
    """Before, the warm-up ran the first job (budget 1.0), which never reaches SlackSwap's
    passes: loading them (or compiling them, 13 s on a fresh clone) fell in the 50% job."""
    got, _ = run_script("slackswap,vdnn,superneurons,swapadvisor,checkpoint")
    # numba's work counted after the warm-up, then after each job (in finishing order)
    assert got["warm_up"] and set(got["per_row"]) == {got["warm_up"][0]}, (
        "numba compiled or loaded code inside a job"
    )
    assert set(got["status"]) == {"feasible"}
    assert max(got["plan_s"]) < 1.0  # planning alone: milliseconds (loading the passes: ~1 s)


# The README's advice for timing solves in your own process: `slackswap.warm_up` first.
WARM_THEN_SOLVE = """
import json
import slackswap
from slackswap.testing import small_instances

slackswap.warm_up(["ga-random", "slackswap"], say=None)
warmed = count[0]
inst = small_instances()[1]
recs = [slackswap.solve(inst, 0.4, solver=s, time_limit=0.3) for s in ("ga-random", "slackswap")]
print(json.dumps({"warm_up": warmed, "in_solves": count[0] - warmed,
                  "status": [r.status.value for r in recs]}))
"""


def test_after_the_public_warm_up_a_solve_loads_no_compiled_code() -> None:
    got, _ = run_counting(WARM_THEN_SOLVE)
    assert got["warm_up"] > 0  # it loaded what the solves need
    assert got["in_solves"] == 0, f"{got['in_solves']} compiled functions loaded inside solves"
    assert set(got["status"]) == {"feasible"}, got


def test_the_compile_notice_names_each_part_once(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """A real compile of a listed part is announced once per process; other compiles and
    repeated ones are silent (a fresh njit function stands in for the simulator)."""
    from numba import njit

    from slackswap.analysis import warmup

    @njit
    def part(x):  # type: ignore[no-untyped-def]
        return x + 1

    elsewhere: dict[str, object] = {"__name__": "elsewhere"}
    exec("def other(x):\n    return x * 2", elsewhere)
    other = njit(elsewhere["other"])

    said: list[str] = []
    monkeypatch.setattr(warmup, "COMPILED_PARTS", (("widget", 7.0, __name__, "part"),))
    monkeypatch.setattr(warmup, "stale_parts", lambda **kw: [("widget", 7.0)])
    monkeypatch.setattr(warmup, "_announced", set())
    with warmup._watch_numba(said.append) as calls:
        other(1)
        assert said == [] and calls[0] >= 1
        part(1)
        part(2.5)  # a second signature: compiled again, not announced again
    from slackswap import numbacache

    assert said == [
        "first run: compiling the widget, about 7 s of CPU (measured on an idle 2-core machine;"
        f" longer when busy) (once: numba's compiled code is {numbacache.describe()})"
    ]


def test_a_filled_cache_reads_as_not_stale() -> None:
    """After a warm-up numba's cache holds both parts, and `stale_parts` can read that (it
    reads numba's cache index, not a public API: a new numba layout fails here)."""
    from slackswap.analysis import warmup

    warmup.warm_up(["slackswap"], say=None)
    assert warmup.stale_parts(unknown=True) == []


def test_the_planner_helper_compiles_only_when_both_parts_are_stale(monkeypatch) -> None:
    from slackswap.analysis import warmup

    monkeypatch.setattr(warmup, "stale_parts", lambda **kw: [("planner", 13.0)])
    assert warmup._planner_helper(None) is None  # the simulator is cached: nothing to overlap
    warmup.compile_planner()  # what the helper process runs (from the cache here)


@pytest.mark.slow
def test_cold_cache_announces_the_compile_and_keeps_it_out_of_planning_time(tmp_path) -> None:
    """An empty numba cache (as in a fresh clone): the notice comes once per part, and the
    compile (tens of seconds) is not in any job's planning time."""
    got, err = run_script("slackswap,vdnn", env={"NUMBA_CACHE_DIR": str(tmp_path)})
    notices = [line for line in err.splitlines() if line.startswith("first run: compiling")]
    # one line each, or one for both when a second core compiles the planner meanwhile
    assert [n.split(",")[0] for n in notices] in (
        ["first run: compiling the simulator", "first run: compiling the planner"],
        ["first run: compiling the simulator and"],
    )
    assert sum(n.count("planner") for n in notices) == 1
    assert set(got["per_row"]) == {got["warm_up"][0]}
    assert max(got["plan_s"]) < 1.0
