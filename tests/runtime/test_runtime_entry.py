"""A saved tensor's state in a planned step is explicit, and the runtime changes it only as a
step does: its place in the step (`EntryState`: saved once, released once) and where its bytes
are (`Residency`: on the device, being copied to the host, on the host, copied back, being
rebuilt, freed), each through a checked transition."""

from __future__ import annotations

import os

import numpy as np
import pytest

from slackswap.plan import RECOMP
from slackswap.runtime.entry import (
    RESIDENCY_TRANSITIONS,
    TRANSITIONS,
    Entry,
    EntryState,
    Residency,
    StateError,
)
from slackswap.runtime.observer import StepObserver

S = EntryState
R = Residency
DEV, HOST = object(), object()  # stand-ins for a device storage and a host copy


class _Capture(StepObserver):
    """Keeps each executor of a checked step (`StepObserver.started`)."""

    def __init__(self, made: list) -> None:  # type: ignore[type-arg]
        self.made = made

    def started(self, executor) -> None:  # type: ignore[no-untyped-def]
        self.made.append(executor)


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


def _move(e: Entry, r: Residency) -> None:
    """Move ``e`` to ``r`` with the storages ``r`` holds."""
    device = DEV if r in (R.DEVICE, R.TO_HOST, R.TO_DEVICE) else None
    host = HOST if r in (R.TO_HOST, R.HOST, R.TO_DEVICE) else None
    e.move(r, device=device, host=host)


@pytest.mark.parametrize(
    "path",
    [
        (R.DEVICE, R.FREED),  # kept
        (R.DEVICE, R.HOST, R.TO_DEVICE, R.HOST, R.TO_DEVICE, R.FREED),  # swapped, evicted once
        (R.DEVICE, R.TO_HOST, R.HOST, R.TO_DEVICE, R.DEVICE, R.FREED),  # a rebuild reads it
        (R.DEVICE, R.TO_HOST, R.DEVICE, R.FREED),  # released while its copy still held it
        (R.REBUILDING, R.DEVICE, R.FREED),  # recomputed
        (R.FREED,),  # released before it was ever rebuilt
    ],
)
def test_where_a_saved_tensor_is_changes_as_a_step_moves_it(path: tuple[Residency, ...]) -> None:
    e = Entry(2, 1, 64, "blocks.0/gelu.out")
    assert e.residency is R.ABSENT and not e.on_device
    for r in path:
        _move(e, r)
        assert e.residency is r
        assert e.on_device == (e.device is not None)
    assert e.device is None and e.host is None


@pytest.mark.parametrize(
    "path",
    [
        (R.TO_DEVICE,),  # copied back before it was saved
        (R.DEVICE, R.TO_DEVICE),  # copied back while on the device
        (R.DEVICE, R.HOST, R.DEVICE),  # on the device again without a copy back
        (R.DEVICE, R.HOST, R.REBUILDING),  # a swapped tensor rebuilt
        (R.REBUILDING, R.REBUILDING),  # rebuilt twice at once
        (R.REBUILDING, R.DEVICE, R.REBUILDING),  # rebuilt again while on the device
        (R.DEVICE, R.FREED, R.DEVICE),  # used after it was freed
        (R.DEVICE, R.FREED, R.FREED),
    ],
)
def test_other_residency_changes_are_refused_naming_the_tensor_and_both_states(
    path: tuple[Residency, ...],
) -> None:
    e = Entry(5, 1, 64, "h.0.mlp/mul.out")
    for r in path[:-1]:
        _move(e, r)
    before = (e.residency, e.device, e.host)
    with pytest.raises(StateError) as err:
        _move(e, path[-1])
    msg = str(err.value)
    assert "'h.0.mlp/mul.out' (#5)" in msg and "\n" not in msg
    assert f"{before[0].value} -> {path[-1].value}" in msg
    assert (e.residency, e.device, e.host) == before  # left as it was


@pytest.mark.parametrize(
    "state,device,host",
    [
        (R.DEVICE, None, None),  # on the device without a device storage
        (R.DEVICE, DEV, HOST),  # on the device only, with a host copy
        (R.HOST, DEV, HOST),  # on the host, still holding the device storage
        (R.TO_HOST, DEV, None),  # being copied to the host without a host copy
        (R.REBUILDING, DEV, None),
    ],
)
def test_storages_that_disagree_with_the_new_state_are_refused(
    state: Residency, device: object, host: object
) -> None:
    e = Entry(1, 1, 64)
    if state in (R.HOST, R.TO_HOST):
        _move(e, R.DEVICE)
    before = e.residency
    with pytest.raises(StateError, match=r"saved tensor #1: .* does not agree with"):
        e.move(state, device=device, host=host)
    assert e.residency is before


def test_every_residency_is_in_the_table_and_only_freed_is_final() -> None:
    assert set(RESIDENCY_TRANSITIONS) == set(Residency)
    for r, to in RESIDENCY_TRANSITIONS.items():
        assert (not to) == (r is R.FREED)
        assert r is R.FREED or R.FREED in to  # closing a step lets everything go
    e = Entry(0, 0, 8)
    _move(e, R.DEVICE)
    e.free()
    e.free()  # idempotent: a step closes after its entries were released
    assert e.residency is R.FREED


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
    factory = _Capture(made)

    with apply(Plan(inst, acts), 1.0, model=model, schedule="simulated", observer=factory):
        loss_fn(model(*inputs)).backward()
    assert {e.state for e in made[0].entries} == {S.RELEASED}
    assert {e.residency for e in made[0].entries} == {R.FREED}


def _paths_of_a_step(kind: str, monkeypatch) -> tuple[dict[int, list[Residency]], list[Entry]]:  # type: ignore[no-untyped-def]
    """Each entry's residencies, in order, over one checked step (CPU, replayed copies)."""
    from examples import models as example_models
    from slackswap.plan import KEEP, RECOMP, SWAP, Plan
    from slackswap.profiling import profile_step
    from slackswap.runtime import apply
    from slackswap.runtime.executor import PlanExecutor

    model, inputs, loss_fn = example_models.gpt()
    inst = profile_step(model, inputs, loss_fn)
    action = {"keep": KEEP, "swap": SWAP, "recompute": RECOMP}[kind]
    acts = np.full(inst.n_tensors, action, dtype=np.int8)
    acts[~np.isfinite(inst.tensor_recompute_s)] = KEEP if action == RECOMP else action
    paths: dict[int, list[Residency]] = {}
    move = Entry.move

    def recording(e: Entry, r: Residency, **kw) -> None:  # type: ignore[no-untyped-def]
        move(e, r, **kw)
        paths.setdefault(e.index, []).append(r)

    monkeypatch.setattr(Entry, "move", recording)
    made: list[PlanExecutor] = []
    factory = _Capture(made)

    with apply(Plan(inst, acts), 1.0, model=model, schedule="simulated", observer=factory):
        loss_fn(model(*inputs)).backward()
    return paths, made[0].entries


def test_the_checked_path_moves_each_saved_tensor_through_its_residencies(monkeypatch) -> None:
    """Kept: on the device, then freed. Swapped, replaying the simulator's copies: its device
    storage held until the simulated copy to the host ends, copied back before it is read
    when that copy ended, its host copy dropped when released, then freed. Recomputed: rebuilt
    when first read, then freed."""
    paths, entries = _paths_of_a_step("keep", monkeypatch)
    assert {tuple(paths[e.index]) for e in entries} == {(R.DEVICE, R.FREED)}
    monkeypatch.undo()
    paths, entries = _paths_of_a_step("swap", monkeypatch)
    swapped = {tuple(paths[e.index]) for e in entries}
    assert swapped <= {
        (R.TO_HOST, R.HOST, R.TO_DEVICE, R.DEVICE, R.FREED),
        (R.TO_HOST, R.DEVICE, R.FREED),  # its simulated copy outlived its readers
    }
    assert (R.TO_HOST, R.HOST, R.TO_DEVICE, R.DEVICE, R.FREED) in swapped
    monkeypatch.undo()
    paths, entries = _paths_of_a_step("recompute", monkeypatch)
    assert {tuple(paths[e.index]) for e in entries if e.action == RECOMP} == {
        (R.REBUILDING, R.DEVICE, R.FREED)
    }


def test_fetching_a_tensor_already_on_the_device_is_a_state_error() -> None:
    """A runtime bug (a second copy back) is caught where it happens, naming the tensor."""
    from examples import models as example_models
    from slackswap.plan import SWAP
    from slackswap.profiling import profile_step
    from slackswap.runtime.executor import PlanExecutor

    model, inputs, loss_fn = example_models.gpt()
    inst = profile_step(model, inputs, loss_fn)
    ex = PlanExecutor(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8), 1 << 30, model)
    e = ex.entries[0]
    e.to(S.SAVED)
    e.move(R.DEVICE, device=torch.zeros(4).untyped_storage())
    with pytest.raises(StateError, match=rf"{inst.tensor_name[0]!r} \(#0\): on the device -> "):
        ex.copies.fetch(e)


def test_a_tensor_released_while_its_copy_to_the_host_runs_is_not_polled_again() -> None:
    """CUDA: autograd may drop a swapped tensor (its last reader done) while its copy to the
    host still runs; polling the finished copies then skips it (its copy's event went with it:
    polling raised AttributeError on None)."""
    from examples import models as example_models
    from slackswap.plan import SWAP
    from slackswap.profiling import profile_step
    from slackswap.runtime.executor import PlanExecutor

    class RunningCopy:  # a CUDA event whose copy has not ended
        def query(self) -> bool:
            return False

    model, inputs, loss_fn = example_models.gpt()
    inst = profile_step(model, inputs, loss_fn)
    ex = PlanExecutor(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8), 1 << 30, model)
    e = ex.entries[0]
    e.to(S.SAVED)
    e.move(R.DEVICE, device=torch.zeros(4).untyped_storage())
    e.move(R.TO_HOST, host=torch.zeros(4).untyped_storage(), event=RunningCopy())
    ex.copies._offloading.append(e)
    ex.copies.poll_offloads(backward_starts=False)
    assert e.residency is R.TO_HOST  # still copying
    ex.copies.release(e)
    assert e.residency is R.FREED and e.device is None and e.host is None
    ex.copies.poll_offloads(backward_starts=False)
    assert not ex.copies._offloading


def test_a_tensor_released_before_its_simulated_copy_ended_is_freed_when_it_ends() -> None:
    """Replaying the simulator's copies, a swapped tensor's device storage stays until its
    simulated copy to the host ends. Released before then (its last reader done), it is
    freed when that copy ends, not held to the end of the step."""
    from examples import models as example_models
    from slackswap.plan import SWAP
    from slackswap.profiling import profile_step
    from slackswap.runtime.executor import PlanExecutor

    model, inputs, loss_fn = example_models.gpt()
    inst = profile_step(model, inputs, loss_fn)
    schedule: dict[str, dict[int, list[int]]] = {
        "d2h_done": {0: [0]}, "h2d_start": {}, "evict": {}, "late": {}
    }  # fmt: skip
    acts = np.full(inst.n_tensors, SWAP, dtype=np.int8)
    ex = PlanExecutor(inst, acts, 1 << 30, model, schedule=schedule)
    e = ex.entries[0]
    e.to(S.SAVED)
    ex.copies.offload(e, torch.zeros(4).untyped_storage())
    assert e.residency is R.TO_HOST  # held until the simulated copy ends
    ex.copies.release(e)
    assert e.residency is R.DEVICE and e.host is None  # still held for the copy
    ex.copies.let_go_due()
    assert e.residency is R.FREED and e.device is None
