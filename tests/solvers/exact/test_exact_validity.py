"""The executed validity argument: feasible simulator runs are solutions of both relaxations.

Each feasible run (keep, swap, recomp, stalls, evictions) is mapped onto the variables of the
linear relaxation (`BoundProgram.embed_run`) and of the CP-SAT model (`CpPlanProgram.embed_run`);
no constraint of either may be violated, so neither optimum can exceed the simulator's optimum.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model, load
from slackswap.plan import Budget
from slackswap.simulator import simulate, simulate_many
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._cp import CpPlanProgram
from slackswap.solvers.exact._lp import BoundProgram
from tests.support.exact_helpers import small_catalog_instances
from tests.support.strategies import small_instances


def random_plan(inst: Instance, rng: np.random.Generator) -> np.ndarray:
    p = rng.dirichlet([1.0, 1.0, 1.0])
    a = rng.choice(3, size=inst.n_tensors, p=p).astype(np.int8)
    a[(a == 2) & ~np.isfinite(inst.tensor_recompute_s)] = 1
    return a


def tight_budget(inst: Instance, acts: np.ndarray, rng: np.random.Generator) -> int:
    """A budget between the plan's keep-free floor and its peak at an ample budget."""
    ample = simulate(inst, acts, Budget.fraction(1.0))
    return max(1, int(ample.peak_bytes * rng.uniform(0.65, 1.0)))


def check_run(inst: Instance, acts: np.ndarray, budget: int, cp: bool = True) -> bool:
    """Simulate; for a feasible run assert both embeddings satisfy their models."""
    res = simulate(inst, acts, Budget.bytes(budget), timeline=True)
    if not res.feasible:
        return False
    lp = BoundProgram(inst, budget)
    x = lp.embed_run(acts, res.timeline)
    assert lp.violations(x) == [], (inst.name, acts.tolist(), budget)
    if cp:
        model = CpPlanProgram(inst, budget, horizon_s=res.step_s)
        assert model.check_values(model.embed_run(acts, res.timeline)), (inst.name, acts.tolist())
    return True


@settings(max_examples=40)
@given(small_instances(max_layers=5), st.integers(0, 2**32 - 1))
def test_random_runs_embed_in_both_models(inst: Instance, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(3):
        acts = random_plan(inst, rng)
        check_run(inst, acts, tight_budget(inst, acts, rng))


def test_a_prefetch_that_starts_as_an_operator_ends_embeds_as_present() -> None:
    """A random instance hypothesis found (in the lowest-versions venv's CI run): tensor 3's
    copy back starts at the instant its last forward reader ends, where its buffer is freed.
    The embedding took that end as S + d, which rounded past the run's own float of it, so the
    free sorted after the copy back and the tensor counted as absent at the next operator (a
    prefetch-deadline row short by 0.25 P). It now reads each operator's end off the run."""
    from pathlib import Path

    from slackswap.instances.format import load_instance

    inst = load_instance(Path(__file__).with_name("embed_tie_random4.json"))
    acts = np.array([1, 1, 1, 1, 1, 2, 1], dtype=np.int8)
    assert check_run(inst, acts, 25009971, cp=False)


@pytest.mark.parametrize("inst", small_catalog_instances(), ids=lambda i: i.name)
def test_catalog_runs_embed(inst: Instance) -> None:
    rng = np.random.default_rng(7)
    feasible = evicted = 0
    for k in range(60):
        acts = random_plan(inst, rng)
        budget = tight_budget(inst, acts, rng)
        if check_run(inst, acts, budget, cp=k % 4 == 0):
            feasible += 1
            evicted += simulate(inst, acts, Budget.bytes(budget)).evictions > 0
    assert feasible >= 15
    assert evicted >= 1  # the embedding handles evictions and second prefetches


def test_vgg16_runs_embed() -> None:
    inst = load("vgg16")
    rng = np.random.default_rng(3)
    assert sum(check_run(inst, random_plan(inst, rng), int(f * inst.peak_bytes), cp=False)
               for f in (0.95, 0.9, 0.85, 0.8, 0.75, 0.7) for _ in range(4)) >= 6  # fmt: skip


def test_bound_below_every_feasible_run() -> None:
    inst = build_model("gpt2-xl", layers=2, seq=256, batch=2)
    rng = np.random.default_rng(11)
    acts = np.stack([random_plan(inst, rng) for _ in range(300)])
    seen_bound = seen_proof = False
    for frac in (0.9, 0.6, 0.45, 0.3):
        budget = int(frac * inst.peak_bytes)
        bound = BoundProgram(inst, budget).solve(deadline=Deadline.begin(20))
        res = simulate_many(inst, acts, Budget.bytes(budget))
        if bound.status == "infeasible":  # a proof: no plan may fit
            assert not res.feasible.any()
            seen_proof = True
            continue
        assert bound.bound_s is not None
        if res.feasible.any():
            assert bound.bound_s <= res.step_s[res.feasible].min() * (1 + 1e-9)
            seen_bound = True
    assert seen_bound and seen_proof


def test_plan_value_is_a_claim_below_the_simulated_step() -> None:
    inst = build_model("llama-7b", layers=2, seq=512, batch=1)
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(30):
        acts = random_plan(inst, rng)
        budget = tight_budget(inst, acts, rng)
        res = simulate(inst, acts, Budget.bytes(budget))
        if not res.feasible:
            continue
        model = BoundProgram(inst, budget)
        model.solve(deadline=Deadline.begin(10))
        claim = model.plan_value(acts, Deadline.begin(30.0))
        assert claim is not None and claim <= res.step_s * (1 + 1e-9)
        checked += 1
    assert checked >= 5


def test_infeasible_budget_has_a_reason() -> None:
    inst = load("vgg16")
    res = BoundProgram(inst, int(0.5 * inst.peak_bytes)).solve(deadline=Deadline.begin(30.0))
    assert res.status == "infeasible" and res.bound_s is None
    assert "s0.c1.conv.bwd" in res.info["reason"]


def test_simultaneous_events_embed() -> None:
    """Zero-latency 1-byte copies end exactly when operators do: float rounding must not make a
    freed tensor look resident (a case hypothesis found)."""
    from slackswap.instance import Hardware
    from slackswap.models.graph import GraphBuilder

    hw = Hardware(gpu="t", link="t", link_bw_Bps=1e9, copy_latency_s=0.0, duplex_factor=0.85)
    g = GraphBuilder("ties", hw)
    g.op("f0", block=0, kind="gemm", duration_s=0.008187224912314222)
    g.saved("t0", nbytes=1, producer="f0", category="block_input", block=0)
    g.op("f1", block=1, kind="gemm", duration_s=0.0001, reads=["t0"])
    g.saved("t1", nbytes=1, producer="f1", category="block_input", block=1)
    g.op("f2", block=2, kind="gemm", duration_s=0.0078125, reads=["t1"])
    g.saved("t2", nbytes=1, producer="f2", category="block_input", block=2)
    for k, reads in ((2, ["t2"]), (1, ["t1"]), (0, ["t0"])):
        g.op(f"b{k}", backward=True, block=k, kind="gemm", duration_s=0.0078125, reads=reads,
             transient_bytes=1 if k == 2 else 0)  # fmt: skip
    inst = g.build()
    assert check_run(inst, np.array([0, 1, 1], dtype=np.int8), 3)
