"""Table 2's vDNN explanation: the per-block arithmetic it states holds in the simulator."""

from __future__ import annotations

import numpy as np
import pytest

import slackswap
from slackswap.reproduce.table2 import BUDGET, block_times, vdnn_why
from slackswap.simulator import simulate
from slackswap.simulator.result import COMPUTE_KINDS
from slackswap.solvers import run


def test_vdnn_llama_backward_stall_is_copy_minus_backward_per_block() -> None:
    inst = slackswap.load("llama-7b")
    rec = run(inst, BUDGET, "vdnn", find_min_budget=False)
    assert rec.plan is not None and rec.d2h_bytes == inst.saved_bytes  # vDNN-all
    sim = simulate(inst, rec.plan, BUDGET, timeline=True)
    tl = sim.timeline
    assert tl is not None
    nf = inst.n_forward_ops
    stall = tl.compute_kind == COMPUTE_KINDS.index("stall_copy")
    for block in (8, 16, 24):
        copy_s, fwd_s, bwd_s = block_times("llama-7b", block)
        assert fwd_s < bwd_s < copy_s
        waits = (tl.compute_end_s - tl.compute_start_s)[stall]
        ops = tl.compute_op[stall]
        in_fwd = (ops < nf) & (inst.op_layer[ops] == block + 1)  # the next block waits
        in_bwd = (ops >= nf) & (inst.op_layer[ops] == block)
        assert waits[in_fwd].sum() == pytest.approx(copy_s - fwd_s, rel=0.02)
        assert waits[in_bwd].sum() == pytest.approx(copy_s - bwd_s, rel=0.02)
    # Memory plays no part: the same plan with all of P stalls exactly as long.
    full = simulate(inst, rec.plan, 1.0)
    assert full.bwd_stall_s == sim.bwd_stall_s and full.fwd_stall_s == sim.fwd_stall_s
    assert sim.peak_bytes < 0.2 * sim.budget_bytes


def test_vdnn_gpt2_is_copy_bound() -> None:
    copy_s, fwd_s, bwd_s = block_times("gpt2-xl")
    assert copy_s > 3 * bwd_s > 3 * fwd_s


def test_vdnn_why_states_the_measured_numbers() -> None:
    text = vdnn_why()
    copy_s, fwd_s, bwd_s = block_times("llama-7b")
    assert "vDNN-all" in text
    assert f"{copy_s * 1e3:.1f} ms against {fwd_s * 1e3:.1f} / {bwd_s * 1e3:.1f} ms" in text
    assert f"{(copy_s - bwd_s) * 1e3:.1f} ms)" in text
    assert np.isfinite(float(text.rsplit(" ", 1)[-1]))
