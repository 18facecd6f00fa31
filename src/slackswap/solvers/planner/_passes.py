"""Algorithm 1's two passes as compiled kernels: spend the link budget, then recompute the rest.

`plan_passes` is one run of Algorithm 1 for one memory budget; the solver in
`slackswap.solvers.planner.slackswap_planner` wraps it in the Sec. 3.4 validation-and-repair rounds.

Pass 1 walks the candidates (saved tensors with r_t < T_F < d_t) in the given order (decreasing
rho_t for SlackSwap, production order for the swap-first ablation) and adds one to the swap set S
when FifoD2H and EdfH2D (`_linkcheck`) still pass, until S covers the deficit D = P - M.

Pass 2 repeatedly finds the first operator i whose memory m(i) exceeds M and recomputes the
tensor t* = argmin c_t / min(s_t, E) among the candidates C (resident at i, unused until after
i, finite c_t), E = max m - M. Candidates are kept tensors and swapped tensors alike, as in the
paper's definition of C (a swapped tensor is resident at i while its offload runs or once it is
back). Ties go to the lower tensor index. When C is empty, the earliest block that still has a
tensor with finite cost not yet recomputed is converted to full recomputation (every such tensor
of the block); when none is left, the budget cannot be met and the pass reports the operator and
the overflow. The memory profile (`_memory`) is kept up to date incrementally: recomputing t
frees it between its last forward reader and its need operator, and pulls its recomputed or
swapped rebuild inputs earlier (rebuild chains). The profile lives in a max segment tree with
lazy range adds (O(log n_ops) per range update, over-budget search and peak), and the first
candidate in rho order comes from an interval index over the tensors (`_candidate_index`), so a
step no longer scans every tensor (only when E is below the largest tensor, where the score
depends on E).

Planning time at depth: both passes once took a walk over the swap set per candidate (Pass 1's
two link schedules, Pass 2's candidate scan), n^1.8 on GPT-2 XL from 768 to 3,072 layers. Pass
1's tests now read the FIFO chain's end from an index and prove EdfH2D from bounds
(`_chain_index`, `_edf_bound`), walking a schedule only where neither decides (near the limit:
the decision stays the walk's). Plans are the walks' plans (benchmarks/README.md, "SlackSwap at
depth", has the profile and the equality check).

Decisions where the paper is open (paper-notes, "ambiguous"):

- Candidates of Pass 1: every saved tensor with r_t < T_F < d_t and s_t > 0 (the filter holds
  for all but the tensors the last forward operator produces). Ties in rho (all block inputs
  have rho = inf) go to the earlier-produced tensor.
- EdfH2D credits memory when any saved tensor's last backward reader ends, kept or swapped
  (a swapped tensor's own prefetch already charged its bytes); recomputed tensors free what
  their rebuild took, so they are not credited. In Pass 1 nothing is recomputed yet.
- The memory profile counts a swapped tensor from its first backward use (or from an earlier
  rebuild that reads it), as the paper writes, not from the start of its prefetch; the
  runtime admits prefetches only when memory allows, and the repair rounds absorb the rest.
  A swapped tensor leaves memory when its FifoD2H copy ends (operator during which it ends)
  and its last forward reader is done.
- E is the largest excess over the whole profile, i the first over-budget operator (as in
  Algorithm 1); only keep and swap tensors are candidates (recomp is final).
- "Earliest remaining block" of the fallback: the block whose first tensor is produced first,
  among blocks with a finite-cost tensor not yet recomputed.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from slackswap import numbacache
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.solvers.planner._candidate_index import (
    candidate_index,
    first_candidate,
    update_candidate,
)
from slackswap.solvers.planner._chain_index import (
    CHAIN_TOL_S,
    _range_add,
    add_after,
    chain_end_with,
    chain_index,
    chain_insert,
    max_after,
    prev_filled,
    refill,
    set_slot,
    slot_value,
)
from slackswap.solvers.planner._edf_bound import (
    BOUND_TOL_S,
    add_bytes,
    bytes_before,
    free_time_bound,
    free_time_table,
    release_time,
)
from slackswap.solvers.planner._linkcheck import _EPS, edf_ok, fifo_end
from slackswap.solvers.planner._memory import (
    StaticArrays,
    forward_ends,
    need_ops,
    op_at_time,
    static_profile,
)

numbacache.install()  # before the first @njit(cache=True): the shared cache

_BIG = np.int64(1) << 62


@njit(cache=True, nogil=True)
def _fifo_fits(order, n, ins, pos, produced_s, copy_s, limit):  # type: ignore[no-untyped-def]
    """End of the FIFO chain with ``ins`` at ``pos``, or inf once some copy ends past ``limit``
    (ends only grow along the chain)."""
    e = 0.0
    k = 0
    for j in range(n + 1):
        if j == pos:
            u = ins
        else:
            u = order[k]
            k += 1
        r = produced_s[u]
        e = (e if e > r else r) + copy_s[u]
        if e > limit:
            return np.inf
    return e


@njit(cache=True, nogil=True)
def _release_index(release_cum, r, cum):  # type: ignore[no-untyped-def]
    """``np.searchsorted(release_cum, cum)`` given that it is at least ``r`` (the bytes only grow
    along the EDF order): a few steps forward, then a binary search over the rest."""
    n_rel = release_cum.shape[0]
    for _ in range(4):
        if r >= n_rel or release_cum[r] >= cum:
            return r
        r += 1
    return r + np.searchsorted(release_cum[r:], cum)


@njit(cache=True, nogil=True)
def _edf_walk(  # type: ignore[no-untyped-def]
    order, n, ins, pos, forward_s, deadline_s, copy_s, size, release_end_s, release_cum, ends
):
    """EdfH2D over ``order[:n]`` with ``ins`` at ``pos`` (the arithmetic of `edf_ok`): True when
    every copy meets its deadline; writes each copy's end (seconds) into ``ends[position]``."""
    e = forward_s
    cum = np.int64(0)
    k = 0
    n_rel = release_cum.shape[0]
    r = np.int64(0)
    for j in range(n + 1):
        if j == pos:
            u = ins
        else:
            u = order[k]
            k += 1
        cum += size[u]
        r = _release_index(release_cum, r, cum)
        if r >= n_rel:
            return False
        t_mem = release_end_s[r]
        e = (e if e > t_mem else t_mem) + copy_s[u]
        if e > deadline_s[u] + _EPS:
            return False
        ends[j] = e
    return True


@njit(cache=True, nogil=True)
def _gather(slot_tensor, member, upto, order):  # type: ignore[no-untyped-def]
    """The members in slot order into ``order``; returns (how many, how many before ``upto``)."""
    n = np.int64(0)
    before = np.int64(0)
    for q in range(slot_tensor.shape[0]):
        if member[q]:
            if q < upto:
                before += 1
            order[n] = slot_tensor[q]
            n += 1
    return n, before


@njit(cache=True, nogil=True)
def pass1_kernel(  # type: ignore[no-untyped-def]
    cand,
    deficit,
    fifo_limit_s,
    produced_s,
    deadline_s,
    copy_s,
    size,
    forward_s,
    release_end_s,
    release_cum,
    swap_out,
    d2h_end,
    h2d_start,
    h2d_end,
    fifo_slot,
    fifo_tensor,
    edf_slot,
    edf_tensor,
):
    """Pass 1 over ``cand`` (priority order); marks ``swap_out`` and writes the final schedules.

    ``fifo_slot`` / ``edf_slot`` (per tensor) rank the candidates by (production time, index)
    and by (deadline, index), the two schedules' orders; ``fifo_tensor`` / ``edf_tensor`` map a
    slot back to its tensor. Each test decides as a walk of its schedule with the candidate
    inserted would, without the walk where it can: the FIFO chain passes when a bound on its
    end (max(end, r_t) + copy_t) stays within the limit, and is decided by its index
    (`_chain_index`) when the end the index reads is further than `CHAIN_TOL_S` from the
    limit; EdfH2D passes when its bounds prove it (`_edf_bound`). Every other case walks the
    schedule, and an EDF walk resets the bounds to the exact schedule.
    """
    n_c = cand.shape[0]
    limit = fifo_limit_s + _EPS
    chain, chain_fen = chain_index(n_c)
    late, _ = chain_index(n_c)  # per EDF slot: an upper bound on the copy's end - its deadline
    bytes_fen = np.zeros(n_c + 1, dtype=np.int64)
    in_fifo = np.zeros(n_c, dtype=np.bool_)
    in_edf = np.zeros(n_c, dtype=np.bool_)
    free_table = free_time_table()
    order = np.empty(n_c, dtype=np.int64)
    ends = np.empty(n_c + 1)
    slots = np.empty(n_c + 1, dtype=np.int64)
    n_rel = release_cum.shape[0]
    freed_total = release_cum[n_rel - 1] if n_rel > 0 else np.int64(-1)
    copy_total = 0.0
    member_bytes = np.int64(0)
    total = np.int64(0)
    bound = 0.0  # an upper bound on the FIFO chain's end (seconds)
    for c in range(n_c):
        if total >= deficit:
            break
        t = cand[c]
        r_t = produced_s[t]
        c_t = copy_s[t]
        s_t = size[t]
        new_bound = (bound if bound > r_t else r_t) + c_t
        if new_bound > limit:
            approx = chain_end_with(chain, chain_fen, copy_total, fifo_slot[t], r_t, c_t)
            if approx > limit + CHAIN_TOL_S:
                continue
            if approx < limit - CHAIN_TOL_S:
                new_bound = approx + CHAIN_TOL_S
            else:  # too close to the limit to trust the index's rounding: walk the chain
                n, pf = _gather(fifo_tensor, in_fifo, fifo_slot[t], order)
                new_bound = _fifo_fits(order, n, t, pf, produced_s, copy_s, limit)
                if new_bound > limit:
                    continue
        if member_bytes + s_t > freed_total:
            continue  # the backward pass never frees room for every prefetch: the walk fails
        q = edf_slot[t]
        pred = prev_filled(late, q)
        t_mem = release_time(release_cum, release_end_s, bytes_before(bytes_fen, q) + s_t)
        if pred < 0:
            end_t = (forward_s if forward_s > t_mem else t_mem) + c_t
            shift = end_t - forward_s
        else:
            e_pred = slot_value(late, pred) + deadline_s[edf_tensor[pred]]
            end_t = (e_pred if e_pred > t_mem else t_mem) + c_t
            shift = c_t
        delta = free_time_bound(free_table, release_cum, release_end_s, s_t)
        shift = shift + delta if pred >= 0 else (shift if shift > delta else delta)
        if (
            end_t <= deadline_s[t] + _EPS - BOUND_TOL_S
            and max_after(late, q) + shift <= _EPS - BOUND_TOL_S
        ):
            set_slot(late, q, end_t - deadline_s[t])
            add_after(late, q, shift)
        else:
            n, pe = _gather(edf_tensor, in_edf, q, order)
            if not _edf_walk(
                order, n, t, pe, forward_s, deadline_s, copy_s, size, release_end_s,
                release_cum, ends,
            ):  # fmt: skip
                continue
            for j in range(n + 1):
                u = t if j == pe else order[j if j < pe else j - 1]
                slots[j] = edf_slot[u]
                ends[j] -= deadline_s[u]
            refill(late, slots, ends, n + 1)
        in_fifo[fifo_slot[t]] = True
        in_edf[q] = True
        add_bytes(bytes_fen, q, s_t)
        member_bytes += s_t
        copy_total = chain_insert(chain, chain_fen, copy_total, fifo_slot[t], r_t, c_t)
        bound = new_bound
        total += s_t
        swap_out[t] = True
    n, _ = _gather(fifo_tensor, in_fifo, 0, order)
    fifo_end(order, n, -1, 0, produced_s, copy_s, d2h_end)
    n, _ = _gather(edf_tensor, in_edf, 0, order)
    edf_ok(
        order, n, -1, 0, deadline_s, copy_s, size, forward_s, release_end_s, release_cum,
        h2d_start, h2d_end,
    )  # fmt: skip
    return n


@njit(cache=True, nogil=True)
def _seg_build(values):  # type: ignore[no-untyped-def]
    """A max segment tree over ``values``: row 0 node maxima (own pending add included), row 1
    pending adds; padding leaves sit far below any budget."""
    n = values.shape[0]
    size = 1
    while size < n:
        size *= 2
    seg = np.zeros((2, 2 * size), dtype=np.int64)
    mx = seg[0]
    for k in range(size):
        mx[size + k] = values[k] if k < n else -_BIG
    for k in range(size - 1, 0, -1):
        a, b = mx[2 * k], mx[2 * k + 1]
        mx[k] = a if a > b else b
    return seg


#: Add ``s`` bytes to operators lo..hi (inclusive) in O(log n_ops): the same max / pending-add
#: tree as the chain index's slots.
_add = _range_add


@njit(cache=True, nogil=True)
def _first_over(seg, budget):  # type: ignore[no-untyped-def]
    """First operator whose memory exceeds ``budget``, or -1."""
    mx, ad = seg[0], seg[1]
    if mx[1] <= budget:
        return -1
    size = mx.shape[0] // 2
    node = 1
    acc = np.int64(0)
    while node < size:
        acc += ad[node]
        node = 2 * node if mx[2 * node] + acc > budget else 2 * node + 1
    return node - size


@njit(cache=True, nogil=True)
def _back_start(t, need, fwd_end):  # type: ignore[no-untyped-def]
    b = need[t]
    f = fwd_end[t] + 1
    return b if b > f else f


@njit(cache=True, nogil=True)
def _contrib(m, t, sign, x, fwd_end, need, prod, lbr, size):  # type: ignore[no-untyped-def]
    s = sign * size[t]
    if x[t] == KEEP:
        _add(m, prod[t], lbr[t], s)
    else:
        _add(m, prod[t], fwd_end[t], s)
        b = _back_start(t, need, fwd_end)
        if b <= lbr[t]:
            _add(m, b, lbr[t], s)


@njit(cache=True, nogil=True)
def _to_recomp(  # type: ignore[no-untyped-def]
    t,
    m,
    x,
    fwd_end,
    need,
    dep_need,
    prod,
    lfr,
    fbr,
    lbr,
    size,
    rb_ptr,
    rb_idx,
    stack,
    cands,
    cand_pos,
):
    """Mark ``t`` recomp and update the profile, including the rebuild chain below it, and the
    candidate index (``cands``, `_candidate_index`) for every tensor whose state changed."""
    _contrib(m, t, -1, x, fwd_end, need, prod, lbr, size)
    x[t] = RECOMP
    fwd_end[t] = lfr[t]
    need[t] = fbr[t] if fbr[t] < dep_need[t] else dep_need[t]
    _contrib(m, t, 1, x, fwd_end, need, prod, lbr, size)
    update_candidate(cands, cand_pos, t, x, fwd_end, need, dep_need, lfr, fbr)
    top = 0
    stack[top] = t
    top += 1
    while top > 0:
        top -= 1
        u = stack[top]
        for j in range(rb_ptr[u], rb_ptr[u + 1]):
            v = rb_idx[j]
            changed = False
            if need[u] < dep_need[v]:
                dep_need[v] = need[u]
                changed = True
            if x[v] != KEEP and dep_need[v] < need[v]:
                old = _back_start(v, need, fwd_end)
                need[v] = dep_need[v]
                new = _back_start(v, need, fwd_end)
                if new < old:
                    _add(m, new, old - 1, size[v])
                changed = True
                if x[v] == RECOMP:
                    stack[top] = v
                    top += 1
            if changed:
                update_candidate(cands, cand_pos, v, x, fwd_end, need, dep_need, lfr, fbr)


@njit(cache=True, nogil=True)
def pass2_kernel(  # type: ignore[no-untyped-def]
    x,
    fwd_end,
    back,
    budget,
    prod,
    lfr,
    fbr,
    lbr,
    size,
    cost,
    block_rank,
    rb_ptr,
    rb_idx,
    transient,
    rho_order,
    rho_pos,
):
    """Pass 2 in place on ``x``; returns (fits, first over-budget op, max overflow bytes).

    ``rho_order``: the tensors with finite cost and positive size by (c_t / s_t, index);
    ``rho_pos``: each tensor's place in it (-1 when not in it).
    """
    n_t = x.shape[0]
    max_size = np.int64(0)
    for t in range(n_t):
        if size[t] > max_size:
            max_size = size[t]
    need = need_ops(x, back, fbr, prod, rb_ptr, rb_idx)
    dep_need = np.full(n_t, _BIG, dtype=np.int64)
    for u in range(n_t):
        if x[u] == RECOMP:
            for j in range(rb_ptr[u], rb_ptr[u + 1]):
                v = rb_idx[j]
                if need[u] < dep_need[v]:
                    dep_need[v] = need[u]
    m = _seg_build(static_profile(x, prod, fwd_end, need, lbr, size, transient, True))
    cands = candidate_index(rho_order, x, fwd_end, need, dep_need, lfr, fbr)
    stack = np.empty(n_t + 1, dtype=np.int64)
    i = 0
    for _ in range(2 * n_t + 2):
        i = _first_over(m, budget)
        if i < 0:
            return True, -1, np.int64(0)
        excess = m[0, 1] - budget
        # C: resident at op i, unused until after i, and freed at i if recomputed. With every
        # candidate covering min(s, E) = s (E >= the largest tensor) the score is rho_t and the
        # first candidate in (rho, index) order is the argmin, which the candidate index finds;
        # otherwise scan all (ties to the lower index either way).
        best = -1
        if excess >= max_size:
            k = first_candidate(cands, i)
            if k >= 0:
                best = rho_order[k]
        else:
            best_score = np.inf
            for t in range(n_t):
                if x[t] == RECOMP or lfr[t] >= i or size[t] <= 0 or not np.isfinite(cost[t]):
                    continue
                nr = fbr[t] if fbr[t] < dep_need[t] else dep_need[t]
                if x[t] == KEEP:
                    if nr <= i:
                        continue
                else:
                    b = need[t] if need[t] > fwd_end[t] + 1 else fwd_end[t] + 1
                    if not (i <= fwd_end[t] or (b <= i and i < nr)):
                        continue
                score = cost[t] / (size[t] if size[t] < excess else excess)
                if score < best_score:
                    best_score = score
                    best = t
        if best >= 0:
            _to_recomp(
                best, m, x, fwd_end, need, dep_need, prod, lfr, fbr, lbr, size, rb_ptr, rb_idx,
                stack, cands, rho_pos,
            )  # fmt: skip
            continue
        # Fallback: the earliest block with a tensor left to recompute goes fully recomputed.
        first_rank = _BIG
        for t in range(n_t):
            if x[t] != RECOMP and np.isfinite(cost[t]) and block_rank[t] < first_rank:
                first_rank = block_rank[t]
        if first_rank == _BIG:
            return False, i, excess
        for t in range(n_t):
            if x[t] != RECOMP and np.isfinite(cost[t]) and block_rank[t] == first_rank:
                _to_recomp(
                    t, m, x, fwd_end, need, dep_need, prod, lfr, fbr, lbr, size, rb_ptr,
                    rb_idx, stack, cands, rho_pos,
                )  # fmt: skip
    return False, i, np.int64(0)


class PassResult(NamedTuple):
    """One run of Algorithm 1 at one budget."""

    actions: np.ndarray  # int8, tensor order: 0 keep, 1 swap, 2 recomp
    fits: bool  # the planner's memory profile stays within the budget
    fail_op: int  # first over-budget operator when it does not fit, else -1
    overflow_bytes: int  # how far the profile stays above the budget when it does not fit
    d2h_end_s: np.ndarray  # FifoD2H end of each swapped tensor's offload (NaN elsewhere)
    h2d_start_s: np.ndarray  # EdfH2D start of each swapped tensor's prefetch (NaN elsewhere)


def candidate_order(sa: StaticArrays, order: str) -> np.ndarray:
    """Pass 1's candidates (r_t < T_F < d_t, s_t > 0) in priority order (memoised, read-only).

    ``"rho"``: decreasing c_t / s_t (block inputs, rho = inf, first), ties by production order;
    ``"production"``: production order (the swap-first ablation).
    """
    key = f"candidates:{order}"
    if key in sa.memo:
        return sa.memo[key]
    idx = np.arange(len(sa.size), dtype=np.int64)
    ok = (sa.produced_s < sa.forward_s) & (sa.deadline_s > sa.forward_s) & (sa.size > 0)
    idx = idx[ok]
    if order == "rho":
        rho = sa.cost[idx] / sa.size[idx]
        out = idx[np.lexsort((idx, sa.prod[idx], -rho))]
    elif order == "production":
        out = idx[np.lexsort((idx, sa.produced_s[idx]))]
    else:
        raise ValueError(f"unknown candidate order {order!r} (rho or production)")
    out.setflags(write=False)
    sa.memo[key] = out
    return out


def rho_order(sa: StaticArrays) -> np.ndarray:
    """Tensors with finite recompute cost and positive size by (c_t / s_t, index); memoised."""
    if "rho_order" not in sa.memo:
        idx = np.flatnonzero(np.isfinite(sa.cost) & (sa.size > 0)).astype(np.int64)
        out = idx[np.lexsort((idx, sa.cost[idx] / sa.size[idx]))]
        out.setflags(write=False)
        sa.memo["rho_order"] = out
    return sa.memo["rho_order"]


def _slots(cand: np.ndarray, key: np.ndarray, n_t: int) -> tuple[np.ndarray, np.ndarray]:
    """``cand`` sorted by (key, index), and each tensor's place in that order (-1: not in it)."""
    by_key = cand[np.lexsort((cand, key[cand]))]
    slot = np.full(n_t, -1, dtype=np.int64)
    slot[by_key] = np.arange(len(by_key))
    return by_key, slot


def rho_positions(sa: StaticArrays) -> np.ndarray:
    """Each tensor's place in `rho_order` (-1 when not in it); memoised."""
    if "rho_pos" not in sa.memo:
        order = rho_order(sa)
        out = np.full(len(sa.size), -1, dtype=np.int64)
        out[order] = np.arange(len(order))
        out.setflags(write=False)
        sa.memo["rho_pos"] = out
    return sa.memo["rho_pos"]


def plan_passes(
    sa: StaticArrays,
    budget_bytes: int,
    peak_bytes: int,
    *,
    order: str = "rho",
    pass1: bool = True,
    guard: float = 0.02,
    excluded: np.ndarray | None = None,
    forced_recomp: np.ndarray | None = None,
) -> PassResult:
    """Algorithm 1 once: Pass 1 (unless ``pass1`` is false), then Pass 2.

    ``budget_bytes`` is M and ``peak_bytes`` P (the keep-all peak), so D = P - M. ``excluded``
    (bool per tensor) are never swapped; ``forced_recomp`` are recomputed from the start (both
    come from the repair rounds).
    """
    n_t = len(sa.size)
    x = np.zeros(n_t, dtype=np.int8)
    d2h_end = np.full(n_t, np.nan)
    h2d_start = np.full(n_t, np.nan)
    h2d_end = np.full(n_t, np.nan)
    deficit = peak_bytes - budget_bytes
    if deficit <= 0:
        return PassResult(x, True, -1, 0, d2h_end, h2d_start)
    blocked = np.zeros(n_t, dtype=bool)
    if excluded is not None:
        blocked |= excluded
    if forced_recomp is not None:
        blocked |= forced_recomp & np.isfinite(sa.cost)
    if pass1:
        cand = candidate_order(sa, order)
        cand = cand[~blocked[cand]]
        swap = np.zeros(n_t, dtype=np.bool_)
        fifo_tensor, fifo_slot = _slots(cand, sa.produced_s, n_t)
        edf_tensor, edf_slot = _slots(cand, sa.deadline_s, n_t)
        pass1_kernel(
            cand, np.int64(deficit), (1.0 - guard) * sa.forward_s, sa.produced_s,
            sa.deadline_s, sa.copy_s, sa.size, sa.forward_s, sa.release_op_end_s,
            sa.release_cum, swap, d2h_end, h2d_start, h2d_end, fifo_slot, fifo_tensor,
            edf_slot, edf_tensor,
        )  # fmt: skip
        x[swap] = SWAP
    if forced_recomp is not None:
        x[forced_recomp & np.isfinite(sa.cost) & (x == KEEP)] = RECOMP
    fwd_end = forward_ends(sa, x, d2h_end)
    back = sa.fbr.copy()
    fits, fail_op, overflow = pass2_kernel(
        x, fwd_end, back, np.int64(budget_bytes), sa.prod, sa.lfr, sa.fbr, sa.lbr, sa.size,
        sa.cost, sa.block_rank, sa.rb_ptr, sa.rb_idx, sa.transient, rho_order(sa),
        rho_positions(sa),
    )  # fmt: skip
    return PassResult(x, bool(fits), int(fail_op), int(overflow), d2h_end, h2d_start)


__all__ = ["KEEP", "RECOMP", "SWAP", "PassResult", "candidate_order", "op_at_time", "plan_passes"]
