"""The planner's memory model (Sec. 3.3): per-instance static arrays and the memory profile.

A plan's memory profile m(i) is the bytes in use during operator i: resident saved tensors plus
the operator's transient bytes. Residency per action (operator indices, inclusive):

- keep: producer .. last backward reader;
- swap: producer .. max(last forward reader, operator during which its offload ends), and again
  from its *back* operator (its first backward reader, or the operator during which its prefetch
  starts when the caller gives one) .. last backward reader;
- recomp: producer .. last forward reader, and again from its *need* operator .. last backward
  reader, where need is its first backward reader, or earlier when a rebuild that runs earlier
  reads it (rebuild chains: a recomputed input is rebuilt first and then stays resident).

A swapped tensor read by an earlier rebuild must likewise be back by that rebuild. Times in the
static arrays come from the ideal schedule (every operator back to back, no stalls), in seconds.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from slackswap import numbacache
from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP

numbacache.install()  # before the first @njit(cache=True): the shared cache


@dataclass(frozen=True)
class StaticArrays:
    """Everything the planner needs from an instance, as contiguous int64 / float64 arrays."""

    n_ops: int
    n_fwd: int
    forward_s: float  # T_F, seconds
    link_Bps: float  # W, bytes per second per direction
    op_start: np.ndarray  # ideal start time of each operator, seconds
    op_end: np.ndarray  # ideal end time of each operator, seconds
    transient: np.ndarray  # op_transient_bytes, int64
    size: np.ndarray  # tensor bytes, int64
    prod: np.ndarray  # producer operator
    lfr: np.ndarray  # last forward reader
    fbr: np.ndarray  # first backward reader
    lbr: np.ndarray  # last backward reader
    cost: np.ndarray  # recompute seconds (inf when nothing rebuilds it)
    block: np.ndarray  # tensor block
    block_rank: np.ndarray  # the tensor's block ranked by its first production ("earliest")
    produced_s: np.ndarray  # r_t: end of the producer, seconds
    deadline_s: np.ndarray  # d_t: start of the first backward reader, seconds
    copy_s: np.ndarray  # one copy of the tensor on an idle link: s / W + latency, seconds
    rb_ptr: np.ndarray  # rebuild inputs (CSR)
    rb_idx: np.ndarray
    release_op_end_s: np.ndarray  # end time of each backward operator, seconds
    release_cum: np.ndarray  # bytes released by the end of each backward operator (all tensors)
    memo: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)


_CACHE: weakref.WeakKeyDictionary[Instance, StaticArrays] = weakref.WeakKeyDictionary()


def static_arrays(instance: Instance) -> StaticArrays:
    """The planner's arrays for ``instance``, built once and cached while the instance lives."""
    cached = _CACHE.get(instance)
    if cached is not None:
        return cached
    i64 = np.int64
    dur = np.asarray(instance.op_duration_s, dtype=np.float64)
    op_end = np.cumsum(dur)
    op_start = op_end - dur
    n_fwd = instance.n_forward_ops
    size = np.asarray(instance.tensor_bytes, dtype=i64)
    prod = np.asarray(instance.tensor_producer, dtype=i64)
    fbr = np.asarray(instance.tensor_first_bwd_reader, dtype=i64)
    lbr = np.asarray(instance.tensor_last_bwd_reader, dtype=i64)
    hw = instance.hardware
    # Bytes each backward operator frees when it ends (every saved tensor dies at its last
    # backward reader), cumulated: the EDF check's memory credit (Sec. 3.2).
    freed = np.zeros(instance.n_ops, dtype=i64)
    np.add.at(freed, lbr, size)
    rb_ptr, rb_idx = instance.rebuild_inputs_csr
    block = np.asarray(instance.tensor_block, dtype=i64)
    # Blocks ranked by their first production; ties: the block whose first tensor comes first.
    ids, first_tensor, block_of = np.unique(block, return_index=True, return_inverse=True)
    first_prod = np.full(len(ids), np.iinfo(i64).max, dtype=i64)
    np.minimum.at(first_prod, block_of, prod)
    rank = np.empty(len(ids), dtype=i64)
    rank[np.lexsort((first_tensor, first_prod))] = np.arange(len(ids))
    out = StaticArrays(
        n_ops=instance.n_ops,
        n_fwd=n_fwd,
        forward_s=float(op_end[n_fwd - 1]) if n_fwd else 0.0,
        link_Bps=float(hw.link_bw_Bps),
        op_start=op_start,
        op_end=op_end,
        transient=np.asarray(instance.op_transient_bytes, dtype=i64),
        size=size,
        prod=prod,
        lfr=np.asarray(instance.tensor_last_fwd_reader, dtype=i64),
        fbr=fbr,
        lbr=lbr,
        cost=np.asarray(instance.tensor_recompute_s, dtype=np.float64),
        block=block,
        block_rank=rank[block_of].astype(i64),
        produced_s=op_end[prod],
        deadline_s=op_start[fbr],
        copy_s=size / float(hw.link_bw_Bps) + float(hw.copy_latency_s),
        rb_ptr=np.asarray(rb_ptr, dtype=i64),
        rb_idx=np.asarray(rb_idx, dtype=i64),
        release_op_end_s=op_end[n_fwd:].copy(),
        release_cum=np.cumsum(freed[n_fwd:]),
    )
    for a in vars(out).values():
        if isinstance(a, np.ndarray):
            a.setflags(write=False)
    _CACHE[instance] = out
    return out


@njit(cache=True, nogil=True)
def need_ops(actions, back, fbr, prod, rb_ptr, rb_idx):  # type: ignore[no-untyped-def]
    """Operator from which each swap / recomp tensor is resident again in backward.

    ``back[t]`` is a swapped tensor's own return operator (its first backward reader or its
    prefetch start); a recomp tensor's own is its first backward reader. A rebuild that runs
    earlier pulls its recomp and swap inputs earlier (chains). Keep tensors get n_ops.
    Inputs are produced before the tensors they rebuild, so one sweep in decreasing producer
    order settles every chain.
    """
    n_t = actions.shape[0]
    big = np.int64(1) << 62
    need = np.full(n_t, big, dtype=np.int64)
    for t in range(n_t):
        if actions[t] == SWAP:
            need[t] = back[t]
        elif actions[t] == RECOMP:
            need[t] = fbr[t]
    order = np.argsort(-prod, kind="mergesort")
    for k in range(n_t):
        t = order[k]
        if actions[t] != RECOMP:
            continue
        for j in range(rb_ptr[t], rb_ptr[t + 1]):
            v = rb_idx[j]
            if actions[v] != KEEP and need[t] < need[v]:
                need[v] = need[t]
    return need


@njit(cache=True, nogil=True)
def static_profile_into(  # type: ignore[no-untyped-def]
    m, actions, prod, fwd_end, back, lbr, size, transient, back_after_fwd
):
    """The static memory profile of a plan, written into ``m[:n_ops]`` (bytes per operator).

    The one definition every static profile in the solvers uses. Residency (operator indices,
    inclusive): a kept tensor ``prod .. lbr``; any other ``prod .. fwd_end`` and again
    ``back .. lbr`` (nothing when ``back > lbr``); plus the operator's transient bytes. The
    callers differ only in the arrays they pass (``fwd_end``, ``back``) and in
    ``back_after_fwd``: when true the backward residency starts no earlier than
    ``fwd_end + 1``, so the two residencies of a tensor never overlap (Pass 2 keeps its
    incremental updates consistent with that); when false a ``back`` inside the forward
    residency counts the tensor twice there, as the planner's final check always has.
    ``m`` may be longer than n_ops (a caller's scratch buffer); only ``m[:n_ops]`` is written.
    """
    n_ops = transient.shape[0]
    for i in range(n_ops):
        m[i] = 0
    for t in range(actions.shape[0]):
        s = size[t]
        m[prod[t]] += s
        if actions[t] == KEEP:
            if lbr[t] + 1 < n_ops:
                m[lbr[t] + 1] -= s
        else:
            if fwd_end[t] + 1 < n_ops:
                m[fwd_end[t] + 1] -= s
            b = back[t]
            if back_after_fwd and b <= fwd_end[t]:
                b = fwd_end[t] + 1
            if b <= lbr[t]:
                m[b] += s
                if lbr[t] + 1 < n_ops:
                    m[lbr[t] + 1] -= s
    acc = np.int64(0)
    for i in range(n_ops):
        acc += m[i]
        m[i] = acc + transient[i]


@njit(cache=True, nogil=True)
def static_profile(  # type: ignore[no-untyped-def]
    actions, prod, fwd_end, back, lbr, size, transient, back_after_fwd
):
    """:func:`static_profile_into` into a new int64 array of length n_ops."""
    m = np.empty(transient.shape[0], dtype=np.int64)
    static_profile_into(m, actions, prod, fwd_end, back, lbr, size, transient, back_after_fwd)
    return m


def op_at_time(op_end: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """Index of the operator running at time ``t_s`` (the first whose end is at or after it)."""
    idx = np.searchsorted(op_end, t_s, side="left")
    return np.minimum(idx, len(op_end) - 1).astype(np.int64)


def forward_ends(
    sa: StaticArrays, actions: np.ndarray, offload_end_s: np.ndarray | None = None
) -> np.ndarray:
    """Last operator of each tensor's forward residency (see the module docstring)."""
    a = np.asarray(actions)
    out = np.where(a == KEEP, sa.lbr, sa.lfr).astype(np.int64)
    if offload_end_s is not None:
        swap = a == SWAP
        out[swap] = np.maximum(out[swap], op_at_time(sa.op_end, offload_end_s[swap]))
    return out


def memory_profile(
    instance: Instance,
    actions: np.ndarray,
    *,
    offload_end_s: np.ndarray | None = None,
    prefetch_start_s: np.ndarray | None = None,
) -> np.ndarray:
    """Bytes in use during each operator under the planner's model of a plan.

    ``offload_end_s`` / ``prefetch_start_s`` (seconds, per tensor; read for swapped tensors
    only) place the end of a swapped tensor's forward residency and the start of its backward
    one; without them it leaves memory after its last forward reader and returns at its first
    backward reader (the paper's Sec. 3.3 wording).
    """
    sa = static_arrays(instance)
    a = np.ascontiguousarray(actions, dtype=np.int8)
    back = sa.fbr.copy()
    if prefetch_start_s is not None:
        swap = a == SWAP
        back[swap] = np.minimum(back[swap], op_at_time(sa.op_end, prefetch_start_s[swap]))
    need = need_ops(a, back, sa.fbr, sa.prod, sa.rb_ptr, sa.rb_idx)
    fwd_end = forward_ends(sa, a, offload_end_s)
    return static_profile(a, sa.prod, fwd_end, need, sa.lbr, sa.size, sa.transient, False)
