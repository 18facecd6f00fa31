"""Hand-worked scenarios with exact expected times (1 GB/s link, 10 us latency, 85% duplex)."""

import numpy as np
import pytest
from simhelpers import HW, MS, chain, eviction_case

from slackswap.models.graph import GraphBuilder
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


def test_barriers_next_layer_waits_for_the_offload() -> None:
    """vDNN: an offload overlaps the layer that reads its tensor last; the next layer waits."""
    g = GraphBuilder("layers", HW)
    g.op("f0", block=0, kind="memory", duration_s=1 * MS)
    g.saved("a", nbytes=0.5e6, producer="f0", category="block_input", block=0)
    g.op("f1", block=1, kind="memory", duration_s=0.2 * MS, reads=["a"])
    g.saved("c", nbytes=0.3e6, producer="f1", category="block_input", block=1)
    g.op("f2", block=2, kind="memory", duration_s=1 * MS, reads=["c"])
    g.op("b2", backward=True, block=2, kind="memory", duration_s=0.1 * MS, reads=["c"])
    g.op("b1", backward=True, block=1, kind="memory", duration_s=1 * MS, reads=["a"])
    g.op("b0", backward=True, block=0, kind="memory", duration_s=1 * MS)
    inst = g.build()
    r = simulate(inst, Plan(inst, [SWAP, SWAP]), 1.0, runtime="barriers", timeline=True)
    # D2H a 1.00 -> 1.51 ms overlaps f1 (its last reader, 1.0 -> 1.2 ms); f2 waits for it, not
    # for c (1.51 -> 1.82 ms, last read by f2 itself): forward stall 0.31 ms, f2 1.51 -> 2.51.
    assert r.fwd_stall_copy_s == approx(0.31 * MS) and r.fwd_stall_mem_s == 0
    # Backward from 2.51 ms: c (b2's) loads 2.51 -> 2.82, b2 waits for it and runs to 2.92;
    # a (b1's, released one layer ahead) loads 2.82 -> 3.33 and b1 waits for it.
    assert r.bwd_stall_copy_s == approx(0.31 * MS + 0.41 * MS) and r.bwd_stall_mem_s == 0
    assert r.ideal_s == approx(4.3 * MS) and r.step_s == approx(5.33 * MS)
    tl = r.timeline
    assert tl is not None
    ops = tl.compute_kind == 0
    starts = dict(zip(tl.compute_op[ops].tolist(), tl.compute_start_s[ops].tolist(), strict=True))
    assert starts[1] == approx(1.0 * MS) and starts[2] == approx(1.51 * MS)
    assert starts[3] == approx(2.82 * MS) and starts[4] == approx(3.33 * MS)
    d2h = tl.copy_engine == 0
    assert tl.copy_end_s[d2h].tolist() == [approx(1.51 * MS), approx(1.82 * MS)]
