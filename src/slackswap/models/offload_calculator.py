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

from slackswap.models.hardware import LINKS
from slackswap.models.transformer import (
    TransformerConfig,
    checkpoint_bytes_per_layer,
    layer_forward_flops,
)

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
    if link_Bps <= 0 or gpus_per_link <= 0 or sustained_flops <= 0:
        raise ValueError("link bandwidth, GPUs per link and FLOP/s must be positive")
    per_layer = checkpoint_bytes_per_layer(cfg, bytes_per_element)
    bw = link_Bps / gpus_per_link
    t_fwd = layer_forward_flops(cfg) / sustained_flops
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
