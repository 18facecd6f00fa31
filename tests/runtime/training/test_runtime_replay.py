"""What a rebuild's replay does per operator, and what it does once (`rebuild.Rebuilder`)."""

from __future__ import annotations

import os
from typing import Any

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.plan import KEEP, RECOMP  # noqa: E402
from slackswap.runtime import rebuild  # noqa: E402
from slackswap.runtime.entry import Entry, EntryState, Residency  # noqa: E402
from slackswap.runtime.rebuild import Rebuilder, _OpRecord, _Ref  # noqa: E402
from slackswap.torchstep.torchapi import tree_flatten  # noqa: E402

pytestmark = pytest.mark.torch


class _Chain:
    """Values 0 (a model input) -> 1 (operator 1) -> 2 (operator 2); values 1 and 2 are saved
    tensors 0 and 1."""

    def __init__(self) -> None:
        self.producers = {0: -1, 1: 1, 2: 2}
        self.asked = 0

    def producer(self, v: int) -> int:
        self.asked += 1
        return self.producers[v]

    def storage(self, v: int) -> int:
        return v


def _record(value_in: int, value_out: int, x: torch.Tensor, grad: bool = True) -> _OpRecord:
    flat, spec = tree_flatten(((x,), {}))
    return _OpRecord(
        torch.ops.aten.relu.default, (spec, [_Ref(value_in, x)]), frozenset(), None, grad,
        {value_out: ("out", 0)},
    )  # fmt: skip


def _rebuilder(numbering: Any, entries: list[Entry]) -> Rebuilder:
    x = torch.ones(3)
    rb = Rebuilder(
        numbering, None,  # type: ignore[arg-type]
        entries, {1: 0, 2: 1},
        materialise=lambda e: e.device, quiet=lambda: torch.no_grad(),
    )  # fmt: skip
    rb.records = {1: _record(0, 1, x), 2: _record(1, 2, x)}
    rb.externals = {0: x}
    return rb


def test_a_chain_is_walked_again_only_when_a_rebuild_input_changes() -> None:
    numbering = _Chain()
    entries = [Entry(0, KEEP, 12), Entry(1, RECOMP, 12)]
    rb = _rebuilder(numbering, entries)
    rb.chains = {}
    assert rb._chain_reads(2) == ({2: 0, 1: 1}, 1)  # saved tensor 0 is a rebuild input
    walked = numbering.asked
    counts, _ = rb._chain_reads(2)
    counts[1] = 0  # a rebuild's _Cache counts down its own copy
    assert rb._chain_reads(2) == ({2: 0, 1: 1}, 1)
    assert numbering.asked == walked  # the memo, not a second walk
    # Released and let go: the chain runs operator 1 too, from the model input.
    entries[0].to(EntryState.SAVED)
    entries[0].to(EntryState.RELEASED)
    assert rb._chain_reads(2) == ({2: 0, 1: 1, 0: 1}, 2)
    assert numbering.asked > walked


def test_a_replay_sets_the_grad_mode_only_where_the_record_differs(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    set_to: list[bool] = []
    real = rebuild.set_grad_mode

    def spy(mode: bool) -> None:
        set_to.append(mode)
        real(mode)

    monkeypatch.setattr(rebuild, "set_grad_mode", spy)
    seen: list[bool] = []

    def op(t: torch.Tensor) -> torch.Tensor:
        seen.append(torch.is_grad_enabled())
        return t + 1

    x = torch.ones(2)
    for grad in (False, True):
        rec = _OpRecord(op, None, frozenset(), None, grad, {})
        with torch.no_grad():
            set_to.clear()
            out = rebuild._replay(rec, (x,), {})
            assert not torch.is_grad_enabled()
            calls = list(set_to)
        assert torch.equal(out, x + 1)
        # The first ran in the mode it recorded (off, as the backward pass runs); the second
        # was recorded with grad on: on for the call, off again after.
        assert calls == ([] if grad is False else [True, False])
    assert seen == [False, True]


def test_a_replay_of_an_operator_that_draws_no_random_numbers_leaves_the_generators(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    entered: list[Any] = []
    real = rebuild._set_rng

    def spy(rng: Any) -> Any:
        entered.append(rng)
        return real(rng)

    monkeypatch.setattr(rebuild, "_set_rng", spy)
    numbering = _Chain()
    entries = [Entry(0, KEEP, 12), Entry(1, RECOMP, 12)]
    rb = _rebuilder(numbering, entries)
    x = rb.externals[0]
    rb.records[1] = rb.records[1].with_rng(rebuild._rng_state([x]))
    entries[0].to(EntryState.SAVED)
    entries[0].to(EntryState.RELEASED)
    cache = rebuild._Cache(2, rb._chain_reads(2)[0])
    storage = rebuild._storage_of(rb._compute(2, cache))
    assert torch.equal(rebuild.view(storage, torch.float32, 0, (3,), (1,)), torch.ones(3))
    # Operator 1 alone: its recorded state put in, then the generators' own put back.
    assert len(entered) == 2 and entered[0] is rb.records[1].rng


def test_a_compiled_rebuild_takes_the_walks_steps_and_is_made_again_when_an_input_changes() -> None:
    """`compile_rebuild` takes the steps the generic walk takes: with saved tensor 0 a rebuild
    input, one operator from it; once it is released and let go, both operators from the model
    input, the intermediate dropped after its last reader. The program says when it no longer
    holds, and each run gives what the generic walk computes."""
    from slackswap.runtime.rebuild_program import (
        EXTERNAL_INPUT,
        INPUT,
        OP,
        compile_rebuild,
    )

    numbering = _Chain()
    entries = [Entry(0, KEEP, 12), Entry(1, RECOMP, 12)]
    rb = _rebuilder(numbering, entries)
    rb.chains = {}
    x = rb.externals[0]
    flat, spec = tree_flatten(((_Ref(1, x), _Ref(1, x)), {}))  # value 1 times itself
    square = torch.ops.aten.mul.Tensor
    rb.records[2] = _OpRecord(square, (spec, flat), frozenset(), None, True, {2: ("out", 0)})
    resident = torch.full((3,), 2.0)
    entries[0].to(EntryState.SAVED)
    entries[0].move(Residency.DEVICE, device=resident.untyped_storage())
    one = compile_rebuild(rb, 2)
    assert [s[0] for s in one.steps] == [INPUT, OP]
    assert one.holds(entries)
    assert torch.equal(one.run(rb), torch.full((3,), 4.0))  # 2 * 2, from the resident input
    entries[0].to(EntryState.RELEASED)
    entries[0].free()
    assert not one.holds(entries)
    two = compile_rebuild(rb, 2)
    assert [s[0] for s in two.steps] == [EXTERNAL_INPUT, OP, OP]
    (_, _, _, _, writes, _), (_, _, _, _, _, drops) = two.steps[1], two.steps[2]
    assert drops == (writes[0][0],)  # value 1 goes after its last reader; the target stays
    got = two.run(rb)
    generic = rb._compute(2, rebuild._Cache(2, rb._chain_reads(2)[0]))
    assert torch.equal(got, torch.ones(3)) and torch.equal(got, generic)
