"""Pass 1's two link schedules (Sec. 3.2): FIFO offloads and earliest-deadline-first prefetches.

FifoD2H: the swap set's D2H copies run in production order on one engine, each starting no
earlier than its tensor's production time r_t; the set passes when the last copy ends by
(1 - g) T_F. EdfH2D: H2D copies start at T_F and run in deadline order (Jackson's rule minimises
the maximum lateness on one machine); memory is taken to be full at T_F, so copy k may start only
once the backward pass has freed as many bytes as copies 1..k bring in (a saved tensor frees its
bytes when its last backward reader ends: kept and swapped tensors alike, since a swapped
tensor's own copy was already charged); the set passes when every copy ends by its tensor's first
backward reader d_u. Copies run alone on their engine here (the other direction is idle during
the forward pass and during most of the backward pass), at W plus the per-copy latency.

The kernels take the set as index arrays sorted by the schedule's key, with at most one tensor
inserted at a position (Pass 1's walks test "S plus one tensor" this way, where its indexes do
not decide: `_chain_index`, `_edf_bound`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from slackswap import numbacache
from slackswap.solvers.planner._memory import StaticArrays

numbacache.install()  # before the first @njit(cache=True): the shared cache

_EPS = 1e-12  # seconds: float slack in deadline comparisons


@njit(cache=True, nogil=True)
def fifo_end(order, n, ins, pos, produced_s, copy_s, ends):  # type: ignore[no-untyped-def]
    """End of the FIFO D2H chain over ``order[:n]`` with ``ins`` at ``pos`` (-1: none).

    Writes each member's end time into ``ends`` (indexed by tensor); returns the last end.
    """
    e = 0.0
    k = 0
    total = n + (1 if ins >= 0 else 0)
    for j in range(total):
        if ins >= 0 and j == pos:
            u = ins
        else:
            u = order[k]
            k += 1
        r = produced_s[u]
        e = (e if e > r else r) + copy_s[u]
        ends[u] = e
    return e


@njit(cache=True, nogil=True)
def edf_ok(  # type: ignore[no-untyped-def]
    order,
    n,
    ins,
    pos,
    deadline_s,
    copy_s,
    size,
    forward_s,
    release_end_s,
    release_cum,
    starts,
    ends,
):
    """True when every H2D copy of ``order[:n]`` plus ``ins`` at ``pos`` meets its deadline.

    Writes start and end times (seconds, indexed by tensor) of the members scheduled so far.
    """
    e = forward_s
    cum = np.int64(0)
    k = 0
    total = n + (1 if ins >= 0 else 0)
    n_rel = release_cum.shape[0]
    for j in range(total):
        if ins >= 0 and j == pos:
            u = ins
        else:
            u = order[k]
            k += 1
        cum += size[u]
        r = np.searchsorted(release_cum, cum)
        if r >= n_rel:
            return False
        t_mem = release_end_s[r]
        start = e if e > t_mem else t_mem
        e = start + copy_s[u]
        starts[u] = start
        ends[u] = e
        if e > deadline_s[u] + _EPS:
            return False
    return True


class LinkSchedule(NamedTuple):
    """Both schedules of one swap set; times in seconds, NaN for tensors outside the set."""

    d2h_end_s: np.ndarray
    h2d_start_s: np.ndarray
    h2d_end_s: np.ndarray
    fifo_ok: bool  # every offload ends by (1 - g) T_F
    edf_ok: bool  # every prefetch ends by its deadline (False also when memory never frees)


def link_schedule(sa: StaticArrays, swap: np.ndarray, guard: float = 0.02) -> LinkSchedule:
    """FifoD2H and EdfH2D for the tensors where ``swap`` is true (Algorithm 1, line 5)."""
    members = np.flatnonzero(np.asarray(swap, dtype=bool)).astype(np.int64)
    n_t = len(sa.size)
    fifo = members[np.lexsort((members, sa.produced_s[members]))]
    edf = members[np.lexsort((members, sa.deadline_s[members]))]
    d2h_end = np.full(n_t, np.nan)
    start = np.full(n_t, np.nan)
    end = np.full(n_t, np.nan)
    last = fifo_end(fifo, len(fifo), -1, 0, sa.produced_s, sa.copy_s, d2h_end)
    ok_edf = edf_ok(
        edf,
        len(edf),
        -1,
        0,
        sa.deadline_s,
        sa.copy_s,
        sa.size,
        sa.forward_s,
        sa.release_op_end_s,
        sa.release_cum,
        start,
        end,
    )
    ok_fifo = len(fifo) == 0 or last <= (1.0 - guard) * sa.forward_s + _EPS
    return LinkSchedule(d2h_end, start, end, bool(ok_fifo), bool(ok_edf))
