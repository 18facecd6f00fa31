"""The batch-by-batch local search of large instances, on a small one forced onto that path:
it ends where no single move improves (checked by scoring every move afresh), and the plan it
returns runs in the simulator at the step it reports."""

from __future__ import annotations

import numpy as np
import pytest

from slackswap.instances.catalog import build_model
from slackswap.plan import KEEP, RECOMP, SWAP, Budget
from slackswap.simulator import simulate
from slackswap.solvers import REGISTRY
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact import _plans
from slackswap.solvers.exact._plans import Scorer, local_search, relaxation_preference, repair


@pytest.mark.parametrize("with_preference", [False, True])
def test_batch_search_ends_in_a_single_move_optimum(
    monkeypatch: pytest.MonkeyPatch, with_preference: bool
) -> None:
    monkeypatch.setattr(_plans, "FIRST_IMPROVEMENT_TENSORS", 0)
    monkeypatch.setattr(_plans, "BATCH", 16)  # several batches on a small instance
    inst = build_model("gpt2-xl", layers=3)
    m = Budget.fraction(0.7).bytes_for(inst)
    scorer = Scorer(inst, m)
    hint = (
        REGISTRY["slackswap"].make().solve(inst, Budget.bytes(m), deadline=Deadline.never(), seed=0)
    )
    start = repair(scorer, hint.plan.actions, Deadline.never())  # type: ignore[union-attr]
    assert start is not None
    step0 = float(scorer.many(start[None, :])[0])
    rng = np.random.default_rng(0)
    preference = (
        relaxation_preference(
            rng.uniform(0, 0.5, inst.n_tensors), rng.uniform(0, 0.5, inst.n_tensors)
        )
        if with_preference
        else None
    )
    plan, step, converged = local_search(scorer, start, step0, Deadline.never(), preference)
    assert converged
    assert step <= step0
    sim = simulate(inst, plan, Budget.bytes(m))
    assert sim.feasible and sim.step_s == pytest.approx(step, rel=1e-12)
    finite = np.isfinite(inst.tensor_recompute_s)
    for t in range(inst.n_tensors):  # no single move improves, scored one plan at a time
        for v in (KEEP, SWAP, RECOMP):
            if v == plan[t] or (v == RECOMP and not finite[t]):
                continue
            trial = plan.copy()
            trial[t] = v
            res = simulate(inst, trial, Budget.bytes(m))
            assert not (res.feasible and res.step_s < step * (1 - 1e-12)), (t, v)
