"""Algorithm 1's pieces on hand-worked instances: memory profile, FifoD2H / EdfH2D, both passes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slackswap.instance import Hardware, Instance
from slackswap.models.graph import GraphBuilder
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.solvers.planner._linkcheck import link_schedule
from slackswap.solvers.planner._memory import memory_profile, static_arrays, static_profile
from slackswap.solvers.planner._passes import candidate_order, plan_passes
from tests.support.strategies import small_instances

GB = 10**9
HW = Hardware(gpu="test", link="test", link_bw_Bps=1e9, copy_latency_s=0.0)


def three_layer(c_size: int = 2 * GB) -> Instance:
    """f0 -> a (1 GB, block input), f1 -> b (1 GB), f2 -> c; backward reads c, b, a; 1 s each.

    T_F = 3 s; r_a = 1, r_b = 2, r_c = 3; d_c = 3, d_b = 4, d_a = 5 (seconds).
    """
    g = GraphBuilder("three", HW)
    g.op("f0", block=0, kind="gemm", duration_s=1.0)
    g.saved("a", nbytes=GB, producer="f0", category="block_input", block=0)
    g.op("f1", block=0, kind="gemm", duration_s=1.0, reads=["a"])
    g.saved("b", nbytes=GB, producer="f1", category="gemm_output", block=0, recompute_s=0.5,
            rebuild_inputs=["a"])  # fmt: skip
    g.op("f2", block=0, kind="gemm", duration_s=1.0, reads=["b"])
    g.saved("c", nbytes=c_size, producer="f2", category="elementwise", block=0,
            recompute_s=0.1, rebuild_inputs=["b"])  # fmt: skip
    g.op("b2", backward=True, block=0, kind="gemm", duration_s=1.0, reads=["c"])
    g.op("b1", backward=True, block=0, kind="gemm", duration_s=1.0, reads=["b"])
    g.op("b0", backward=True, block=0, kind="gemm", duration_s=1.0, reads=["a"])
    return g.build()


def test_keep_all_profile_matches_instance() -> None:
    inst = three_layer()
    prof = memory_profile(inst, np.zeros(inst.n_tensors, dtype=np.int8))
    assert np.array_equal(prof, inst.memory_profile_keep_all)


def test_profile_residency_per_action() -> None:
    inst = three_layer()
    # a swapped (offload ends during f1), b recomputed (rebuilt right before b1), c kept.
    prof = memory_profile(
        inst,
        np.array([SWAP, RECOMP, KEEP], dtype=np.int8),
        offload_end_s=np.array([1.5, np.nan, np.nan]),
    )
    # ops f0 f1 f2 b2 b1 b0. a: f0..f1, then back from b1 (b's rebuild there reads it) to b0;
    # b: f1..f2 (its last forward reader), then b1; c: f2..b2.
    assert prof.tolist() == [GB, 2 * GB, 3 * GB, 2 * GB, 2 * GB, GB]


def test_rebuild_chain_pulls_inputs_earlier() -> None:
    inst = three_layer()
    # b and c recomputed: c's rebuild at b2 needs b, so b is rebuilt first and stays to b1.
    prof = memory_profile(inst, np.array([KEEP, RECOMP, RECOMP], dtype=np.int8))
    assert prof.tolist() == [GB, 2 * GB, 4 * GB, 4 * GB, 2 * GB, GB]


def test_fifo_and_edf_hand_worked() -> None:
    sa = static_arrays(three_layer())
    one = link_schedule(sa, np.array([True, False, False]))
    # a: produced at 1 s, 1 s copy -> ends at 2 s <= 0.98 * 3 s. Prefetch: memory is full at
    # T_F = 3 s; c (2 GB) frees at the end of b2 (4 s), so a's copy runs 4-5 s, d_a = 5 s.
    assert one.fifo_ok and one.edf_ok
    assert one.d2h_end_s[0] == pytest.approx(2.0)
    assert one.h2d_start_s[0] == pytest.approx(4.0)
    assert one.h2d_end_s[0] == pytest.approx(5.0)
    two = link_schedule(sa, np.array([True, True, False]))
    # a then b back to back end at 3 s > 2.94 s; b's prefetch (first by deadline) ends at 5 > 4.
    assert not two.fifo_ok and not two.edf_ok
    assert link_schedule(sa, np.array([True, True, False]), guard=0.0).fifo_ok


def test_edf_needs_memory_released() -> None:
    # c only 0.5 GB: by d_a the backward pass has freed 0.5 GB, less than a's 1 GB.
    sa = static_arrays(three_layer(c_size=GB // 2))
    assert not link_schedule(sa, np.array([True, False, False])).edf_ok


def test_pass1_swaps_block_input_then_pass2_recomputes_cheapest() -> None:
    inst = three_layer()
    p = inst.peak_bytes  # 4 GB during f2 / b2
    res = plan_passes(static_arrays(inst), 3 * GB, p)
    # a (rho = inf) passes both checks; b then fails FIFO; a's 1 GB covers D = 1 GB: fits.
    assert res.fits
    assert res.actions.tolist() == [SWAP, KEEP, KEEP]


def test_deficit_stops_pass1() -> None:
    inst = three_layer()
    res = plan_passes(static_arrays(inst), inst.peak_bytes - 1, inst.peak_bytes, guard=0.0)
    assert res.actions.tolist() == [SWAP, KEEP, KEEP]  # D = 1 byte: one tensor covers it


def knapsack_instance(big_cost: float) -> Instance:
    """Two candidates at the first over-budget op: big (4 GB) and small (1 GB, 2 s)."""
    g = GraphBuilder("knap", HW)
    g.op("f0", block=0, kind="gemm", duration_s=1.0)
    g.saved("x", nbytes=1, producer="f0", category="block_input", block=0)
    g.op("f1", block=0, kind="gemm", duration_s=1.0, reads=["x"])
    g.saved("big", nbytes=4 * GB, producer="f1", category="gemm_output", block=0,
            recompute_s=big_cost, rebuild_inputs=["x"])  # fmt: skip
    g.op("f2", block=0, kind="gemm", duration_s=1.0, reads=["x"])
    g.saved("small", nbytes=GB, producer="f2", category="gemm_output", block=0,
            recompute_s=2.0, rebuild_inputs=["x"])  # fmt: skip
    g.op("f3", block=0, kind="gemm", duration_s=1.0, transient_bytes=4 * GB)
    g.op("b1", backward=True, block=0, kind="gemm", duration_s=1.0, reads=["big", "small"])
    g.op("b0", backward=True, block=0, kind="gemm", duration_s=1.0, reads=["x"])
    return g.build()


@pytest.mark.parametrize(
    ("excess", "expect"),
    [(1 * GB, [KEEP, KEEP, RECOMP]), (4 * GB, [KEEP, RECOMP, KEEP])],
)
def test_pass2_cost_per_covered_byte(excess: int, expect: list[int]) -> None:
    # big: 4 s / min(4 GB, E); small: 2 s / min(1 GB, E). With E = 1 GB the small one is
    # cheaper per byte of excess (2 vs 4); with E = 4 GB the big one is (1 vs 2).
    inst = knapsack_instance(big_cost=4.0)
    p = inst.peak_bytes
    res = plan_passes(static_arrays(inst), p - excess, p, pass1=False)
    assert res.fits
    assert res.actions.tolist() == expect


def test_block_fallback_and_failure() -> None:
    inst = three_layer()
    sa = static_arrays(inst)
    # Without swaps, 3 GB is first exceeded at f2 (4 GB), where b is read and c produced: C is
    # empty, so the fallback recomputes the whole block (b and c), which cannot help there.
    res = plan_passes(sa, 3 * GB, inst.peak_bytes, pass1=False)
    assert not res.fits
    assert res.actions.tolist() == [KEEP, RECOMP, RECOMP]
    assert inst.op_name[res.fail_op] == "f2"
    assert res.overflow_bytes == GB


def test_candidate_orders() -> None:
    sa = static_arrays(three_layer())
    # c is produced by the last forward op (r_c = T_F): not a candidate.
    assert candidate_order(sa, "rho").tolist() == [0, 1]
    assert candidate_order(sa, "production").tolist() == [0, 1]
    with pytest.raises(ValueError):
        candidate_order(sa, "random")


@given(inst=small_instances(), frac=st.floats(0.05, 1.0), pass1=st.booleans())
def test_plan_fits_its_own_profile(inst: Instance, frac: float, pass1: bool) -> None:
    """Pass 2's incremental profile agrees with a from-scratch one; a fitting plan fits it."""
    sa = static_arrays(inst)
    m = int(frac * inst.peak_bytes)
    res = plan_passes(sa, m, inst.peak_bytes, pass1=pass1)
    prof = memory_profile(inst, res.actions, offload_end_s=res.d2h_end_s)
    if res.fits:
        assert prof.max() <= m
    else:
        assert prof.max() > m
        assert prof[res.fail_op] > m
        assert (prof[: res.fail_op] <= m).all()  # the first over-budget operator
        assert res.overflow_bytes == prof.max() - m  # the incremental profile's own peak
    swapped = res.actions == SWAP
    if swapped.any():
        sched = link_schedule(sa, swapped)
        assert sched.fifo_ok and sched.edf_ok
        # Pass 1 stops once the set covers D = P - M: before its last member it fell short.
        in_order = [t for t in candidate_order(sa, "rho") if swapped[t]]
        sizes = inst.tensor_bytes
        assert sizes[swapped].sum() - sizes[in_order[-1]] < inst.peak_bytes - m
    assert not (res.actions[~np.isfinite(inst.tensor_recompute_s)] == RECOMP).any()
    if not pass1:
        assert not swapped.any()


def test_gpt2_xl_fig3_plan_shape() -> None:
    """Fig. 3: GPT-2 XL at 30% swaps 3.3 GB, recomputes 12.9 GB and keeps 6.1 GB."""
    from slackswap.instances.catalog import load

    inst = load("gpt2-xl")
    res = plan_passes(static_arrays(inst), int(0.3 * inst.peak_bytes), inst.peak_bytes)
    s = inst.tensor_bytes
    got = [s[res.actions == a].sum() / 1e9 for a in (SWAP, RECOMP, KEEP)]
    assert res.fits
    assert got == pytest.approx([3.3, 12.9, 6.1], abs=0.15)
    cats = np.asarray(inst.tensor_category)
    # Every block input the link can take is swapped before anything cheaper.
    assert (res.actions[cats == "block_input"][:-2] == SWAP).all()
    assert math.isclose(s[res.actions == SWAP].sum(), inst.link_budget_bytes, rel_tol=0.02)


def _one_tensor(action: int, back: int) -> list[int]:
    """Hand-worked: one 10-byte tensor made at op 0, forward residency to op 2, back at ``back``,
    last read at op 3, five operators; back_after_fwd False and True."""
    args = [np.array([v], dtype=np.int64) for v in (0, 2, back, 3, 10)]
    out = []
    for after in (False, True):
        prof = static_profile(np.array([action], dtype=np.int8), *args[:4], args[4],
                              np.zeros(5, dtype=np.int64), after)  # fmt: skip
        out.append(prof.tolist())
    return out


def test_the_static_profile_semantics_by_hand() -> None:
    assert _one_tensor(KEEP, 1) == [[10, 10, 10, 10, 0]] * 2  # producer .. last reader
    # back inside the forward residency: counted twice there, or moved past it
    assert _one_tensor(SWAP, 1) == [[10, 20, 20, 10, 0], [10, 10, 10, 10, 0]]
    assert _one_tensor(RECOMP, 3) == [[10, 10, 10, 10, 0]] * 2  # back right after: no gap
    assert _one_tensor(SWAP, 4) == [[10, 10, 10, 0, 0]] * 2  # back after the last reader: gone


@pytest.mark.parametrize("name", ["vgg16", "gpt2-xl"])
def test_the_static_profile_of_keep_all_is_the_instances_closed_form(name: str) -> None:
    from slackswap.instances.catalog import load

    inst = load(name)
    keep = np.zeros(inst.n_tensors, dtype=np.int8)
    sa = static_arrays(inst)
    prof = static_profile(keep, sa.prod, sa.lfr, sa.fbr, sa.lbr, sa.size, sa.transient, False)
    assert np.array_equal(prof, inst.memory_profile_keep_all)
