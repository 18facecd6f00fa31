"""Reentrant ``torch.utils.checkpoint`` whose first block's input requires grad without a layer
of the model before it: the model's input (``x.requires_grad_()``) or an embedding's output.

The input keeps its ``.grad`` from one step to the next (nothing zeroes it), so autograd adds
the next step's gradient into it (``add_``) where the profiled step, starting from none, stored
it without an operator: the checked step stopped at that ``add_`` "after the profile's last
operator", blaming retain_graph. Every static solver's plan now runs bitwise, checked and on
the training path, also with gradients accumulated over micro-batches."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.cli import main  # noqa: E402
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan  # noqa: E402
from slackswap.profiling import profile_step
from slackswap.profiling.recorder import Recorder  # noqa: E402
from slackswap.runtime import HeldTensorWarning, StepMismatchError, apply, prepare  # noqa: E402
from slackswap.runtime.measure import (  # noqa: E402
    run_step,
    simulated_op_peaks,
    step_difference,
)
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import REGISTRY, run  # noqa: E402
from slackswap.torchstep.loss import default_loss  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402

pytestmark = pytest.mark.torch

FACTORIES = Path(__file__).parent.parent / "support" / "profiling_factories.py"
MODELS = ("checkpoint_input_grad", "checkpoint_embedding", "checkpoint_closure",
          "checkpoint_closure_head")  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread():  # type: ignore[no-untyped-def]
    # Bitwise comparisons between runs: one thread, so no reduction depends on scheduling.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Case:
    def __init__(self, name: str):
        made = getattr(pf, name)()
        self.model: torch.nn.Module = made[0]
        self.inputs = (made[1],)
        self.loss_fn = made[2] if len(made) == 3 else default_loss
        self.inst = profile_step(self.model, self.inputs, self.loss_fn)
        self.ref = run_step(self.model, self.inputs, self.loss_fn)


_CASES: dict[str, Case] = {}


def _case(name: str) -> Case:
    if name not in _CASES:
        _CASES[name] = Case(name)
    return _CASES[name]


def _solver_plans(inst: Any) -> list[tuple[str, np.ndarray, Budget]]:
    """Every static solver's plan at 95%, 80% and 65% of P, or at the smallest budget that
    fits above that; plus all-swap and all-recompute at P; each distinct plan once."""
    n = inst.n_tensors
    out = [
        ("all-swap", np.full(n, SWAP, dtype=np.int8), Budget.fraction(1.0)),
        ("all-recompute", np.where(np.isfinite(inst.tensor_recompute_s), RECOMP, KEEP).astype(
            np.int8), Budget.fraction(1.0)),
    ]  # fmt: skip
    seen = {acts.tobytes() for _, acts, _ in out}
    for b in (0.95, 0.8, 0.65):
        for entry in REGISTRY:
            if not entry.tags.static_plan:
                continue
            budget = Budget.fraction(b)
            rec = run(inst, budget, entry.name, time_limit=0.2, find_min_budget=True)
            if rec.plan is None and rec.min_budget_bytes is not None:
                budget = Budget.fraction(max(b, rec.min_budget_bytes / inst.peak_bytes) * 1.001)
                rec = run(inst, budget, entry.name, time_limit=0.2, find_min_budget=False)
            if rec.plan is None:
                continue
            acts = np.asarray(rec.plan.actions)
            if not simulate(inst, acts, budget).feasible or acts.tobytes() in seen:
                continue
            seen.add(acts.tobytes())
            out.append((f"{entry.name}@{budget}", acts, budget))
    return out


def test_the_profile_starts_the_inputs_gradient_from_none_and_puts_it_back() -> None:
    model, x = pf.checkpoint_input_grad()
    model(x).sum().backward()
    before = x.grad.clone()
    inst = profile_step(model, (x,))
    assert torch.equal(x.grad, before)
    # No accumulation into the input's gradient in the profile: the first step's own add_ ops
    # are the residual's and the reentrant blocks' (a profile from x.grad had one more).
    fresh = profile_step(*pf.checkpoint_input_grad())
    assert list(inst.op_name) == list(fresh.op_name)


@pytest.mark.parametrize("name", MODELS)
def test_every_static_solver_plan_is_bitwise_identical(name: str) -> None:
    """The unplanned step before each left the input's .grad set: each planned step adds into it."""
    case = _case(name)
    x = case.inputs[0]
    plans = _solver_plans(case.inst)
    assert any(b.value < 1.0 for _, _, b in plans), "no plan below P: the test is moot"
    swaps = any((acts == SWAP).any() for _, acts, _ in plans)
    recomputes = any((acts == RECOMP).any() for _, acts, _ in plans)
    assert swaps and recomputes
    errors = []
    for label, acts, budget in plans:
        if x.is_floating_point():
            assert x.grad is not None  # carried over from the earlier steps
        out = run_step(case.model, case.inputs, case.loss_fn, Plan(case.inst, acts), budget)
        d = step_difference(out, case.ref)
        if d is not None:
            errors.append(f"{label}: {d}")
    assert not errors, "; ".join(errors)


def test_a_tensor_only_a_reentrant_checkpoints_closure_saves_is_held_not_planned() -> None:
    """``cos`` and ``sin`` reach the checkpointed layers through a closure: autograd saves them
    only when backward re-runs a layer. The closure holds them from the forward pass on, so
    they are no saved tensor a plan acts on (a plan that swapped them stopped in backward with
    "needed while freed"): each operator from their making to backward counts their bytes."""
    model, ids = pf.checkpoint_closure()
    inst = profile_step(model, (ids,))
    assert not any(n.startswith(("model/cos", "model/sin")) for n in inst.tensor_name)
    ops = list(inst.op_name)
    rotary = 2 * 16 * 32 * 4  # cos and sin: (16, 32) float32 each
    from_sin = range(ops.index("model/sin") + 1, inst.n_forward_ops + 1)
    assert min(int(inst.op_transient_bytes[o]) for o in from_sin) >= rotary
    # The head saves ``cos`` in the forward pass too; the closure holds it all the same (until
    # the graph goes, after the step): still no saved tensor a plan acts on.
    inst = profile_step(*pf.checkpoint_closure_head())
    assert "model/cos.out" not in inst.tensor_name
    ops = list(inst.op_name)
    cos = rotary // 2
    assert (
        min(int(inst.op_transient_bytes[o]) for o in range(ops.index("model/cos") + 1, inst.n_ops))
        >= cos
    )


@pytest.mark.parametrize("prepared", [False, True], ids=["checked", "fast"])
@pytest.mark.parametrize(
    "name", ["checkpoint_closure_head", "checkpoint_closure_head_nonreentrant"]
)
def test_a_swapped_tensor_a_checkpoints_closure_holds_is_named_held(
    name: str, prepared: bool
) -> None:
    """The head saves ``cos`` in the forward pass and a plan swaps it; the checkpoints' closure
    keeps it: a reentrant checkpoint saves it again after the head's backward let it go, a
    non-reentrant one's function goes (and ``cos`` with it) during the backward pass. Every
    step trains as unplanned and warns that the closure held it, naming what to do, not the
    forward hooks the model may have. (A profile does not offer ``cos`` to a plan, as the
    closure holds it, `test_a_tensor_a_nonreentrant_checkpoints_closure_holds_is_not_planned`:
    here the profile is made as an older one, or an instance file from elsewhere, has it.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Recorder, "_note_let_go_in_backward", lambda self: None)
        mp.setattr(Recorder, "end_backward", lambda self: None)
        case = Case(name)
    i = case.inst.tensor_name.index("model/cos.out")
    acts = np.zeros(case.inst.n_tensors, dtype=np.int8)
    acts[i] = SWAP
    plan = Plan(case.inst, acts)
    steps = 3 if prepared else 1
    planned = prepare(copy.deepcopy(case.model), plan, 1.0) if prepared else None
    model = planned.model if planned is not None else copy.deepcopy(case.model)
    ref_model = copy.deepcopy(case.model)
    for _ in range(steps):
        with pytest.warns(HeldTensorWarning, match="torch.utils.checkpoint whose function") as w:
            if planned is not None:
                with planned.step() as stats:
                    model(case.inputs[0]).sum().backward()
            else:
                with apply(plan, 1.0, model=model) as stats:
                    model(case.inputs[0]).sum().backward()
        assert stats.held_tensors == ["model/cos.out"] and stats.checkpoint_closure
        assert stats.swapped_bytes == 0  # held: its memory was never freed
        assert "pass it to checkpoint as a positional argument" in str(w[0].message)
        ref_model(case.inputs[0]).sum().backward()
    if planned is not None:
        assert planned.fast, planned.reason
    for a, b in zip(ref_model.parameters(), model.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("action", [KEEP, SWAP])
def test_a_reentrant_checkpoints_node_holds_its_inputs_until_its_inner_backward_ends(
    action: int,
) -> None:
    """The block's checkpoint alone saves the encoder's output (``memory``); its node returns,
    letting it go, only when the block's inner backward pass (a graph task of its own) is
    done, after the node's own last operator. The profile ended its use at that operator:
    the simulated peak was 4,096 B below the measured one (BART's decoder layer, 15.6 KB).
    Oracle: the storages the step allocates, measured per operator, never above the
    simulator's, and the same peak."""
    model, ids = pf.checkpoint_cross()
    inst = profile_step(model, (ids,))
    i = inst.tensor_name.index("encoder.2/addmm.out")
    inner = [o for o, name in enumerate(inst.op_name) if name.startswith("bwd:block/mm")]
    assert inner and int(inst.tensor_last_bwd_reader[i]) > max(inner)
    plan = Plan(inst, np.full(inst.n_tensors, action, dtype=np.int8))
    out = run_step(model, (ids,), None, plan, 1.0)
    simulated = simulated_op_peaks(inst, plan, 1.0)
    over = {o: out.op_peak_bytes.get(o, 0) - b for o, b in simulated.items()}
    assert max(over.values()) <= 0, max(over.items(), key=lambda x: x[1])
    assert out.peak_bytes == simulate(inst, plan, 1.0).peak_bytes


def test_the_inputs_gradient_accumulates_as_without_a_plan() -> None:
    case = _case("checkpoint_input_grad")
    plan = Plan(case.inst, np.full(case.inst.n_tensors, SWAP, dtype=np.int8))
    grads = []
    for planned in (False, True):
        model, x = pf.checkpoint_input_grad()
        for _ in range(3):
            if planned:
                with apply(plan, 1.0, model=model):
                    model(x).sum().backward()
            else:
                model(x).sum().backward()
        grads.append((x.grad.clone(), [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1], strict=True))


def test_a_leaf_outside_the_models_inputs_is_named_with_what_to_do() -> None:
    """A tensor that requires grad, neither a parameter nor an input of the model (here read
    from the module), keeps its .grad between steps: the runtime cannot know it was carried
    over, and says what to do instead of blaming retain_graph."""

    class Closure(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module, x: torch.Tensor):
            super().__init__()
            self.inner = inner
            self.x = x  # a plain attribute: not a parameter, not an input

        def forward(self) -> torch.Tensor:
            return self.inner(self.x)

    inner, x = pf.checkpoint_input_grad()
    model = Closure(inner, x)
    inst = profile_step(model, ())
    model().sum().backward()  # x.grad is set now
    plan = Plan(inst, np.full(inst.n_tensors, KEEP, dtype=np.int8))
    with pytest.raises(StepMismatchError, match=r"set \.grad to None before each step") as err:
        with apply(plan, 1.0, model=model):
            model().sum().backward()
    assert "retain_graph" not in str(err.value) and "\n" not in str(err.value)
    x.grad = None
    with apply(plan, 1.0, model=model):
        model().sum().backward()


@pytest.mark.parametrize("name", MODELS)
def test_prepared_steps_train_bitwise_with_micro_batches(name: str) -> None:
    """prepare + planned.step: 4 AdamW steps of two micro-batches each (the second adds into
    the first's gradients, zero_grad only before the first), against the same loop unplanned:
    the first (checked) step from no gradients, the later (fast) ones adding into them."""
    case = _case(name)
    rec = run(case.inst, Budget.fraction(0.95), "slackswap", time_limit=0.3, find_min_budget=True)
    budget = Budget.fraction(0.95)
    if rec.plan is None:
        assert rec.min_budget_bytes is not None
        budget = Budget.fraction(rec.min_budget_bytes / case.inst.peak_bytes * 1.001)
        rec = run(case.inst, budget, "slackswap", time_limit=0.3, find_min_budget=False)
    assert rec.plan is not None and np.asarray(rec.plan.actions).any()
    results = []
    for planned_run in (False, True):
        model = copy.deepcopy(case.model)
        x = case.inputs[0].detach().clone().requires_grad_(case.inputs[0].requires_grad)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        planned = prepare(model, rec.plan, budget) if planned_run else None
        for k in range(4):
            opt.zero_grad(set_to_none=True)
            for micro in range(2):
                torch.manual_seed(10 * k + micro)
                if planned is None:
                    case.loss_fn(model(x)).backward()
                else:
                    with planned.step():
                        case.loss_fn(model(x)).backward()
            opt.step()
        if planned is not None:
            assert planned.steps == 8
        grad = None if x.grad is None else x.grad.clone()
        results.append(([p.detach().clone() for p in model.parameters()], grad))
    (ref, ref_x), (got, got_x) = results
    for (n, _), a, b in zip(case.model.named_parameters(), ref, got, strict=True):
        assert torch.equal(a, b), f"{name}: parameter {n!r} differs"
    assert (ref_x is None and got_x is None) or torch.equal(ref_x, got_x)


def test_run_check_passes(capsys) -> None:
    rc = main(["run", f"{FACTORIES}:checkpoint_input_grad", "--budget", "95%", "--solver",
               "slackswap", "--check", "--steps", "3", "--time-limit", "1", "--json"])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    r = json.loads(captured.out)
    assert r["bitwise_identical"] is True and r["first_difference"] is None
    assert r["swapped_bytes"] + r["recomputed_bytes"] > 0


def test_a_tensor_a_nonreentrant_checkpoints_closure_holds_is_not_planned() -> None:
    """The head saves ``cos`` in the forward pass; the non-reentrant checkpoints' function
    holds it through a closure until the last layer's backward, where it goes. No action frees
    it before then, so the profile offers it to no plan: its bytes count from its producer to
    that operator."""
    model, ids = pf.checkpoint_closure_head_nonreentrant()
    inst = profile_step(model, (ids,))
    assert not any(n.startswith(("model/cos", "model/sin")) for n in inst.tensor_name)
    ops = list(inst.op_name)
    cos = 16 * 32 * 4  # (16, 32) float32
    layer0 = [o for o in range(inst.n_forward_ops, inst.n_ops) if ops[o].startswith("bwd:layers.0")]
    held = range(ops.index("model/cos") + 1, layer0[0])
    assert min(int(inst.op_transient_bytes[o]) for o in held) >= cos
