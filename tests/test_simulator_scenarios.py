"""Hand-worked scenarios with exact expected times (1 GB/s link, 10 us latency, 85% duplex)."""

import numpy as np
import pytest
from simhelpers import MS, chain, eviction_case

from slackswap.plan import KEEP, RECOMP, SWAP, Plan
from slackswap.simulator import simulate


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def test_swap_fully_hidden() -> None:
    inst = chain()
    r = simulate(inst, Plan(inst, [SWAP, KEEP]), 1.0)
    # D2H of a: 1.00 -> 1.51 ms; freed at 2 ms; H2D 2.00 -> 2.51 ms; b0 starts at 3 ms.
    assert r.feasible and r.step_s == r.ideal_s == approx(4 * MS)
    assert r.bwd_stall_s == 0 and r.fwd_stall_s == 0
    assert r.d2h_bytes == r.h2d_bytes == 500_000


def test_prefetch_late() -> None:
    inst = chain(b1_s=0.2 * MS)
    r = simulate(inst, Plan(inst, [SWAP, KEEP]), 1.0)
    # b0 wants a at 2.2 ms; the H2D ends at 2.0 + 0.01 + 0.5 = 2.51 ms.
    assert r.bwd_stall_copy_s == approx(0.31 * MS)
    assert r.step_s == approx(3.51 * MS)
    assert r.throughput == approx(3.2 / 3.51)


def test_two_copies_overlap_at_85_percent() -> None:
    inst = chain(b1_s=0.2 * MS, c_bytes=1e6)
    r = simulate(inst, Plan(inst, [SWAP, SWAP]), 1.0, timeline=True)
    # At 2 ms the D2H of c and the H2D of a start together: 10 us latency, then 0.85 GB/s each.
    h2d_end = 2.01 * MS + 0.5e6 / 0.85e9
    assert r.step_s == approx(h2d_end + 1 * MS)
    assert r.bwd_stall_copy_s == approx(h2d_end - 2.2 * MS)
    tl = r.timeline
    assert tl is not None
    d2h_c = (tl.copy_engine == 0) & (tl.copy_tensor == 1)
    # c: 0.5e6 bytes at 0.85 GB/s while a loads, the other 0.5e6 at full rate.
    assert tl.copy_end_s[d2h_c][0] == approx(h2d_end + 0.5 * MS)
    assert r.d2h_bytes == 1_500_000 and r.h2d_bytes == 500_000


def test_one_eviction() -> None:
    inst = eviction_case()
    r = simulate(inst, Plan(inst, [SWAP, KEEP]), 2.2e6 / inst.peak_bytes)
    assert r.budget_bytes == 2_200_000
    # a loads at 3 ms (fits with the look-ahead), g4 needs 1.5 MB at 7 ms: a is evicted, loaded
    # again from 8 ms and g5 waits until 9.01 ms.
    assert r.feasible and r.evictions == 1
    assert r.bwd_stall_copy_s == approx(1.01 * MS)
    assert r.step_s == approx(10.01 * MS)
    assert r.h2d_bytes == 2_000_000 and r.peak_bytes <= r.budget_bytes


def test_recompute_adds_its_cost() -> None:
    inst = chain()
    inst_c = inst  # "c" is 0 bytes: recompute a is invalid (no rebuild), c's cost is inf too
    r = simulate(inst_c, Plan(inst_c, [RECOMP, KEEP]), 1.0)
    assert not r.feasible and "recompute" in r.reason and np.isinf(r.step_s)
    assert r.throughput == 0.0 and r.fail_op >= 0


def test_prefetch_memory_counts_from_admission() -> None:
    inst = chain()
    r = simulate(inst, Plan(inst, [SWAP, KEEP]), 1.0, timeline=True)
    tl = r.timeline
    assert tl is not None
    # a's 0.5 MB return at 2 ms, when its H2D copy is admitted, not at b0's start (3 ms).
    at = np.flatnonzero(np.isclose(tl.mem_time_s, 2 * MS, rtol=1e-12, atol=0))
    assert at.size and tl.mem_bytes[at[-1]] == 500_000  # (a's forward buffer was freed first)
    assert tl.mem_bytes[tl.mem_time_s < 2 * MS].max() == 500_000
    h2d = tl.copy_engine == 1
    assert tl.copy_start_s[h2d][0] == approx(2 * MS)
