"""Pass 1's FIFO chain end under "S plus one tensor" in O(log |S|), not a walk of the chain.

The FifoD2H chain runs the swap set's offloads in production order, each starting no earlier
than its tensor's production time r_k; its end is max over members k of (r_k + S_k), S_k the
copy seconds of k and every member after it. Each candidate owns a fixed *slot* (its rank by
(r, index) among Pass 1's candidates), so inserting t adds copy_t to S_k of every member before
t's slot and adds t's own term: a range add and a point set in a max segment tree over the slots
(lazy adds kept at the nodes, never pushed down), plus a Fenwick tree of the copy seconds for
the sum after a slot. The end with t inserted is then
max(max_{k before t} (r_k + S_k) + copy_t, r_t + copy_t + S_after(t), max_{k after t} (r_k + S_k)),
read on one root-to-leaf descent.

The sums are summed in another order than the chain's own walk, so the end read here differs
from the walk's float result by rounding (about |S| * 1e-16 relative). Pass 1 uses it only to
reject a candidate whose end lies clearly past the limit (`CHAIN_TOL_S`); anything closer runs
the walk, so Pass 1's decisions are the walk's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Seconds: a chain end read from the index is trusted to reject only when it exceeds the limit
#: by more than this (rounding of the index's sums is below 1e-9 s on any chain a step holds).
CHAIN_TOL_S = 1e-6


@njit(cache=True, nogil=True)
def chain_index(n_slots):  # type: ignore[no-untyped-def]
    """An empty index over ``n_slots`` slots: (tree, Fenwick). Tree row 0: node maxima (own
    pending add included), row 1: pending adds; empty slots hold -inf."""
    size = 1
    while size < n_slots:
        size *= 2
    tree = np.zeros((2, 2 * size))
    tree[0, :] = -np.inf
    fen = np.zeros(n_slots + 1)
    return tree, fen


@njit(cache=True, nogil=True)
def _fen_prefix(fen, slot):  # type: ignore[no-untyped-def]
    """Copy seconds of the members in slots 0..slot."""
    acc = 0.0
    k = slot + 1
    while k > 0:
        acc += fen[k]
        k -= k & (-k)
    return acc


@njit(cache=True, nogil=True)
def _fen_add(fen, slot, v):  # type: ignore[no-untyped-def]
    k = slot + 1
    n = fen.shape[0]
    while k < n:
        fen[k] += v
        k += k & (-k)


@njit(cache=True, nogil=True)
def _range_add(tree, lo, hi, v):  # type: ignore[no-untyped-def]
    """Add ``v`` to slots lo..hi (inclusive)."""
    if lo > hi:
        return
    mx, ad = tree[0], tree[1]
    size = mx.shape[0] // 2
    left, right = lo + size, hi + size + 1
    while left < right:
        if left & 1:
            mx[left] += v
            ad[left] += v
            left += 1
        if right & 1:
            right -= 1
            mx[right] += v
            ad[right] += v
        left >>= 1
        right >>= 1
    for leaf in (lo + size, hi + size):
        k = leaf >> 1
        while k >= 1:
            a, b = mx[2 * k], mx[2 * k + 1]
            mx[k] = (a if a > b else b) + ad[k]
            k >>= 1


@njit(cache=True, nogil=True)
def _descend(tree, slot):  # type: ignore[no-untyped-def]
    """(max before ``slot``, max after it, the pending adds above its leaf)."""
    mx, ad = tree[0], tree[1]
    size = mx.shape[0] // 2
    before = -np.inf
    after = -np.inf
    node = 1
    acc = 0.0  # pending adds of the nodes above ``node``
    half = size // 2
    while node < size:
        below = acc + ad[node]
        if slot & half:
            v = mx[2 * node] + below
            if v > before:
                before = v
            node = 2 * node + 1
        else:
            v = mx[2 * node + 1] + below
            if v > after:
                after = v
            node = 2 * node
        acc = below
        half >>= 1
    return before, after, acc


@njit(cache=True, nogil=True)
def chain_end_with(tree, fen, total, slot, r, c):  # type: ignore[no-untyped-def]
    """The chain's end (seconds) with a tensor produced at ``r`` copying ``c`` in ``slot``."""
    before, after, _ = _descend(tree, slot)
    own = r + c + (total - _fen_prefix(fen, slot))
    end = before + c
    if own > end:
        end = own
    if after > end:
        end = after
    return end


@njit(cache=True, nogil=True)
def chain_insert(tree, fen, total, slot, r, c):  # type: ignore[no-untyped-def]
    """Add the member (``slot``, r, c); returns the new total copy seconds."""
    mx = tree[0]
    size = mx.shape[0] // 2
    _, _, acc = _descend(tree, slot)
    mx[size + slot] = r + c + (total - _fen_prefix(fen, slot)) - acc
    _range_add(tree, slot, slot, 0.0)  # pull the new leaf up
    _range_add(tree, 0, slot - 1, c)
    _fen_add(fen, slot, c)
    return total + c


@njit(cache=True, nogil=True)
def slot_value(tree, slot):  # type: ignore[no-untyped-def]
    """The value held in ``slot`` (its leaf plus the pending adds above it)."""
    _, _, acc = _descend(tree, slot)
    return tree[0, tree.shape[1] // 2 + slot] + acc


@njit(cache=True, nogil=True)
def set_slot(tree, slot, v):  # type: ignore[no-untyped-def]
    """Make ``slot`` hold ``v`` (-inf: empty)."""
    _, _, acc = _descend(tree, slot)
    tree[0, tree.shape[1] // 2 + slot] = v - acc
    _range_add(tree, slot, slot, 0.0)


@njit(cache=True, nogil=True)
def add_after(tree, slot, v):  # type: ignore[no-untyped-def]
    """Add ``v`` to every slot after ``slot``."""
    _range_add(tree, slot + 1, tree.shape[1] // 2 - 1, v)


@njit(cache=True, nogil=True)
def max_after(tree, slot):  # type: ignore[no-untyped-def]
    """The largest value held after ``slot`` (-inf when all are empty)."""
    _, after, _ = _descend(tree, slot)
    return after


@njit(cache=True, nogil=True)
def prev_filled(tree, slot):  # type: ignore[no-untyped-def]
    """The last non-empty slot before ``slot``, or -1."""
    mx = tree[0]
    size = mx.shape[0] // 2
    node = size + slot
    while node > 1:  # climb until a left sibling holds something
        if node & 1 and mx[node - 1] > -np.inf:
            node -= 1
            while node < size:  # then its rightmost non-empty leaf
                node = 2 * node + 1 if mx[2 * node + 1] > -np.inf else 2 * node
            return node - size
        node >>= 1
    return -1


@njit(cache=True, nogil=True)
def refill(tree, slots, values, n):  # type: ignore[no-untyped-def]
    """Empty every slot, then make ``slots[:n]`` hold ``values[:n]`` (a full rebuild)."""
    mx, ad = tree[0], tree[1]
    size = mx.shape[0] // 2
    mx[:] = -np.inf
    ad[:] = 0.0
    for k in range(n):
        mx[size + slots[k]] = values[k]
    for k in range(size - 1, 0, -1):
        a, b = mx[2 * k], mx[2 * k + 1]
        mx[k] = a if a > b else b
