"""A recorded call's arguments as a rebuild fills them in (`records.Call`)."""

from __future__ import annotations

import os
from typing import Any

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.runtime.records import Call, Ref  # noqa: E402
from slackswap.torchstep.torchapi import tree_flatten  # noqa: E402

pytestmark = pytest.mark.torch


def _template(args: Any, kwargs: Any, activations: list[int]) -> tuple[Any, list[Any]]:
    flat, spec = tree_flatten((args, kwargs))
    return spec, [Ref(k, x) if k in activations else x for k, x in enumerate(flat)]


@pytest.mark.parametrize(
    ("args", "kwargs", "activations", "mutated", "fast"),
    [
        # convolution: the activation is the first positional argument
        ((torch.ones(1, 2, 4, 4), torch.ones(3, 2, 3, 3), None, [1, 1], [1, 1]), {}, [0],
         set(), True),
        # an activation passed by keyword, a buffer written in place
        ((torch.ones(2),), {"other": torch.ones(2), "out": torch.zeros(2)}, [1], {2}, True),
        # cat: the activations inside a list, filled in through the pytree
        (([torch.ones(2), torch.ones(3)],), {"dim": 0}, [0, 1], set(), False),
    ],
)  # fmt: skip
def test_a_call_is_filled_in_as_the_pytree_would_be(
    args: Any, kwargs: Any, activations: list[int], mutated: set[int], fast: bool
) -> None:
    spec, flat = _template(args, kwargs, activations)
    call = Call(spec, flat, frozenset(mutated))
    assert (call.places is not None) is fast
    assert call.varying == sorted({*activations, *mutated})
    real = {i: torch.full((1,), float(i)) for i in call.varying}
    got_args, got_kwargs = call.fill(flat, real)
    want = [real.get(i, x) for i, x in enumerate(flat)]
    got = tree_flatten((tuple(got_args), dict(got_kwargs)))[0]
    assert len(got) == len(want) and all(a is b for a, b in zip(got, want, strict=True))
    again_args, _ = call.fill(flat, {i: torch.zeros(1) for i in call.varying})
    assert again_args is not got_args  # each rebuild gets its own argument list
