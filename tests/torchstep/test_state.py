"""`put_back`: the one way the profiler and the runtime keep a model's buffers as one step
leaves them."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.torchstep.state import put_back  # noqa: E402

pytestmark = pytest.mark.torch


def test_buffers_updated_in_the_block_are_put_back_after_it() -> None:
    bn = torch.nn.BatchNorm1d(4)
    before = [b.clone() for b in bn.buffers()]
    with put_back(list(bn.buffers())):
        bn(torch.randn(8, 4))
        inside = [b.clone() for b in bn.buffers()]
    assert not torch.equal(inside[0], before[0])  # the block saw its own update
    assert all(torch.equal(a, b) for a, b in zip(bn.buffers(), before, strict=True))


def test_they_are_put_back_when_the_block_raises() -> None:
    t = torch.zeros(3)
    with pytest.raises(RuntimeError, match="boom"), put_back([t]):
        t.add_(1)
        raise RuntimeError("boom")
    assert torch.equal(t, torch.zeros(3))
