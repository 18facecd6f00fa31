"""The compiled event-model kernel: one plan per call of `_sim_one`, a population per `run_batch`.

State lives in preallocated arrays (`Work`) reused across plans; scalar state sits in two small
arrays indexed by the ``F_*`` / ``I_*`` constants. Semantics are documented in
`slackswap.simulator`; this module only implements them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

# No allocation happens inside the kernel, so reference counting (numba's NRT) is switched off:
# with it, every call that passes the argument tuples increfs and decrefs each array in them.
_JIT_OPTIONS: dict[str, Any] = {"cache": True, "nogil": True, "_nrt": False}
_jit = njit(**_JIT_OPTIONS)

KEEP, SWAP, RECOMP = 0, 1, 2
BIG = np.int64(1) << 60

# Float state.
F_NOW = 0  # DMA clock, s
F_DELAY = 1  # compute delay over the ideal schedule, s
F_REC = 2  # recompute time, s
F_FSC = 3  # forward stall waiting for a copy
F_FSM = 4  # forward stall waiting for memory
F_BSC = 5
F_BSM = 6
F_LAT = 7  # 7, 8: end of the latency phase of engine 0 (D2H), 1 (H2D)
F_REM = 9  # 9, 10: bytes left of the copy on engine e
F_ST = 11  # 11, 12: start of the copy on engine e
N_F = 13

# Integer state.
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
I_HP = 15  # H2D queue scan: bucket (operator) and node
I_HQ = 16
I_RQN = 17  # requeued (evicted) tensors
I_EVICT = 18
I_D2HB = 19
I_H2DB = 20
I_NC = 21  # recorded compute / copy / memory events
I_NK = 22
I_NM = 23
I_BUDGET = 24
I_RECFULL = 25
I_FW = 26  # runtime codes
I_HR = 27
I_LA = 28
I_REC = 29  # recording on
N_I = 30

# Reasons (the Python side words them).
R_OK = 0
R_NO_RECOMPUTE = 1  # RECOMP of a tensor with infinite recompute cost
R_OOM_COMPUTE = 2  # an operator or rebuild does not fit; nothing in flight or evictable
R_OOM_H2D = 3  # a needed prefetch does not fit; nothing in flight or evictable
R_STUCK = 4  # no progress (guard)

# Compute record kinds.
K_OP, K_REBUILD, K_STALL_COPY, K_STALL_MEM, K_EVICT = 0, 1, 2, 3, 4


class Work(NamedTuple):
    """Per-plan scratch arrays, reused across a population (one per thread)."""

    rebuild_at: np.ndarray
    need_at: np.ndarray
    release_at: np.ndarray
    rb_head: np.ndarray
    rb_next: np.ndarray
    nd_head: np.ndarray
    nd_next: np.ndarray
    rl_head: np.ndarray
    rl_next: np.ndarray
    res: np.ndarray
    host: np.ndarray
    pend: np.ndarray
    freeok: np.ndarray
    inrq: np.ndarray
    fifo: np.ndarray
    rq: np.ndarray
    rq_d: np.ndarray
    F: np.ndarray
    I: np.ndarray  # noqa: E741


class Record(NamedTuple):
    """Timeline buffers (zero-length when not recording)."""

    comp_f: np.ndarray  # (cap, 2) start, end s
    comp_i: np.ndarray  # (cap, 3) kind, op, tensor
    copy_f: np.ndarray  # (cap, 2) start, end s
    copy_i: np.ndarray  # (cap, 2) engine, tensor
    mem_f: np.ndarray  # (cap,) time s
    mem_i: np.ndarray  # (cap,) bytes in use


def new_work(n_ops: int, n_tensors: int) -> Work:
    i64 = np.int64
    t = max(n_tensors, 1)

    def z() -> np.ndarray:
        return np.zeros(t, dtype=i64)

    def heads() -> np.ndarray:
        return np.full(n_ops, -1, dtype=i64)

    def flags() -> np.ndarray:
        return np.zeros(t, dtype=np.int8)

    return Work(
        rebuild_at=z(),
        need_at=z(),
        release_at=z(),
        rb_head=heads(),
        rb_next=z(),
        nd_head=heads(),
        nd_next=z(),
        rl_head=heads(),
        rl_next=z(),
        res=flags(),
        host=flags(),
        pend=flags(),
        freeok=flags(),
        inrq=flags(),
        fifo=z(),
        rq=z(),
        rq_d=z(),
        F=np.zeros(N_F, dtype=np.float64),
        I=np.zeros(N_I, dtype=i64),
    )


def new_record(cap: int) -> Record:
    return Record(
        np.zeros((cap, 2)),
        np.zeros((cap, 3), dtype=np.int64),
        np.zeros((cap, 2)),
        np.zeros((cap, 2), dtype=np.int64),
        np.zeros(cap),
        np.zeros(cap, dtype=np.int64),
    )


# ----- recording -------------------------------------------------------------------------------
@_jit
def _rec_mem(W, R, t):
    if W.I[I_REC] == 0:
        return
    k = W.I[I_NM]
    if k >= R.mem_f.shape[0]:
        W.I[I_RECFULL] = 1
        return
    R.mem_f[k] = t
    R.mem_i[k] = W.I[I_USED]
    W.I[I_NM] = k + 1


@_jit
def _rec_comp(W, R, kind, t0, t1, op, tensor):
    if W.I[I_REC] == 0:
        return
    k = W.I[I_NC]
    if k >= R.comp_f.shape[0]:
        W.I[I_RECFULL] = 1
        return
    R.comp_f[k, 0] = t0
    R.comp_f[k, 1] = t1
    R.comp_i[k, 0] = kind
    R.comp_i[k, 1] = op
    R.comp_i[k, 2] = tensor
    W.I[I_NC] = k + 1


@_jit
def _rec_copy(W, R, e, tensor, t0, t1):
    if W.I[I_REC] == 0:
        return
    k = W.I[I_NK]
    if k >= R.copy_f.shape[0]:
        W.I[I_RECFULL] = 1
        return
    R.copy_f[k, 0] = t0
    R.copy_f[k, 1] = t1
    R.copy_i[k, 0] = e
    R.copy_i[k, 1] = tensor
    W.I[I_NK] = k + 1


# ----- memory ----------------------------------------------------------------------------------
@_jit
def _alloc(W, R, nbytes, t):
    u = W.I[I_USED] + nbytes
    W.I[I_USED] = u
    if u > W.I[I_PEAK]:
        W.I[I_PEAK] = u
    if nbytes != 0:
        _rec_mem(W, R, t)


@_jit
def _free(W, R, nbytes, t):
    W.I[I_USED] -= nbytes
    if nbytes != 0:
        _rec_mem(W, R, t)


@_jit
def _fail(W, reason, op, tensor, over):
    if W.I[I_BAD] == 0:
        W.I[I_BAD] = 1
        W.I[I_REASON] = reason
        W.I[I_FAILOP] = op
        W.I[I_FAILT] = tensor
    if over > W.I[I_OVER]:
        W.I[I_OVER] = over


# ----- the two DMA engines ---------------------------------------------------------------------
@_jit
def _rate(S, W, e):
    if W.I[I_ENG + 1 - e] >= 0:
        return S.link_bw * S.duplex
    return S.link_bw


@_jit
def _eng_next(S, W, e):
    """Time of engine e's next event (end of latency or end of copy); inf when idle."""
    if W.I[I_ENG + e] < 0:
        return np.inf
    now = W.F[F_NOW]
    lat = W.F[F_LAT + e]
    if now < lat:
        return lat
    return now + W.F[F_REM + e] / _rate(S, W, e)


@_jit
def _progress(S, W, t):
    """Move the DMA clock to t (no event may lie in between)."""
    now = W.F[F_NOW]
    if t <= now:
        return
    for e in range(2):
        if W.I[I_ENG + e] >= 0 and now >= W.F[F_LAT + e]:
            r = W.F[F_REM + e] - _rate(S, W, e) * (t - now)
            W.F[F_REM + e] = r if r > 0.0 else 0.0
    W.F[F_NOW] = t


@_jit
def _start_copy(S, W, R, e, u):
    now = W.F[F_NOW]
    W.I[I_ENG + e] = u
    W.F[F_LAT + e] = now + S.latency
    W.F[F_REM + e] = float(S.tbytes[u])
    W.F[F_ST + e] = now


@_jit
def _try_d2h(S, W, R):
    if W.I[I_ENG] < 0 and W.I[I_FH] < W.I[I_FT]:
        u = W.fifo[W.I[I_FH]]
        W.I[I_FH] += 1
        _start_copy(S, W, R, 0, u)


@_jit
def _h2d_head(S, W):
    """The released pending tensor with the earliest deadline (-1 if none)."""
    n = S.n_ops
    limit = W.I[I_LIMIT]
    hp = W.I[I_HP]
    hq = W.I[I_HQ]
    cand = -1
    cd = BIG
    while hp <= limit and hp < n:
        node = hq
        while node >= 0 and (W.pend[node] == 0 or W.inrq[node] != 0):
            node = W.nd_next[node]
        if node >= 0:
            cand = node
            cd = hp
            hq = node
            break
        hp += 1
        hq = W.nd_head[hp] if hp < n else -1
    W.I[I_HP] = hp
    W.I[I_HQ] = hq
    m = W.I[I_RQN]
    if m > 0:
        k = 0
        while k < m:
            u = W.rq[k]
            if W.pend[u] == 0:
                W.inrq[u] = 0
                m -= 1
                W.rq[k] = W.rq[m]
                continue
            d = W.rq_d[u]
            if d <= limit and d < cd:
                cd = d
                cand = u
            k += 1
        W.I[I_RQN] = m
    return cand


@_jit
def _start_h2d(S, W, R, u):
    W.pend[u] = 0
    _alloc(W, R, S.tbytes[u], W.F[F_NOW])
    _start_copy(S, W, R, 1, u)


@_jit
def _try_h2d(S, W, R):
    if W.I[I_ENG + 1] >= 0 or W.I[I_BW] == 0 or W.I[I_MEMBLK] != 0:
        return
    h = _h2d_head(S, W)
    if h < 0:
        return
    nxt = W.I[I_NXT]
    end = nxt + W.I[I_LA]
    if end > S.n_ops:
        end = S.n_ops
    look = S.cumtr[end] - S.cumtr[nxt] if nxt < S.n_ops else 0
    if W.I[I_USED] + S.tbytes[h] + look <= W.I[I_BUDGET]:
        _start_h2d(S, W, R, h)


@_jit
def _finish(S, W, R, e):
    u = W.I[I_ENG + e]
    now = W.F[F_NOW]
    W.I[I_ENG + e] = -1
    W.F[F_REM + e] = 0.0
    _rec_copy(W, R, e, u, W.F[F_ST + e], now)
    if e == 0:
        W.host[u] = 1
        W.I[I_D2HB] += S.tbytes[u]
        if W.freeok[u] != 0 and W.res[u] != 0:
            W.res[u] = 0
            _free(W, R, S.tbytes[u], now)
    else:
        W.res[u] = 1
        W.I[I_H2DB] += S.tbytes[u]


@_jit
def _step_event(S, W, R):
    """Process the next DMA event; False when both engines are idle."""
    t0 = _eng_next(S, W, 0)
    t1 = _eng_next(S, W, 1)
    te = t0 if t0 < t1 else t1
    if te == np.inf:
        return False
    now = W.F[F_NOW]
    c0 = W.I[I_ENG] >= 0 and now >= W.F[F_LAT] and t0 <= te
    c1 = W.I[I_ENG + 1] >= 0 and now >= W.F[F_LAT + 1] and t1 <= te
    _progress(S, W, te)
    if c0:
        _finish(S, W, R, 0)
    if c1:
        _finish(S, W, R, 1)
    _try_d2h(S, W, R)
    _try_h2d(S, W, R)
    return True


@_jit
def _advance_to(S, W, R, t):
    """Run the DMA engines up to time t (events at exactly t included)."""
    while True:
        t0 = _eng_next(S, W, 0)
        t1 = _eng_next(S, W, 1)
        if (t0 if t0 < t1 else t1) > t:
            break
        _step_event(S, W, R)
    _progress(S, W, t)


# ----- eviction --------------------------------------------------------------------------------
@_jit
def _next_use(S, W, act, u, j):
    """First operator >= j that needs u (a reader, or the rebuild of a pending consumer)."""
    nu = BIG
    for p in range(S.rdr_ptr[u], S.rdr_ptr[u + 1]):
        k = S.rdr_idx[p]
        if k >= j:
            nu = k
            break
    for p in range(S.rcons_ptr[u], S.rcons_ptr[u + 1]):
        v = S.rcons_idx[p]
        if act[v] == RECOMP and W.res[v] == 0:
            k = W.rebuild_at[v]
            if k >= j and k < nu:
                nu = k
    return nu


@_jit
def _evict_until(S, W, R, act, alloc, j, horizon):
    """Evict swapped tensors with a host copy, furthest next use first, until alloc fits.

    Tensors needed at or before operator ``horizon`` stay. Returns True when alloc fits.
    """
    budget = W.I[I_BUDGET]
    nt = act.shape[0]
    while W.I[I_USED] + alloc > budget:
        best = -1
        best_nu = np.int64(-1)
        for u in range(nt):
            if act[u] == SWAP and W.res[u] != 0 and W.host[u] != 0:
                nu = _next_use(S, W, act, u, j)
                if nu > horizon and nu > best_nu:
                    best = u
                    best_nu = nu
        if best < 0:
            return False
        u = best
        now = W.F[F_NOW]
        W.res[u] = 0
        _free(W, R, S.tbytes[u], now)
        W.I[I_EVICT] += 1
        _rec_comp(W, R, K_EVICT, now, now, j, u)
        if best_nu >= BIG:
            continue  # no use left: drop the device copy for good
        W.pend[u] = 1
        if W.inrq[u] != 0:
            W.rq_d[u] = best_nu
        elif best_nu == W.need_at[u]:
            if best_nu <= W.I[I_HP]:
                W.I[I_HP] = best_nu
                W.I[I_HQ] = W.nd_head[best_nu]
        else:
            W.inrq[u] = 1
            W.rq_d[u] = best_nu
            W.rq[W.I[I_RQN]] = u
            W.I[I_RQN] += 1
    return True


# ----- compute-side waits ----------------------------------------------------------------------
@_jit
def _account(S, W, j, slot):
    """Move the compute delay up to the DMA clock after a wait; charge the stall to ``slot``."""
    d = W.F[F_NOW] - S.base[j]
    old = W.F[F_DELAY]
    if d > old:
        W.F[slot] += d - old
        W.F[F_DELAY] = d
        return old
    return -1.0


@_jit
def _ensure_memory(S, W, R, act, alloc, j, fwd):
    """Wait / evict until ``alloc`` more bytes fit; on failure record it and go on."""
    budget = W.I[I_BUDGET]
    if W.I[I_USED] + alloc <= budget:
        return
    W.I[I_MEMBLK] = 1
    while W.I[I_USED] + alloc > budget and W.I[I_BAD] == 0:
        if fwd:
            if W.I[I_ENG] >= 0:
                _step_event(S, W, R)
                continue
        else:
            if _evict_until(S, W, R, act, alloc, j, j):
                break
            if W.I[I_ENG] >= 0 or W.I[I_ENG + 1] >= 0:
                _step_event(S, W, R)
                continue
        _fail(W, R_OOM_COMPUTE, j, -1, W.I[I_USED] + alloc - budget)
    W.I[I_MEMBLK] = 0
    over = W.I[I_USED] + alloc - budget
    if over > 0:
        _fail(W, R_OOM_COMPUTE, j, -1, over)


@_jit
def _require(S, W, R, act, u, j, horizon):
    """Wait until swapped tensor u is on the device (deadlock rule: admit without look-ahead)."""
    if W.res[u] != 0:
        return
    if W.I[I_HR] == 3 and W.I[I_LIMIT] < j:
        W.I[I_LIMIT] = j
        _try_h2d(S, W, R)
    budget = W.I[I_BUDGET]
    while W.res[u] == 0:
        if W.I[I_ENG + 1] >= 0:
            _step_event(S, W, R)
            continue
        h = _h2d_head(S, W)
        if h < 0:
            # Cannot happen for a consistent state; treat as a failure rather than loop.
            _fail(W, R_STUCK, j, u, 0)
            return
        need = S.tbytes[h]
        if W.I[I_USED] + need <= budget or W.I[I_BAD] != 0:
            _start_h2d(S, W, R, h)
            continue
        W.I[I_MEMBLK] = 1
        ok = _evict_until(S, W, R, act, need, j, horizon)
        if not ok and W.I[I_ENG] >= 0:
            _step_event(S, W, R)
            W.I[I_MEMBLK] = 0
            continue
        W.I[I_MEMBLK] = 0
        if not ok:
            _fail(W, R_OOM_H2D, j, h, W.I[I_USED] + need - budget)
        _start_h2d(S, W, R, h)


# ----- one plan --------------------------------------------------------------------------------
@_jit
def _prepare(S, W, act):
    """Per-plan tables: rebuild times, prefetch deadlines, release times, bucket lists.

    Returns the first tensor marked RECOMP without a finite recompute cost, or -1.
    """
    n = S.n_ops
    for k in range(S.n_fwd, n):
        W.rb_head[k] = -1
        W.nd_head[k] = -1
        W.rl_head[k] = -1
    nt = act.shape[0]
    for u in range(nt):
        W.res[u] = 0
        W.host[u] = 0
        W.pend[u] = 0
        W.freeok[u] = 0
        W.inrq[u] = 0
    bad = -1
    # Decreasing producer order: a rebuild consumer is seen before its inputs, and pushing at the
    # front leaves each bucket in increasing producer order (chain inputs rebuild first).
    for k in range(nt):
        u = S.order_desc[k]
        r = S.tfbr[u]
        rel = S.tlbr[u]
        for p in range(S.rcons_ptr[u], S.rcons_ptr[u + 1]):
            v = S.rcons_idx[p]
            if act[v] == RECOMP:
                rv = W.rebuild_at[v]
                if rv < r:
                    r = rv
                if rv > rel:
                    rel = rv
        W.release_at[u] = rel
        W.rl_next[u] = W.rl_head[rel]
        W.rl_head[rel] = u
        a = act[u]
        if a == RECOMP:
            if not np.isfinite(S.trec[u]) and (bad < 0 or u < bad):
                bad = u
            W.rebuild_at[u] = r
            W.rb_next[u] = W.rb_head[r]
            W.rb_head[r] = u
        elif a == SWAP:
            W.need_at[u] = r
            W.nd_next[u] = W.nd_head[r]
            W.nd_head[r] = u
    return bad


@_jit
def _backward_start(S, W, R, act):
    n = S.n_ops
    for k in range(S.n_fwd, n):
        u = W.nd_head[k]
        while u >= 0:
            if W.res[u] != 0:
                W.freeok[u] = 0  # still on the device (offload not finished): it stays
            else:
                W.pend[u] = 1
            u = W.nd_next[u]
    W.I[I_BW] = 1
    W.I[I_HP] = S.n_fwd
    W.I[I_HQ] = W.nd_head[S.n_fwd] if S.n_fwd < n else -1
    hr = W.I[I_HR]
    if hr == 0:
        W.I[I_LIMIT] = n
    elif hr == 3:
        W.I[I_LIMIT] = -1
    else:
        W.I[I_LIMIT] = S.next_seg_end[S.n_fwd] if S.n_fwd < n else n
    _try_h2d(S, W, R)


@_jit
def sim_one(S, act, budget, fw, hr, la, W, R, rec):
    """Simulate one plan; results stay in W.F / W.I (read them with the F_* / I_* indices)."""
    n = S.n_ops
    nf = S.n_fwd
    F = W.F
    I = W.I  # noqa: E741
    F[:] = 0.0
    I[:] = 0
    I[I_ENG] = -1
    I[I_ENG + 1] = -1
    I[I_BUDGET] = budget
    I[I_FW] = fw
    I[I_HR] = hr
    I[I_LA] = la
    I[I_REC] = 1 if rec else 0
    I[I_LIMIT] = -1
    bad = _prepare(S, W, act)
    if bad >= 0:
        over = 0
        for u in range(act.shape[0]):
            if act[u] == RECOMP and not np.isfinite(S.trec[u]):
                over += S.tbytes[u]
        _fail(W, R_NO_RECOMPUTE, -1, bad, over)
        return
    _rec_mem(W, R, 0.0)
    for j in range(n):
        fwd = j < nf
        I[I_NXT] = j
        t = S.base[j] + F[F_DELAY]
        _advance_to(S, W, R, t)
        if fw != 0 and (fw == 2 or (S.fwd_layer_start[j] != 0 if fwd else j == nf)):
            # Barrier on every earlier offload (per layer for vDNN, per op for inline copies).
            while I[I_ENG] >= 0 or I[I_FH] < I[I_FT]:
                if not _step_event(S, W, R):
                    break
            old = _account(S, W, j, F_FSC if fwd else F_BSC)
            if old >= 0.0:
                _rec_comp(W, R, K_STALL_COPY, S.base[j] + old, S.base[j] + F[F_DELAY], j, -1)
        if j == nf:
            _backward_start(S, W, R, act)
        if not fwd:
            if S.seg_first[j] != 0 and (hr == 1 or hr == 2):
                if S.next_seg_end[j] > I[I_LIMIT]:
                    I[I_LIMIT] = S.next_seg_end[j]
                _try_h2d(S, W, R)
            if S.seg_first[j] != 0 and hr == 1:
                horizon = S.seg_end[j]
                for k in range(j, horizon + 1):
                    u = W.nd_head[k]
                    while u >= 0:
                        _require(S, W, R, act, u, j, horizon)
                        u = W.nd_next[u]
                old = _account(S, W, j, F_BSC)
                if old >= 0.0:
                    _rec_comp(W, R, K_STALL_COPY, S.base[j] + old, S.base[j] + F[F_DELAY], j, -1)
            # Rebuilds right before the first backward reader, chain inputs first.
            v = W.rb_head[j]
            while v >= 0:
                for p in range(S.rin_ptr[v], S.rin_ptr[v + 1]):
                    u = S.rin_idx[p]
                    if act[u] == SWAP:
                        _require(S, W, R, act, u, j, j)
                old = _account(S, W, j, F_BSC)
                if old >= 0.0:
                    _rec_comp(W, R, K_STALL_COPY, S.base[j] + old, S.base[j] + F[F_DELAY], j, v)
                _ensure_memory(S, W, R, act, S.tbytes[v], j, False)
                old = _account(S, W, j, F_BSM)
                if old >= 0.0:
                    _rec_comp(W, R, K_STALL_MEM, S.base[j] + old, S.base[j] + F[F_DELAY], j, v)
                t0 = S.base[j] + F[F_DELAY]
                W.res[v] = 1
                _alloc(W, R, S.tbytes[v], t0)
                F[F_DELAY] += S.trec[v]
                F[F_REC] += S.trec[v]
                t1 = S.base[j] + F[F_DELAY]
                _rec_comp(W, R, K_REBUILD, t0, t1, j, v)
                _advance_to(S, W, R, t1)
                v = W.rb_next[v]
            for p in range(S.reads_ptr[j], S.reads_ptr[j + 1]):
                u = S.reads_idx[p]
                if act[u] == SWAP:
                    _require(S, W, R, act, u, j, j)
            old = _account(S, W, j, F_BSC)
            if old >= 0.0:
                _rec_comp(W, R, K_STALL_COPY, S.base[j] + old, S.base[j] + F[F_DELAY], j, -1)
        alloc = S.transient[j]
        if fwd:
            for p in range(S.prod_ptr[j], S.prod_ptr[j + 1]):
                alloc += S.tbytes[S.prod_idx[p]]
        _ensure_memory(S, W, R, act, alloc, j, fwd)
        old = _account(S, W, j, F_FSM if fwd else F_BSM)
        if old >= 0.0:
            _rec_comp(W, R, K_STALL_MEM, S.base[j] + old, S.base[j] + F[F_DELAY], j, -1)
        t0 = S.base[j] + F[F_DELAY]
        if fwd:
            for p in range(S.prod_ptr[j], S.prod_ptr[j + 1]):
                W.res[S.prod_idx[p]] = 1
        _alloc(W, R, alloc, t0)
        I[I_NXT] = j + 1
        t1 = S.base[j + 1] + F[F_DELAY]
        _rec_comp(W, R, K_OP, t0, t1, j, -1)
        _advance_to(S, W, R, t1)
        _free(W, R, S.transient[j], t1)
        if fwd:
            for p in range(S.prod_ptr[j], S.prod_ptr[j + 1]):
                u = S.prod_idx[p]
                if act[u] == SWAP:
                    W.fifo[I[I_FT]] = u
                    I[I_FT] += 1
            for p in range(S.lfr_ptr[j], S.lfr_ptr[j + 1]):
                u = S.lfr_idx[p]
                a = act[u]
                if a == RECOMP or (a == SWAP and W.host[u] != 0):
                    if W.res[u] != 0:
                        W.res[u] = 0
                        _free(W, R, S.tbytes[u], t1)
                elif a == SWAP:
                    W.freeok[u] = 1
        else:
            u = W.rl_head[j]
            while u >= 0:
                if W.res[u] != 0:
                    if act[u] == SWAP and W.host[u] == 0:
                        W.freeok[u] = 1  # the offload still reads it
                    else:
                        W.res[u] = 0
                        _free(W, R, S.tbytes[u], t1)
                W.pend[u] = 0
                u = W.rl_next[u]
        _try_d2h(S, W, R)
        _try_h2d(S, W, R)
    # Copies still running after the last operator do not lengthen the step.


@_jit
def run_batch(S, acts, budget, fw, hr, la, W, R, rec, out_f, out_i, lo, hi):
    """Simulate plans lo..hi-1 of ``acts``; write one row of out_f / out_i per plan."""
    for p in range(lo, hi):
        sim_one(S, acts[p], budget, fw, hr, la, W, R, rec)
        F = W.F
        I = W.I  # noqa: E741
        out_f[p, 0] = F[F_DELAY]
        out_f[p, 1] = F[F_REC]
        out_f[p, 2] = F[F_FSC]
        out_f[p, 3] = F[F_FSM]
        out_f[p, 4] = F[F_BSC]
        out_f[p, 5] = F[F_BSM]
        out_i[p, 0] = I[I_BAD]
        out_i[p, 1] = I[I_REASON]
        out_i[p, 2] = I[I_FAILOP]
        out_i[p, 3] = I[I_FAILT]
        out_i[p, 4] = I[I_OVER]
        out_i[p, 5] = I[I_D2HB]
        out_i[p, 6] = I[I_H2DB]
        out_i[p, 7] = I[I_PEAK]
        out_i[p, 8] = I[I_EVICT]
