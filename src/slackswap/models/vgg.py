"""VGG-16 at operator granularity: convolution, in-place ReLU, max-pool, classifier.

Memory follows the in-place ReLU of cuDNN-era frameworks (Caffe's ReLU layer with top = bottom,
vDNN's era) and of torchvision's VGG (``nn.ReLU(inplace=True)``): each convolution's output and
its ReLU's output are one saved tensor, which serves the ReLU backward and the next layer's
weight gradient; and the ReLU backward runs in place on the incoming gradient (in Caffe an
in-place layer's top and bottom blobs share their gradient buffer too), so it holds one gradient
buffer, not two. The backward pass is the chain rule's order: a layer's ReLU backward, then its
convolution backward (weight and input gradients, so that operator holds two gradient buffers;
the first convolution's holds one, see below).
Each pool saves its output, the next stage's input; its backward reads its input, whose max
positions it recomputes. Simplification: cuDNN's pooling backward also reads the output
(PyTorch's keeps int64 indices instead); the model keeps neither alive until then. Blocks are
the five convolution stages and the classifier (the segments checkpointing recomputes); layers
are the individual convolution, pooling and fully-connected layers (vDNN's unit of
synchronisation). Stage inputs are block inputs and are never recomputed, as in the transformer
builder.

Convolutions run as PyTorch eager runs ``nn.Conv2d`` with a bias on a GPU. A profiler's dispatch
mode records one ATen operator, ``convolution``, so the model has one operator per convolution;
but cuDNN's convolution takes no bias, so on CUDA that operator launches two kernels: the cuDNN
convolution, then ``output.add_(bias)``, a separate memory-bound kernel that reads and writes the
whole output (ATen's ``_convolution``, ``ConvBackend::Cudnn``). Its backward,
``convolution_backward``, runs cuDNN's data and weight gradients, then reduces the output
gradient for the bias (``grad_output.sum((0, 2, 3))``), a memory-bound pass over it. The
operator times are the sum of those kernels on the roofline. Neither adds a saved tensor: the
add runs in place, below autograd, and the bias gradient needs only the incoming gradient.
Caffe's cuDNN convolution layer (vDNN's era, the Titan X check) runs the same separate kernels:
``cudnnAddTensor`` after the convolution, ``cudnnConvolutionBackwardBias`` in backward. The
first convolution computes no input gradient, since the image needs none (autograd asks
``convolution_backward`` for the weight and bias gradients only): its backward costs the weight
gradient and the bias reduction, and holds no input-gradient buffer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from slackswap.instance import Instance
from slackswap.models.graph import GraphBuilder
from slackswap.models.hardware import get_gpu, get_link, hardware
from slackswap.models.registry import instance_name, register_model
from slackswap.models.roofline import Roofline

VGG16_STAGES = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


@dataclass(frozen=True)
class VGGConfig:
    name: str = "vgg16"
    batch: int = 128
    image: int = 224
    classes: int = 1000
    stages: tuple[tuple[int, ...], ...] = VGG16_STAGES
    fc: int = 4096


def _relu_bwd(rf: Roofline, prefix: str, block: int, layer: int, out_b: int) -> dict[str, Any]:
    """The backward op of ReLU ``prefix``: reads its saved output and the incoming gradient,
    writes the input gradient in place (one gradient buffer of ``out_b`` bytes)."""
    return dict(
        name=prefix + ".relu.bwd",
        block=block,
        layer=layer,
        kind="memory",
        duration_s=rf.memory(3 * out_b),
        reads=[prefix + ".out"],
        transient_bytes=out_b,  # in place on the incoming gradient
    )


def _conv_s(rf: Roofline, flops: float, in_b: int, out_b: int, wt_b: int, bias_b: int) -> float:
    """Forward ``convolution`` with a bias: cuDNN's convolution, then the bias added in place
    (its own kernel: the output read and written once more)."""
    return rf.gemm(flops, in_b + out_b + wt_b) + rf.memory(2 * out_b + bias_b)


def _conv_bwd_s(
    rf: Roofline, flops: float, in_b: int, out_b: int, wt_b: int, bias_b: int, input_grad: bool
) -> float:
    """``convolution_backward``: cuDNN's weight gradient and, when the input needs one, its data
    gradient (2x the forward FLOPs with both), then the bias gradient, a reduction of the
    output gradient (its own kernel)."""
    if input_grad:
        grads = rf.gemm(2 * flops, 2 * (in_b + out_b + wt_b))
    else:
        grads = rf.gemm(flops, in_b + out_b + wt_b)
    return grads + rf.memory(out_b + bias_b)


def build_vgg(
    cfg: VGGConfig,
    gpu: str = "a100",
    link: str | None = None,
    name: str | None = None,
    link_bw_Bps: float | None = None,
) -> Instance:
    """One training step of VGG-16 (the GPU's precision: BF16, or FP32 on the Titan X)."""
    g = get_gpu(gpu)
    hw = hardware(gpu, link, link_bw_Bps)
    rf = Roofline(g)
    e = g.bytes_per_element
    B = cfg.batch
    meta = {
        "model": cfg.name,
        "config": asdict(cfg),
        "gpu": g.key,
        "link": hw.link,
        "builder": "vgg",
    }
    if name is None:  # the catalog name: what differs from VGG-16 at batch 128 on the link
        bw = None if hw.link_bw_Bps == get_link(hw.link).bw_Bps else hw.link_bw_Bps
        batch = None if cfg.batch == VGGConfig().batch else cfg.batch
        name = instance_name(cfg.name, g.key, hw.link, batch=batch, link_bw_Bps=bw)
    b = GraphBuilder(name, hw, meta)

    side, cin = cfg.image, 3
    b.op("input", block=0, layer=0, kind="memory", duration_s=rf.memory(B * 3 * side**2 * e))
    x = "input.out"
    b.saved(x, nbytes=B * 3 * side**2 * e, producer="input", category="block_input", block=0)
    layer = 0
    backward: list[dict] = []  # backward ops, in forward order; emitted reversed
    for s, widths in enumerate(cfg.stages):
        for j, cout in enumerate(widths):
            p = f"s{s}.c{j}"
            out_b = B * cout * side**2 * e
            in_b = B * cin * side**2 * e
            flops = 2.0 * B * side**2 * cout * cin * 9
            wt_b, bias_b = cout * cin * 9 * e, cout * e
            t_conv = _conv_s(rf, flops, in_b, out_b, wt_b, bias_b)
            input_grad = layer > 0  # the image needs no gradient
            t_relu = rf.memory(2 * out_b)
            b.op(
                p + ".conv",
                block=s,
                layer=layer,
                kind="conv",
                duration_s=t_conv,
                flops=flops,
                reads=[x],
            )
            b.op(p + ".relu", block=s, layer=layer, kind="memory", duration_s=t_relu)
            b.saved(
                p + ".out",
                nbytes=out_b,
                producer=p + ".relu",
                category="gemm_output",
                block=s,
                recompute_s=t_conv + t_relu,
                rebuild_inputs=[x],
            )
            # Backward ops are emitted reversed: the conv's goes first here so that the ReLU
            # backward (which makes the conv's output gradient) runs before it.
            backward.append(
                dict(
                    name=p + ".conv.bwd",
                    block=s,
                    layer=layer,
                    kind="conv",
                    duration_s=_conv_bwd_s(rf, flops, in_b, out_b, wt_b, bias_b, input_grad),
                    flops=2 * flops if input_grad else flops,
                    reads=[x],
                    transient_bytes=out_b + (in_b if input_grad else 0),
                )
            )
            backward.append(_relu_bwd(rf, p, s, layer, out_b))
            x, cin = p + ".out", cout
            layer += 1
        side //= 2
        pool_b = B * cin * side**2 * e
        t_pool = rf.memory(4 * pool_b + pool_b)
        # A pooling layer is a layer of its own for vDNN (it offloads and synchronises per layer).
        b.op(f"s{s}.pool", block=s, layer=layer, kind="pool", duration_s=t_pool, reads=[x])
        backward.append(
            dict(
                name=f"s{s}.pool.bwd",
                block=s,
                layer=layer,
                kind="pool",
                duration_s=rf.memory(4 * pool_b * 2 + pool_b),
                reads=[x],
                transient_bytes=4 * pool_b + pool_b,
            )
        )
        layer += 1
        x = f"s{s}.pool.out"
        b.saved(x, nbytes=pool_b, producer=f"s{s}.pool", category="block_input", block=s + 1)

    cls = len(cfg.stages)
    fin = cin * side**2
    for j, fout in enumerate((cfg.fc, cfg.fc, cfg.classes)):
        p = f"fc{j}"
        flops = 2.0 * B * fin * fout
        t = rf.gemm(flops, (B * fin + fin * fout + B * fout) * e)
        b.op(p, block=cls, layer=layer, kind="gemm", duration_s=t, flops=flops, reads=[x])
        backward.append(
            dict(
                name=p + ".bwd",
                block=cls,
                layer=layer,
                kind="gemm",
                duration_s=rf.gemm(2 * flops, 2 * (B * fin + fin * fout + B * fout) * e),
                flops=2 * flops,
                reads=[x],
                transient_bytes=B * (fin + fout) * e,
            )
        )
        last = j == 2
        out_b = B * fout * e
        if not last:
            t_relu = rf.memory(2 * out_b)
            b.op(p + ".relu", block=cls, layer=layer, kind="memory", duration_s=t_relu)
            b.saved(
                p + ".out",
                nbytes=out_b,
                producer=p + ".relu",
                category="gemm_output",
                block=cls,
                recompute_s=t + t_relu,
                rebuild_inputs=[x],
            )
            backward.append(_relu_bwd(rf, p, cls, layer, out_b))
        else:
            b.saved(
                p + ".out",
                nbytes=out_b,
                producer=p,
                category="gemm_output",
                block=cls,
                recompute_s=t,
                rebuild_inputs=[x],
            )
        x, fin = p + ".out", fout
        layer += 1
    b.op(
        "loss",
        block=cls,
        layer=layer - 1,
        kind="loss",
        duration_s=rf.memory(B * fin * e),
        reads=[x],
    )
    b.op(
        "loss.bwd",
        backward=True,
        block=cls,
        layer=layer - 1,
        kind="loss",
        duration_s=rf.memory(2 * B * fin * e),
        reads=[x],
        transient_bytes=B * fin * e,
    )
    for op in reversed(backward):
        b.op(op.pop("name"), backward=True, **op)
    return b.build()


def vgg_config(batch: int | None = None, image: int | None = None) -> VGGConfig:
    cfg = VGGConfig()
    if batch is not None:
        if batch <= 0:
            raise ValueError(f"batch must be positive, got {batch}")
        cfg = replace(cfg, batch=batch)
    if image is not None:
        cfg = replace(cfg, image=image)
    return cfg


def _catalog_build(
    gpu: str,
    link: str | None,
    *,
    seq: int | None,
    batch: int | None,
    layers: int | None,
    link_bw_Bps: float | None,
    name: str | None,
) -> Instance:
    """The catalog's builder of ``vgg16`` (`slackswap.models.registry.ModelBuilder`)."""
    if seq is not None or layers is not None:
        raise ValueError("vgg16 takes no --seq or --layers")
    return build_vgg(vgg_config(batch=batch), gpu, link, name=name, link_bw_Bps=link_bw_Bps)


register_model("vgg16", _catalog_build, "VGG-16 (models/vgg.py)")
