"""The paper's baselines and the checkpoint-offload runtimes: plans, decisions, simulated facts."""

from __future__ import annotations

import numpy as np
import pytest

from slackswap.instance import Hardware, Instance
from slackswap.instances.catalog import build_model
from slackswap.models.graph import GraphBuilder
from slackswap.solvers.baselines._common import (
    checkpoint_actions,
    checkpointable_blocks,
    loss_block,
)
from slackswap.solvers.baselines.offload import offload_actions
from slackswap.solvers.baselines.superneurons import superneurons_actions
from slackswap.solvers.baselines.swapadvisor import belady_swaps
from slackswap.solvers.baselines.vdnn import vdnn_actions

KEEP, SWAP, RECOMP = 0, 1, 2


@pytest.fixture(scope="module")
def gpt() -> Instance:
    return build_model("gpt2-xl", layers=2, seq=128, batch=1)


@pytest.fixture(scope="module")
def vgg() -> Instance:
    return build_model("vgg16", batch=2)


def names(inst: Instance, actions: np.ndarray, action: int) -> set[str]:
    return {inst.tensor_name[t] for t in np.flatnonzero(actions == action)}


def chain(n: int = 3) -> Instance:
    hw = Hardware(gpu="t", link="t", link_bw_Bps=100.0, copy_latency_s=0.0)
    b = GraphBuilder("chain", hw)
    for i in range(n):
        b.op(f"f{i}", block=i, kind="gemm", duration_s=1.0)
        b.saved(f"t{i}", nbytes=100, producer=f"f{i}", category="gemm_output", block=i)
    for i in reversed(range(n)):
        b.op(f"b{i}", backward=True, block=i, kind="gemm", duration_s=1.0, reads=[f"t{i}"])
    return b.build()


# ----- block structure ---------------------------------------------------------------------------
def test_checkpointable_blocks_skip_the_head_and_the_embedding(
    gpt: Instance, vgg: Instance
) -> None:
    assert loss_block(gpt) == 2 and checkpointable_blocks(gpt) == [0, 1]
    assert loss_block(vgg) == 5 and checkpointable_blocks(vgg) == [0, 1, 2, 3, 4]


def test_checkpoint_actions_keep_block_inputs_and_recompute_the_rest(gpt: Instance) -> None:
    acts = checkpoint_actions(gpt, [1])
    assert names(gpt, acts, RECOMP) == {
        f"L1.{n}"
        for n in ("norm1.out", "qkv.out", "attn.out", "drop1.mask", "resid", "norm2.out",
                  "fc1.out", "gelu.out", "drop2.mask")
    }  # fmt: skip
    assert acts[gpt.tensor_index["L1.in"]] == KEEP
    assert not names(gpt, acts, SWAP)


# ----- vDNN --------------------------------------------------------------------------------------
def test_vdnn_conv_offloads_inputs_of_gemms_and_attention(gpt: Instance) -> None:
    conv = vdnn_actions(gpt, "conv")
    swapped = names(gpt, conv, SWAP)
    assert {"L0.norm1.out", "L0.qkv.out", "L0.attn.out", "L0.norm2.out", "L0.gelu.out"} <= swapped
    assert not swapped & {"L0.fc1.out", "L0.resid", "L1.in", "emb.out", "L0.drop1.mask"}
    assert not names(gpt, conv, RECOMP)
    assert (vdnn_actions(gpt, "all") == SWAP).all() and (vdnn_actions(gpt, "none") == KEEP).all()


def test_vdnn_conv_on_vgg_offloads_convolution_inputs_only(vgg: Instance) -> None:
    swapped = names(vgg, vdnn_actions(vgg, "conv"), SWAP)
    assert {"input.out", "s0.c0.out", "s0.pool.out", "s4.c1.out"} <= swapped
    # Read only by a pool (s0.c1.out) or by the classifier's GEMMs (fc*): not convolution inputs.
    assert not swapped & {"s0.c1.out", "s4.c2.out", "s4.pool.out", "fc0.out", "fc2.out"}


# ----- SuperNeurons ------------------------------------------------------------------------------
def test_superneurons_recomputes_cheap_layers_and_caches_heavy_outputs(gpt: Instance) -> None:
    acts = superneurons_actions(gpt)
    assert {"L0.norm1.out", "L0.gelu.out", "L0.drop1.mask", "emb.mask"} <= names(gpt, acts, RECOMP)
    assert {"L0.qkv.out", "L0.attn.out", "L0.fc1.out", "head.logits"} <= names(gpt, acts, SWAP)
    assert {"emb.out", "L0.resid", "L1.in", "head.in"} <= names(gpt, acts, KEEP)


# ----- SwapAdvisor -------------------------------------------------------------------------------
def test_belady_evicts_the_furthest_next_use_first() -> None:
    inst = chain()  # keep-all profile 100, 200, 300 | 300, 200, 100
    acts, floor = belady_swaps(inst, 200)
    assert acts.tolist() == [SWAP, KEEP, KEEP] and floor == 200
    acts, floor = belady_swaps(inst, 100)
    assert acts.tolist() == [SWAP, SWAP, KEEP] and floor == 100
    _, floor = belady_swaps(inst, 50)
    assert floor == 100  # an operator's own output cannot be swapped: no plan below it
    acts, _ = belady_swaps(inst, 300)
    assert (acts == KEEP).all()


def test_belady_swaps_just_the_deficit() -> None:
    inst = build_model("gpt2-xl", layers=8, seq=128, batch=1)
    m = int(0.5 * inst.peak_bytes)
    acts, floor = belady_swaps(inst, m)
    assert floor <= m
    swapped = int(inst.tensor_bytes[acts == SWAP].sum())
    assert inst.peak_bytes - m <= swapped <= inst.peak_bytes - m + int(inst.tensor_bytes.max())
    assert not (acts == RECOMP).any()


# ----- checkpoint offload ------------------------------------------------------------------------
def test_offload_swaps_every_checkpoint_but_overlap_keeps_the_newest(gpt: Instance) -> None:
    sync = offload_actions(gpt, keep_last=0)
    over = offload_actions(gpt, keep_last=1)
    assert names(gpt, sync, SWAP) == {"emb.out", "L1.in"}
    assert names(gpt, over, SWAP) == {"emb.out"}
    assert names(gpt, sync, RECOMP) == names(gpt, checkpoint_actions(gpt, [0, 1]), RECOMP)
    assert sync[gpt.tensor_index["head.in"]] == KEEP


# ----- planners in the simulator -----------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt8() -> Instance:
    """Eight GPT-2 XL layers at full sequence and batch: copies and compute in paper proportions."""
    return build_model("gpt2-xl", layers=8)


def test_checkpoint_uses_the_fewest_earliest_blocks(gpt8: Instance) -> None:
    from slackswap.plan import Budget
    from slackswap.simulator import simulate
    from slackswap.solvers import run

    assert run(gpt8, 1.0, "checkpoint").plan.recompute_bytes == 0  # fits: nothing recomputed
    for frac in (0.8, 0.6, 0.45):
        rec = run(gpt8, frac, "checkpoint")
        assert rec.status.value == "feasible" and rec.plan is not None
        blocks = sorted(set(gpt8.tensor_block[rec.plan.actions == RECOMP].tolist()))
        k = len(blocks)
        assert blocks == checkpointable_blocks(gpt8)[:k]
        fewer = checkpoint_actions(gpt8, blocks[:-1])
        assert not simulate(gpt8, fewer, Budget.fraction(frac)).feasible
        assert rec.fwd_stall_s == 0 and rec.d2h_bytes == 0


def test_checkpoint_has_no_plan_below_its_floor(gpt8: Instance) -> None:
    from slackswap.plan import Budget
    from slackswap.simulator import simulate
    from slackswap.solvers import run

    rec = run(gpt8, 0.1, "checkpoint")
    assert rec.status.value == "infeasible" and rec.plan is None
    floor = rec.min_budget_bytes
    assert floor is not None and 0.1 * gpt8.peak_bytes < floor < gpt8.peak_bytes
    every = checkpoint_actions(gpt8, checkpointable_blocks(gpt8))
    assert simulate(gpt8, every, Budget.bytes(floor)).feasible
    assert not simulate(gpt8, every, Budget.bytes(floor - 1)).feasible
    assert run(gpt8, Budget.bytes(floor), "checkpoint").status.value == "feasible"


def test_vdnn_dynamic_policy_steps_from_none_to_conv_to_all(gpt8: Instance) -> None:
    from slackswap.solvers import run

    seen = []
    for frac in (1.0, 0.7, 0.4):
        rec = run(gpt8, frac, "vdnn")
        assert rec.status.value == "feasible" and rec.runtime == "barriers"
        swapped = rec.plan.actions == SWAP
        seen.append("none" if not swapped.any() else "all" if swapped.all() else "conv")
        assert rec.recompute_bytes == 0
    assert seen == ["none", "conv", "all"]
    forced = run(gpt8, 1.0, "vdnn", options={"policy": "all"})
    assert forced.d2h_bytes == gpt8.saved_bytes and forced.step_s > forced.ideal_s


def test_vdnn_rejects_an_unknown_policy(gpt8: Instance) -> None:
    from slackswap.errors import UserError
    from slackswap.solvers import run

    with pytest.raises(UserError, match="policy"):
        run(gpt8, 0.5, "vdnn", options={"policy": "some"})


def test_swapadvisor_copies_the_deficit_and_recomputes_nothing(gpt8: Instance) -> None:
    from slackswap.solvers import run

    rec = run(gpt8, 0.6, "swapadvisor")
    assert rec.status.value == "feasible" and rec.recompute_s == 0
    assert rec.d2h_bytes == rec.swap_bytes >= 0.4 * gpt8.peak_bytes
    low = run(gpt8, 0.05, "swapadvisor", find_min_budget=False)
    assert low.status.value == "infeasible" and "GB" in low.reason


def test_overlapped_offload_hides_its_copies_and_sync_does_not(gpt8: Instance) -> None:
    from slackswap.solvers import run

    sync = run(gpt8, 0.45, "offload-sync")
    over = run(gpt8, 0.45, "offload-overlap")
    assert sync.status.value == over.status.value == "feasible"
    assert over.recompute_s == pytest.approx(sync.recompute_s)
    assert over.fwd_stall_s + over.bwd_stall_s == pytest.approx(0.0, abs=1e-9)
    assert sync.fwd_stall_s > 0 and sync.bwd_stall_s > 0
    assert sync.step_s > over.step_s
    assert sync.d2h_bytes == over.d2h_bytes + gpt8.tensor_bytes[gpt8.tensor_index["L7.in"]]
