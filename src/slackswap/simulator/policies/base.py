"""What every simulator runtime implements: the `Runtime` base class of the one registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import RECOMP
from slackswap.simulator.result import BatchResult, SimResult


@dataclass(frozen=True)
class ExecutionMode:
    """How `slackswap.runtime` runs a runtime's plans on the real PyTorch step.

    ``overlap``: copies on side streams (else on the compute stream); ``prefetch``: copies back
    admitted by the look-ahead rule from the start of backward (else each when compute needs it).
    """

    overlap: bool
    prefetch: bool


class Runtime(ABC):
    """A runtime: how one training step runs a plan's actions (keep / swap / recompute).

    A subclass sets ``name`` (what ``--runtime`` and ``Plan.runtime`` take) and ``description``
    (one line, listed by the CLI), implements `simulate`, and is added with
    `slackswap.simulator.policies.register_runtime`. `simulate_population` and
    `score_population` default to one plan after another; a faster runtime overrides them with
    the same values.

    The API (`slackswap.simulator.simulate`, ``simulate_many``, ``score_many``) has checked the
    inputs before it calls these: ``actions`` is an int8 array of 0 keep / 1 swap / 2 recomp in
    tensor order, ``actions_2d`` a C-contiguous int8 (n_plans, n_tensors) array of the same,
    ``budget_bytes`` the budget in bytes.

    ``execution``: how the real PyTorch runtime (`slackswap.runtime`) runs this runtime's plans;
    None when it cannot.
    """

    name: str
    description: str
    execution: ExecutionMode | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @abstractmethod
    def simulate(
        self, instance: Instance, actions: np.ndarray, budget_bytes: int, timeline: bool = False
    ) -> SimResult:
        """One training step of ``actions``, with its `Timeline` when ``timeline``.

        Deterministic and pure; an infeasible plan gives ``feasible=False`` with a reason, never
        an exception."""

    def simulate_population(
        self, instance: Instance, actions_2d: np.ndarray, budget_bytes: int, n_jobs: int = 1
    ) -> BatchResult:
        """Each row of ``actions_2d`` through `simulate` (``n_jobs`` is a hint a runtime may
        ignore)."""
        rows = [self.simulate(instance, a, budget_bytes) for a in actions_2d]
        return batch_of(rows, instance, budget_bytes)

    def score_population(
        self, instance: Instance, actions_2d: np.ndarray, budget_bytes: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each plan's step seconds (inf when infeasible), bytes over the budget (0 when
        feasible) and whether it recomputes a tensor nothing can rebuild: the values
        `simulate_population` gives."""
        res = self.simulate_population(instance, actions_2d, budget_bytes)
        unrebuildable = ~np.isfinite(instance.tensor_recompute_s)
        invalid = ((actions_2d == RECOMP) & unrebuildable).any(axis=1)
        return res.step_s, res.overflow_bytes, invalid


def batch_of(rows: Sequence[SimResult], instance: Instance, budget_bytes: int) -> BatchResult:
    """One `BatchResult` from the `SimResult` of each plan, in order."""

    def col(key: str, dtype: type) -> np.ndarray:
        return np.array([getattr(r, key) for r in rows], dtype=dtype)

    return BatchResult(
        step_s=col("step_s", np.float64),
        feasible=col("feasible", np.bool_),
        overflow_bytes=col("overflow_bytes", np.int64),
        recompute_s=col("recompute_s", np.float64),
        fwd_stall_s=col("fwd_stall_s", np.float64),
        bwd_stall_s=col("bwd_stall_s", np.float64),
        d2h_bytes=col("d2h_bytes", np.int64),
        h2d_bytes=col("h2d_bytes", np.int64),
        peak_bytes=col("peak_bytes", np.int64),
        evictions=col("evictions", np.int64),
        ideal_s=float(instance.ideal_step_s),
        budget_bytes=int(budget_bytes),
    )
