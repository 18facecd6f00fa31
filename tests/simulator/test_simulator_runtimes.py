"""The one runtime registry: compiled and Python runtimes register, are found and simulate alike."""

from __future__ import annotations

import math

import numpy as np
import pytest

import slackswap.runtime as real_runtime
from slackswap.instance import Instance
from slackswap.models.graph import GraphBuilder
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan, PlanError
from slackswap.simulator import (
    RUNTIMES,
    ExecutionMode,
    Runtime,
    RuntimeSpec,
    SimResult,
    get_runtime,
    register_runtime,
    runtime_names,
    score_many,
    simulate,
    simulate_many,
)
from slackswap.simulator import policies as registry
from tests.support.simhelpers import HW, MS, chain

KERNEL = ("barrier-free", "barriers", "layer-prefetch", "sync")


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runtimes a test registers are gone after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


class AllResident(Runtime):
    """A toy Python runtime: nothing ever leaves the device and copies are free, so the step is
    the ideal step plus the rebuilds, and the peak is every saved tensor at once."""

    name = "test-all-resident"
    description = "toy: every tensor stays resident; only rebuilds cost time"

    def simulate(
        self, instance: Instance, actions: np.ndarray, budget_bytes: int, timeline: bool = False
    ) -> SimResult:
        rebuild_s = float(instance.tensor_recompute_s[actions == RECOMP].sum())
        peak = int(instance.tensor_bytes.sum())
        ok = peak <= budget_bytes and math.isfinite(rebuild_s)
        step = instance.ideal_step_s + rebuild_s if ok else math.inf
        return SimResult(
            step_s=step, ideal_s=instance.ideal_step_s,
            throughput=instance.ideal_step_s / step if ok else 0.0, recompute_s=rebuild_s,
            fwd_stall_s=0.0, fwd_stall_copy_s=0.0, fwd_stall_mem_s=0.0, bwd_stall_s=0.0,
            bwd_stall_copy_s=0.0, bwd_stall_mem_s=0.0, d2h_bytes=0, h2d_bytes=0, peak_bytes=peak,
            budget_bytes=budget_bytes, feasible=ok, reason="" if ok else "does not fit",
            fail_op=-1 if ok else 0, overflow_bytes=0 if ok else max(1, peak - budget_bytes),
            evictions=0, runtime=self.name, timeline=None,
        )  # fmt: skip


def rebuildable() -> Instance:
    """f0 makes a (0.5 MB, no rebuild), f1 makes c (0.3 MB, rebuilt from a in 0.5 ms)."""
    g = GraphBuilder("rebuildable", HW)
    g.op("f0", block=0, kind="memory", duration_s=1 * MS)
    g.saved("a", nbytes=0.5e6, producer="f0", category="block_input", block=0)
    g.op("f1", block=1, kind="memory", duration_s=1 * MS, reads=["a"])
    g.saved("c", nbytes=0.3e6, producer="f1", category="elementwise", block=1,
            recompute_s=0.5 * MS, rebuild_inputs=["a"])  # fmt: skip
    g.op("b1", backward=True, block=1, kind="memory", duration_s=1 * MS, reads=["c"])
    g.op("b0", backward=True, block=0, kind="memory", duration_s=1 * MS, reads=["a"])
    return g.build()


def test_every_registered_runtime_is_found_by_name() -> None:
    assert runtime_names()[: len(KERNEL)] == list(KERNEL)
    assert "on-demand-lru" in runtime_names()  # the Python event loop, registered the same way
    for name in runtime_names():
        rt = get_runtime(name)
        assert isinstance(rt, Runtime) and rt.name == name
        assert RUNTIMES[name] == rt.description and rt.description
    assert list(RUNTIMES) == runtime_names() and len(RUNTIMES) == len(runtime_names())
    with pytest.raises(PlanError, match="'nope': unknown .*on-demand-lru"):
        get_runtime("nope")


@pytest.mark.usefixtures("scratch_registry")
def test_a_python_runtime_is_registered_and_simulated_like_any_other() -> None:
    inst = rebuildable()
    rt = register_runtime(AllResident())
    assert get_runtime(rt.name) is rt and RUNTIMES[rt.name] == rt.description
    plan = Plan(inst, [KEEP, RECOMP], runtime=rt.name)
    r = simulate(inst, plan, Budget.bytes(1e6))
    assert r.runtime == rt.name and r.feasible
    # Hand-worked: f0 f1 b1 b0 take 4 ms; c's rebuild (0.5 ms) is the only extra time.
    assert r.step_s == pytest.approx(4.5 * MS, rel=1e-12)
    assert not simulate(inst, plan, Budget.bytes(0.7e6)).feasible  # 0.8 MB never leave
    # Populations: the base class runs one plan after another; scores are the same values.
    pop = np.array([[KEEP, KEEP], [KEEP, RECOMP], [SWAP, KEEP], [RECOMP, KEEP]], dtype=np.int8)
    many = simulate_many(inst, pop, Budget.bytes(1e6), runtime=rt.name)
    one_by_one = [simulate(inst, a, Budget.bytes(1e6), runtime=rt.name) for a in pop]
    assert many.step_s.tolist() == [x.step_s for x in one_by_one]
    assert many.step_s[:3] == pytest.approx([4 * MS, 4.5 * MS, 4 * MS], rel=1e-12)
    assert many.feasible.tolist() == [True, True, True, False]  # a cannot be rebuilt
    assert many.peak_bytes.tolist() == [800_000] * 4 and many.budget_bytes == 1_000_000
    step, over, invalid = score_many(inst, pop, Budget.bytes(1e6), runtime=rt.name)
    assert step.tolist() == many.step_s.tolist()
    assert over.tolist() == many.overflow_bytes.tolist()
    assert invalid.tolist() == [False, False, False, True]
    step, over, _ = score_many(inst, pop, Budget.bytes(0.7e6), runtime=rt.name)
    assert np.isinf(step).all() and over.tolist() == [100_000] * 4


@pytest.mark.usefixtures("scratch_registry")
def test_a_new_switch_combination_is_a_compiled_runtime() -> None:
    inst = chain(c_bytes=0.3e6)
    spec = register_runtime(RuntimeSpec("test-bf-copy", "barrier-free's switches, renamed"))
    pop = np.array([[SWAP, KEEP], [SWAP, RECOMP], [KEEP, SWAP]], dtype=np.int8)
    for budget in (Budget.bytes(0.6e6), Budget.bytes(0.4e6)):
        mine = simulate_many(inst, pop, budget, runtime=spec.name)
        ref = simulate_many(inst, pop, budget, runtime="barrier-free")
        assert mine.step_s.tolist() == ref.step_s.tolist()
        assert mine.peak_bytes.tolist() == ref.peak_bytes.tolist()
        r = simulate(inst, pop[0], budget, runtime=spec.name, timeline=True)
        assert r.runtime == spec.name and r.timeline is not None
        assert r.step_s == simulate(inst, pop[0], budget).step_s


@pytest.mark.usefixtures("scratch_registry")
def test_registration_refuses_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="'barriers' is already registered"):
        register_runtime(RuntimeSpec("barriers", "again"))
    with pytest.raises(ValueError, match="'on-demand-lru' is already registered"):
        register_runtime(RuntimeSpec("on-demand-lru", "a compiled one under a Python name"))
    with pytest.raises(TypeError, match="got dict"):
        register_runtime({"name": "x"})  # type: ignore[type-var]
    with pytest.raises(ValueError, match="unknown policy code"):
        RuntimeSpec("test-bad", "bad", fwd_wait=7)
    with pytest.raises(ValueError, match="lookahead_ops must be >= 0"):
        RuntimeSpec("test-bad", "bad", lookahead_ops=-1)
    with pytest.raises(ValueError, match="non-empty name"):
        register_runtime(RuntimeSpec("", "no name"))
    with pytest.raises(TypeError, match="abstract"):
        type("NoSimulate", (Runtime,), {"name": "x", "description": "y"})()
    assert "test-bad" not in RUNTIMES


@pytest.mark.usefixtures("scratch_registry")
def test_the_real_runtime_runs_what_the_registry_says_it_can() -> None:
    modes = registry.execution_modes()
    assert real_runtime.RUNTIME_MODES == modes
    assert set(modes) == {"barrier-free", "layer-prefetch", "sync"}
    assert modes["sync"] == ExecutionMode(overlap=False, prefetch=False)
    inst = chain()
    plan = Plan(inst, [SWAP, KEEP])
    with pytest.raises(PlanError, match="'barriers': slackswap.runtime runs barrier-free, "):
        real_runtime.check_plan(plan, 1.0, runtime="barriers")
    spec = RuntimeSpec("test-sync-too", "sync's switches", fwd_wait=2, h2d_release=3,
                       lookahead_ops=0, execution=ExecutionMode(overlap=False, prefetch=False))  # fmt: skip
    register_runtime(spec)
    assert real_runtime.check_plan(plan, 1.0, runtime=spec.name).runtime == spec.name


def test_listings_say_which_runtime_each_solver_plans_for(capsys: pytest.CaptureFixture) -> None:
    import json

    from slackswap.cli import main

    assert main(["solvers", "--json"]) == 0
    solvers = {e["name"]: e["runtime"] for e in json.loads(capsys.readouterr().out)}
    assert set(solvers.values()) <= set(runtime_names())  # every solver's runtime is registered
    assert solvers["barriers"] == solvers["vdnn"] == "barriers"  # the solver runs on the runtime
    assert solvers["slackswap"] == solvers["checkpoint"] == "barrier-free"
    assert solvers["offload-sync"] == "sync" and solvers["offload-overlap"] == "layer-prefetch"
    assert solvers["superneurons"] == "on-demand-lru"
    assert main(["runtimes", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed] == runtime_names()
    by_name = {e["name"]: e for e in listed}
    assert sorted(by_name["barriers"]["solvers"]) == ["barriers", "vdnn"]
    assert by_name["sync"]["real_runtime"] and not by_name["barriers"]["real_runtime"]
    assert main(["runtimes"]) == 0
    text = capsys.readouterr().out
    assert "barriers: vDNN per-layer synchronisation" in text
    assert max(len(line) for line in text.splitlines()) <= 100
