"""The shared conformance suite: every registered solver and runtime keeps the contract.

Built on the public kit `slackswap.testing` (what an outside solver's own tests call): for each
solver in the registry, on two small instances, a status that claims a plan comes with a plan
the simulator finds feasible within the budget, and bounds and claims agree with it; the same
seed gives the same plan (searches get a fixed work budget through ``max_evaluations``); options
are stored as given and round-trip to the same plan; the instance is left untouched; a time limit is honoured; a budget below every plan's reach is an
``infeasible`` record (with the smallest budget that fits, for deterministic non-search
solvers), never an exception; and the records pickle and the runs repeat identically in a
freshly spawned process. For each runtime: keep-all gives the ideal step, results are
consistent, feasibility is monotone in the budget, and the batch path agrees.
"""

from __future__ import annotations

import pytest

from slackswap import testing as kit
from slackswap.instance import Instance
from slackswap.simulator import RUNTIMES
from slackswap.solvers import REGISTRY

# A solver that reads instance metadata the catalog's instances lack (torch-budget: the
# compiled step's own partitioner decisions) runs the kit in its own tests, on instances
# that carry it (tests/compile).
SOLVERS = [n for n in REGISTRY.names() if not REGISTRY[n].tags.needs_meta]
INSTANCES = ("gpt2", "llama")


def instance(name: str) -> Instance:
    gpt2, llama = kit.small_instances()
    return gpt2 if name == "gpt2" else llama


@pytest.mark.parametrize("inst_name", INSTANCES)
@pytest.mark.parametrize("name", SOLVERS)
def test_status_matches_plan(name: str, inst_name: str) -> None:
    kit.check_plans(name, instance(inst_name), kit.BUDGETS)


@pytest.mark.parametrize("name", SOLVERS)
def test_same_seed_same_plan(name: str) -> None:
    kit.check_deterministic(name, instance("gpt2"), 0.7, seed=3)


@pytest.mark.parametrize("name", SOLVERS)
def test_options_round_trip(name: str) -> None:
    kit.check_options_round_trip(name, instance("gpt2"), 0.7)


@pytest.mark.slow
@pytest.mark.wallclock  # a wall-clock bound: run alone, in a process of its own (.ci/run)
@pytest.mark.parametrize("name", SOLVERS)
def test_time_limit_honoured(name: str) -> None:
    if not REGISTRY[name].tags.honours_time_limit:
        pytest.skip(f"{name} declares it does not honour time limits")
    kit.check_time_limit(name, instance("llama"), 0.4)


@pytest.mark.parametrize("name", SOLVERS)
def test_budget_below_reach_is_infeasible(name: str) -> None:
    kit.check_budget_below_reach(name, instance("gpt2"))


def test_records_pickle_and_rerun_in_spawned_process() -> None:
    kit.check_reruns_in_fresh_process(SOLVERS, instance("gpt2"), 0.7, seed=1)


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_runtime_conforms(runtime: str) -> None:
    kit.check_runtime(runtime)


def test_every_solver_and_runtime_is_covered() -> None:
    # The suite must see the whole registry; an empty registry would make it vacuous.
    assert {"slackswap", "swap-first", "recompute-only", "barriers"} <= set(SOLVERS)
    assert len(SOLVERS) == len(set(SOLVERS))
    assert all(REGISTRY[n].name == n for n in SOLVERS)
    assert {"barrier-free", "barriers", "layer-prefetch", "sync", "on-demand-lru"} <= set(RUNTIMES)
