"""The checkpoint-offload calculator of the companion essay (first-order arithmetic).

With gradient checkpointing each layer keeps one checkpoint, its input (batch x seq x hidden,
2 bytes per element). Offloading it sends those bytes over the host link twice per step: out in
forward, back in backward. A checkpointed step costs about four forwards per layer (forward,
recompute, backward = 2). The synchronous runtime (Hugging Face ``save_on_cpu``: both copies on
the compute stream, no prefetch) adds both copies to the step; the overlapped runtime (Arctic:
side streams, reverse prefetch one layer ahead) hides the reload behind the next layer's
recompute and backward (three forwards), and forward never waits, so it costs
``max(0, copy - 3 x forward)`` per layer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from slackswap.errors import ArgumentError
from slackswap.models.hardware import LINKS
from slackswap.models.transformer import (
    TransformerConfig,
    checkpoint_bytes_per_layer,
    layer_forward_flops,
)
from slackswap.validation import RANGES, in_range, range_text

#: Sustained rate the essay assumes on H100-class GPUs, FLOP/s.
ESSAY_TFLOPS = 500e12
#: Links as the essay quotes them (bytes/s per direction), from the one link table; why they differ
#: from the paper's figures that instances use is in `slackswap.models.hardware.Link`.
ESSAY_LINKS = {k: lk.essay_bw_Bps for k, lk in LINKS.items() if lk.essay_bw_Bps is not None}
GIB = 2**30


@dataclass(frozen=True)
class OffloadEstimate:
    model: str
    layers: int
    tokens: int  # tokens per GPU (batch x sequence)
    checkpoint_bytes_per_layer: int
    checkpoint_bytes_total: int
    host_bytes_per_node: int
    link_Bps: float  # effective per-GPU link bandwidth
    layer_forward_s: float
    copy_s: float  # one checkpoint over the link, one direction
    sync_slowdown: float  # fraction of the checkpointed step added by the synchronous runtime
    overlap_slowdown: float  # same for the overlapped runtime

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Most GPUs on one link or in one node the calculator takes (a rack-scale NVLink domain has 72).
MAX_GPUS = 1024


def _check_inputs(
    link_Bps: float, gpus_per_link: int, gpus_per_node: int, sustained_flops: float
) -> None:
    """Refuse (`ArgumentError`, one line) an input outside its physical range: the ranges of
    the instance files (`slackswap.validation.RANGES`) where one applies."""
    if not in_range("hardware.link_bw_Bps", link_Bps):
        raise ArgumentError(
            f"link bandwidth {link_Bps:.3g} B/s: {range_text('hardware.link_bw_Bps')}"
        )
    if not (0 < sustained_flops <= RANGES["hardware.gpu_flops"][1]):
        raise ArgumentError(
            f"sustained FLOP/s {sustained_flops:.3g}: outside the physical range (0, "
            f"{RANGES['hardware.gpu_flops'][1]:g}]"
        )
    for what, n in (("GPUs per link", gpus_per_link), ("GPUs per node", gpus_per_node)):
        if not 1 <= n <= MAX_GPUS:
            raise ArgumentError(f"{what} = {n}: expected 1 to {MAX_GPUS}")


def estimate(
    cfg: TransformerConfig,
    *,
    link_Bps: float,
    gpus_per_link: int = 1,
    gpus_per_node: int = 8,
    sustained_flops: float = ESSAY_TFLOPS,
    bytes_per_element: int = 2,
) -> OffloadEstimate:
    """Checkpoint bytes, host memory per node and the two runtimes' slowdowns for ``cfg``.

    ``gpus_per_link`` GPUs share one link (a PCIe switch or one host memory controller), so each
    sees ``link_Bps / gpus_per_link``.
    """
    _check_inputs(link_Bps, gpus_per_link, gpus_per_node, sustained_flops)
    per_layer = checkpoint_bytes_per_layer(cfg, bytes_per_element)
    if not in_range("tensor_bytes", per_layer):
        raise ArgumentError(
            f"{cfg.name} at {cfg.tokens:,} tokens per GPU (batch x seq): one layer's checkpoint "
            f"would be {per_layer:.3g} bytes, {range_text('tensor_bytes')} of a tensor's bytes "
            "(lower the sequence length or the batch)"
        )
    bw = link_Bps / gpus_per_link
    t_fwd = layer_forward_flops(cfg) / sustained_flops
    if not in_range("op_duration_s", t_fwd):
        raise ArgumentError(
            f"{cfg.name} at {cfg.tokens:,} tokens per GPU: one layer's forward would take "
            f"{t_fwd:.3g} s, {range_text('op_duration_s')} of an operator's seconds "
            "(lower the sequence length or the batch, or raise the FLOP/s)"
        )
    t_copy = per_layer / bw
    step_per_layer = 4 * t_fwd
    return OffloadEstimate(
        model=cfg.name,
        layers=cfg.layers,
        tokens=cfg.tokens,
        checkpoint_bytes_per_layer=per_layer,
        checkpoint_bytes_total=per_layer * cfg.layers,
        host_bytes_per_node=per_layer * cfg.layers * gpus_per_node,
        link_Bps=bw,
        layer_forward_s=t_fwd,
        copy_s=t_copy,
        sync_slowdown=2 * t_copy / step_per_layer,
        overlap_slowdown=max(0.0, t_copy - 3 * t_fwd) / step_per_layer,
    )
