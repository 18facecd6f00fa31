"""What the simulator returns: `SimResult` for one plan, `BatchResult` for many, `Timeline`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

#: Compute-lane record kinds of a `Timeline`.
COMPUTE_KINDS = ("op", "rebuild", "stall_copy", "stall_mem", "evict")
#: Copy engines of a `Timeline`.
ENGINES = ("D2H", "H2D")


@dataclass(frozen=True, eq=False)
class Timeline:
    """Everything that happened, in seconds from the start of the step.

    compute_*: one row per operator, rebuild, stall (interval) or eviction (instant); kind indexes
    `COMPUTE_KINDS`, op is the operator index, tensor the tensor index (-1 when none).
    copy_*: one row per finished copy; engine indexes `ENGINES`.
    mem_*: bytes in use after each change.
    """

    compute_start_s: np.ndarray
    compute_end_s: np.ndarray
    compute_kind: np.ndarray
    compute_op: np.ndarray
    compute_tensor: np.ndarray
    copy_engine: np.ndarray
    copy_tensor: np.ndarray
    copy_start_s: np.ndarray
    copy_end_s: np.ndarray
    mem_time_s: np.ndarray
    mem_bytes: np.ndarray

    def __repr__(self) -> str:
        # Counts, not the arrays: a step has thousands of records (it is inside SimResult's repr).
        end = float(self.compute_end_s.max()) if self.compute_end_s.size else 0.0
        return (
            f"Timeline({self.compute_start_s.size} compute records, {self.copy_start_s.size} "
            f"copies, {self.mem_time_s.size} memory changes, 0 to {end:.6g} s)"
        )


@dataclass(frozen=True)
class SimResult:
    """One simulated training step (seconds, bytes). Infeasible: step_s inf, throughput 0."""

    step_s: float
    ideal_s: float
    throughput: float
    recompute_s: float
    fwd_stall_s: float
    fwd_stall_copy_s: float
    fwd_stall_mem_s: float
    bwd_stall_s: float
    bwd_stall_copy_s: float
    bwd_stall_mem_s: float
    d2h_bytes: int
    h2d_bytes: int
    peak_bytes: int
    budget_bytes: int
    feasible: bool
    reason: str
    fail_op: int
    overflow_bytes: int
    evictions: int
    runtime: str = "barrier-free"
    timeline: Timeline | None = None

    def to_dict(self) -> dict[str, Any]:
        """The metrics as plain JSON-ready values (timeline left out; inf step as None)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "timeline":
                continue
            v = getattr(self, f.name)
            if isinstance(v, float) and not np.isfinite(v):
                v = None
            out[f.name] = v
        return out


@dataclass(frozen=True, eq=False)
class BatchResult:
    """Metrics of a population, one entry per plan (the values `simulate` gives, bit for bit)."""

    step_s: np.ndarray
    feasible: np.ndarray
    overflow_bytes: np.ndarray
    recompute_s: np.ndarray
    fwd_stall_s: np.ndarray
    bwd_stall_s: np.ndarray
    d2h_bytes: np.ndarray
    h2d_bytes: np.ndarray
    peak_bytes: np.ndarray
    evictions: np.ndarray
    ideal_s: float
    budget_bytes: int

    @property
    def throughput(self) -> np.ndarray:
        """ideal / step (0 for infeasible plans)."""
        return np.where(self.feasible, self.ideal_s / self.step_s, 0.0)

    def __len__(self) -> int:
        return int(self.step_s.shape[0])

    def __repr__(self) -> str:
        # A summary, not one value per plan of the population.
        n, ok = len(self), int(np.count_nonzero(self.feasible))
        best = f", best step {float(self.step_s[self.feasible].min()):.6g} s" if ok else ""
        return f"BatchResult({n} plans, {ok} feasible{best}, budget {self.budget_bytes} B)"
