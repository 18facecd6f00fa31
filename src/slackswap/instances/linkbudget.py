"""Eq. 1 across GPU generations and workloads: the share of saved activations a link can hide.

f = min(1, I / beta) = min(1, W T_F / A), with I = F / A (workload) and beta = (F / T_F) / W
(machine). The Fig. 1 label "GEMM FLOP/s per link byte/s" is the sustained GEMM rate (75% of
peak) over the link bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from slackswap.instances.catalog import build_model
from slackswap.models.hardware import GPUS, get_link
from slackswap.models.roofline import GEMM_EFFICIENCY

#: GPU generations of Fig. 1, each with the link it shipped with.
FIG1_GPUS = ("titanx", "v100", "a100", "h100")
FIG1_WORKLOADS = ("bert-large", "gpt2-xl", "llama-7b", "vgg16")


@dataclass(frozen=True)
class LinkBudgetRow:
    gpu: str
    link: str
    workload: str
    link_Bps: float
    gemm_flops_per_link_byte: float
    saved_bytes: int
    forward_s: float
    intensity: float
    beta: float
    hideable_fraction: float
    link_budget_bytes: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def link_budget_table(
    gpus: tuple[str, ...] = FIG1_GPUS, workloads: tuple[str, ...] = FIG1_WORKLOADS
) -> list[LinkBudgetRow]:
    """One row per (GPU with its default link, workload), built from the workload models."""
    rows = []
    for g in gpus:
        gpu = GPUS[g]
        link = get_link(gpu.default_link)
        for w in workloads:
            inst = build_model(w, g, link.key)
            rows.append(
                LinkBudgetRow(
                    gpu=g,
                    link=link.key,
                    workload=w,
                    link_Bps=link.bw_Bps,
                    gemm_flops_per_link_byte=GEMM_EFFICIENCY * gpu.peak_flops / link.bw_Bps,
                    saved_bytes=inst.saved_bytes,
                    forward_s=inst.forward_s,
                    intensity=inst.intensity,
                    beta=inst.beta,
                    hideable_fraction=inst.hideable_fraction,
                    link_budget_bytes=inst.link_budget_bytes,
                )
            )
    return rows
