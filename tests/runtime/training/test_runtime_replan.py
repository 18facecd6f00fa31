"""`prepare(..., replan=True)` with the loss a training loop computes: a classification loss
with targets, given each step's batch (``loss_fn(output, batch)``, ``planned.step(batch)``)."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.errors import UserError  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import ShapeChangeError, prepare  # noqa: E402
from slackswap.solvers import run  # noqa: E402

pytestmark = pytest.mark.torch

CLASSES = 10
BATCH_SIZES = (4, 4, 5, 5, 3)  # the data loader's last batches are smaller, as they often are
# 80%: the smallest budget with a plan is 75.8% of P at batch size 4 (the weights' gradients
# weigh as much as the activations of so small a batch).
BUDGET = 0.8


@pytest.fixture(autouse=True)
def _one_thread():  # type: ignore[no-untyped-def]
    # Bitwise comparisons between runs: one thread, so no reduction depends on scheduling.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(3)
        )
        self.inp = torch.nn.Linear(16, 32)
        self.head = torch.nn.Linear(32, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.inp(x))
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def loss_fn(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(output, batch[1])


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(n, 16, generator=g), torch.randint(0, CLASSES, (n,), generator=g))
        for n in BATCH_SIZES
    ]


def _solver(inst: Any, budget: Any) -> Any:
    return run(inst, budget, "slackswap", time_limit=0.5, find_min_budget=False).plan


def _prepared(model: torch.nn.Module, batch: Any, **kw: Any) -> Any:
    inst = profile_step(model, (batch[0],), lambda out: loss_fn(out, batch))
    plan = _solver(inst, BUDGET)
    assert plan is not None and plan.actions.any(), "the test needs a plan that swaps or recomputes"
    return prepare(model, plan, BUDGET, replan=True, solver=_solver, **kw)


def test_replan_with_a_loss_that_takes_the_batch_trains_bitwise_across_batch_sizes() -> None:
    torch.manual_seed(0)
    model = Classifier()
    reference = copy.deepcopy(model)
    batches = _batches()
    planned = _prepared(model, batches[0], loss_fn=loss_fn)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    plans = []
    for k, batch in enumerate(batches):
        x, _ = batch
        ref_opt.zero_grad(set_to_none=True)
        want = loss_fn(reference(x), batch)
        want.backward()
        ref_opt.step()

        opt.zero_grad(set_to_none=True)
        with planned.step(batch):
            got = loss_fn(model(x), batch)
            got.backward()
        opt.step()
        plans.append(planned.plan)
        assert torch.equal(got.detach(), want.detach()), f"step {k}: loss {got} != {want}"
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            assert torch.equal(p, q), f"step {k}: parameter {name!r} differs"
    # One plan per batch size, each for its shapes: 4 (prepared), 5 and 3 (replanned).
    assert plans[0] is plans[1] and plans[2] is plans[3]
    assert len({id(p) for p in plans}) == 3
    sizes = [p.instance.meta["runtime_signature"]["shapes"][0][0] for p in plans]
    assert sizes == list(BATCH_SIZES), sizes
    assert planned.fast, planned.reason


def test_replan_with_a_loss_that_takes_the_batch_needs_the_batch() -> None:
    """Without the batch, the new shapes cannot be profiled with their targets: one line."""
    torch.manual_seed(0)
    model = Classifier()
    batches = _batches()
    planned = _prepared(model, batches[0], loss_fn=loss_fn)
    for batch in batches[:2]:
        model.zero_grad(set_to_none=True)
        with planned.step(batch):
            loss_fn(model(batch[0]), batch).backward()
    batch = batches[2]
    with pytest.raises(ShapeChangeError, match=r"planned\.step\(batch\)") as err:
        with planned.step():
            loss_fn(model(batch[0]), batch).backward()
    assert "\n" not in str(err.value)


def test_a_batch_for_a_loss_that_takes_the_output_alone_is_refused() -> None:
    torch.manual_seed(0)
    model = Classifier()
    batch = _batches()[0]
    planned = _prepared(model, batch, loss_fn=lambda out: out.sum())
    with pytest.raises(UserError, match="takes the output alone"):
        with planned.step(batch):
            pass
