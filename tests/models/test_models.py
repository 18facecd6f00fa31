"""Workload models: Table 1 of the paper within tolerance, catalog resolution."""

import pytest

import slackswap
from slackswap.instances.catalog import build_model

# (A bytes, ideal step s, intensity, f) from the paper's Table 1 (A100, PCIe 4.0).
TABLE1 = {
    "bert-large": (13.9e9, 0.173, 782, 0.11),
    "gpt2-xl": (22.3e9, 0.399, 1200, 0.15),
    "llama-7b": (35.2e9, 1.635, 3326, 0.38),
}


@pytest.mark.parametrize("name", sorted(TABLE1))
def test_table1_transformers(name: str) -> None:
    inst = slackswap.load(name)
    a, step, intensity, f = TABLE1[name]
    assert inst.saved_bytes == pytest.approx(a, rel=0.05)
    assert inst.intensity == pytest.approx(intensity, rel=0.05)
    assert inst.hideable_fraction == pytest.approx(f, rel=0.05)
    assert inst.ideal_step_s == pytest.approx(step, rel=0.08)


def test_vgg16_saved_bytes_and_intensity() -> None:
    inst = slackswap.load("vgg16")
    assert inst.saved_bytes == pytest.approx(3.9e9, rel=0.05)
    assert inst.intensity == pytest.approx(1015, rel=0.05)
    # The first two convolutions hold 42% of the activations (paper Sec. 4.2).
    first_two = inst.tensor_bytes[1] + inst.tensor_bytes[2]
    assert first_two / inst.saved_bytes == pytest.approx(0.42, abs=0.01)


def test_vgg16_backward_is_chain_rule_order_with_in_place_relu() -> None:
    """Each ReLU backward runs right before its convolution's backward, in place on the incoming
    gradient (one buffer of the layer's output size), and frees that layer's saved output
    before the convolution backward needs two gradient buffers."""
    inst = build_model("vgg16", batch=4)
    pos = {n: i for i, n in enumerate(inst.op_name)}
    size = dict(zip(inst.tensor_name, inst.tensor_bytes.tolist(), strict=True))
    convs = [n[: -len(".conv")] for n in inst.op_name if n.endswith(".conv")]
    assert len(convs) == 13
    for p in convs:
        relu_b, conv_b = pos[p + ".relu.bwd"], pos[p + ".conv.bwd"]
        assert conv_b == relu_b + 1
        assert inst.op_transient_bytes[relu_b] == size[p + ".out"]
        t = inst.tensor_index[p + ".out"]
        assert inst.tensor_last_bwd_reader[t] < conv_b
    # The keep-all peak is where the forward pass ends, not at a stage-0 backward operator.
    peak_op = int(inst.memory_profile_keep_all.argmax())
    assert inst.op_name[peak_op].startswith(("s4.", "fc", "loss"))


def test_vgg16_convolution_bias_runs_as_its_own_kernels() -> None:
    """PyTorch eager on cuDNN adds a convolution's bias in a kernel of its own after cuDNN's
    convolution (``output.add_(bias)``) and reduces the output gradient for the bias gradient
    after cuDNN's data and weight gradients. Hand-worked on the A100 (BF16; 312 TFLOP/s at 75%,
    2.0 TB/s at 85%, 5 us per kernel) for stage 0's second convolution: 64 -> 64 channels,
    224 x 224, batch 128."""
    inst = slackswap.load("vgg16")
    flop_s, byte_s, launch = 0.75 * 312e12, 0.85 * 2.0e12, 5e-6
    out_b = 128 * 64 * 224 * 224 * 2  # 0.82 GB; the input is as large
    bias_b = 64 * 2
    flops = 2 * 128 * 224 * 224 * 64 * 64 * 9  # 473.5 GFLOP: 2.02 ms, over 0.97 ms of traffic
    conv = launch + flops / flop_s
    bias_add = launch + (2 * out_b + bias_b) / byte_s  # 0.97 ms: the output read, written again
    grads = launch + 2 * flops / flop_s  # data and weight gradients, compute-bound too
    bias_grad = launch + (out_b + bias_b) / byte_s  # 0.48 ms: the output gradient read once
    relu = launch + 2 * out_b / byte_s
    op = {n: i for i, n in enumerate(inst.op_name)}
    assert inst.op_duration_s[op["s0.c1.conv"]] == pytest.approx(conv + bias_add, rel=1e-12)
    assert inst.op_duration_s[op["s0.c1.conv.bwd"]] == pytest.approx(grads + bias_grad, rel=1e-12)
    # Recomputing the layer's output re-runs both forward kernels and the in-place ReLU.
    t = inst.tensor_index["s0.c1.out"]
    assert inst.tensor_recompute_s[t] == pytest.approx(conv + bias_add + relu, rel=1e-12)


def test_gpt2_forward_time() -> None:
    assert slackswap.load("gpt2-xl").forward_s == pytest.approx(0.136, rel=0.03)


@pytest.mark.parametrize("seq,f", [(2048, 0.36), (32768, 0.60)])
def test_llama_hideable_fraction_vs_sequence(seq: int, f: float) -> None:
    batch = max(1, 16384 // seq)
    inst = build_model("llama-7b", seq=seq, batch=batch)
    assert inst.hideable_fraction == pytest.approx(f, rel=0.05)


def test_bundled_files_match_models() -> None:
    for name in ("bert-large", "gpt2-xl", "llama-7b", "vgg16"):
        assert slackswap.load(name).content_hash == build_model(name, name=name).content_hash


def test_catalog_names_resolve() -> None:
    inst = slackswap.load("llama-7b@h100-pcie5")
    assert inst.hardware.gpu == "h100" and inst.hardware.link_bw_Bps == 50e9
    assert slackswap.load("qwen3-8b").n_tensors > 0


def test_unknown_name_is_user_error() -> None:
    with pytest.raises(slackswap.UserError):
        slackswap.load("gpt5")
    with pytest.raises(slackswap.UserError):
        slackswap.load("gpt2-xl@tpu-pcie4")
