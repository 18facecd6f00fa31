"""Property tests of the event model on random small instances and plans (hypothesis)."""

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan
from slackswap.simulator import RUNTIMES, simulate, simulate_many
from tests.support.simhelpers import random_instance

KERNEL_RUNTIMES = ["barrier-free", "barriers", "layer-prefetch", "sync"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def case(draw, actions=(KEEP, SWAP, RECOMP)):  # type: ignore[no-untyped-def]
    inst = random_instance(draw)
    acts = np.array(
        draw(st.lists(st.sampled_from(actions), min_size=inst.n_tensors, max_size=inst.n_tensors)),
        dtype=np.int8,
    )
    frac = draw(st.floats(0.05, 1.5))
    runtime = draw(st.sampled_from(KERNEL_RUNTIMES))
    return inst, acts, frac, runtime


@SETTINGS
@given(inst=st.composite(lambda d: random_instance(d))(), frac=st.floats(1.0, 3.0))
def test_keep_all_at_peak_is_ideal(inst, frac: float) -> None:  # type: ignore[no-untyped-def]
    for runtime in KERNEL_RUNTIMES:
        r = simulate(inst, Plan.keep_all(inst), Budget.fraction(frac), runtime=runtime)
        assert r.feasible and r.step_s == r.ideal_s == inst.ideal_step_s
        assert r.throughput == 1.0
        assert r.fwd_stall_s == r.bwd_stall_s == r.recompute_s == 0.0
        assert r.d2h_bytes == r.h2d_bytes == r.evictions == 0
        assert r.peak_bytes == inst.peak_bytes <= r.budget_bytes


@SETTINGS
@given(case())
def test_invariants(c) -> None:  # type: ignore[no-untyped-def]
    inst, acts, frac, runtime = c
    r = simulate(inst, acts, Budget.fraction(frac), runtime=runtime)
    assert r.budget_bytes == Budget.fraction(frac).bytes_for(inst)
    if r.feasible:
        assert r.peak_bytes <= r.budget_bytes
        assert r.step_s >= r.ideal_s + r.recompute_s
        assert math.isfinite(r.step_s) and r.throughput == r.ideal_s / r.step_s <= 1.0
        assert r.reason == "" and r.fail_op == -1 and r.overflow_bytes == 0
        assert r.fwd_stall_s == r.fwd_stall_copy_s + r.fwd_stall_mem_s >= 0
        assert r.bwd_stall_s == r.bwd_stall_copy_s + r.bwd_stall_mem_s >= 0
        swapped = int(inst.tensor_bytes[acts == SWAP].sum())
        assert r.d2h_bytes == swapped
    else:
        assert r.step_s == math.inf and r.throughput == 0.0
        assert r.reason and 0 <= r.fail_op < inst.n_ops
        invalid = (acts == RECOMP) & np.isinf(inst.tensor_recompute_s)
        if not invalid.any():
            assert r.overflow_bytes > 0
    expected_rec = float(inst.tensor_recompute_s[acts == RECOMP].sum())
    if r.feasible:
        assert (
            r.recompute_s == np.float64(expected_rec) or abs(r.recompute_s - expected_rec) < 1e-12
        )


@SETTINGS
@given(case())
def test_deterministic_and_batch_agrees_bit_for_bit(c) -> None:  # type: ignore[no-untyped-def]
    inst, acts, frac, runtime = c
    a = simulate(inst, acts, Budget.fraction(frac), runtime=runtime)
    b = simulate(inst, acts.copy(), Budget.fraction(frac), runtime=runtime)
    assert a == b
    pop = np.stack([acts, np.zeros_like(acts), acts])
    for n_jobs in (1, 2):
        m = simulate_many(inst, pop, Budget.fraction(frac), runtime=runtime, n_jobs=n_jobs)
        for k in (0, 2):
            assert m.step_s[k] == a.step_s and m.feasible[k] == a.feasible
            assert m.overflow_bytes[k] == a.overflow_bytes
            assert m.recompute_s[k] == a.recompute_s
            assert m.fwd_stall_s[k] == a.fwd_stall_s and m.bwd_stall_s[k] == a.bwd_stall_s
            assert m.d2h_bytes[k] == a.d2h_bytes and m.h2d_bytes[k] == a.h2d_bytes
            assert m.peak_bytes[k] == a.peak_bytes and m.evictions[k] == a.evictions


@SETTINGS
@given(case())
def test_timeline_agrees_with_the_result(c) -> None:  # type: ignore[no-untyped-def]
    inst, acts, frac, runtime = c
    plain = simulate(inst, acts, Budget.fraction(frac), runtime=runtime)
    r = simulate(inst, acts, Budget.fraction(frac), runtime=runtime, timeline=True)
    tl = r.timeline
    assert tl is not None
    assert r.to_dict() == plain.to_dict()
    if plain.feasible:
        assert tl.mem_bytes.max() == r.peak_bytes
        ops = tl.compute_kind == 0
        assert np.array_equal(tl.compute_op[ops], np.arange(inst.n_ops))
        assert tl.compute_end_s[ops][-1] == np.float64(r.step_s) or math.isclose(
            tl.compute_end_s[ops][-1], r.step_s, rel_tol=1e-12
        )
        spans = tl.compute_kind != 4  # evictions are instants
        s0, s1 = tl.compute_start_s[spans], tl.compute_end_s[spans]
        assert np.all(s1 >= s0) and np.all(s0[1:] >= s1[:-1] - 1e-12)
        for e in (0, 1):
            k = tl.copy_engine == e
            assert np.all(tl.copy_start_s[k][1:] >= tl.copy_end_s[k][:-1] - 1e-12)
        d2h = tl.copy_engine == 0
        assert int(inst.tensor_bytes[tl.copy_tensor[d2h]].sum()) == r.d2h_bytes
        assert int(inst.tensor_bytes[tl.copy_tensor[~d2h]].sum()) == r.h2d_bytes


@SETTINGS
@given(case(actions=(KEEP, SWAP)))
def test_keep_and_swap_fit_at_the_peak(c) -> None:  # type: ignore[no-untyped-def]
    inst, acts, _, runtime = c
    r = simulate(inst, acts, 1.0, runtime=runtime)
    # Feasible, though an offload slower than its tensor's lifetime may hold memory (a wait).
    assert r.feasible and r.recompute_s == 0.0


@SETTINGS
@given(st.composite(lambda d: random_instance(d))())
def test_all_recompute_at_a_tiny_budget_is_infeasible_not_an_error(inst) -> None:  # type: ignore[no-untyped-def]
    needs = inst.op_transient_bytes.max() > 1 or inst.tensor_bytes.max() > 1
    everything = np.full(inst.n_tensors, RECOMP, dtype=np.int8)
    r = simulate(inst, everything, Budget.bytes(1))
    if np.isinf(inst.tensor_recompute_s).any():
        assert not r.feasible and "recompute" in r.reason and r.fail_op >= 0
    else:
        assert r.feasible != needs
    finite = np.where(np.isfinite(inst.tensor_recompute_s), RECOMP, KEEP).astype(np.int8)
    r = simulate(inst, finite, Budget.bytes(1))
    assert r.feasible != needs
    if needs:
        assert "out of memory" in r.reason and r.overflow_bytes > 0 and r.fail_op >= 0


def test_every_registered_kernel_runtime_is_tested() -> None:
    assert set(KERNEL_RUNTIMES) <= set(RUNTIMES)
