"""Roofline operator timing with the sustained efficiencies of the paper's Sec. 4.1."""

from __future__ import annotations

from dataclasses import dataclass

from slackswap.models.hardware import GPU

GEMM_EFFICIENCY = 0.75
ATTENTION_FWD_EFFICIENCY = 0.62
ATTENTION_BWD_EFFICIENCY = 0.48
MEMORY_EFFICIENCY = 0.85
LAUNCH_S = 5e-6


@dataclass(frozen=True)
class Roofline:
    """Operator time = launch + max(FLOPs / sustained compute, bytes / sustained bandwidth)."""

    gpu: GPU

    def gemm(self, flops: float, bytes_moved: float = 0.0) -> float:
        """A GEMM or convolution (tensor cores at 75% of peak)."""
        return LAUNCH_S + max(
            flops / (GEMM_EFFICIENCY * self.gpu.peak_flops), self._mem(bytes_moved)
        )

    def attention(self, flops: float, backward: bool) -> float:
        """A FlashAttention kernel (62% of peak forward, 48% backward)."""
        eff = ATTENTION_BWD_EFFICIENCY if backward else ATTENTION_FWD_EFFICIENCY
        return LAUNCH_S + flops / (eff * self.gpu.peak_flops)

    def memory(self, bytes_moved: float) -> float:
        """A memory-bound kernel (85% of HBM bandwidth)."""
        return LAUNCH_S + self._mem(bytes_moved)

    def _mem(self, bytes_moved: float) -> float:
        return bytes_moved / (MEMORY_EFFICIENCY * self.gpu.hbm_Bps)
