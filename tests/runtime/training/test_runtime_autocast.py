"""The training path inside ``torch.autocast``: the parameters' casts autocast keeps in its cache
are named when they outlive the plan, and without the cache the plan runs fast, bitwise."""

from __future__ import annotations

import copy
import os
import warnings
from typing import Any

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.plan import KEEP, RECOMP, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import prepare  # noqa: E402
from slackswap.runtime.stats import HeldTensorWarning  # noqa: E402

pytestmark = pytest.mark.torch


class _TwoLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.nn.functional.gelu(self.a(x)))


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.float().square().sum()


def _recompute_casts(model: torch.nn.Module, x: torch.Tensor, cache: bool) -> Plan:
    """The second layer's casts recomputed (its weight's is a saved tensor of its ``addmm``),
    the rest kept."""
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache):
        inst = profile_step(model, (x,), _loss)
    casts = [i for i, n in enumerate(inst.tensor_name) if str(n).startswith("b/_to_copy")]
    assert casts, list(inst.tensor_name)
    return Plan(inst, [RECOMP if i in casts else KEEP for i in range(inst.n_tensors)])


def _train(model: torch.nn.Module, xs: list[Any], planned: Any, cache: bool) -> list[Any]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for x in xs:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache):
            if planned is None:
                _loss(model(x)).backward()
            else:
                with planned.step():
                    _loss(model(x)).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_a_profile_under_autocasts_cache_offers_its_casts_to_no_plan() -> None:
    """The cache keeps each weight's cast from the forward pass past the backward pass: no
    action frees it, so a profile made with the cache on does not offer it to a plan."""
    torch.manual_seed(0)
    model = _TwoLinears()
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inst = profile_step(model, (x,), _loss)
    assert not [n for n in inst.tensor_name if str(n).startswith("b/_to_copy")]


def test_a_weight_cast_autocasts_cache_keeps_is_named_as_its_holder() -> None:
    """A plan made without the cache (that recomputes the casts) run with it on: the cache
    keeps the casts, and the step names it."""
    torch.manual_seed(0)
    model = _TwoLinears()
    x = torch.randn(8, 16)
    planned = prepare(model, _recompute_casts(model, x, cache=False), 1.0)
    with pytest.warns(HeldTensorWarning, match=r"torch.autocast's cache of casts") as caught:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with planned.step() as stats:
                _loss(model(x)).backward()
    assert "cache_enabled=False" in str(caught[0].message)
    assert stats.autocast_cache
    assert any(name.startswith("b/_to_copy") for name in stats.held_tensors)


def test_without_autocasts_cache_a_plan_recomputing_the_casts_runs_fast_and_bitwise() -> None:
    torch.manual_seed(0)
    model = _TwoLinears()
    xs = [torch.randn(8, 16) for _ in range(3)]
    plan = _recompute_casts(model, xs[0], cache=False)
    ref = _train(copy.deepcopy(model), xs, None, cache=False)
    mine = copy.deepcopy(model)
    planned = prepare(mine, plan, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no held tensor, no step over its budget
        got = _train(mine, xs, planned, cache=False)
    assert planned.fast, planned.reason
    assert planned.last_stats is not None and not planned.last_stats.autocast_cache
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
