"""Profiling real torch training steps into instances (GPT-style model and CNN, CPU, float32)."""

from __future__ import annotations

import gc
import math
import os
import re

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import slackswap  # noqa: E402
from examples import models as example_models  # noqa: E402
from slackswap.errors import UserError  # noqa: E402
from slackswap.models.transformer import TransformerConfig, build_transformer  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.profiling.step import ProfileError  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402

pytestmark = pytest.mark.torch


def autograd_saved_bytes(model, inputs, loss_fn) -> int:
    """Bytes autograd saved in one step, counted independently of the profiler: a pack hook
    that sums each distinct storage once (by data pointer), parameters, buffers and every
    tensor that existed before the step (the caller's inputs and targets) excluded."""
    params = {p.untyped_storage().data_ptr() for p in (*model.parameters(), *model.buffers())}
    gc.collect()
    params |= {
        o.untyped_storage().data_ptr()
        for o in gc.get_objects()
        if issubclass(type(o), torch.Tensor) and o.layout == torch.strided
    }
    held, sizes = [], {}

    def pack(t):
        held.append(t)  # keep it alive so no other tensor reuses the address
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            sizes[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(model(*inputs)).backward()
    return sum(sizes.values())


@pytest.fixture(scope="module")
def gpt():
    model, inputs, loss_fn = example_models.gpt()
    return model, inputs, loss_fn, profile_step(model, inputs, loss_fn, gpu="titanx")


@pytest.fixture(scope="module")
def cnn():
    model, images = example_models.cnn()
    return model, (images,), profile_step(model, images, gpu="titanx")


def test_gpt_saved_bytes_equal_what_autograd_saved(gpt) -> None:
    model, inputs, loss_fn, inst = gpt
    assert inst.saved_bytes == autograd_saved_bytes(model, inputs, loss_fn)


def test_cnn_saved_bytes_equal_what_autograd_saved(cnn) -> None:
    model, inputs, inst = cnn
    assert inst.saved_bytes == autograd_saved_bytes(model, inputs, lambda out: out.sum())


def _check_block_order(inst) -> None:
    fwd = inst.op_block[: inst.n_forward_ops]
    bwd = inst.op_block[inst.n_forward_ops :]
    assert np.all(np.diff(fwd) >= 0), "forward blocks must come in order"
    assert np.all(np.diff(bwd) <= 0), "backward blocks must come in reverse order"


def _check_block_of_names(inst, container: str) -> None:
    """Every operator of module ``container.i`` (forward or backward) is in block i."""
    hits = 0
    for i in range(inst.n_ops):
        m = re.match(rf"(bwd:)?{container}\.(\d+)[./]", inst.op_name[i])
        if m:
            hits += 1
            assert inst.op_block[i] == int(m.group(2)), inst.op_name[i]
    assert hits > inst.n_ops // 2


def test_gpt_blocks_match_layers(gpt) -> None:
    _, _, _, inst = gpt
    layers = example_models.GPT_CONFIG["layers"]
    assert inst.meta["n_blocks"] == layers
    assert inst.meta["block_modules"] == [f"blocks.{i}" for i in range(layers)]
    _check_block_order(inst)
    _check_block_of_names(inst, "blocks")
    # Embedding before the first layer (block -1), the head and loss after the last (block L).
    assert inst.op_block[inst.op_name.index("tok/embedding")] == -1
    assert inst.op_block[inst.op_name.index("lm/mm")] == layers
    # One block input per layer plus the head's input, never recomputed.
    b_in = [t for t in range(inst.n_tensors) if inst.tensor_category[t] == "block_input"]
    by_block = sorted(int(inst.tensor_block[t]) for t in b_in if inst.tensor_block[t] >= 0)
    assert by_block == list(range(layers + 1))
    assert all(math.isinf(inst.tensor_recompute_s[t]) for t in b_in)


def test_gpt_tensors_are_the_layer_activations(gpt) -> None:
    _, _, _, inst = gpt
    c = example_models.GPT_CONFIG
    act = c["batch"] * c["seq"] * c["hidden"] * 4
    names = dict(zip(inst.tensor_name, inst.tensor_bytes, strict=True))
    assert names["blocks.0.qkv/addmm.out"] == 3 * act  # q, k, v: views of one storage
    assert names["blocks.0.fc1/addmm.out"] == act * c["mlp"] // c["hidden"]
    t = inst.tensor_index["blocks.0/add#1.out"]
    assert inst.tensor_category[t] == "residual"
    # The mid-block residual rebuilds through the (unsaved) projection: attention output and
    # block input are its rebuild inputs; cost = projection + add.
    rebuild = {inst.tensor_name[u] for u in inst.tensor_rebuild_inputs[t]}
    assert rebuild == {"block0.in", "blocks.0/_scaled_dot_product_flash_attention_for_cpu.out"}
    proj = inst.op_name.index("blocks.0.proj/addmm")
    add = inst.tensor_producer[t]
    expected = inst.op_duration_s[proj] + inst.op_duration_s[add]
    assert inst.tensor_recompute_s[t] == pytest.approx(expected)
    attn = inst.tensor_index["blocks.0/_scaled_dot_product_flash_attention_for_cpu.out"]
    assert inst.tensor_category[attn] == "attention_output"


def test_cnn_blocks_match_stages(cnn) -> None:
    model, _, inst = cnn
    stages = len(model.stages)
    assert inst.meta["block_modules"] == [f"stages.{i}" for i in range(stages)]
    _check_block_order(inst)
    _check_block_of_names(inst, "stages")
    assert {inst.op_kind[i] for i in range(inst.n_ops)} >= {"conv", "pool", "gemm", "memory"}
    # The in-place ReLU's output rebuilds from the convolution output through batch norm.
    t = inst.tensor_index["stages.1.relu/relu_.out"]
    assert [inst.tensor_name[u] for u in inst.tensor_rebuild_inputs[t]] == [
        "stages.1.conv/convolution.out"
    ]
    # The image (block 0's input) is the caller's: it exists before the step and is held
    # through it, so it is no saved tensor; its bytes are on record. Nor is a parameter.
    assert not any(n.startswith(("block0.in", "input.")) for n in inst.tensor_name)
    assert inst.tensor_name[0] == "stages.0.conv/convolution.out"
    assert inst.meta["caller_held_bytes"] == 4 * 3 * 32 * 32 * 4
    assert (
        inst.meta["parameter_bytes"]
        == sum(
            p.numel() * 4
            for p in (*model.parameters(), *model.buffers())
            if p.dtype == torch.float32
        )
        + 8 * stages
    )  # num_batches_tracked: one int64 per batch norm


def test_gpt_agrees_with_the_analytic_builder(gpt) -> None:
    """Profiled and analytic GPT layers agree on saved bytes (10%) and roofline forward (15%).

    The profile runs in float32 on the CPU, so it is compared with the builder on the Titan X,
    the catalog's FP32 GPU (4-byte activations): the same element size on both sides, without
    rescaling. Both sides use FP32 peak FLOP/s. The test model has no dropout, so the builder
    runs with ``dropout=False`` (PyTorch's CPU dropout saves a 4-byte mask where the builder,
    like CUDA's fused kernel, counts one byte).
    """
    _, _, _, inst = gpt
    c = example_models.GPT_CONFIG
    cfg = TransformerConfig(
        "tiny-gpt",
        c["layers"],
        c["hidden"],
        c["heads"],
        c["heads"],
        c["hidden"] // c["heads"],
        c["mlp"],
        c["vocab"],
        c["seq"],
        c["batch"],
        dropout=False,
    )
    ref = build_transformer(cfg, gpu="titanx")
    assert inst.saved_bytes == pytest.approx(ref.saved_bytes, rel=0.10)
    assert inst.forward_s == pytest.approx(ref.forward_s, rel=0.15)
    assert inst.forward_flops == pytest.approx(ref.forward_flops, rel=0.02)


def test_instance_file_round_trip(gpt, tmp_path) -> None:
    inst = gpt[3]
    path = tmp_path / "gpt.json"
    inst.save(path)
    back = slackswap.load(str(path))
    assert back.content_hash == inst.content_hash
    assert back.meta["builder"] == "profile" and back.meta["timing"] == "roofline"


def test_same_step_same_instance() -> None:
    runs = []
    for _ in range(2):
        model, inputs, loss_fn = example_models.gpt(layers=2, hidden=32, mlp=64, vocab=64, seq=16)
        runs.append(profile_step(model, inputs, loss_fn, gpu="a100").content_hash)
    assert runs[0] == runs[1]


class _Views(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return y[:, :4].sin() + y.t().t()[:, 4:].cos()


def test_views_of_one_storage_count_once() -> None:
    model, x = _Views(), torch.randn(5, 8)
    inst = profile_step(model, x, blocks=[])
    y = inst.tensor_index["fc/addmm.out"]
    assert inst.tensor_bytes[y] == 5 * 8 * 4  # the whole storage, once, though two views saved
    # sin and cos both read it in backward; the input, also saved, is the caller's.
    assert inst.n_tensors == 1 and inst.meta["n_blocks"] == 0
    assert inst.meta["caller_held_bytes"] == 5 * 8 * 4
    assert set(inst.op_block.tolist()) == {-1}
    assert inst.tensor_first_bwd_reader[y] < inst.tensor_last_bwd_reader[y]
    assert inst.saved_bytes == autograd_saved_bytes(model, (x,), lambda o: o.sum())


def test_parameters_are_not_activations() -> None:
    model, x = nn.Sequential(nn.Linear(16, 4), nn.ReLU()), torch.randn(3, 16)
    inst = profile_step(model, x)
    # The ReLU's output; the weight is excluded, and so is the input, saved by the linear
    # layer but held by the caller for the whole step.
    assert inst.tensor_bytes.tolist() == [3 * 4 * 4]
    assert inst.meta["caller_held_bytes"] == 3 * 16 * 4
    assert inst.meta["parameter_bytes"] == (16 * 4 + 4) * 4


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(self.fc(x))
        self.unused = (y * 2).sin()  # saved by autograd, never unpacked: its node never runs
        return y


def test_dropout_mask_and_never_unpacked_tensor() -> None:
    model, x = _Branchy(), torch.randn(4, 8)
    inst = profile_step(model, x)
    masks = [t for t in range(inst.n_tensors) if inst.tensor_category[t] == "dropout_mask"]
    assert len(masks) == 1
    m = masks[0]
    assert math.isfinite(inst.tensor_recompute_s[m]) and inst.tensor_rebuild_inputs[m] == ()
    # Saved but never unpacked: released with the graph, i.e. read by the last backward op.
    t = inst.tensor_index["model/mul.out"]
    assert inst.tensor_first_bwd_reader[t] == inst.n_ops - 1
    assert inst.saved_bytes == autograd_saved_bytes(model, (x,), lambda o: o.sum())


def test_measured_timing_keeps_the_trace() -> None:
    model, images = example_models.cnn(batch=2, image=16)
    roof = profile_step(model, images, timing="roofline")
    meas = profile_step(model, images, timing="measured")
    assert meas.op_name == roof.op_name and meas.tensor_name == roof.tensor_name
    assert np.array_equal(meas.tensor_bytes, roof.tensor_bytes)
    assert meas.meta["timing"] == "measured" and meas.meta["device"] == "cpu"
    assert np.all(np.isfinite(meas.op_duration_s)) and meas.forward_s > 0
    conv = meas.op_name.index("stages.0.conv/convolution")
    t = meas.tensor_index["stages.0.conv/convolution.out"]
    assert meas.tensor_recompute_s[t] == meas.op_duration_s[conv]


def test_profile_leaves_model_and_rng_as_they_were() -> None:
    model, images = example_models.cnn(batch=2, image=16)
    model.head.weight.grad = torch.ones_like(model.head.weight)
    stats = [b.clone() for b in model.buffers()]
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    profile_step(model, images)
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(model.head.weight.grad, torch.ones_like(model.head.weight))
    assert model.stages[0].conv.weight.grad is None
    assert all(torch.equal(a, b) for a, b in zip(stats, model.buffers(), strict=True))


def test_explicit_blocks() -> None:
    model, images = example_models.cnn(batch=2, image=16)
    by_class = profile_step(model, images, blocks="ConvStage")
    by_path = profile_step(model, images, blocks="stages")
    by_list = profile_step(model, images, blocks=list(model.stages)[:2])
    assert by_class.meta["block_modules"] == by_path.meta["block_modules"]
    assert by_list.meta["block_modules"] == ["stages.0", "stages.1"]
    with pytest.raises(UserError, match="neither a module path"):
        profile_step(model, images, blocks="NoSuchThing")


def test_forward_that_raises_is_a_user_error() -> None:
    model, x = pf.broken()
    with pytest.raises(ProfileError, match="forward of Broken raised ValueError: shape mismatch"):
        profile_step(model, x)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(timing="fast"), "timing"),
        (dict(gpu="z80"), "unknown GPU"),
        (dict(loss_fn=lambda out: out), "scalar"),
        (dict(loss_fn=lambda out: out.detach().sum()), "does not require grad"),
        (dict(loss_fn=lambda out: 1 / 0), "loss_fn raised ZeroDivisionError"),
    ],
)
def test_bad_arguments_are_user_errors(kwargs, match) -> None:
    model, x = nn.Linear(4, 4), torch.randn(2, 4)
    with pytest.raises(UserError, match=match):
        profile_step(model, x, **kwargs)


def test_not_a_module_is_a_user_error() -> None:
    with pytest.raises(UserError, match="torch.nn.Module"):
        profile_step("model", torch.zeros(1))  # type: ignore[arg-type]


class _Locals(nn.Module):
    """Locals hold buffers past their last reader until forward returns."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)  # saved (sin reads it); the local holds it to the end
        h = y.sin() + 1  # unsaved: exp saves its result, not h; held to the end too
        z = h.exp()
        return (z * 2).cos()


def test_buffers_held_by_python_locals_count_until_dropped() -> None:
    model, x = _Locals(), torch.randn(4, 8)
    inst = profile_step(model, x, blocks=[])
    y = inst.tensor_index["fc/addmm.out"]
    last_fwd = inst.n_forward_ops - 2  # the model's cos; the loss's sum follows
    assert inst.op_name[last_fwd] == "model/cos"
    # y's last reader is sin, but forward's local keeps its buffer until cos has run.
    assert inst.tensor_last_fwd_reader[y] == last_fwd
    assert y in inst.op_reads[last_fwd]
    # h (4x8 floats, unsaved) is read last by exp, but occupies memory through cos as well.
    mul = inst.op_name.index("model/mul")
    assert inst.op_transient_bytes[mul] >= 4 * 8 * 4
    cos = inst.op_transient_bytes[last_fwd]
    assert cos >= 4 * 8 * 4


def test_a_saved_tensor_is_held_until_its_node_has_run_all_its_operators() -> None:
    """Autograd releases a node's saved tensors after the node returns: a linear layer's
    backward reads its input for the weight gradient, then sums the bias gradient while it
    still holds the input. The profile's release point is that last operator of the node."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    inst = profile_step(model, (torch.randn(32, 8),))
    (t,) = [i for i in range(inst.n_tensors) if inst.tensor_bytes[i] == 32 * 16 * 4
            and inst.tensor_first_bwd_reader[i] < inst.n_ops
            and inst.op_name[inst.tensor_first_bwd_reader[i]].startswith("bwd:2/")]  # fmt: skip
    node_ops = [o for o in range(inst.n_forward_ops, inst.n_ops)
                if inst.op_name[o].startswith("bwd:2/")]  # fmt: skip
    assert [inst.op_name[o].split("/")[1] for o in node_ops] == ["mm#1", "mm#2", "sum"]
    assert inst.tensor_first_bwd_reader[t] == node_ops[0]
    assert inst.tensor_last_bwd_reader[t] == node_ops[-1]  # the bias sum, not the weight mm


def test_a_nonreentrant_checkpoints_inputs_are_held_from_the_rerun_to_the_blocks_end() -> None:
    """A non-reentrant checkpoint unpacks its block's inputs once, to re-run the block, keeps
    the re-run's aliases of them until the nodes that read them have run, and lets go of them
    after the block's backward pass (its input saver node runs last). So every backward
    operator from the re-run to the block's last reads them: no gap in which the simulator
    could evict a copy back that the checkpoint still holds (a BART plan measured 15 KB over
    its budget so). Before, each input was read at the re-run and again by the operators that
    read it, with gaps of 8-12 operators between."""
    model, x = pf.checkpoint_cross_inputs()
    inst = profile_step(model, (x,))
    bwd = range(inst.n_forward_ops, inst.n_ops)

    def region(b: int) -> list[int]:
        return [o for o in bwd if inst.op_name[o].startswith(f"bwd:blocks.{b}")]

    def readers(t: int) -> list[int]:
        return [o for o in bwd if t in inst.op_reads[o]]

    names = [n for n in inst.tensor_name if n.startswith("block") and ".in" in n]
    assert len(names) == 3, names  # the hidden state into each block, the encoder's output
    for name in names:
        got = readers(inst.tensor_index[name])
        assert got == list(range(got[0], got[-1] + 1)), (name, got)
    one, zero = region(1), region(0)
    # the hidden state into block 1: from block 1's re-run to its last operator
    assert readers(inst.tensor_index["block1.in"]) == one
    # of block 0's two inputs, the encoder's output is read in block 1 already: from block 1's
    # re-run through block 0's backward pass, past the layer that reads it there (``k``) to
    # the last node of the block that saved a tensor (``q``): the checkpoint's input saver,
    # which holds the block's inputs, goes with the block's last saved tensor; the hidden
    # state, block 0's whole backward pass
    (ctx,) = [
        n for n in names if n.startswith("block0") and readers(inst.tensor_index[n])[0] in one
    ]
    (hidden,) = [n for n in names if n.startswith("block0") and n != ctx]
    got = readers(inst.tensor_index[ctx])
    assert got[0] == one[0] and got[-1] == list(inst.op_name).index("bwd:blocks.0.q/sum")
    assert readers(inst.tensor_index[hidden]) == zero
