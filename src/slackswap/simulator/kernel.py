"""The compiled event-model kernel: `sim_one` runs one plan, `run_batch` a population.

Semantics are documented in `slackswap.simulator`; this module only implements them. For speed
the state lives in a few preallocated arrays reused across plans (rows named by the ``W_*``,
``L_*``, ``F_*`` and ``I_*`` constants), helpers receive only the arrays they touch, and the
common case (no copy in flight, memory fits) never leaves `sim_one`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from slackswap import numbacache
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.simulator.static import (
    H_BW,
    H_DUPLEX,
    H_LATENCY,
    O_CUMTR,
    O_FWD_LAYER_START,
    O_LFR,
    O_NEXT_SEG_END,
    O_PROD,
    O_PROD_BYTES,
    O_READS,
    O_SEG_END,
    O_SEG_FIRST,
    O_TRANS,
    T_BYTES,
    T_FBR,
    T_LBR,
    T_LFR,
    T_ORDER,
    T_RCONS,
    T_RDR,
    T_RIN,
    T_WS,
)

numbacache.install()  # before the first @njit(cache=True): the shared cache

# The kernel allocates nothing, so numba's reference counting is switched off: with it every
# helper call would incref and decref each array argument. Helpers on the hot path are inlined
# (a call passes each array as several machine words); rare paths stay calls to keep the code
# (and the compile time) small.
_JIT_OPTIONS: dict[str, Any] = {"cache": True, "nogil": True, "_nrt": False}
_inline = njit(**_JIT_OPTIONS, forceinline=True)
_jit = njit(**_JIT_OPTIONS)

BIG = np.int64(1) << 60
# Hot loops index with unsigned integers: numba wraps a negative signed index around (a compare,
# a select and a load of the array's length on every access), and an unsigned one cannot be
# negative. Tensor and CSR positions are never negative where they are cast (lists end at -1, so
# a list walk casts inside the loop).
_ix = np.uint64
ONE = np.uint64(1)

# Rows of the per-tensor int64 work array `Work.wt`.
W_AT = 0  # first operator needing the tensor: rebuild point (recomp), H2D deadline (swap)
W_RELEASE_AT = 1  # operator after which the tensor leaves the device
W_NEXT = 2  # 2, 3, 4: bucket lists (by W_AT) of the kept / swapped / recomp tensors (row + action)
W_RL_NEXT = 5  # bucket list of releases (by W_RELEASE_AT)
W_FIFO = 6  # D2H queue, production order
W_RQ = 7  # tensors evicted after a first use and queued again
W_RQ_D = 8  # their new deadline (indexed by tensor)
W_SWAPS = 9  # the plan's swapped tensors (eviction candidates), latest produced first
N_WT = 10
W_ND_NEXT = W_NEXT + SWAP
W_RB_NEXT = W_NEXT + RECOMP
# Rows of the per-tensor int8 flags `Work.fl`.
L_RES = 0  # on the device
L_HOST = 1  # host copy done
L_PEND = 2  # waiting for its H2D copy
L_FREEOK = 3  # free the device buffer when the D2H copy ends
L_INRQ = 4  # in the W_RQ list
N_FL = 5
# Rows of the per-operator heads `Work.wo`.
B_KEEP = KEEP  # (never read: lets the bucket push skip a branch on the action)
B_ND = SWAP
B_RB = RECOMP
B_RL = 3

# Float state `Work.f`.
F_NOW = 0  # DMA clock, s
F_DELAY = 1  # compute delay over the ideal schedule, s
F_REC = 2  # recompute time, s
F_FSC = 3  # forward stall waiting for a copy / for memory, backward likewise
F_FSM = 4
F_BSC = 5
F_BSM = 6
F_LAT = 7  # 7, 8: end of the latency phase of engine 0 (D2H), 1 (H2D)
F_END = 9  # 9, 10: projected end of the copy on engine e at its current rate
F_ST = 11  # 11, 12: start of the copy on engine e
F_NEXT = 13  # time of the next engine event (inf when both are idle)
N_F = 14

# Integer state `Work.i`.
I_USED = 0
I_PEAK = 1
I_ENG = 2  # 2, 3: tensor on engine e, -1 idle
I_FH = 4  # D2H FIFO head / tail
I_FT = 5
I_BAD = 6
I_REASON = 7
I_FAILOP = 8
I_FAILT = 9
I_OVER = 10
I_NXT = 11  # first operator not started
I_BW = 12  # backward started
I_MEMBLK = 13  # compute waits for memory: no H2D admission meanwhile
I_LIMIT = 14  # H2D copies with deadline <= limit are released
I_HP = 15  # H2D queue scan position: operator bucket and node
I_HQ = 16
I_RQN = 17
I_EVICT = 18
I_D2HB = 19
I_H2DB = 20
I_NC = 21  # recorded compute / copy / memory events
I_NK = 22
I_NM = 23
I_BUDGET = 24
I_RECFULL = 25
I_HR = 26  # H2D release policy
I_LA = 27  # look-ahead operators
I_REC = 28  # recording on
I_NSWAP = 29  # number of swapped tensors
I_VER = 30  # copies finished so far (an eviction scan that failed is retried only after one)
I_NPEND = 31  # tensors waiting for an H2D copy
I_EVLIM = 32  # evictions allowed (a bound no correct run reaches; see `sim_one`)
N_I = 33

# Reasons (the Python side words them).
R_OK = 0
R_NO_RECOMPUTE = 1  # RECOMP of a tensor with infinite recompute cost
R_OOM_COMPUTE = 2  # an operator or rebuild does not fit; nothing in flight or evictable
R_OOM_H2D = 3  # a needed prefetch does not fit; nothing in flight or evictable
R_STUCK = 4  # no progress possible: a copy never ends, or no copy can serve a wait
R_NOT_FINITE = 5  # a time is not finite (instance values out of any physical range)
R_LIMIT = 6  # more evictions than any correct run makes (guard; not expected)

# Record lanes of `rec` (3, cap, 5) and compute kinds.
LANE_COMPUTE, LANE_COPY, LANE_MEM = 0, 1, 2
K_OP, K_REBUILD, K_STALL_COPY, K_STALL_MEM, K_EVICT = 0, 1, 2, 3, 4


class Work(NamedTuple):
    """Per-plan scratch arrays, reused across a population (one set per thread)."""

    wt: np.ndarray  # (N_WT, n_tensors) int64
    fl: np.ndarray  # (N_FL, n_tensors) int8
    wo: np.ndarray  # (4, n_ops) int64
    f: np.ndarray  # (N_F,) float64
    i: np.ndarray  # (N_I,) int64


def new_work(n_ops: int, n_tensors: int) -> Work:
    t = max(n_tensors, 1)
    return Work(
        wt=np.zeros((N_WT, t), dtype=np.int64),
        fl=np.zeros((N_FL, t), dtype=np.int8),
        wo=np.full((4, max(n_ops, 1)), -1, dtype=np.int64),
        f=np.zeros(N_F, dtype=np.float64),
        i=np.zeros(N_I, dtype=np.int64),
    )


def new_record(cap: int) -> np.ndarray:
    """Timeline buffer: lanes compute (t0, t1, kind, op, tensor), copy (t0, t1, engine,
    tensor, -), memory (t, bytes, -, -, -)."""
    return np.zeros((3, cap, 5), dtype=np.float64)


# ----- recording -------------------------------------------------------------------------------
@_inline
def _record(ns, rec, lane, a, b, c, d, e):
    k = ns[I_NC + lane]
    if k >= rec.shape[1]:
        ns[I_RECFULL] = 1
        return
    rec[lane, k, 0] = a
    rec[lane, k, 1] = b
    rec[lane, k, 2] = c
    rec[lane, k, 3] = d
    rec[lane, k, 4] = e
    ns[I_NC + lane] = k + 1


@_inline
def _mem_at(recording, ns, rec, nbytes, t):
    """Change used memory by nbytes (alloc > 0, free < 0) at time t; ``recording`` is the
    recording flag (the main loop passes its own copy, kept in a register)."""
    u = ns[I_USED] + nbytes
    ns[I_USED] = u
    if u > ns[I_PEAK]:
        ns[I_PEAK] = u
    # Every change is recorded, zero ones too (the Python side drops those): testing the bytes
    # here as well let the compiler test them first, and whether an operator frees anything
    # varies by plan, a mispredicted branch per operator even with recording off.
    if recording != 0:
        _record(ns, rec, LANE_MEM, t, u, 0, 0, 0)


@_inline
def _mem(ns, rec, nbytes, t):
    """`_mem_at` with the recording flag read from the state."""
    _mem_at(ns[I_REC], ns, rec, nbytes, t)


@_inline
def _fail(ns, reason, op, tensor, over):
    if ns[I_BAD] == 0:
        ns[I_BAD] = 1
        ns[I_REASON] = reason
        ns[I_FAILOP] = op
        ns[I_FAILT] = tensor
    if over > ns[I_OVER]:
        ns[I_OVER] = over


# ----- the two DMA engines ---------------------------------------------------------------------
# A copy is a latency phase, then a data phase; its end is projected at the current rate, and
# when the other engine starts or stops, the data still to move is re-projected at the new rate.
@_inline
def _set_next(fs, ns):
    nxt = np.inf
    if ns[I_ENG] >= 0:
        nxt = fs[F_END]
    if ns[I_ENG + 1] >= 0 and fs[F_END + 1] < nxt:
        nxt = fs[F_END + 1]
    fs[F_NEXT] = nxt


@_inline
def _rescale(fs, ns, hw, e, now, other_busy_before):
    """Engine e's rate changes because the other engine started or stopped at ``now``."""
    if ns[I_ENG + e] < 0:
        return
    full = hw[H_BW]
    shared = hw[H_BW] * hw[H_DUPLEX]
    old = shared if other_busy_before else full
    new = full if other_busy_before else shared
    s = fs[F_LAT + e]
    if now > s:
        s = now
    fs[F_END + e] = s + (fs[F_END + e] - s) * old / new


@_inline
def _start_copy(fs, ns, st, hw, e, u):
    now = fs[F_NOW]
    other = 1 - e
    if ns[I_ENG + e] < 0:
        _rescale(fs, ns, hw, other, now, False)
    ns[I_ENG + e] = u
    rate = hw[H_BW] * hw[H_DUPLEX] if ns[I_ENG + other] >= 0 else hw[H_BW]
    fs[F_LAT + e] = now + hw[H_LATENCY]
    fs[F_END + e] = fs[F_LAT + e] + st[T_BYTES, _ix(u)] / rate
    fs[F_ST + e] = now
    _set_next(fs, ns)


@_inline
def _h2d_head(ns, wt, fl, wo, n):
    """The released pending tensor with the earliest deadline (-1 if none)."""
    limit = ns[I_LIMIT]
    hp = ns[I_HP]
    hq = ns[I_HQ]
    cand = np.int64(-1)
    cd = BIG
    while hp <= limit and hp < n:
        node = hq
        while node >= 0 and (fl[L_PEND, _ix(node)] == 0 or fl[L_INRQ, _ix(node)] != 0):
            node = wt[W_ND_NEXT, _ix(node)]
        if node >= 0:
            cand = node
            cd = hp
            hq = node
            break
        hp += 1
        hq = wo[B_ND, _ix(hp)] if hp < n else -1
    ns[I_HP] = hp
    ns[I_HQ] = hq
    m = ns[I_RQN]
    k = 0
    while k < m:
        u = wt[W_RQ, k]
        if fl[L_PEND, _ix(u)] == 0:
            fl[L_INRQ, _ix(u)] = 0
            m -= 1
            wt[W_RQ, k] = wt[W_RQ, m]
            continue
        d = wt[W_RQ_D, _ix(u)]
        if d <= limit and d < cd:
            cd = d
            cand = u
        k += 1
    ns[I_RQN] = m
    return cand


@_inline
def _start_h2d(fs, ns, fl, st, hw, rec, u):
    fl[L_PEND, _ix(u)] = 0
    ns[I_NPEND] -= 1
    _mem(ns, rec, st[T_BYTES, _ix(u)], fs[F_NOW])
    _start_copy(fs, ns, st, hw, 1, u)


@_inline
def _try_h2d(fs, ns, wt, fl, wo, st, so, hw, rec):
    """Admit the head of the H2D queue if used + its bytes + the look-ahead fit: the transient
    bytes of operators I_NXT .. I_NXT + I_LA - 1, the first operators not yet started (at an
    operator's end, after its frees, the next one is I_NXT)."""
    if ns[I_ENG + 1] >= 0 or ns[I_NPEND] == 0 or ns[I_BW] == 0 or ns[I_MEMBLK] != 0:
        return
    n = so.shape[1] - 1
    h = _h2d_head(ns, wt, fl, wo, n)
    if h < 0:
        return
    nxt = ns[I_NXT]
    end = nxt + ns[I_LA]
    if end > n:
        end = n
    look = so[O_CUMTR, end] - so[O_CUMTR, nxt] if nxt < n else 0
    if ns[I_USED] + st[T_BYTES, _ix(h)] + look <= ns[I_BUDGET]:
        _start_h2d(fs, ns, fl, st, hw, rec, h)


@_inline
def _finish(fs, ns, wt, fl, st, hw, rec, e):
    u = ns[I_ENG + e]
    uu = _ix(u)
    now = fs[F_NOW]
    ns[I_VER] += 1
    if ns[I_REC] != 0:
        _record(ns, rec, LANE_COPY, fs[F_ST + e], now, e, u, 0)
    if e == 0:
        fl[L_HOST, uu] = 1
        ns[I_D2HB] += st[T_BYTES, uu]
        if fl[L_FREEOK, uu] != 0 and fl[L_RES, uu] != 0:
            fl[L_RES, uu] = 0
            _mem(ns, rec, -st[T_BYTES, uu], now)
    else:
        fl[L_RES, uu] = 1
        ns[I_H2DB] += st[T_BYTES, uu]
    if e == 0 and ns[I_FH] < ns[I_FT]:
        # The next offload starts at once: the H2D engine's rate does not change.
        v = wt[W_FIFO, _ix(ns[I_FH])]
        ns[I_FH] += 1
        ns[I_ENG] = v
        rate = hw[H_BW] * hw[H_DUPLEX] if ns[I_ENG + 1] >= 0 else hw[H_BW]
        fs[F_LAT] = now + hw[H_LATENCY]
        fs[F_END] = fs[F_LAT] + st[T_BYTES, _ix(v)] / rate
        fs[F_ST] = now
    else:
        ns[I_ENG + e] = -1
        _rescale(fs, ns, hw, 1 - e, now, True)
    _set_next(fs, ns)


@_inline
def _step_event(fs, ns, wt, fl, wo, st, so, hw, rec):
    """Finish the copy that ends first (engine 0 on ties); False when both engines are idle."""
    te = fs[F_NEXT]
    if te == np.inf:
        return False
    if te > fs[F_NOW]:
        fs[F_NOW] = te
    e = 0
    if ns[I_ENG] < 0 or (ns[I_ENG + 1] >= 0 and fs[F_END + 1] < fs[F_END]):
        e = 1
    _finish(fs, ns, wt, fl, st, hw, rec, e)
    if ns[I_ENG + 1] < 0 and ns[I_NPEND] != 0:
        _try_h2d(fs, ns, wt, fl, wo, st, so, hw, rec)
    return True


@_inline
def _advance_to(fs, ns, wt, fl, wo, st, so, hw, rec, t):
    """Run the engines up to time t (events at exactly t included); the clock ends at t."""
    while fs[F_NEXT] <= t:
        if not _step_event(fs, ns, wt, fl, wo, st, so, hw, rec):
            break  # t is inf: nothing left to run (`sim_one` reports the time)
    if t > fs[F_NOW]:
        fs[F_NOW] = t


# ----- eviction --------------------------------------------------------------------------------
@_inline
def _next_use(wt, fl, st, idx, act, u, j):
    """First operator >= j that needs u (a reader, or the rebuild of a pending consumer)."""
    first = wt[W_AT, u]
    if first > j:
        return first  # not used yet: every use lies at or after its deadline
    nu = BIG
    for p in range(st[T_RDR, u], st[T_RDR, u + 1]):
        k = idx[p]
        if k >= j:
            nu = k
            break
    for p in range(st[T_RCONS, u], st[T_RCONS, u + 1]):
        v = idx[p]
        if act[v] == RECOMP and fl[L_RES, v] == 0:
            k = wt[W_AT, v]
            if k >= j and k < nu:
                nu = k
    return nu


@_jit
def _evict_until(fs, ns, wt, fl, wo, st, idx, rec, act, alloc, j, horizon):
    """Evict swapped tensors with a host copy, furthest next use first, until alloc fits.

    Tensors needed at or before operator ``horizon`` stay. Returns True when alloc fits.
    """
    budget = ns[I_BUDGET]
    while ns[I_USED] + alloc > budget:
        best = -1
        best_nu = np.int64(-1)
        for k in range(ns[I_NSWAP]):
            u = wt[W_SWAPS, k]
            if fl[L_RES, u] != 0 and fl[L_HOST, u] != 0 and st[T_BYTES, u] > 0:
                nu = _next_use(wt, fl, st, idx, act, u, j)
                if nu > horizon and nu > best_nu:
                    best = u
                    best_nu = nu
        if best < 0:
            return False
        if ns[I_EVICT] >= ns[I_EVLIM]:
            _fail(ns, R_LIMIT, j, best, 0)
            return False
        u = best
        now = fs[F_NOW]
        fl[L_RES, u] = 0
        _mem(ns, rec, -st[T_BYTES, u], now)
        ns[I_EVICT] += 1
        if ns[I_REC] != 0:
            _record(ns, rec, LANE_COMPUTE, now, now, K_EVICT, j, u)
        if best_nu >= BIG:
            continue  # no use left: the device copy goes for good
        fl[L_PEND, u] = 1
        ns[I_NPEND] += 1
        if fl[L_INRQ, u] != 0:
            wt[W_RQ_D, u] = best_nu
        elif best_nu == wt[W_AT, u]:
            if best_nu <= ns[I_HP]:
                ns[I_HP] = best_nu
                ns[I_HQ] = wo[B_ND, best_nu]
        else:
            fl[L_INRQ, u] = 1
            wt[W_RQ_D, u] = best_nu
            wt[W_RQ, ns[I_RQN]] = u
            ns[I_RQN] += 1
    return True


# ----- compute-side waits ----------------------------------------------------------------------
@_inline
def _account(fs, ns, base, rec, j, slot, kind, tensor):
    """Move the compute delay up to the DMA clock after a wait; charge the stall to ``slot``."""
    old = fs[F_DELAY]
    bj = base[_ix(j)]
    if fs[F_NOW] <= bj + old:
        return  # no wait happened (the clock sits at the compute time)
    d = fs[F_NOW] - bj
    if d > old:
        fs[slot] += d - old
        fs[F_DELAY] = d
        if ns[I_REC] != 0:
            _record(ns, rec, LANE_COMPUTE, bj + old, bj + d, kind, j, tensor)


@_jit
def _ensure_memory(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, alloc, j, fwd):
    """Wait / evict until ``alloc`` more bytes fit; on failure record it and go on."""
    budget = ns[I_BUDGET]
    ns[I_MEMBLK] = 1
    failed_at = np.int64(-1)
    while ns[I_USED] + alloc > budget and ns[I_BAD] == 0:
        # Backward: evict first unless the offload in flight frees a buffer when it ends. An
        # offload still running in the backward pass belongs to a tensor that stays on the
        # device, so its end frees nothing unless the tensor's last backward reader is done;
        # it only gives one more tensor a host copy. Waiting for such copies while a device copy
        # with a host copy could go stalled for the whole lagging queue (`slackswap.simulator`).
        d2h = ns[I_ENG]
        frees = d2h >= 0 and fl[L_FREEOK, d2h] != 0
        if not fwd and not frees and ns[I_VER] != failed_at:
            if _evict_until(fs, ns, wt, fl, wo, st, idx, rec, act, alloc, j, j):
                break
            failed_at = ns[I_VER]
        # Then wait for the next copy to end: a finished offload frees its buffer if no
        # operator still needs it; in the backward pass any finished copy may make a tensor
        # evictable. (No H2D copy runs in the forward pass.)
        if d2h >= 0 or ns[I_ENG + 1] >= 0:
            if _step_event(fs, ns, wt, fl, wo, st, so, hw, rec):
                continue
            _fail(ns, R_STUCK, j, -1, 0)  # a copy in flight never ends
            break
        _fail(ns, R_OOM_COMPUTE, j, -1, ns[I_USED] + alloc - budget)
    ns[I_MEMBLK] = 0
    over = ns[I_USED] + alloc - budget
    if over > 0:
        _fail(ns, R_OOM_COMPUTE, j, -1, over)


@_jit
def _require(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, u, j, horizon):
    """Wait until swapped tensor u is on the device (deadlock rule: admit without look-ahead)."""
    if ns[I_HR] == 3 and ns[I_LIMIT] < j:
        ns[I_LIMIT] = j
        _try_h2d(fs, ns, wt, fl, wo, st, so, hw, rec)
    budget = ns[I_BUDGET]
    n = so.shape[1] - 1
    failed_at = np.int64(-1)
    while fl[L_RES, u] == 0:
        if ns[I_ENG + 1] >= 0:
            if not _step_event(fs, ns, wt, fl, wo, st, so, hw, rec):
                _fail(ns, R_STUCK, j, u, 0)  # the prefetch in flight never ends
                return
            continue
        h = _h2d_head(ns, wt, fl, wo, n)
        if h < 0:
            _fail(ns, R_STUCK, j, u, 0)
            return
        need = st[T_BYTES, h]
        if ns[I_USED] + need <= budget or ns[I_BAD] != 0:
            _start_h2d(fs, ns, fl, st, hw, rec, h)
            continue
        ns[I_MEMBLK] = 1
        # The order of `_ensure_memory`: evict first unless the offload in flight frees a
        # buffer when it ends, then wait for it.
        ok = False
        d2h = ns[I_ENG]
        if (d2h < 0 or fl[L_FREEOK, d2h] == 0) and ns[I_VER] != failed_at:
            ok = _evict_until(fs, ns, wt, fl, wo, st, idx, rec, act, need, j, horizon)
            if not ok:
                failed_at = ns[I_VER]
        if not ok and d2h >= 0:
            moved = _step_event(fs, ns, wt, fl, wo, st, so, hw, rec)
            ns[I_MEMBLK] = 0
            if not moved:
                _fail(ns, R_STUCK, j, u, 0)  # the offload in flight never ends
                return
            continue
        ns[I_MEMBLK] = 0
        if not ok:
            _fail(ns, R_OOM_H2D, j, h, ns[I_USED] + need - budget)
        _start_h2d(fs, ns, fl, st, hw, rec, h)


@_jit
def _wait_offloads_read_before(fs, ns, wt, fl, wo, st, so, hw, rec, j):
    """Wait until the offload of every swapped tensor last read in the forward pass before
    operator j is done (its copy and every earlier one in the FIFO)."""
    # One D2H engine serves the FIFO in order: entries before the last one started are done, so
    # only the latest queued entry that must be waited for matters.
    lo = max(ns[I_FH] - 1, 0)
    q = ns[I_FT] - 1
    while q >= lo and st[T_LFR, wt[W_FIFO, q]] >= j:
        q -= 1
    if q < lo:
        return
    u = wt[W_FIFO, q]
    while fl[L_HOST, u] == 0:
        if not _step_event(fs, ns, wt, fl, wo, st, so, hw, rec):
            _fail(ns, R_STUCK, j, u, 0)  # an offload never ends
            break


@_jit
def _wait_all_offloads(fs, ns, wt, fl, wo, st, so, hw, rec, j):
    """Wait until every offload is done (the barriers before operator j)."""
    while ns[I_ENG] >= 0:
        if not _step_event(fs, ns, wt, fl, wo, st, so, hw, rec):
            _fail(ns, R_STUCK, j, ns[I_ENG], 0)  # an offload never ends
            return


# ----- one plan --------------------------------------------------------------------------------
@_jit
def _prepare(ns, wt, fl, wo, st, trec, idx, act, nf, n):
    """Per-plan tables: rebuild points, prefetch deadlines, release points, bucket lists.

    Returns the lowest tensor marked RECOMP without a finite recompute cost, or -1.
    """
    for k in range(nf, n):
        wo[B_ND, _ix(k)] = -1
        wo[B_RB, _ix(k)] = -1
        wo[B_RL, _ix(k)] = -1
    nt = act.shape[0]
    fl[:, :nt] = 0
    bad = -1
    nswap = 0
    # Decreasing producer order: a rebuild consumer is seen before its inputs, and pushing at the
    # front leaves each bucket in increasing producer order (chain inputs rebuild first). Random
    # plans make branches on the action unpredictable, hence the selects and row arithmetic.
    for k in range(nt):
        t = st[T_ORDER, k]
        u = _ix(t)
        r = st[T_FBR, u]
        rel = st[T_LBR, u]
        for p in range(st[T_RCONS, u], st[T_RCONS, u + ONE]):
            v = _ix(idx[_ix(p)])
            at = wt[W_AT, v]  # loaded unconditionally so the choice below is a select
            rv = at if act[v] == RECOMP else r
            r = min(r, rv)
            rel = max(rel, rv)
        wt[W_AT, u] = r
        wt[W_RELEASE_AT, u] = rel
        wt[W_RL_NEXT, u] = wo[B_RL, _ix(rel)]
        wo[B_RL, _ix(rel)] = t
        a = act[u]
        wt[_ix(W_NEXT + a), u] = wo[_ix(a), _ix(r)]
        wo[_ix(a), _ix(r)] = t
        wt[W_SWAPS, _ix(nswap)] = t
        nswap += a == SWAP
        if not np.isfinite(trec[u]) and a == RECOMP and (bad < 0 or t < bad):
            bad = t
    ns[I_NSWAP] = nswap
    return bad


@_jit
def _next_prefetch_end(ns, wt, fl, wo, so, j):
    """Last operator of the closest backward segment after the one starting at j that waits for
    a prefetch (vDNN prefetches the closest preceding offloaded layer); n - 1 if none."""
    n = so.shape[1] - 1
    if ns[I_NPEND] == 0:
        return n - 1
    k = so[O_SEG_END, j] + 1
    while k < n:
        end = so[O_SEG_END, k]
        for m in range(k, end + 1):
            u = wo[B_ND, m]
            while u >= 0:
                if fl[L_PEND, u] != 0:
                    return end
                u = wt[W_ND_NEXT, u]
        k = end + 1
    return n - 1


@_jit
def _backward_start(fs, ns, wt, fl, wo, st, so, hw, rec, nf):
    n = so.shape[1] - 1
    for k in range(nf, n):
        u = wo[B_ND, k]
        while u >= 0:
            if fl[L_RES, u] != 0:
                fl[L_FREEOK, u] = 0  # offload not finished: the device copy stays
            else:
                fl[L_PEND, u] = 1
                ns[I_NPEND] += 1
            u = wt[W_ND_NEXT, u]
    ns[I_BW] = 1
    ns[I_HP] = nf
    ns[I_HQ] = wo[B_ND, nf] if nf < n else -1
    hr = ns[I_HR]
    if hr == 0:
        ns[I_LIMIT] = n
    elif hr == 3:
        ns[I_LIMIT] = -1
    elif hr == 1:
        # vDNN: the first segment's own copies; the one ahead is released at its first operator.
        ns[I_LIMIT] = so[O_SEG_END, nf] if nf < n else n
    else:
        ns[I_LIMIT] = so[O_NEXT_SEG_END, nf] if nf < n else n
    _try_h2d(fs, ns, wt, fl, wo, st, so, hw, rec)


@_inline
def _release(recording, ns, rec, nbytes, t):
    """`_mem_at` of a release of nbytes >= 0: a release cannot raise the peak, so the main
    loop's releases skip that test."""
    u = ns[I_USED] - nbytes
    ns[I_USED] = u
    if recording != 0:
        _record(ns, rec, LANE_MEM, t, u, 0, 0, 0)


@_inline
def _op_run(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, base, j, ju, budget, fwd, recording):
    """Allocate, compute and free the operator's transient bytes; returns its end time."""
    ju1 = ju + ONE
    alloc = so[O_TRANS, ju] + so[O_PROD_BYTES, ju]
    if ns[I_USED] + alloc > budget:
        _ensure_memory(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, alloc, j, fwd)
        _account(fs, ns, base, rec, j, F_FSM if fwd else F_BSM, K_STALL_MEM, -1)
    t0 = base[ju] + fs[F_DELAY]
    _mem_at(recording, ns, rec, alloc, t0)
    if not fwd:
        ns[I_NXT] = j + 1  # read only by the H2D admission's look-ahead, a backward-pass rule
    t1 = base[ju1] + fs[F_DELAY]
    if recording != 0:
        _record(ns, rec, LANE_COMPUTE, t0, t1, K_OP, j, -1)
    _advance_to(fs, ns, wt, fl, wo, st, so, hw, rec, t1)
    _release(recording, ns, rec, so[O_TRANS, ju], t1)
    return t1


@_jit
def sim_one(so, base, st, trec, idx, hw, nf, act, budget, fw, hr, la, wt, fl, wo, fs, ns, rec):
    """Simulate one plan; results stay in fs / ns (read them with the F_* / I_* indices)."""
    n = so.shape[1] - 1
    recording = ns[I_REC]
    fs[:] = 0.0
    ns[:] = 0
    ns[I_REC] = recording
    ns[I_ENG] = -1
    ns[I_ENG + 1] = -1
    fs[F_NEXT] = np.inf
    ns[I_BUDGET] = budget
    ns[I_HR] = hr
    ns[I_LA] = la
    ns[I_LIMIT] = -1
    bad = _prepare(ns, wt, fl, wo, st, trec, idx, act, nf, n)
    # Every wait loop either ends a copy, starts one or evicts; copies are bounded by the
    # offloads and prefetches, so evictions are what could cycle. One memory wait evicts each
    # swapped tensor at most once (plus the prefetch in flight when it began: no H2D copy is
    # admitted meanwhile), one prefetch wait evicts only tensors used after those it fetches,
    # and there is at most one wait per operator, rebuild, read and rebuild input: a correct
    # run stays under this bound, so passing it means a loop that cannot end.
    ns[I_EVLIM] = (n + 2 * act.shape[0] + idx.shape[0] + 1) * (ns[I_NSWAP] + 1)
    if bad >= 0:
        over = 0
        for u in range(act.shape[0]):
            if act[u] == RECOMP and not np.isfinite(trec[u]):
                over += st[T_BYTES, u]
        _fail(ns, R_NO_RECOMPUTE, -1, bad, over)
        return
    if recording != 0:
        _record(ns, rec, LANE_MEM, 0.0, 0, 0, 0, 0)
    # The forward pass and the backward pass are two loops: each iteration then tests only
    # what its pass does, and the branches it keeps follow the plan, not the pass.
    for j in range(min(nf, n)):
        ju = _ix(j)
        ju1 = ju + ONE
        _advance_to(fs, ns, wt, fl, wo, st, so, hw, rec, base[ju] + fs[F_DELAY])  # op start
        if fw != 0 and (fw == 2 or so[O_FWD_LAYER_START, ju] != 0):
            if fw == 1:
                # vDNN: a layer waits for the offloads of the tensors earlier layers read last
                # (an offload overlaps the layer that reads its tensor; the next one waits).
                _wait_offloads_read_before(fs, ns, wt, fl, wo, st, so, hw, rec, j)
            else:
                # Every earlier offload, before each inline op.
                _wait_all_offloads(fs, ns, wt, fl, wo, st, so, hw, rec, j)
            _account(fs, ns, base, rec, j, F_FSC, K_STALL_COPY, -1)
        t1 = _op_run(
            fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, base, j, ju, budget, True, recording
        )
        for p in range(so[O_PROD, ju], so[O_PROD, ju1]):
            u = idx[_ix(p)]
            fl[L_RES, _ix(u)] = 1
            wt[W_FIFO, _ix(ns[I_FT])] = u
            ns[I_FT] += act[_ix(u)] == SWAP
        for p in range(so[O_LFR, ju], so[O_LFR, ju1]):
            # recomp: free now; swap: free now if offloaded, else when the offload ends.
            u = _ix(idx[_ix(p)])
            a = act[u]
            host = np.int64(fl[L_HOST, u] != 0)
            isswap = np.int64(a == SWAP)
            res = np.int64(fl[L_RES, u])
            free = (np.int64(a == RECOMP) | (isswap & host)) & res
            fl[L_FREEOK, u] |= isswap & (1 - host)
            fl[L_RES, u] = res - free
            _release(recording, ns, rec, st[T_BYTES, u] * free, t1)
        if ns[I_ENG] < 0 and ns[I_FH] < ns[I_FT]:
            u = wt[W_FIFO, ns[I_FH]]
            ns[I_FH] += 1
            _start_copy(fs, ns, st, hw, 0, u)
    segmented = hr == 1 or hr == 2  # vDNN-style release of prefetches by segment
    for j in range(nf, n):
        ju = _ix(j)
        ns[I_NXT] = j
        _advance_to(fs, ns, wt, fl, wo, st, so, hw, rec, base[ju] + fs[F_DELAY])  # op start
        if j == nf:
            if fw != 0:
                # Every earlier offload, at the start of backward.
                _wait_all_offloads(fs, ns, wt, fl, wo, st, so, hw, rec, j)
                _account(fs, ns, base, rec, j, F_BSC, K_STALL_COPY, -1)
            _backward_start(fs, ns, wt, fl, wo, st, so, hw, rec, nf)
        elif fw == 2:
            # Every earlier offload, before each inline op.
            _wait_all_offloads(fs, ns, wt, fl, wo, st, so, hw, rec, j)
            _account(fs, ns, base, rec, j, F_BSC, K_STALL_COPY, -1)
        if segmented and so[O_SEG_FIRST, ju] != 0:
            ahead = so[O_NEXT_SEG_END, ju] if hr == 2 else _next_prefetch_end(ns, wt, fl, wo, so, j)
            if ahead > ns[I_LIMIT]:
                ns[I_LIMIT] = ahead
            _try_h2d(fs, ns, wt, fl, wo, st, so, hw, rec)
            if hr == 1:
                horizon = so[O_SEG_END, ju]
                for k in range(j, horizon + 1):
                    u = wo[B_ND, k]
                    while u >= 0:
                        if fl[L_RES, u] == 0:
                            _require(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, u, j, horizon)
                        u = wt[W_ND_NEXT, u]
                _account(fs, ns, base, rec, j, F_BSC, K_STALL_COPY, -1)
        # Rebuilds right before the first backward reader, chain inputs first.
        v = wo[B_RB, ju]
        while v >= 0:
            vu = _ix(v)
            for p in range(st[T_RIN, vu], st[T_RIN, vu + ONE]):
                u = idx[_ix(p)]
                if act[_ix(u)] == SWAP and fl[L_RES, _ix(u)] == 0:
                    _require(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, u, j, j)
            _account(fs, ns, base, rec, j, F_BSC, K_STALL_COPY, v)
            # The rebuilt tensor stays; the chain's intermediates (workspace) live only while
            # the rebuild runs, as an operator's transient bytes do.
            ws = st[T_WS, vu]
            b = st[T_BYTES, vu] + ws
            if ns[I_USED] + b > budget:
                _ensure_memory(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, b, j, False)
                _account(fs, ns, base, rec, j, F_BSM, K_STALL_MEM, v)
            t0 = base[ju] + fs[F_DELAY]
            fl[L_RES, vu] = 1
            _mem_at(recording, ns, rec, b, t0)
            fs[F_DELAY] += trec[vu]
            fs[F_REC] += trec[vu]
            t1 = base[ju] + fs[F_DELAY]
            if recording != 0:
                _record(ns, rec, LANE_COMPUTE, t0, t1, K_REBUILD, j, v)
            _advance_to(fs, ns, wt, fl, wo, st, so, hw, rec, t1)
            if ws != 0:  # (no memory record for nothing: a single-operator rebuild's is as before)
                _release(recording, ns, rec, ws, t1)
            v = wt[W_RB_NEXT, vu]
        waited = False
        for p in range(so[O_READS, ju], so[O_READS, ju + ONE]):
            u = idx[_ix(p)]
            if fl[L_RES, _ix(u)] == 0 and act[_ix(u)] == SWAP:
                _require(fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, u, j, j)
                waited = True
        if waited:
            _account(fs, ns, base, rec, j, F_BSC, K_STALL_COPY, -1)
        t1 = _op_run(
            fs, ns, wt, fl, wo, st, so, idx, hw, rec, act, base, j, ju, budget, False, recording
        )
        u = wo[B_RL, ju]
        while u >= 0:
            uu = _ix(u)
            if fl[L_RES, uu] != 0:
                if act[uu] == SWAP and fl[L_HOST, uu] == 0:
                    fl[L_FREEOK, uu] = 1  # the offload still reads it
                else:
                    fl[L_RES, uu] = 0
                    _release(recording, ns, rec, st[T_BYTES, uu], t1)
            if fl[L_PEND, uu] != 0:
                fl[L_PEND, uu] = 0
                ns[I_NPEND] -= 1
            u = wt[W_RL_NEXT, uu]
        if ns[I_ENG + 1] < 0 and ns[I_NPEND] != 0:
            _try_h2d(fs, ns, wt, fl, wo, st, so, hw, rec)
    # Copies still running after the last operator finish (they count in the bytes moved) but
    # do not lengthen the step.
    while fs[F_NEXT] != np.inf:
        _step_event(fs, ns, wt, fl, wo, st, so, hw, rec)
    # Overflowing times (durations, latencies or rebuild costs near 1e308, a denormal link)
    # make the clock inf or nan: the run is not a result. (The first failure is the one
    # reported; this is the cause of most of the others, so it goes first.)
    if not (fs[F_NOW] < np.inf and fs[F_DELAY] < np.inf):
        ns[I_BAD] = 0
        _fail(ns, R_NOT_FINITE, -1, -1, 0)
    for e in range(2):
        if ns[I_ENG + e] >= 0:
            _fail(ns, R_STUCK, n - 1, ns[I_ENG + e], 0)  # a copy that never ends


@_jit
def run_batch(
    so,
    base,
    st,
    trec,
    idx,
    hw,
    nf,
    acts,
    budget,
    fw,
    hr,
    la,
    wt,
    fl,
    wo,
    fs,
    ns,
    rec,
    out_f,
    out_i,
    lo,
    hi,
):
    """Simulate plans lo..hi-1 of ``acts``; write one row of out_f / out_i per plan.

    Recording (``ns[I_REC]`` set by the caller) fills ``rec`` for the last plan run.
    """
    for p in range(lo, hi):
        sim_one(
            so, base, st, trec, idx, hw, nf, acts[p], budget, fw, hr, la, wt, fl, wo, fs, ns, rec
        )
        out_f[p, 0] = fs[F_DELAY]
        out_f[p, 1] = fs[F_REC]
        out_f[p, 2] = fs[F_FSC]
        out_f[p, 3] = fs[F_FSM]
        out_f[p, 4] = fs[F_BSC]
        out_f[p, 5] = fs[F_BSM]
        out_i[p, 0] = ns[I_BAD]
        out_i[p, 1] = ns[I_REASON]
        out_i[p, 2] = ns[I_FAILOP]
        out_i[p, 3] = ns[I_FAILT]
        out_i[p, 4] = ns[I_OVER]
        out_i[p, 5] = ns[I_D2HB]
        out_i[p, 6] = ns[I_H2DB]
        out_i[p, 7] = ns[I_PEAK]
        out_i[p, 8] = ns[I_EVICT]
