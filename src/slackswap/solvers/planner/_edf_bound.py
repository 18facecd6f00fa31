"""Pass 1's EdfH2D check under "S plus one tensor", proved in O(log |S|) when it clearly passes.

EdfH2D (`_linkcheck`) runs the prefetches in deadline order from T_F; copy k starts once the
backward pass has freed the bytes of copies 1..k, at T(cum_k) (the end of the first backward
operator by which that many bytes are free). Inserting t (s bytes, copy c) in the order delays
every later copy by at most D = c + Delta(s), Delta(s) = max over x of T(x + s) - T(x) (the
longest the backward pass takes to free s more bytes): a copy's end moves by at most the larger
of its predecessor's delay and the shift of its own memory time, and the first copy after t by
at most c plus that shift.

So the index keeps, per member k in deadline order, an upper bound u_k on its end minus its
deadline d_k (exact after each full walk), in a max tree with range adds
(`_chain_index`): t passes for sure when its own end, bounded from its predecessor's bound and
T(cum + s), meets d_t, and max_{k after t} u_k + D <= 0; then t's slot is set and D added to
the slots after it. Anything else is decided by the exact walk, which also resets every bound to
the exact schedule, so Pass 1's decisions are the walk's. Delta is monotone in s and is
computed once per size class (sizes rounded up to 2^(1/8) steps).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Seconds of slack the bounds must keep to decide without a walk (their sums round, by far
#: less than this).
BOUND_TOL_S = 1e-9
#: Size classes per doubling of bytes in the Delta table.
CLASSES_PER_DOUBLING = 8


@njit(cache=True, nogil=True)
def _free_time_bound(release_cum, release_end_s, s):  # type: ignore[no-untyped-def]
    """Delta(s): the longest the backward pass takes to free ``s`` more bytes, seconds.

    T is a step function (T(x) = release_end_s[r] for release_cum[r - 1] < x <= release_cum[r]),
    so the worst x in each step is its right end; x + s past every release counts as the last
    release (a walk that reaches it fails on its own)."""
    n_rel = release_cum.shape[0]
    if n_rel == 0:
        return 0.0
    last = release_cum[n_rel - 1]
    worst = 0.0
    q = 0
    for r in range(n_rel):
        x = release_cum[r] + s
        if x > last:
            x = last
        while release_cum[q] < x:
            q += 1
        d = release_end_s[q] - release_end_s[r]
        if d > worst:
            worst = d
    return worst


@njit(cache=True, nogil=True)
def free_time_bound(table, release_cum, release_end_s, s):  # type: ignore[no-untyped-def]
    """Delta(s') for s' >= ``s`` the size class's upper end, memoised in ``table`` (NaN: not
    computed yet)."""
    if s <= 1:
        k = 0
    else:
        # np.log2, not math.log2: numba 0.59 (the declared floor) has no math.log2; both are
        # C's log2
        k = int(math.ceil(np.log2(np.float64(s)) * CLASSES_PER_DOUBLING))
    if k >= table.shape[0]:
        k = table.shape[0] - 1
    upper = np.int64(math.ceil(2.0 ** (k / CLASSES_PER_DOUBLING))) + 1
    if upper < s or k == table.shape[0] - 1:  # outside the classes: no memo
        return _free_time_bound(release_cum, release_end_s, s)
    if np.isnan(table[k]):
        table[k] = _free_time_bound(release_cum, release_end_s, upper)
    return table[k]


@njit(cache=True, nogil=True)
def release_time(release_cum, release_end_s, cum):  # type: ignore[no-untyped-def]
    """T(cum), or inf when the backward pass never frees that many bytes."""
    r = np.searchsorted(release_cum, cum)
    if r >= release_cum.shape[0]:
        return np.inf
    return release_end_s[r]


@njit(cache=True, nogil=True)
def free_time_table():  # type: ignore[no-untyped-def]
    """An empty Delta table (one entry per size class up to 2^64 bytes)."""
    return np.full(64 * CLASSES_PER_DOUBLING + 1, np.nan)


@njit(cache=True, nogil=True)
def bytes_before(fen, slot):  # type: ignore[no-untyped-def]
    """Bytes of the members in the slots before ``slot`` (a Fenwick tree of int64 bytes)."""
    acc = np.int64(0)
    k = slot
    while k > 0:
        acc += fen[k]
        k -= k & (-k)
    return acc


@njit(cache=True, nogil=True)
def add_bytes(fen, slot, s):  # type: ignore[no-untyped-def]
    k = slot + 1
    n = fen.shape[0]
    while k < n:
        fen[k] += s
        k += k & (-k)
