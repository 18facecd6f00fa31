"""When the simulator moves each swapped tensor, as operator indices (plain numpy; no torch).

The CPU runtime replays this schedule (`simulated_schedule`); the live runtime's look-ahead
admission uses the same memory model (`base_resident`), and both need the operators before
which a tensor must be on the device and after which it may go (`rebuild_points`).
"""

from __future__ import annotations

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP, Budget
from slackswap.simulator import simulate

__all__ = ["base_resident", "rebuild_points", "simulated_schedule"]


def rebuild_points(instance: Instance, actions: np.ndarray) -> tuple[list[int], list[int]]:
    """Per tensor, the operator before which it must be on the device (its first backward
    reader, or an earlier rebuild of a recomputed consumer) and the operator after which it may
    go (its last backward reader, or a later rebuild that reads it): the simulator's rule."""
    n_t = instance.n_tensors
    at = [int(x) for x in instance.tensor_first_bwd_reader]
    rel = [int(x) for x in instance.tensor_last_bwd_reader]
    consumers: list[list[int]] = [[] for _ in range(n_t)]
    for v, ins in enumerate(instance.tensor_rebuild_inputs):
        for u in ins:
            consumers[u].append(v)
    for u in sorted(range(n_t), key=lambda t: -int(instance.tensor_producer[t])):
        for v in consumers[u]:
            if actions[v] == RECOMP:
                at[u] = min(at[u], at[v])
                rel[u] = max(rel[u], at[v])
    return at, rel


def simulated_schedule(
    instance: Instance, actions: np.ndarray, budget_bytes: int, runtime: str
) -> dict[str, dict[int, list[int]]]:
    """When the simulator ends each D2H copy and starts each H2D copy, as operator indices:
    ``d2h_done[o]`` the swapped tensors whose offload has ended before operator o starts,
    ``h2d_start[o]`` those whose copy back started while operator o ran or before it,
    ``evict[o]`` those whose device copy was evicted before operator o."""

    budget = Budget.bytes(budget_bytes)  # a bare number would be a fraction of P
    tl = simulate(instance, actions, budget, runtime=runtime, timeline=True).timeline
    assert tl is not None
    ops = tl.compute_kind == 0
    op_idx, op_start = tl.compute_op[ops], tl.compute_start_s[ops]
    order = np.argsort(op_start, kind="stable")
    op_idx, op_start = op_idx[order], op_start[order]
    op_end = tl.compute_end_s[ops][order]
    out: dict[str, dict[int, list[int]]] = {
        "d2h_done": {},
        "h2d_start": {},
        "evict": {},
        "late": {},
    }
    nf = instance.n_forward_ops
    bwd_start = (
        float(tl.compute_start_s[ops][tl.compute_op[ops] == nf].min())
        if nf < instance.n_ops
        else np.inf
    )
    h2d_at: dict[tuple[int, int], float] = {}  # (operator, tensor) -> when its H2D started
    for eng, t, s0, s1 in zip(
        tl.copy_engine, tl.copy_tensor, tl.copy_start_s, tl.copy_end_s, strict=True
    ):
        if eng == 0 and s1 > bwd_start:
            # Not offloaded when backward began: the device copy stays (no H2D), and its buffer
            # stays until the copy ends even after its last reader.
            out["late"][int(t)] = [1]
        if eng == 0:  # D2H: the buffer may go before the first operator starting after it
            k = int(np.searchsorted(op_start, s1, side="left"))
            o = int(op_idx[k]) if k < len(op_idx) else instance.n_ops
            out["d2h_done"].setdefault(o, []).append(int(t))
        else:
            # H2D: allocated when admitted: before the operator running then, or, when it was
            # admitted between operators (or while the next one waited for it), before the next
            k = max(int(np.searchsorted(op_start, s0, side="right")) - 1, 0)
            if not op_start[k] <= s0 < op_end[k]:
                k = min(int(np.searchsorted(op_start, s0, side="left")), len(op_idx) - 1)
            o = int(op_idx[k])
            out["h2d_start"].setdefault(o, []).append(int(t))
            h2d_at[o, int(t)] = float(s0)
    evicted = tl.compute_kind == 4
    for o, t, at in zip(
        tl.compute_op[evicted], tl.compute_tensor[evicted], tl.compute_start_s[evicted], strict=True
    ):
        o, t = int(o), int(t)
        out["evict"].setdefault(o, []).append(t)
        if h2d_at.get((o, t), np.inf) <= at:
            # Copied back and evicted again before the same operator (admitted by the
            # look-ahead, then its memory needed): replayed before that operator (evictions
            # first), the copy back would stay. Net, it is not on the device there.
            out["h2d_start"][o].remove(t)
            if not out["h2d_start"][o]:
                del out["h2d_start"][o]
    return out


def base_resident(instance: Instance, actions: np.ndarray) -> np.ndarray:
    """Bytes of saved tensors resident when operator o starts, before anything is fetched back:
    kept ones from producer to last backward reader, swapped ones to their last forward reader,
    recomputed ones to their last forward reader and again from their first backward reader."""
    n = instance.n_ops
    delta = np.zeros(n + 1, dtype=np.int64)
    b = instance.tensor_bytes
    prod, lfr = instance.tensor_producer, instance.tensor_last_fwd_reader
    lbr = instance.tensor_last_bwd_reader
    at, rel = rebuild_points(instance, actions)
    for i, a in enumerate(actions):
        if a == KEEP:
            spans = [(prod[i], max(lbr[i], rel[i]))]
        elif a == SWAP:
            spans = [(prod[i], lfr[i])]
        else:
            spans = [(prod[i], lfr[i]), (at[i], max(lbr[i], rel[i]))]
        for lo, hi in spans:
            delta[lo] += b[i]
            delta[hi + 1] -= b[i]
    return np.cumsum(delta)[:n]
