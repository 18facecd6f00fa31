"""A saved tensor's state in a planned step is explicit (`EntryState`), and the runtime changes
it only as a step does: saved once, released once."""

from __future__ import annotations

import os

import numpy as np
import pytest

from slackswap.runtime.entry import TRANSITIONS, Entry, EntryState, StateError

S = EntryState


def test_a_step_saves_then_releases() -> None:
    e = Entry(3, 0, 64)
    assert e.state is S.NOT_SAVED and not e.packed and not e.released
    e.to(S.SAVED)
    assert e.packed and not e.released
    e.to(S.RELEASED)
    assert e.packed and e.released


@pytest.mark.parametrize(
    "path",
    [
        (S.RELEASED,),  # released before autograd saved it
        (S.SAVED, S.SAVED),  # saved twice
        (S.SAVED, S.NOT_SAVED),
        (S.SAVED, S.RELEASED, S.SAVED),  # saved again after its last reader
        (S.SAVED, S.RELEASED, S.RELEASED),  # released twice
    ],
)
def test_other_state_changes_are_refused(path: tuple[EntryState, ...]) -> None:
    e = Entry(7, 1, 64)
    for s in path[:-1]:
        e.to(s)
    before = e.state
    with pytest.raises(StateError, match=r"saved tensor #7: .* -> .* is no state change") as err:
        e.to(path[-1])
    assert "\n" not in str(err.value)
    assert e.state is before  # a refused change leaves the state as it was


def test_every_state_is_in_the_table() -> None:
    assert set(TRANSITIONS) == set(EntryState)


if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # noqa: F401 - CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind", ["keep", "swap", "recompute"])
def test_after_a_planned_step_every_saved_tensor_is_released(kind: str) -> None:
    from examples import models as example_models
    from slackswap.plan import KEEP, RECOMP, SWAP, Plan
    from slackswap.profiling import profile_step
    from slackswap.runtime import apply
    from slackswap.runtime.executor import PlanExecutor

    model, inputs, loss_fn = example_models.gpt()
    inst = profile_step(model, inputs, loss_fn)
    action = {"keep": KEEP, "swap": SWAP, "recompute": RECOMP}[kind]
    acts = np.full(inst.n_tensors, action, dtype=np.int8)
    if action == RECOMP:
        # Only what has a finite recompute cost; the rest kept.
        acts[~np.isfinite(inst.tensor_recompute_s)] = KEEP
    made: list[PlanExecutor] = []

    def factory(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(PlanExecutor(*args, **kwargs))
        return made[-1]

    with apply(Plan(inst, acts), 1.0, model=model, schedule="simulated", _executor=factory):
        loss_fn(model(*inputs)).backward()
    assert {e.state for e in made[0].entries} == {S.RELEASED}
