"""The VGG builder's convolution layers against a profiled torch VGG (``nn.Conv2d`` with a bias).

A dispatch mode records what PyTorch eager runs at the ATen level: a convolution with a bias is
one ``convolution`` operator (the bias rides inside it; on CUDA it is a second kernel, which the
builder times but does not split off), followed by the in-place ReLU; in backward the ReLU's
``threshold_backward`` and then one ``convolution_backward``. The builder must emit that
structure: the same operators in the same order, the same FLOPs, the same saved tensors with the
same producers, readers and rebuild inputs. CPU, float32, so compared with the builder on the
Titan X (4-byte activations).
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # noqa: F401 - CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from examples import models as example_models  # noqa: E402
from slackswap.instance import Instance  # noqa: E402
from slackswap.models.vgg import VGGConfig, build_vgg  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def pair() -> tuple[nn.Module, Instance, Instance]:
    model, inputs, loss_fn = example_models.vgg()
    prof = profile_step(model, inputs, loss_fn, gpu="titanx", blocks=[])
    c = example_models.VGG_CONFIG
    cfg = VGGConfig("tiny-vgg", c["batch"], c["image"], c["classes"], c["stages"], c["fc"])
    return model, prof, build_vgg(cfg, gpu="titanx")


def _reads(inst: Instance, op: int) -> list[int]:
    return list(inst.op_reads[op])


def test_convolution_layers_match_the_profile(pair) -> None:  # type: ignore[no-untyped-def]
    model, prof, ref = pair
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    assert all(m.bias is not None for m in convs)
    p_conv = [i for i, n in enumerate(prof.op_name) if n.endswith("/convolution")]
    r_conv = [i for i, n in enumerate(ref.op_name) if n.endswith(".conv")]
    assert len(p_conv) == len(r_conv) == len(convs)
    for layer, (pi, ri, conv) in enumerate(zip(p_conv, r_conv, convs, strict=True)):
        prefix = ref.op_name[ri][: -len(".conv")]
        # Forward: the convolution (bias included: no operator between it and the ReLU), then
        # the in-place ReLU, which writes the saved output.
        assert prof.op_name[pi + 1].endswith("/relu_") and ref.op_name[ri + 1] == prefix + ".relu"
        assert prof.op_kind[pi] == ref.op_kind[ri] == "conv"
        assert prof.op_kind[pi + 1] == ref.op_kind[ri + 1] == "memory"
        assert prof.op_flops[pi] == ref.op_flops[ri]
        p_reads, (r_in,) = _reads(prof, pi), _reads(ref, ri)
        if layer == 0:
            # The profile leaves the image (and the int64 labels) to the caller, who holds
            # them through the step (no action frees them); the builder counts the image as a
            # saved tensor.
            labels = example_models.VGG_CONFIG["batch"] * 8
            assert p_reads == []
            assert prof.meta["caller_held_bytes"] == ref.tensor_bytes[r_in] + labels
            p_in = None
        else:
            (p_in,) = p_reads
            assert prof.tensor_bytes[p_in] == ref.tensor_bytes[r_in]
        p_out = next(t for t in range(prof.n_tensors) if prof.tensor_producer[t] == pi + 1)
        r_out = ref.tensor_index[prefix + ".out"]
        assert ref.tensor_producer[r_out] == ri + 1
        assert prof.tensor_bytes[p_out] == ref.tensor_bytes[r_out]
        assert [prof.tensor_bytes[u] for u in prof.tensor_rebuild_inputs[p_out]] == [
            ref.tensor_bytes[u] for u in ref.tensor_rebuild_inputs[r_out] if p_in is not None
        ]
        # Backward: the next layer (convolution or pool) reads the saved output as its input
        # first; the ReLU's backward reads it last, then one convolution backward reads the
        # layer input (weight, input and bias gradients in one operator).
        p_first, r_first = prof.tensor_first_bwd_reader[p_out], ref.tensor_first_bwd_reader[r_out]
        assert prof.op_kind[p_first] == ref.op_kind[r_first] in ("conv", "pool")
        p_bwd, r_bwd = prof.tensor_last_bwd_reader[p_out], ref.tensor_last_bwd_reader[r_out]
        assert prof.op_name[p_bwd].endswith("/threshold_backward")
        assert ref.op_name[r_bwd] == prefix + ".relu.bwd"
        assert prof.op_name[p_bwd + 1].endswith("/convolution_backward")
        assert ref.op_name[r_bwd + 1] == prefix + ".conv.bwd"
        assert p_in is None or p_in in _reads(prof, p_bwd + 1)
        assert r_in in _reads(ref, r_bwd + 1)
        # The image needs no gradient: the first layer's backward computes the weight gradient
        # only (the forward's FLOPs, no input-gradient buffer); the others both (2x).
        assert prof.op_flops[p_bwd + 1] == ref.op_flops[r_bwd + 1], prefix
        assert ref.op_flops[r_bwd + 1] == (1 if layer == 0 else 2) * ref.op_flops[ri]
        # Transients: the profile also counts the fresh weight and bias gradient buffers, which
        # the builder leaves with the model states outside the budget, and the loss and its
        # seed gradient (one float each), which the step holds until backward returns.
        grads = (conv.weight.numel() + conv.bias.numel()) * 4
        held = 2 * 4
        assert (
            prof.op_transient_bytes[p_bwd + 1] - grads - held == ref.op_transient_bytes[r_bwd + 1]
        )
        # A documented choice, not an oversight: PyTorch's threshold_backward writes a new
        # gradient; the builder runs it in place, as Caffe does (one buffer, not two).
        assert prof.op_transient_bytes[p_bwd] - held == 2 * ref.op_transient_bytes[r_bwd]
