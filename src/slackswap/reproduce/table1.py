"""``slackswap reproduce table1``: Table 1, Eq. 1 versus sequence length, and the essay's figures.

Every row prints the paper's (or essay's) value, the toolkit's and the relative error, flags rows
outside the tolerance the issue sets, and says why where the two differ.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from slackswap.console import format_table, print_json
from slackswap.instances.catalog import build_model, load
from slackswap.models.offload_calculator import ESSAY_LINKS, estimate
from slackswap.models.transformer import transformer_config

GIB = 2**30


@dataclass(frozen=True)
class Row:
    what: str
    paper: float
    toolkit: float
    unit: str
    tolerance: float  # relative
    why: str = ""

    @property
    def rel_error(self) -> float:
        return (self.toolkit - self.paper) / self.paper if self.paper else 0.0

    @property
    def ok(self) -> bool:
        return abs(self.rel_error) <= self.tolerance


def vgg_why(inst: Any, paper_a_bytes: float, paper_step_s: float, paper_f: float) -> str:
    """Why VGG-16's step differs: the forward pass is what the paper's f implies (its link hides
    f A in T_F, Eq. 1), so the gap is the backward pass's; the figures come from ``inst``."""
    fwd = inst.forward_s
    fwd_paper = paper_f * paper_a_bytes / inst.hardware.link_bw_Bps
    bwd, bwd_paper = inst.ideal_step_s - fwd, paper_step_s - fwd_paper
    return (
        f"with PyTorch's separate bias kernels (an in-place add after each cuDNN convolution, a "
        f"reduction in its backward) the forward pass takes {1e3 * fwd:.1f} ms, where the "
        f"paper's f, A and link imply {1e3 * fwd_paper:.1f} ms; the gap is the backward pass: "
        f"{1e3 * bwd:.1f} ms ({bwd / fwd:.2f}x forward) against the {1e3 * bwd_paper:.1f} ms "
        f"({bwd_paper / fwd_paper:.2f}x) the {1e3 * paper_step_s:.0f} ms step implies; the "
        "roofline runs cuDNN's data and weight gradients at 75% of the GEMM peak like any "
        "GEMM, and Sec. 4.1 states no other efficiency for them; we do not tune per workload"
    )


def table1_rows() -> list[Row]:
    paper = {
        "bert-large": (13.9, 173, 782, 0.11),
        "gpt2-xl": (22.3, 399, 1200, 0.15),
        "llama-7b": (35.2, 1635, 3326, 0.38),
        "vgg16": (3.9, 82, 1015, 0.17),
    }
    rows = []
    for name, (a, step, i, f) in paper.items():
        inst = load(name)
        why_step = vgg_why(inst, a * 1e9, step / 1e3, f) if name == "vgg16" else ""
        rows += [
            Row(f"{name} A", a, inst.saved_bytes / 1e9, "GB", 0.05),
            Row(f"{name} ideal step", step, inst.ideal_step_s * 1e3, "ms", 0.08, why_step),
            Row(f"{name} I", i, inst.intensity, "FLOP/B", 0.05),
            Row(f"{name} f", f * 100, inst.hideable_fraction * 100, "%", 0.05, why_step),
        ]
    rows.append(Row("gpt2-xl forward T_F", 136, load("gpt2-xl").forward_s * 1e3, "ms", 0.05))
    for seq, f in ((2048, 36), (32768, 60)):
        inst = build_model("llama-7b", seq=seq, batch=max(1, 16384 // seq))
        rows.append(Row(f"llama-7b f at {seq // 1024}K tokens", f, inst.hideable_fraction * 100,
                        "%", 0.05))  # fmt: skip
    return rows


def essay_rows() -> list[Row]:
    def est(model: str, seq: int, link: str = "pcie5"):  # type: ignore[no-untyped-def]
        return estimate(transformer_config(model, seq=seq, batch=1), link_Bps=ESSAY_LINKS[link])

    q8_128k = est("qwen3-8b", 131072)
    q17_4k5, q17_4k4 = est("qwen3-1.7b", 4096), est("qwen3-1.7b", 4096, "pcie4")
    l70 = estimate(transformer_config("llama-70b", seq=3_000_000 // 32, batch=1),
                   link_Bps=ESSAY_LINKS["pcie5"], gpus_per_node=8)  # fmt: skip
    return [
        Row("qwen3-8b 128K checkpoints", 36, q8_128k.checkpoint_bytes_total / GIB, "GiB", 0.05),
        Row("qwen3-1.7b 32K checkpoints freed", 3.5,
            est("qwen3-1.7b", 32768).checkpoint_bytes_total / GIB, "GiB", 0.05),
        Row("llama-70b 3M tokens / 32 GPUs host memory per node", 915.5,
            l70.host_bytes_per_node / GIB, "GiB", 0.05),
        Row("sync slowdown qwen3-1.7b 4K PCIe 5", 15.7, q17_4k5.sync_slowdown * 100, "%", 0.05),
        Row("sync slowdown qwen3-1.7b 4K PCIe 4", 28.1, q17_4k4.sync_slowdown * 100, "%", 0.05),
        Row("sync slowdown qwen3-8b 128K PCIe 5", 2.5, q8_128k.sync_slowdown * 100, "%", 0.05),
        Row("overlap slowdown qwen3-1.7b 4K PCIe 5", 0.0, q17_4k5.overlap_slowdown * 100, "%", 0),
        Row("overlap slowdown qwen3-1.7b 4K PCIe 4", 0.0, q17_4k4.overlap_slowdown * 100, "%", 0),
        Row("overlap slowdown qwen3-8b 128K PCIe 5", 0.0, q8_128k.overlap_slowdown * 100, "%", 0),
    ]  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="rows as JSON")


def main(args: argparse.Namespace) -> int:
    rows = table1_rows() + essay_rows()
    if args.json:
        print_json(
            [
                {"what": r.what, "paper": r.paper, "toolkit": r.toolkit, "unit": r.unit,
                 "rel_error": r.rel_error, "tolerance": r.tolerance, "ok": r.ok, "why": r.why}
                for r in rows
            ]
        )  # fmt: skip
        return 0
    table = [
        (r.what, f"{r.paper:g}", f"{r.toolkit:.4g}", r.unit,
         f"{r.rel_error * 100:+.1f}%", "ok" if r.ok else "DIFFERS")
        for r in rows
    ]  # fmt: skip
    print(format_table(table, ("quantity", "paper", "toolkit", "unit", "error", "")))
    notes = [r for r in rows if not r.ok and r.why]
    seen: set[str] = set()
    for r in notes:
        if r.why not in seen:
            seen.add(r.why)
            print(f"\nwhy {r.what.split()[0]} differs: {r.why}")
    print(
        "\nModel choices (all workloads alike): P counts saved tensors plus each operator's "
        "transients (unsaved outputs, workspace, activation gradients and the running "
        "residual-stream gradient); backward GEMMs cost 2x forward FLOPs, FlashAttention "
        "backward 2x forward FLOPs at 48%; a convolution's bias runs as PyTorch eager runs it "
        "on cuDNN (its own kernels); block inputs are never recomputed."
    )
    return 0
