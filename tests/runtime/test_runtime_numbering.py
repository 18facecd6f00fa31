"""The executor is off the profiler: not a `Recorder`, it numbers a live step with the
profiler's value numbering (`torchstep.values`) and gets the profile's value ids."""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # noqa: F401 - CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.plan import KEEP, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.profiling import step as step_module  # noqa: E402
from slackswap.profiling.recorder import Recorder  # noqa: E402
from slackswap.runtime import apply  # noqa: E402
from slackswap.runtime.executor import PlanExecutor  # noqa: E402
from slackswap.runtime.observer import StepObserver  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402


class _Capture(StepObserver):
    """Keeps each executor of a checked step (`StepObserver.started`)."""

    def __init__(self, made: list) -> None:  # type: ignore[type-arg]
        self.made = made

    def started(self, executor) -> None:  # type: ignore[no-untyped-def]
        self.made.append(executor)


def test_the_executor_is_no_recorder() -> None:
    assert not issubclass(PlanExecutor, Recorder)
    assert PlanExecutor.__mro__[1].__name__ == "TorchDispatchMode"


@pytest.mark.parametrize("name", ["gpt", "resnet", "lstm", "checkpoint_nonreentrant"])
def test_the_executor_numbers_values_and_operators_as_the_profiler(monkeypatch, name: str) -> None:
    made = getattr(pf, name)()
    model, inputs = made[0], made[1]
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    loss_fn = made[2] if len(made) > 2 else (lambda out: out.float().sum())
    recorders: list[Recorder] = []

    class Keeping(Recorder):
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            recorders.append(self)

    monkeypatch.setattr(step_module, "Recorder", Keeping)
    inst = profile_step(model, inputs, loss_fn)
    profiled = recorders[0].trace
    executors: list[PlanExecutor] = []
    factory = _Capture(executors)

    keep = np.full(inst.n_tensors, KEEP, dtype=np.int8)
    with apply(Plan(inst, keep), 1.0, model=model, schedule="simulated", observer=factory):
        loss_fn(model(*inputs)).backward()
    live = executors[0].trace
    shift = int(inst.meta["runtime_signature"]["op_shift"])
    assert shift == 0
    assert [(v.producer, v.dtype, v.shape, v.nbytes) for v in live.values] == [
        (v.producer, v.dtype, v.shape, v.nbytes) for v in profiled.values
    ]
    assert [(o.aten, o.phase, o.module, o.writes) for o in live.ops] == [
        (o.aten, o.phase, o.module, o.writes) for o in profiled.ops
    ]


def test_an_observer_is_told_of_the_checked_step_in_order() -> None:
    """`StepObserver`: started before the first operator, each forward operator before and
    after it runs, each pack with its plan entry, closing last (records still held)."""
    model, inputs, loss_fn = pf.gpt()
    inst = profile_step(model, inputs, loss_fn)
    events: list[tuple[str, int]] = []

    class Recording(StepObserver):
        def started(self, executor) -> None:  # type: ignore[no-untyped-def]
            events.append(("started", len(executor.trace.ops)))

        def before_forward_op(self, func, args, kwargs):  # type: ignore[no-untyped-def]
            return len(events)

        def after_forward_op(self, token, index, func, args, kwargs) -> None:  # type: ignore[no-untyped-def]
            events.append(("op", index))

        def packed(self, t, entry: int) -> None:  # type: ignore[no-untyped-def]
            events.append(("packed", entry))

        def closing(self, executor) -> None:  # type: ignore[no-untyped-def]
            events.append(("closing", len(executor.trace.ops)))

    keep = np.full(inst.n_tensors, KEEP, dtype=np.int8)
    with apply(Plan(inst, keep), 1.0, model=model, schedule="simulated", observer=Recording()):
        loss_fn(model(*inputs)).backward()
    assert events[0] == ("started", 0) and events[-1] == ("closing", inst.n_ops)
    ops = [i for kind, i in events if kind == "op"]
    assert ops == sorted(ops) and inst.n_forward_ops - 1 <= max(ops) <= inst.n_forward_ops
    packed = {i for kind, i in events if kind == "packed" and i >= 0}
    assert packed == set(range(inst.n_tensors))
