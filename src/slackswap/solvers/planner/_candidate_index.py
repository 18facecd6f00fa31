"""Pass 2's cheapest candidate at an operator, found without scanning every tensor.

A tensor t is a Pass 2 candidate at operator i (resident at i, unused until after i, not yet
recomputed; `pass2_kernel`) exactly when i lies in one of at most two operator intervals, read
from the plan's state:

- keep: [lfr + 1, nr - 1], nr = min(first backward reader, earliest rebuild reading it);
- swap: [lfr + 1, fwd_end] (its offload still running) and [max(b, lfr + 1), nr - 1], b the
  operator it is back from (`_back_start`);
- recomp: none.

The index is a tree over the tensors in (c_t / s_t, index) order (`rho_order`) whose nodes hold
the smallest start and largest end of each interval kind below them; `first_candidate` descends
left first and skips a subtree that no interval of it can contain i, so it returns the first
candidate in that order, the one Pass 2's scan would pick, in O(log n) per skipped subtree. On
deep sequential graphs a subtree covers neighbouring layers of one tensor kind, so almost every
skip happens near the root. A tensor's leaf is rewritten whenever Pass 2 changes what its
intervals are read from.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from slackswap.plan import KEEP, RECOMP

_BIG = np.int64(1) << 62


@njit(cache=True, nogil=True)
def _intervals(t, x, fwd_end, need, dep_need, lfr, fbr):  # type: ignore[no-untyped-def]
    """(lo1, hi1, lo2, hi2): the operators where ``t`` is a candidate (empty: lo > hi)."""
    if x[t] == RECOMP:
        return _BIG, np.int64(-1), _BIG, np.int64(-1)
    nr = fbr[t] if fbr[t] < dep_need[t] else dep_need[t]
    lo = lfr[t] + 1
    if x[t] == KEEP:
        return lo, nr - 1, _BIG, np.int64(-1)
    b = need[t] if need[t] > fwd_end[t] + 1 else fwd_end[t] + 1
    return lo, fwd_end[t], (b if b > lo else lo), nr - 1


@njit(cache=True, nogil=True)
def _pull(tree, k):  # type: ignore[no-untyped-def]
    while k >= 1:
        a, b = 2 * k, 2 * k + 1
        tree[0, k] = tree[0, a] if tree[0, a] < tree[0, b] else tree[0, b]
        tree[1, k] = tree[1, a] if tree[1, a] > tree[1, b] else tree[1, b]
        tree[2, k] = tree[2, a] if tree[2, a] < tree[2, b] else tree[2, b]
        tree[3, k] = tree[3, a] if tree[3, a] > tree[3, b] else tree[3, b]
        k >>= 1


@njit(cache=True, nogil=True)
def _set_leaf(tree, leaf, t, x, fwd_end, need, dep_need, lfr, fbr):  # type: ignore[no-untyped-def]
    lo1, hi1, lo2, hi2 = _intervals(t, x, fwd_end, need, dep_need, lfr, fbr)
    tree[0, leaf] = lo1
    tree[1, leaf] = hi1
    tree[2, leaf] = lo2
    tree[3, leaf] = hi2


@njit(cache=True, nogil=True)
def candidate_index(order, x, fwd_end, need, dep_need, lfr, fbr):  # type: ignore[no-untyped-def]
    """The index over ``order`` (tensor ids by rho); rows: min lo1, max hi1, min lo2, max hi2."""
    n = order.shape[0]
    size = 1
    while size < n:
        size *= 2
    tree = np.empty((4, 2 * size), dtype=np.int64)
    tree[0, :] = _BIG
    tree[1, :] = -1
    tree[2, :] = _BIG
    tree[3, :] = -1
    for k in range(n):
        _set_leaf(tree, size + k, order[k], x, fwd_end, need, dep_need, lfr, fbr)
    for k in range(size - 1, 0, -1):
        a, b = 2 * k, 2 * k + 1
        tree[0, k] = tree[0, a] if tree[0, a] < tree[0, b] else tree[0, b]
        tree[1, k] = tree[1, a] if tree[1, a] > tree[1, b] else tree[1, b]
        tree[2, k] = tree[2, a] if tree[2, a] < tree[2, b] else tree[2, b]
        tree[3, k] = tree[3, a] if tree[3, a] > tree[3, b] else tree[3, b]
    return tree


@njit(cache=True, nogil=True)
def update_candidate(  # type: ignore[no-untyped-def]
    tree, pos, t, x, fwd_end, need, dep_need, lfr, fbr
):
    """Rewrite ``t``'s leaf (``pos[t]``: its place in the order, -1 when not indexed)."""
    p = pos[t]
    if p < 0:
        return
    leaf = tree.shape[1] // 2 + p
    _set_leaf(tree, leaf, t, x, fwd_end, need, dep_need, lfr, fbr)
    _pull(tree, leaf >> 1)


@njit(cache=True, nogil=True)
def first_candidate(tree, i):  # type: ignore[no-untyped-def]
    """Place in the order of the first tensor that is a candidate at operator ``i``, or -1."""
    size = tree.shape[1] // 2
    node = 1
    while True:
        if (tree[0, node] <= i and i <= tree[1, node]) or (
            tree[2, node] <= i and i <= tree[3, node]
        ):
            if node >= size:
                return node - size
            node = 2 * node
            continue
        while node & 1:  # a right child (or the root): climb to the next subtree on the right
            node >>= 1
        if node == 0:
            return -1
        node += 1
