"""Tiny solvers for the batch-runner tests; `registered()` adds them to the registry as ``toy-*``.

They are pickled by value so loky and Dask worker processes need not import this module. They
are registered only inside a test (and removed after) so the shared conformance suite, which
runs every registered solver, never sees them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from slackswap.plan import KEEP, RECOMP, Plan
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.registry import REGISTRY


class ToyKeep(Solver):
    """Keeps every tensor (feasible only at budgets >= P); optional delay per solve."""

    key = "toy-keep"

    def __init__(self, *, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        log = os.environ.get("SLACKSWAP_TOY_LOG")
        if log:  # count solves across processes (the resume test)
            with open(log, "a") as fh:
                fh.write(f"{seed}\n")
        time.sleep(self.delay_s)
        return Plan.keep_all(instance)


class ToyRecompute(Solver):
    """Recomputes a seeded random half of the recomputable tensors, keeps the rest."""

    key = "toy-recompute"
    tags = Tags(deterministic=True)

    def __init__(self, *, share: float = 0.5) -> None:
        self.share = share

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(seed)
        finite = np.isfinite(instance.tensor_recompute_s)
        pick = finite & (rng.random(instance.n_tensors) < self.share)
        return Plan(instance, np.where(pick, RECOMP, KEEP).astype(np.int8))


class ToyOnce(Solver):
    """Keeps every tensor and declares that the seed never changes its plan: a sweep runs it
    once per case (``Tags.uses_seed=False``)."""

    key = "toy-once"
    tags = Tags(uses_seed=False)

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        return Plan.keep_all(instance)


class ToyBoom(Solver):
    key = "toy-boom"

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        raise RuntimeError("toy solver failure")


class ToySleep(Solver):
    """Never returns in time: sleeps ``seconds`` (interrupted by the wall-clock guard)."""

    key = "toy-sleep"
    #: Sleeps that ran to their end (in this process): none, when every call was guarded.
    finished = 0

    def __init__(self, *, seconds: float = 60.0) -> None:
        self.seconds = seconds

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        time.sleep(self.seconds)
        type(self).finished += 1
        return Plan.keep_all(instance)


class ToySleepOn(Solver):
    """Sleeps ``seconds`` on the instance named ``name`` only (not on the warm-up's): keep-all."""

    key = "toy-sleep-on"

    def __init__(self, *, name: str, seconds: float = 60.0) -> None:
        self.name = name
        self.seconds = seconds

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        if instance.name == self.name:
            time.sleep(self.seconds)
        return Plan.keep_all(instance)


class ToyOutOfTime(Solver):
    """A search that spends its whole time limit and returns its best plan: keep-all."""

    key = "toy-out-of-time"
    tags = Tags(uses_time_limit=True)

    def solve(self, instance, budget, *, deadline, seed):  # type: ignore[no-untyped-def]
        return Solution(Plan.keep_all(instance), timed_out=True)


TOYS = (ToyKeep, ToyRecompute, ToyOnce, ToyBoom, ToySleep, ToyOutOfTime)


@contextmanager
def registered() -> Iterator[None]:
    """Register the toy solvers for the duration of a block."""
    added = [c.key for c in TOYS if c.key not in REGISTRY]
    for cls in TOYS:
        if cls.key in added:
            REGISTRY.register(cls.key, cls)
    try:
        yield
    finally:
        for key in added:
            REGISTRY._entries.pop(key, None)


try:  # loky's cloudpickle: ship these classes by value to worker processes
    from joblib.externals import cloudpickle as _jcp

    _jcp.register_pickle_by_value(sys.modules[__name__])
except (ImportError, ValueError):
    pass
try:
    import cloudpickle as _cp

    _cp.register_pickle_by_value(sys.modules[__name__])
except (ImportError, ValueError):
    pass
