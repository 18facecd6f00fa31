"""Every step of the training path is measured and honest (models of this file's own): a fast
step that goes over its budget says so, names ``retain_graph=True`` or the forward hook that
caused it, and makes the next step a checked one; a tensor a forward hook holds is never
counted as swapped or recomputed, on the checked first step or on any later one."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import prepare  # noqa: E402
from slackswap.simulator import simulate  # noqa: E402

pytestmark = pytest.mark.torch

#: What a fast step measures (`RunStats.measured`); the checked path's is "operator outputs".
FAST = "saved tensors, with modelled transients"


@pytest.fixture(autouse=True)
def _one_thread():  # type: ignore[no-untyped-def]
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class GeluMLP(torch.nn.Module):
    """Three linear layers with GELU between them: each GELU saves its input (the linear's
    output), so a hook on a linear layer holds a saved tensor."""

    def __init__(self, width: int = 256):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, width)
        self.fc2 = torch.nn.Linear(width, width)
        self.fc3 = torch.nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.fc1(x))
        h = torch.nn.functional.gelu(self.fc2(h))
        return self.fc3(h)


def _made(batch: int = 512) -> tuple[GeluMLP, torch.Tensor]:
    torch.manual_seed(0)
    return GeluMLP(), torch.randn(batch, 32)


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.square().mean()


def _entry(inst: Any, module: str) -> str:
    """The saved tensor a linear layer's output is (what GELU saves)."""
    names = [n for n in inst.tensor_name if n.startswith(f"{module}/")]
    assert len(names) == 1, names
    return names[0]


def _steps(planned: Any, model: Any, x: Any, n: int, *, retain: bool = False) -> list[Any]:
    """``n`` steps; each step's stats and warnings (messages by class name)."""
    out = []
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with planned.step() as stats:
                loss = _loss(model(x))
                loss.backward(retain_graph=retain)
            del loss
        assert planned.last_stats is stats
        ours = [
            w for w in caught if type(w.message).__name__ in ("BudgetWarning", "HeldTensorWarning")
        ]
        if stats.measured == FAST:  # a fast step's warning points at the caller's with statement
            assert all(w.filename == __file__ for w in ours), [w.filename for w in ours]
        out.append((stats, [(type(w.message).__name__, str(w.message)) for w in ours]))
    return out


def test_a_fast_step_over_its_budget_warns_names_retain_graph_and_checks_the_next_step() -> None:
    model, x = _made()
    inst = profile_step(model, (x,), _loss)
    plan = Plan(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8))
    peak = simulate(inst, plan, 1.0).peak_bytes
    budget = Budget.bytes(peak)  # all-swap fits exactly: nothing to spare
    planned = prepare(model, plan, budget)
    (first, w0), (fast, w1) = _steps(planned, model, x, 2)
    assert first.measured == "operator outputs" and fast.measured == FAST
    assert fast.measured_peak_bytes is not None and fast.over_budget_bytes == 0
    assert not w0 and not w1 and planned.fast, planned.reason
    # A graph kept with retain_graph=True keeps every copy back to the end of the step.
    ((retained, w2),) = _steps(planned, model, x, 1, retain=True)
    assert retained.measured == FAST  # the fast step measured it itself
    assert retained.over_budget_bytes == retained.measured_peak_bytes - peak > 0
    assert retained.retained_tensors > 0
    budget_msgs = [m for c, m in w2 if c == "BudgetWarning"]
    assert len(budget_msgs) == 1 and "retain_graph=True" in budget_msgs[0]
    assert not planned.fast and "over its budget" in planned.reason
    # The next step is a checked one; within its budget, the one after is fast again.
    (checked, w3), (again, w4) = _steps(planned, model, x, 2)
    assert checked.measured == "operator outputs" and checked.over_budget_bytes == 0
    assert again.measured == FAST and not w3 and not w4 and planned.fast


@pytest.mark.parametrize("action", [SWAP, RECOMP])
def test_a_tensor_a_forward_hook_holds_is_never_counted_as_swapped_or_recomputed(
    action: int,
) -> None:
    model, x = _made()
    inst = profile_step(model, (x,), _loss)
    acts = np.full(inst.n_tensors, action, dtype=np.int8)
    acts[~np.isfinite(inst.tensor_recompute_s)] = KEEP
    plan = Plan(inst, acts)
    held_name = _entry(inst, "fc2")
    i = list(inst.tensor_name).index(held_name)
    assert acts[i] == action
    kept_by_hook: list[torch.Tensor] = []
    handle = model.fc2.register_forward_hook(lambda m, a, out: kept_by_hook.append(out))
    try:
        # A budget the held tensor cannot exceed: every step but the first is a fast one.
        planned = prepare(model, plan, Budget.bytes(10 * int(inst.peak_bytes)))
        steps = _steps(planned, model, x, 3)
    finally:
        handle.remove()
    planned_bytes = int(np.asarray(inst.tensor_bytes)[acts == action].sum())
    held_bytes = int(inst.tensor_bytes[i])
    for k, (stats, msgs) in enumerate(steps):
        assert stats.held_tensors == [held_name], (k, stats.held_tensors)
        assert stats.held_bytes == held_bytes
        done = stats.swapped_bytes if action == SWAP else stats.recomputed_bytes
        assert done == planned_bytes - held_bytes, k
        assert stats.hooked_modules == ["fc2"]
        held_msgs = [m for c, m in msgs if c == "HeldTensorWarning"]
        assert len(held_msgs) == 1 and "the forward hook on 'fc2'" in held_msgs[0], msgs
    assert [s.measured for s, _ in steps] == ["operator outputs", FAST, FAST]


def test_a_hook_holding_a_kept_tensor_is_named_after_its_last_reader() -> None:
    # The plan keeps the tensor; the hook keeps it past its last backward reader, where the
    # plan frees it: named on every step, counted as neither swapped nor recomputed.
    model, x = _made()
    inst = profile_step(model, (x,), _loss)
    acts = np.full(inst.n_tensors, SWAP, dtype=np.int8)
    held_name = _entry(inst, "fc1")
    acts[list(inst.tensor_name).index(held_name)] = KEEP
    kept_by_hook: list[torch.Tensor] = []
    handle = model.fc1.register_forward_hook(lambda m, a, out: kept_by_hook.append(out))
    try:
        planned = prepare(model, Plan(inst, acts), Budget.bytes(10 * int(inst.peak_bytes)))
        steps = _steps(planned, model, x, 3)
    finally:
        handle.remove()
    assert [s.measured for s, _ in steps] == ["operator outputs", FAST, FAST]
    swapped = int(np.asarray(inst.tensor_bytes)[acts == SWAP].sum())
    for stats, msgs in steps:
        assert stats.held_tensors == [held_name]
        assert stats.swapped_bytes == swapped and stats.recomputed_bytes == 0
        assert any("the forward hook on 'fc1'" in m for c, m in msgs if c == "HeldTensorWarning")


def test_a_hook_that_pushes_a_fast_step_over_its_budget_is_named_in_the_budget_warning() -> None:
    model, x = _made(batch=4096)  # activations far above the weights' gradients
    inst = profile_step(model, (x,), _loss)
    plan = Plan(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8))
    peak = simulate(inst, plan, 1.0).peak_bytes
    planned = prepare(model, plan, Budget.bytes(peak))
    ((first, _),) = _steps(planned, model, x, 1)
    assert first.over_budget_bytes == 0 and planned.fast, planned.reason
    kept_by_hook: list[torch.Tensor] = []
    hooks = [  # keeping each layer's input and output: every activation but the logits
        m.register_forward_hook(lambda mod, a, out: kept_by_hook.extend((a[0], out)))
        for m in (model.fc1, model.fc2, model.fc3)
    ]
    try:
        ((fast, msgs),) = _steps(planned, model, x, 1)
    finally:
        for h in hooks:
            h.remove()
    assert fast.measured == FAST and fast.over_budget_bytes > 0
    assert {_entry(inst, "fc1"), _entry(inst, "fc2")} <= set(fast.held_tensors)
    over = [m for c, m in msgs if c == "BudgetWarning"]
    assert len(over) == 1 and "the forward hook on 'fc1'" in over[0], msgs
    assert not planned.fast and "over its budget" in planned.reason


def test_the_output_a_callers_variable_keeps_is_not_blamed_on_a_hook() -> None:
    # `out` outlives the step in the caller's frame; the loss saved it (square) and the plan
    # keeps it. With no forward hook on the model, that is the caller's own memory: no warning.
    model, x = _made()
    inst = profile_step(model, (x,), _loss)
    keep = Plan(inst, np.full(inst.n_tensors, KEEP, dtype=np.int8))
    # Room for the output the variable keeps past the profile's free (16 KB over P otherwise).
    planned = prepare(model, keep, Budget.bytes(int(inst.peak_bytes) + 64 * 1024))
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with planned.step() as stats:
                out = model(x)
                _loss(out).backward()
        assert stats.held_tensors == [] and stats.over_budget_bytes == 0
        assert not [w for w in caught if "referenced outside autograd" in str(w.message)]
    assert out.shape == (512, 8) and planned.fast
