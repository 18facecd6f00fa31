"""Lamarckian repair for the genetic search: make a plan fit a static memory profile.

The repair is cheap (compiled, a few microseconds for a plan that needs a handful of changes) and
approximate: it judges memory with the planner's static profile, not the event model, and the
simulator still scores the repaired plan. Per plan it

1. turns ``recomp`` on a tensor that nothing can rebuild (infinite cost) into ``swap``, the only
   other way to free it (the simulator would reject the plan outright);
2. builds the static memory profile (bytes in use during each operator): a kept tensor is
   resident from its producer to its last backward reader; a swapped or recomputed one from its
   producer to its last forward reader and again from its first to its last backward reader;
   plus the operator's transient bytes. Copies that lag behind, prefetch windows and rebuild
   chains are not counted, so the profile is a lower bound of what the simulator will see;
3. while the profile exceeds the budget at some operator i (the highest point first, excess E),
   frees one kept tensor that is resident at i but not read there (last forward reader < i <
   first backward reader): the one with the smallest recompute cost per freed byte
   ``c_t / min(s_t, E)`` is recomputed (Pass 2's rule of Algorithm 1); when every candidate has
   an infinite cost, the largest is swapped instead. It stops when the profile fits or nothing
   at the peak can be freed (the plan then stays infeasible and is ranked by its overflow).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from slackswap import numbacache
from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.solvers.planner._memory import static_profile as memory_static_profile
from slackswap.solvers.planner._memory import static_profile_into

numbacache.install()  # before the first @njit(cache=True): the shared cache


@njit(cache=True, nogil=True)
def _repair_one(
    a: np.ndarray,
    producer: np.ndarray,
    last_fwd: np.ndarray,
    first_bwd: np.ndarray,
    last_bwd: np.ndarray,
    size: np.ndarray,
    cost: np.ndarray,
    transient: np.ndarray,
    budget: np.int64,
    prof: np.ndarray,
) -> int:
    n_t = a.shape[0]
    n_ops = transient.shape[0]
    changed = 0
    for t in range(n_t):
        if a[t] == RECOMP and not np.isfinite(cost[t]):
            a[t] = SWAP
            changed += 1
    static_profile_into(prof, a, producer, last_fwd, first_bwd, last_bwd, size, transient, False)
    for _ in range(n_t):
        peak = np.int64(-1)
        at = -1
        for i in range(n_ops):
            if prof[i] > peak:
                peak = prof[i]
                at = i
        excess = peak - budget
        if excess <= 0:
            break
        best = -1
        best_score = np.inf
        big = -1
        big_size = np.int64(-1)
        for t in range(n_t):
            if a[t] != KEEP or not (last_fwd[t] < at < first_bwd[t]):
                continue
            if size[t] <= 0:  # frees nothing (a zero-byte tensor): never a candidate
                continue
            if np.isfinite(cost[t]):
                score = cost[t] / min(size[t], excess)
                if score < best_score:
                    best_score = score
                    best = t
            elif size[t] > big_size:
                big_size = size[t]
                big = t
        if best >= 0:
            a[best] = RECOMP
            pick = best
        elif big >= 0:
            a[big] = SWAP
            pick = big
        else:
            break
        changed += 1
        for i in range(last_fwd[pick] + 1, first_bwd[pick]):
            prof[i] -= size[pick]
    return changed


@njit(cache=True, nogil=True)
def _repair_many(
    actions: np.ndarray,
    producer: np.ndarray,
    last_fwd: np.ndarray,
    first_bwd: np.ndarray,
    last_bwd: np.ndarray,
    size: np.ndarray,
    cost: np.ndarray,
    transient: np.ndarray,
    budget: np.int64,
    changed: np.ndarray,
) -> None:
    prof = np.zeros(transient.shape[0] + 1, dtype=np.int64)
    for r in range(actions.shape[0]):
        changed[r] = _repair_one(
            actions[r], producer, last_fwd, first_bwd, last_bwd, size, cost, transient, budget, prof
        )


class Repair:
    """The repair for one instance and budget (bytes); call it on a plans x tensors int8 array."""

    def __init__(self, inst: Instance, budget_bytes: int) -> None:
        self._args = (
            np.ascontiguousarray(inst.tensor_producer, dtype=np.int64),
            np.ascontiguousarray(inst.tensor_last_fwd_reader, dtype=np.int64),
            np.ascontiguousarray(inst.tensor_first_bwd_reader, dtype=np.int64),
            np.ascontiguousarray(inst.tensor_last_bwd_reader, dtype=np.int64),
            np.ascontiguousarray(inst.tensor_bytes, dtype=np.int64),
            np.ascontiguousarray(inst.tensor_recompute_s, dtype=np.float64),
            np.ascontiguousarray(inst.op_transient_bytes, dtype=np.int64),
            np.int64(budget_bytes),
        )

    def __call__(self, actions: np.ndarray) -> np.ndarray:
        """Repair every row of ``actions`` (int8, C-contiguous) in place; genes changed per row."""
        if actions.dtype != np.int8 or not actions.flags.c_contiguous or actions.ndim != 2:
            raise ValueError("actions must be a C-contiguous 2-D int8 array")
        changed = np.zeros(actions.shape[0], dtype=np.int64)
        _repair_many(actions, *self._args, changed)
        return changed


def static_profile(inst: Instance, actions: np.ndarray) -> np.ndarray:
    """The repair's static memory profile (bytes per operator) of one plan; for tests and docs."""
    a = np.ascontiguousarray(actions, dtype=np.int8)
    producer, last_fwd, first_bwd, last_bwd, size, _cost, transient, _budget = Repair(inst, 0)._args
    out: np.ndarray = memory_static_profile(
        a, producer, last_fwd, first_bwd, last_bwd, size, transient, False
    )
    return out
