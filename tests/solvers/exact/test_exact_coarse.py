"""The coarse relaxation (`CoarseBound`) is a valid bound: runs embed in it, its optimum is at or
below the full LP's and the brute-force optimum, and ``milp`` uses it past its size threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model
from slackswap.plan import Budget
from slackswap.simulator import simulate
from slackswap.solvers import Status, run
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._coarse import CoarseBound, select_ops
from slackswap.solvers.exact._lp import BoundProgram
from tests.solvers.exact.test_exact_validity import random_plan, tight_budget
from tests.support.exact_helpers import brute_force, mini_layer, small_catalog_instances
from tests.support.strategies import small_instances


def kept_subsets(model: BoundProgram, rng: np.random.Generator) -> list[np.ndarray]:
    """Every operator, the default selection at two sizes, and two random subsets."""
    need = np.array([0, model.nf - 1, model.nf, model.n - 1])
    out = [np.arange(model.n), select_ops(model, 4), select_ops(model, 12)]
    for share in (0.2, 0.6):
        out.append(np.union1d(need, np.flatnonzero(rng.random(model.n) < share)))
    return out


def check_run_embeds(inst: Instance, acts: np.ndarray, budget: int, seed: int) -> bool:
    """Simulate; a feasible run's point of the full LP, carried over, breaks no coarse row."""
    res = simulate(inst, acts, Budget.bytes(budget), timeline=True)
    if not res.feasible:
        return False
    model = BoundProgram(inst, budget)
    x_full = model.embed_run(acts, res.timeline)
    for ops in kept_subsets(model, np.random.default_rng(seed)):
        coarse = CoarseBound(model, ops)
        x = coarse.embed(x_full)
        assert coarse.violations(x) == [], (inst.name, acts.tolist(), budget, ops.tolist())
        # the objective is the run's stall: the point is the run, not a cheaper one
        step = inst.ideal_step_s + x[coarse.T[-1]] * model.time_unit
        assert step == pytest.approx(res.step_s, rel=1e-9)
    return True


@pytest.mark.parametrize("inst", small_catalog_instances(), ids=lambda i: i.name)
def test_catalog_runs_embed_in_the_coarse_lp(inst: Instance) -> None:
    rng = np.random.default_rng(17)
    feasible = 0
    for k in range(30):
        acts = random_plan(inst, rng)
        feasible += check_run_embeds(inst, acts, tight_budget(inst, acts, rng), k)
    assert feasible >= 8


@settings(max_examples=25, deadline=None)
@given(small_instances(max_layers=5), st.integers(0, 2**32 - 1))
def test_random_runs_embed_in_the_coarse_lp(inst: Instance, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(2):
        acts = random_plan(inst, rng)
        check_run_embeds(inst, acts, tight_budget(inst, acts, rng), seed)


@pytest.mark.parametrize("layers", [3, 6])
@pytest.mark.parametrize("frac", [0.8, 0.5, 0.35])
def test_coarse_optimum_at_or_below_the_full_lp(layers: int, frac: float) -> None:
    """Kept at every operator the coarse LP is the full LP over every pair (the running extremes
    are exact): its optimum equals the row generation's converged one. Fewer kept operators only
    lower it."""
    inst = build_model("gpt2-xl", layers=layers, seq=256, batch=2)
    model = BoundProgram(inst, int(frac * inst.peak_bytes))
    full = model.solve(deadline=Deadline.begin(60), max_rounds=100, stall_rounds=100)
    every = CoarseBound(model, np.arange(model.n)).solve(Deadline.begin(60))
    if full.status == "infeasible":
        assert every.status == "infeasible" or every.bound_s is not None
        return
    assert full.status == "optimal" and every.status == "optimal"
    assert every.bound_s == pytest.approx(full.bound_s, rel=1e-7)
    for per_pass in (40, 12, 4):
        coarse = CoarseBound(model, select_ops(model, per_pass)).solve(Deadline.begin(60))
        assert coarse.status == "optimal" and coarse.bound_s is not None
        assert inst.ideal_step_s * (1 - 1e-9) <= coarse.bound_s <= full.bound_s * (1 + 1e-9)


@pytest.mark.parametrize("frac", [1.0, 0.8, 0.65, 0.55, 0.45])
def test_coarse_optimum_at_or_below_the_brute_force_optimum(frac: float) -> None:
    inst = mini_layer()
    budget = max(1, int(frac * inst.peak_bytes))
    opt, _ = brute_force(inst, budget)
    model = BoundProgram(inst, budget)
    for ops in kept_subsets(model, np.random.default_rng(3)):
        res = CoarseBound(model, ops).solve(Deadline.begin(10))
        if math.isinf(opt):
            continue  # no plan fits: any answer of a relaxation is consistent
        assert res.bound_s is not None and res.bound_s <= opt * (1 + 1e-9), (frac, ops, opt)


def test_kept_operators_must_include_the_pass_ends() -> None:
    inst = build_model("gpt2-xl", layers=2, seq=256, batch=2)
    model = BoundProgram(inst, inst.peak_bytes)
    with pytest.raises(ValueError, match="first and last"):
        CoarseBound(model, np.arange(1, model.n))


def test_milp_bounds_with_the_coarse_lp_past_its_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past FULL_LP_MAX_OPS milp's bound is the coarse LP's (no binary version, whose root is
    the full LP); the bound stays at or below the plan's simulated step."""
    import slackswap.solvers.exact.milp as milp_mod

    inst = build_model("gpt2-xl", layers=4, seq=256, batch=2)
    budget = Budget.fraction(0.5)
    model = BoundProgram(inst, budget.bytes_for(inst))
    expect = CoarseBound(model, select_ops(model, 100)).solve(Deadline.begin(30)).bound_s
    monkeypatch.setattr(milp_mod, "FULL_LP_MAX_OPS", inst.n_ops - 1)
    rec = run(inst, budget, "milp", time_limit=6.0, find_min_budget=False)
    assert rec.status is not Status.ERROR, rec.error
    assert rec.info["lp_engine"] == "coarse" and "milp_status" not in rec.info
    # the coarse LP's optimum (30 s), or below it when its 2.4 s share ran out under load
    assert expect is not None and rec.lower_bound_s is not None
    assert rec.lower_bound_s <= expect * (1 + 1e-9)
    assert rec.step_s is not None and rec.lower_bound_s <= rec.step_s * (1 + 1e-9)


def test_cpsat_bounds_with_the_coarse_lp_past_its_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cpsat switches to the coarse LP at the same threshold (before: the full LP, which at 768
    layers ran out of time and left the ideal step as the bound)."""
    import slackswap.solvers.exact.cpsat as cpsat_mod

    inst = build_model("gpt2-xl", layers=4, seq=256, batch=2)
    budget = Budget.fraction(0.5)
    model = BoundProgram(inst, budget.bytes_for(inst))
    expect = CoarseBound(model, select_ops(model, 100)).solve(Deadline.begin(30)).bound_s
    monkeypatch.setattr(cpsat_mod, "FULL_LP_MAX_OPS", inst.n_ops - 1)
    rec = run(inst, budget, "cpsat", time_limit=6.0, find_min_budget=False)
    assert rec.status is not Status.ERROR, rec.error
    assert rec.info["lp_engine"] == "coarse"
    assert expect is not None and rec.lower_bound_s is not None
    assert rec.step_s is not None and rec.lower_bound_s <= rec.step_s * (1 + 1e-9)


def test_runs_embed_where_a_tensor_skips_a_backward_operator() -> None:
    """A swapped tensor may be away between two of its backward reads (no catalog model has
    one): every plan of a graph that has one embeds, at every budget it fits."""
    import itertools

    from slackswap.instance import Hardware
    from slackswap.models.graph import GraphBuilder

    hw = Hardware(gpu="t", link="t", link_bw_Bps=1e9, copy_latency_s=1e-5, duplex_factor=0.85)
    g = GraphBuilder("skip", hw)
    for k in range(3):
        g.op(f"f{k}", block=k, kind="gemm", duration_s=0.004, reads=[f"t{k - 1}"] if k else [])
        g.saved(f"t{k}", nbytes=4_000_000, producer=f"f{k}", category="block_input", block=k)
    for k, reads in ((2, ["t2", "t0"]), (1, ["t1"]), (0, ["t0"])):
        # b1's transient bytes push t0 out between its reads (an eviction)
        g.op(f"b{k}", backward=True, block=k, kind="gemm", duration_s=0.004, reads=reads,
             transient_bytes=8_000_000 if k == 1 else 0)  # fmt: skip
    inst = g.build()
    assert len(BoundProgram(inst, inst.peak_bytes)._between_reads_terms()[0]) > 0
    checked = evicted = 0
    for plan in itertools.product((0, 1), repeat=inst.n_tensors):
        acts = np.array(plan, dtype=np.int8)
        for frac in (1.0, 0.9, 0.8, 0.6, 0.45):
            budget = int(frac * inst.peak_bytes)
            if check_run_embeds(inst, acts, budget, checked):
                checked += 1
                evicted += simulate(inst, acts, Budget.bytes(budget)).evictions > 0
    assert checked >= 10 and evicted >= 4


def test_scorer_starts_no_batch_past_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """milp's clock stops a neighbourhood between simulator batches (at 768 layers one
    neighbourhood is about 7 s): plans left unscored are inf and not counted."""
    import slackswap.solvers.exact._plans as plans

    inst = build_model("gpt2-xl", layers=2, seq=256, batch=2)
    budget = inst.peak_bytes
    acts = np.zeros((5, inst.n_tensors), dtype=np.int8)
    monkeypatch.setattr(plans, "BATCH", 2)
    free = plans.Scorer(inst, budget)
    expect = free.many(acts)
    assert np.all(np.isfinite(expect)) and free.evaluations == 5
    late = plans.Scorer(inst, budget, Deadline.begin(0.0))
    assert np.all(np.isinf(late.many(acts))) and late.evaluations == 0
    # a clock that passes the deadline after the first batch: two plans scored, three left
    clock = iter([0.0, 0.0, 10.0, 10.0, 10.0])
    cut = plans.Scorer(inst, budget, Deadline.begin(5.0, clock=lambda: next(clock)))
    got = cut.many(acts)
    np.testing.assert_array_equal(got[:2], expect[:2])
    assert np.all(np.isinf(got[2:])) and cut.evaluations == 2


@pytest.mark.parametrize("name", ["bert-large", "gpt2-xl", "llama-7b", "vgg16"])
def test_coarse_bound_below_slackswap_on_bundled_instances(name: str) -> None:
    """At the sizes milp keeps on the full LP, the coarse bound still never passes a plan's
    simulated step (SlackSwap's, at budgets 10-90% of P)."""
    from slackswap.instances.catalog import load

    inst = load(name)
    compared = 0
    for frac in (0.1, 0.2, 0.5, 0.7, 0.9):
        budget = Budget.fraction(frac)
        model = BoundProgram(inst, budget.bytes_for(inst))
        res = CoarseBound(model, select_ops(model, 100)).solve(Deadline.begin(30))
        plan = run(inst, budget, "slackswap", find_min_budget=False)
        if plan.step_s is None:
            continue
        assert res.bound_s is not None, (name, frac, res.status)
        assert res.bound_s <= plan.step_s * (1 + 1e-9), (name, frac, res.bound_s, plan.step_s)
        compared += 1
    assert compared >= 2
