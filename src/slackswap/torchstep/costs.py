"""Operator kinds from ATen names, and roofline times of recorded operators (no torch here)."""

from __future__ import annotations

from slackswap.models.hardware import GPU
from slackswap.models.roofline import Roofline
from slackswap.torchstep.trace import OpRecord

_GEMM = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "addbmm",
    "mv",
    "addmv",
    "dot",
    "vdot",
    "matmul",
    "_int_mm",
    "_scaled_mm",
    "linear",
    "_addmm_activation",
}
_ATTENTION_MARKS = ("scaled_dot_product", "flash_attention", "efficient_attention", "attention")
# Operators that launch no kernel of their own: allocation only.
NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


def op_kind(aten: str) -> str:
    """The `validation.OP_KINDS` entry of an ATen operator (``aten`` is the packet name)."""
    name = aten.split(".")[-1]
    if name in _GEMM:
        return "gemm"
    if "conv" in name and "convert" not in name:
        return "conv"
    if any(m in name for m in _ATTENTION_MARKS):
        return "attention"
    if "pool" in name:
        return "pool"
    if "loss" in name:
        return "loss"
    if name.startswith("embedding") or name.startswith("_embedding"):
        return "embedding"
    return "memory"


def roofline_s(op: OpRecord, rf: Roofline) -> float:
    """Seconds of ``op`` on the roofline of ``rf.gpu`` (the paper's sustained efficiencies)."""
    if op.kind in ("gemm", "conv"):
        return rf.gemm(op.flops, op.bytes_moved)
    if op.kind == "attention" and op.flops > 0:
        return max(rf.attention(op.flops, backward=op.phase == 1), rf.memory(op.bytes_moved))
    return rf.memory(op.bytes_moved)


def durations_s(ops: list[OpRecord], timing: str, gpu: GPU) -> list[float]:
    """Per-operator seconds: ``measured`` on the profiling device, or ``roofline`` on ``gpu``."""
    if timing == "measured":
        return [max(0.0, op.measured_s) for op in ops]
    rf = Roofline(gpu)
    return [roofline_s(op, rf) for op in ops]
