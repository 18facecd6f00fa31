"""A planned step leaves the model's state as an unplanned one: buffers, parameters, optimizer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.cli import main  # noqa: E402
from slackswap.plan import KEEP, RECOMP, Budget, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import records  # noqa: E402
from slackswap.runtime.measure import (  # noqa: E402
    has_sparse_gradients,
    run_step,
    step_difference,
    train_difference,
    train_steps,
)
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import REGISTRY, run  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402

pytestmark = pytest.mark.torch

FACTORIES = Path(__file__).parent.parent / "support" / "profiling_factories.py"


def _made(name: str):  # type: ignore[no-untyped-def]
    made = getattr(pf, name)()
    inputs = made[1] if isinstance(made[1], tuple) else (made[1],)
    return made[0], inputs, (made[2] if len(made) == 3 else None)


def _all_recompute(inst) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.where(np.isfinite(inst.tensor_recompute_s), RECOMP, KEEP).astype(np.int8)


@pytest.fixture(scope="module")
def resnet():  # type: ignore[no-untyped-def]
    model, inputs, loss_fn = _made("resnet")
    inst = profile_step(model, inputs, loss_fn)
    return model, inputs, loss_fn, inst


def _recomputes_batch_norm(inst, acts: np.ndarray) -> bool:  # type: ignore[no-untyped-def]
    return any(
        acts[i] == RECOMP and "batch_norm" in inst.op_name[int(inst.tensor_producer[i])]
        for i in range(inst.n_tensors)
    )


def test_batch_norm_statistics_are_protected_as_written() -> None:
    f = torch.ops.aten.native_batch_norm.default
    x, w, b, mean, var = (torch.zeros(2, 3, 4), None, None, torch.zeros(3), torch.ones(3))
    bound = {"input": x, "weight": w, "bias": b, "running_mean": mean, "running_var": var}
    written = records.written_arguments(f._schema, {**bound, "training": True})
    assert [id(t) for t in written] == [id(mean), id(var)]
    assert records.written_arguments(f._schema, {**bound, "training": False}) == []
    add_ = torch.ops.aten.add_.Tensor
    assert [id(t) for t in records.written_arguments(add_._schema, {"self": x, "other": x})] == [
        id(x)
    ]


def test_a_rebuild_updates_the_running_statistics_once(resnet) -> None:  # type: ignore[no-untyped-def]
    """A recompute chain re-runs native_batch_norm, whose schema does not mark running_mean and
    running_var as written: without a scratch copy the rebuild was a second momentum update."""
    model, inputs, loss_fn, inst = resnet
    acts = _all_recompute(inst)
    assert _recomputes_batch_norm(inst, acts)
    ref = run_step(model, inputs, loss_fn)
    out = run_step(model, inputs, loss_fn, Plan(inst, acts))
    assert out.stats is not None and out.stats.rebuilds > 0
    assert ref.buffers and set(ref.buffers) == set(out.buffers)
    assert step_difference(out, ref) is None


def _check(capsys, tmp_path, inst, acts, *extra: str):  # type: ignore[no-untyped-def]
    inst.save(tmp_path / "inst.json")
    Plan(inst, acts).save(tmp_path / "plan.json")
    rc = main(["run", f"{FACTORIES}:resnet", "--budget", "100%", "--instance",
               str(tmp_path / "inst.json"), "--plan", str(tmp_path / "plan.json"), "--check",
               *extra])  # fmt: skip
    return rc, capsys.readouterr()


def test_check_fails_on_the_double_update(capsys, tmp_path, resnet, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`--check` compares every buffer: with the protection of the unmarked writes off (the
    runtime as it was), it exits 1 naming a running statistic; with it, it passes."""
    *_, inst = resnet
    acts = _all_recompute(inst)
    monkeypatch.setattr(records, "UNMARKED_WRITES", frozenset())
    rc, out = _check(capsys, tmp_path, inst, acts, "--json")
    r = json.loads(out.out)
    assert rc == 1, out.err
    assert r["bitwise_identical"] is False
    assert r["first_difference"].startswith("buffer ") and "running_" in r["first_difference"]
    monkeypatch.undo()
    rc, out = _check(capsys, tmp_path, inst, acts, "--steps", "2")
    assert rc == 0, out.out + out.err
    assert "after 2 AdamW step(s): parameters, buffers and optimizer state bitwise identical" in (
        out.out
    )


def test_a_difference_in_optimizer_state_is_named(resnet) -> None:  # type: ignore[no-untyped-def]
    model, inputs, loss_fn, _ = resnet
    before = [p.detach().clone() for p in model.parameters()]
    a = train_steps(model, inputs, loss_fn, steps=2)
    b = train_steps(model, inputs, loss_fn, steps=2)
    # the model is restored: both runs started from the same state
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    assert train_difference(a, b) is None
    assert a.optimizer == "AdamW" and len(a.losses) == 2
    key = "AdamW exp_avg_sq of 'fc.weight'"
    assert key in a.state and "buffer 'bn1.running_var'" in a.state
    t = b.state[key].clone()
    t.view(-1)[0] = torch.nextafter(t.view(-1)[0], torch.tensor(float("inf")))  # one ulp
    b.state[key] = t
    assert train_difference(a, b) == key
    b.state["buffer 'bn1.running_var'"] = -b.state["buffer 'bn1.running_var'"]
    assert train_difference(a, b) == "buffer 'bn1.running_var'"


# Every test model (the runtime tests' four, and the ResNet with its batch-norm statistics):
# 5 AdamW steps under every static solver's plan at 50% and 30% of P, or at the smallest budget
# that fits above that, end bitwise identical to 5 unplanned steps.
STATE_MODELS = (
    "resnet",
    "plain_cnn",
    "gpt_dropout",
    "bert",
    "torch_encoder",
    "lstm_deep",
    "gru",
    "checkpoint_reentrant",
    "checkpoint_nonreentrant",
    "sparse_embedding",
)
STEPS = 5


def _solver_plans(inst) -> dict[str, tuple[np.ndarray, Budget]]:  # type: ignore[no-untyped-def]
    out: dict[str, tuple[np.ndarray, Budget]] = {}
    seen: set[bytes] = set()
    for b in (0.5, 0.3):
        for entry in REGISTRY:
            if not entry.tags.static_plan:
                continue
            rec = run(inst, b, entry.name, time_limit=0.3, find_min_budget=b == 0.3)
            budget = Budget.fraction(b)
            if rec.plan is None and rec.min_budget_bytes is not None:
                budget = Budget.fraction(max(b, rec.min_budget_bytes / inst.peak_bytes) * 1.001)
                rec = run(inst, budget, entry.name, time_limit=0.3, find_min_budget=False)
            if rec.plan is None:
                continue
            acts = np.asarray(rec.plan.actions)
            if not simulate(inst, acts, budget).feasible or acts.tobytes() in seen:
                continue
            seen.add(acts.tobytes())
            out[f"{entry.name}@{budget}"] = (acts, budget)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", STATE_MODELS)
def test_five_adamw_steps_under_every_solver_plan(name: str) -> None:
    model, inputs, loss_fn = _made(name)
    inst = profile_step(model, inputs, loss_fn)
    sparse = has_sparse_gradients(run_step(model, inputs, loss_fn))  # SGD: AdamW takes none
    ref = train_steps(model, inputs, loss_fn, steps=STEPS, sparse=sparse)
    plans = _solver_plans(inst)
    assert plans, f"{name}: no solver plan fits"
    errors = []
    for label, (acts, b) in plans.items():
        got = train_steps(model, inputs, loss_fn, Plan(inst, acts), b, steps=STEPS, sparse=sparse)
        diff = train_difference(got, ref)
        if diff is not None:
            errors.append(f"{label}: {diff}")
    assert not errors, f"{name}: " + "; ".join(errors)


@pytest.mark.slow  # five training steps of a ResNet, every tensor rebuilt: tens of seconds
def test_five_adamw_steps_of_the_resnet_all_recompute(resnet) -> None:  # type: ignore[no-untyped-def]
    """The fast case of the one above: every batch-norm output rebuilt in each of 5 steps."""
    model, inputs, loss_fn, inst = resnet
    ref = train_steps(model, inputs, loss_fn, steps=STEPS)
    got = train_steps(model, inputs, loss_fn, Plan(inst, _all_recompute(inst)), steps=STEPS)
    assert train_difference(got, ref) is None


def test_statistics_that_are_no_buffer_are_updated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """F.batch_norm on running statistics the module holds as plain attributes: the rebuild
    found them as the caller's tensors and updated them a second time. A profile now gives
    such a batch-norm no rebuild (the statistics are no input, parameter or buffer: a fast step
    never sees them); profiled as before, without the model's inputs noted, the checked path
    still rebuilds it, and must update them once."""
    from slackswap.profiling.recorder import Recorder

    model, inputs, loss_fn = _made("functional_batch_norm")
    now = profile_step(model, inputs, loss_fn)
    assert not _recomputes_batch_norm(now, _all_recompute(now))
    monkeypatch.setattr(Recorder, "note_model_inputs", lambda self, inputs: None)
    inst = profile_step(model, inputs, loss_fn)
    acts = _all_recompute(inst)
    assert _recomputes_batch_norm(inst, acts)
    stats = (model.stats_mean, model.stats_var)
    start = [t.clone() for t in stats]

    def after(plan: Plan | None) -> list[torch.Tensor]:
        for t, s in zip(stats, start, strict=True):
            t.copy_(s)
        out = run_step(model, inputs, loss_fn, plan)
        assert out.stats is None or out.stats.rebuilds > 0
        return [t.clone() for t in stats]

    ref = after(None)
    got = after(Plan(inst, acts))
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    assert not torch.equal(ref[0], start[0])  # the step does update them
