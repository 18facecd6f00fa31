"""The on-demand-lru runtime (SuperNeurons): hand-worked timings and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slackswap.instance import Hardware, Instance
from slackswap.models.graph import GraphBuilder
from slackswap.simulator.policies.lru import build_steps, simulate_lru
from tests.support.strategies import small_instances

KEEP, SWAP, RECOMP = 0, 1, 2


def chain(n: int = 3, *, bw: float = 100.0, latency: float = 0.0, kind: str = "gemm") -> Instance:
    """n forward ops of 1 s, each saving one 100-byte tensor read by its 1 s backward op."""
    hw = Hardware(gpu="t", link="t", link_bw_Bps=bw, copy_latency_s=latency, duplex_factor=0.5)
    b = GraphBuilder("chain", hw)
    for i in range(n):
        b.op(f"f{i}", block=i, kind=kind, duration_s=1.0)
        b.saved(f"t{i}", nbytes=100, producer=f"f{i}", category="gemm_output", block=i)
    for i in reversed(range(n)):
        b.op(f"b{i}", backward=True, block=i, kind=kind, duration_s=1.0, reads=[f"t{i}"])
    return b.build()


def test_one_eviction_and_a_hidden_prefetch() -> None:
    # Budget 200 B: f2 must evict t0 (LRU) and wait 1 s for its copy; in backward b1 (a heavy
    # op) prefetches t0 for b0 once t2 is freed, hidden behind b1: step 7 s against 6 s ideal.
    inst = chain()
    r = simulate_lru(inst, np.full(3, SWAP, dtype=np.int8), 200)
    assert r["feasible"]
    assert r["step_s"] == pytest.approx(7.0)
    assert r["fwd_stall_mem_s"] == pytest.approx(1.0)
    assert r["bwd_stall_s"] == pytest.approx(0.0)
    assert r["d2h_bytes"] == 100 and r["h2d_bytes"] == 100
    assert r["peak_bytes"] == 200 and r["evictions"] == 1


def test_timeline_shows_the_eviction_the_stall_and_both_copies() -> None:
    inst = chain()
    r = simulate_lru(inst, np.full(3, SWAP, dtype=np.int8), 200, timeline=True)
    tl = r["timeline"]
    kinds = tl.compute_kind.tolist()
    assert kinds.count(0) == 6 and kinds.count(3) == 1 and kinds.count(4) == 1
    stall = kinds.index(3)
    assert (tl.compute_start_s[stall], tl.compute_end_s[stall]) == pytest.approx((2.0, 3.0))
    lanes = (tl.copy_engine.tolist(), tl.copy_start_s.tolist(), tl.copy_end_s.tolist())
    copies = sorted(zip(*lanes, strict=True))
    assert copies == [(0, 2.0, 3.0), (1, 5.0, 6.0)]
    assert tl.mem_bytes.max() == 200 and tl.mem_bytes[-1] == 0
    assert simulate_lru(inst, np.full(3, SWAP, dtype=np.int8), 200)["timeline"] is None


@pytest.mark.parametrize("duplex,step", [(0.5, 12.0), (1.0, 11.0)])
def test_duplex_slows_an_eviction_that_overlaps_a_prefetch(duplex: float, step: float) -> None:
    # Budget 400 B. f3's temporaries evict a (1 s). When g3 starts it prefetches a for g0 and
    # then evicts b for its own temporaries: both 100 B copies share the link from t = 5 s, at
    # half rate each with duplex 0.5, so g3 waits until 7 s (6 s at full duplex).
    hw = Hardware(gpu="t", link="t", link_bw_Bps=100.0, copy_latency_s=0.0, duplex_factor=duplex)
    b = GraphBuilder("duplex", hw)
    for i, t in enumerate("abcd"):
        b.op(f"f{i}", block=i, kind="gemm", duration_s=1.0, transient_bytes=100 if t == "d" else 0)
        b.saved(t, nbytes=100, producer=f"f{i}", category="gemm_output", block=i)
    b.op("g3", backward=True, block=3, kind="gemm", duration_s=2.0, reads=["d"],
         transient_bytes=100)  # fmt: skip
    for i, t in ((0, "a"), (2, "c"), (1, "b")):
        b.op(f"g{i}", backward=True, block=i, kind="gemm", duration_s=1.0, reads=[t])
    inst = b.build()
    r = simulate_lru(inst, np.full(4, SWAP, dtype=np.int8), 400)
    assert r["feasible"] and r["step_s"] == pytest.approx(step)
    assert r["fwd_stall_mem_s"] == pytest.approx(1.0)
    assert r["bwd_stall_mem_s"] == pytest.approx(step - 10.0)
    assert r["d2h_bytes"] == 200 and r["h2d_bytes"] == 200 and r["evictions"] == 2


def test_fetch_on_demand_without_heavy_ops() -> None:
    # Memory-bound ops never trigger the heavy-op prefetch: b0 fetches t0 itself (1 s stall).
    inst = chain(kind="memory")
    r = simulate_lru(inst, np.full(3, SWAP, dtype=np.int8), 200)
    assert r["step_s"] == pytest.approx(8.0)
    assert r["bwd_stall_copy_s"] == pytest.approx(1.0)


def test_latency_adds_to_each_copy() -> None:
    inst = chain(latency=0.25)
    r = simulate_lru(inst, np.full(3, SWAP, dtype=np.int8), 200)
    # The prefetch of t0 (issued when b1 starts) takes 1.25 s, 0.25 s more than b1 runs.
    assert r["fwd_stall_mem_s"] == pytest.approx(1.25)
    assert r["bwd_stall_copy_s"] == pytest.approx(0.25)
    assert r["step_s"] == pytest.approx(7.5)


def test_kept_tensors_are_never_evicted() -> None:
    inst = chain()
    r = simulate_lru(inst, np.array([KEEP, KEEP, SWAP], dtype=np.int8), 200)
    assert not r["feasible"]
    assert r["fail_op"] == 2 and r["overflow_bytes"] == 100
    assert "f2" in r["reason"]


def test_infinite_recompute_is_infeasible_not_an_error() -> None:
    inst = chain()
    r = simulate_lru(inst, np.array([RECOMP, KEEP, KEEP], dtype=np.int8), 10**6)
    assert not r["feasible"] and "recomput" in r["reason"] and r["step_s"] == math.inf


def test_rebuild_chains_run_before_the_first_backward_reader() -> None:
    hw = Hardware(gpu="t", link="t", link_bw_Bps=100.0, copy_latency_s=0.0)
    b = GraphBuilder("rebuild", hw)
    b.op("f0", block=0, kind="gemm", duration_s=1.0)
    b.saved("x", nbytes=10, producer="f0", category="block_input", block=0)
    b.op("f1", block=0, kind="gemm", duration_s=1.0, reads=["x"])
    b.saved("y", nbytes=10, producer="f1", category="gemm_output", block=0,
            recompute_s=0.5, rebuild_inputs=["x"])  # fmt: skip
    b.op("f2", block=0, kind="memory", duration_s=1.0, reads=["y"])
    b.saved("z", nbytes=10, producer="f2", category="elementwise", block=0,
            recompute_s=0.25, rebuild_inputs=["y"])  # fmt: skip
    b.op("b2", backward=True, block=0, kind="memory", duration_s=1.0, reads=["z"])
    b.op("b1", backward=True, block=0, kind="gemm", duration_s=1.0, reads=["y"])
    b.op("b0", backward=True, block=0, kind="gemm", duration_s=1.0, reads=["x"])
    inst = b.build()
    acts = np.array([KEEP, RECOMP, RECOMP], dtype=np.int8)
    steps = build_steps(inst, acts)
    # y is rebuilt first (z's input), then z, then b2 reads z.
    assert steps.rebuild[3:6] == [1, 2, -1]
    r = simulate_lru(inst, acts, 10**6)
    assert r["recompute_s"] == pytest.approx(0.75)
    assert r["step_s"] == pytest.approx(6.75)


@given(small_instances(), st.integers(0, 2**32 - 1))
def test_properties_on_random_instances(inst: Instance, seed: int) -> None:
    rng = np.random.default_rng(seed)
    acts = rng.integers(0, 3, inst.n_tensors).astype(np.int8)
    acts[(acts == RECOMP) & ~np.isfinite(inst.tensor_recompute_s)] = SWAP
    budget = int(rng.uniform(0.05, 1.5) * inst.peak_bytes) + 1
    r = simulate_lru(inst, acts, budget)
    assert r == simulate_lru(inst, acts, budget)  # deterministic
    if r["feasible"]:
        assert r["peak_bytes"] <= budget
        assert r["step_s"] >= inst.ideal_step_s + r["recompute_s"] - 1e-9
        stalls = r["fwd_stall_s"] + r["bwd_stall_s"]
        assert r["step_s"] == pytest.approx(inst.ideal_step_s + r["recompute_s"] + stalls)
    else:
        assert r["reason"] and r["overflow_bytes"] > 0
    # Evictable tensors never leave a budget that holds everything kept.
    big = simulate_lru(inst, np.where(acts == SWAP, SWAP, KEEP).astype(np.int8), inst.peak_bytes)
    assert big["feasible"] and big["step_s"] == pytest.approx(inst.ideal_step_s)
    assert big["d2h_bytes"] == 0


@pytest.mark.timeout(60)  # the link model used to stop its clock here and loop forever
def test_a_link_of_1e15_bytes_per_second_ends_every_copy() -> None:
    # As test_one_eviction_and_a_hidden_prefetch on a 1 PB/s link with 10 us latency: f2 waits
    # for t0's eviction, 10 us + 100 B / 1e15 B/s; the prefetch hides behind b1. A copy of
    # 1e-13 s is below the resolution of a clock near 2 s, which froze the old link model.
    inst = chain(bw=1e15, latency=10e-6)
    r = simulate_lru(inst, np.full(3, SWAP, dtype=np.int8), 200)
    copy_s = 10e-6 + 100 / 1e15
    assert r["feasible"] and r["evictions"] == 1
    assert r["fwd_stall_mem_s"] == pytest.approx(copy_s, rel=1e-6)
    assert r["step_s"] == pytest.approx(6.0 + copy_s, rel=1e-12)
    assert r["d2h_bytes"] == 100 and r["h2d_bytes"] == 100


def test_nothing_copied_gives_exactly_the_ideal_step() -> None:
    # VGG-16 at its keep-all peak: nothing leaves the device, so the step is the ideal step to
    # the last bit. Adding the durations one by one instead ended 1.4e-17 s below it
    # (throughput 1.0000000000000002): the ideal step is numpy's pairwise sum.
    from slackswap.instances.catalog import load

    inst = load("vgg16")
    r = simulate_lru(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8), inst.peak_bytes)
    assert r["feasible"] and r["d2h_bytes"] == 0
    assert r["step_s"] == r["ideal_s"] and r["throughput"] == 1.0


@given(small_instances(), st.data())
def test_the_step_is_never_below_the_ideal(inst: Instance, data: st.DataObject) -> None:
    acts = np.array(
        data.draw(st.lists(st.sampled_from([KEEP, SWAP]), min_size=inst.n_tensors,
                           max_size=inst.n_tensors)), dtype=np.int8,
    )  # fmt: skip
    budget = int(inst.peak_bytes * data.draw(st.sampled_from([1.0, 0.8, 0.6])))
    r = simulate_lru(inst, acts, budget)
    if r["feasible"]:
        assert r["step_s"] >= r["ideal_s"] and r["throughput"] <= 1.0
