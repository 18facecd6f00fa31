"""The runtime refuses a different step, another instance's plan and a budget the plan does not
fit, with one clear error, and leaves no hook installed (also when the step raises)."""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

import torch.nn.modules.module as torch_module  # noqa: E402
from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: E402

import slackswap.runtime as rt  # noqa: E402
from examples import models as example_models  # noqa: E402
from slackswap.errors import UserError  # noqa: E402
from slackswap.plan import SWAP, Plan, PlanError  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime.measure import bitwise_equal, run_step  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402

pytestmark = pytest.mark.torch

SMALL = dict(layers=1, hidden=32, heads=2, mlp=64, vocab=64, seq=16, batch=2)


@pytest.fixture(scope="module")
def gpt():
    model, inputs, loss_fn = example_models.gpt(**SMALL)
    return model, inputs, loss_fn, profile_step(model, inputs, loss_fn)


def assert_no_hooks(model: torch.nn.Module) -> None:
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert _get_current_dispatch_mode() is None
    assert not torch_module._global_forward_pre_hooks
    for m in model.modules():
        assert not m._forward_pre_hooks and not m._forward_hooks, m
    for p in model.parameters():
        assert not p._post_accumulate_grad_hooks


def step(model, inputs, loss_fn) -> None:  # type: ignore[no-untyped-def]
    loss_fn(model(*inputs)).backward()


def test_apply_with_and_without_the_model_gives_the_same_step(gpt) -> None:
    model, inputs, loss_fn, inst = gpt
    plan = Plan(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8))
    ref = run_step(model, inputs, loss_fn)
    torch.manual_seed(0)
    for p in model.parameters():
        p.grad = None
    with rt.apply(plan, "100%") as stats:  # the model is found by its first call
        loss = loss_fn(model(*inputs))
        loss.backward()
    assert torch.equal(loss.detach(), ref.loss)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), ref.grads, strict=True))
    assert stats.swapped_bytes == plan.swap_bytes and stats.h2d_bytes > 0
    assert_no_hooks(model)
    for p in model.parameters():
        p.grad = None


def test_a_different_step_is_refused_naming_the_first_mismatch(gpt) -> None:
    model, inputs, loss_fn, inst = gpt
    other_model, other_inputs, other_loss = example_models.gpt(**{**SMALL, "seq": 8})
    plan = Plan.keep_all(inst)
    with pytest.raises(rt.StepMismatchError, match=r"differs from .* at (operator|saved tensor)"):
        with rt.apply(plan, 1.0):
            step(other_model, other_inputs, other_loss)
    assert_no_hooks(other_model)
    deeper, deeper_inputs, deeper_loss = example_models.gpt(**{**SMALL, "layers": 2})
    with pytest.raises(rt.StepMismatchError, match=r"operator #\d+"):
        with rt.apply(plan, 1.0, model=deeper):
            step(deeper, deeper_inputs, deeper_loss)
    assert_no_hooks(deeper)


def test_forward_only_inside_the_block_is_refused(gpt) -> None:
    model, inputs, loss_fn, inst = gpt
    with pytest.raises(rt.StepMismatchError, match="forward and backward must both run"):
        with rt.apply(Plan.keep_all(inst), 1.0, model=model):
            loss = loss_fn(model(*inputs))
    assert_no_hooks(model)
    loss.backward()  # the graph still works after the runtime is gone (kept tensors)
    for p in model.parameters():
        p.grad = None


def test_a_plan_for_another_instance_is_refused(gpt) -> None:
    model, inputs, loss_fn, inst = gpt
    cnn, images = pf.tiny_cnn()
    other = Plan.keep_all(profile_step(cnn, images))
    with pytest.raises(PlanError, match="plan made for instance"):
        with rt.apply(other, 1.0, instance=inst):
            step(model, inputs, loss_fn)  # pragma: no cover - refused before the step
    assert_no_hooks(model)


def test_a_budget_the_plan_does_not_fit_is_refused(gpt) -> None:
    model, inputs, loss_fn, inst = gpt
    with pytest.raises(PlanError, match="does not fit the budget"):
        with rt.apply(Plan.keep_all(inst), 0.3):
            step(model, inputs, loss_fn)  # pragma: no cover
    assert_no_hooks(model)


def test_an_unknown_runtime_is_refused(gpt) -> None:
    *_, inst = gpt
    with pytest.raises(PlanError, match="slackswap.runtime runs"):
        with rt.apply(Plan.keep_all(inst, runtime="on-demand-lru"), 1.0):
            pass  # pragma: no cover


def test_hooks_are_removed_when_the_step_raises(gpt) -> None:
    model, inputs, loss_fn, inst = gpt
    with pytest.raises(ValueError, match="boom"):
        with rt.apply(Plan(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8)), 1.0):
            model(*inputs)
            raise ValueError("boom")
    assert_no_hooks(model)
    assert issubclass(rt.StepMismatchError, UserError)


def test_offload_runtimes_run_their_plans(gpt) -> None:
    """offload-sync (synchronous copies, no prefetch) and offload-overlap run their own plans
    through the same entry point, bitwise identical to the unplanned step."""
    from slackswap.solvers import run

    model, inputs, loss_fn, inst = gpt
    ref = run_step(model, inputs, loss_fn)
    for solver in ("offload-sync", "offload-overlap"):
        rec = run(inst, 1.0, solver, find_min_budget=False)
        assert rec.plan is not None and rec.plan.runtime in rt.RUNTIME_MODES
        out = run_step(model, inputs, loss_fn, rec.plan, 1.0)
        assert bitwise_equal(out, ref), solver
        assert out.stats is not None and out.stats.runtime == rec.plan.runtime


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("schedule", ["live", "simulated"])
def test_cuda_swap_and_recompute_are_bitwise_identical(schedule: str) -> None:
    """On a GPU: copies on side streams, pinned host memory, events; same results."""
    model, inputs, loss_fn = pf.gpt_dropout()
    model = model.cuda()
    inputs = tuple(t.cuda() for t in inputs)
    targets = torch.roll(inputs[0], -1, dims=1)

    def loss_cuda(logits):  # type: ignore[no-untyped-def]
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]),
                                                 targets.view(-1))  # fmt: skip

    inst = profile_step(model, inputs, loss_cuda)
    ref = run_step(model, inputs, loss_cuda)
    rng = np.random.default_rng(0)
    acts = rng.integers(0, 3, inst.n_tensors).astype(np.int8)
    acts[(acts == 2) & ~np.isfinite(inst.tensor_recompute_s)] = 0
    plan = Plan(inst, acts)
    out = run_step(model, inputs, loss_cuda, plan, 1.0, schedule=schedule)
    assert bitwise_equal(out, ref)
    assert out.cuda_peak_bytes is not None and out.cuda_peak_bytes > 0
    assert out.stats is not None and out.stats.swapped_bytes == plan.swap_bytes
