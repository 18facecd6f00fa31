"""Helpers for the exact-solver tests: tiny instances and brute force over all 3^n plans."""

from __future__ import annotations

import itertools
import math

import numpy as np

from slackswap.instance import Hardware, Instance
from slackswap.instances.catalog import build_model
from slackswap.models.graph import GraphBuilder
from slackswap.plan import Budget
from slackswap.simulator import simulate_many

US = 1e-6
HW = Hardware(gpu="test", link="test", link_bw_Bps=25e9, copy_latency_s=10e-6, duplex_factor=0.85)


def mini_layer(name: str = "mini", *, seq_scale: float = 1.0) -> Instance:
    """One pre-norm transformer layer in miniature: 9 saved tensors, 18 operators.

    Sizes and times follow a GPT layer's ratios (a 1.6 MB residual stream, GEMMs ~100 us), so
    swaps, recomputes and their chains all compete.
    """
    act = 1.6e6 * seq_scale
    g = GraphBuilder(name, HW)
    g.op("emb", block=-1, kind="embedding", duration_s=20 * US, transient_bytes=act)
    g.saved("x", nbytes=act, producer="emb", category="block_input", block=0)
    g.op("norm1", block=0, kind="memory", duration_s=15 * US, reads=["x"])
    g.saved("n1", nbytes=act, producer="norm1", category="elementwise", block=0,
            recompute_s=15 * US, rebuild_inputs=["x"])  # fmt: skip
    g.op("qkv", block=0, kind="gemm", duration_s=120 * US, reads=["n1"])
    g.saved("qkv", nbytes=3 * act, producer="qkv", category="gemm_output", block=0,
            recompute_s=120 * US, rebuild_inputs=["n1"])  # fmt: skip
    g.op("attn", block=0, kind="attention", duration_s=150 * US, reads=["qkv"])
    g.saved("att", nbytes=act, producer="attn", category="attention_output", block=0,
            recompute_s=150 * US, rebuild_inputs=["qkv"])  # fmt: skip
    g.op("proj", block=0, kind="gemm", duration_s=40 * US, reads=["att"], transient_bytes=act)
    g.op("add1", block=0, kind="memory", duration_s=10 * US, reads=["x"], transient_bytes=act)
    g.saved("res", nbytes=act, producer="add1", category="residual", block=0,
            recompute_s=50 * US, rebuild_inputs=["att", "x"])  # fmt: skip
    g.op("norm2", block=0, kind="memory", duration_s=15 * US, reads=["res"])
    g.saved("n2", nbytes=act, producer="norm2", category="elementwise", block=0,
            recompute_s=15 * US, rebuild_inputs=["res"])  # fmt: skip
    g.op("fc1", block=0, kind="gemm", duration_s=160 * US, reads=["n2"])
    g.saved("h", nbytes=4 * act, producer="fc1", category="gemm_output", block=0,
            recompute_s=160 * US, rebuild_inputs=["n2"])  # fmt: skip
    g.op("gelu", block=0, kind="memory", duration_s=30 * US, reads=["h"])
    g.saved("a", nbytes=4 * act, producer="gelu", category="elementwise", block=0,
            recompute_s=30 * US, rebuild_inputs=["h"])  # fmt: skip
    g.op("fc2", block=0, kind="gemm", duration_s=160 * US, reads=["a"], transient_bytes=act)
    g.op("add2", block=0, kind="memory", duration_s=10 * US, reads=["res"], transient_bytes=act)
    g.saved("y", nbytes=act, producer="add2", category="block_input", block=1)
    g.op("loss", block=1, kind="loss", duration_s=20 * US, reads=["y"])
    g.op("loss.bwd", backward=True, block=1, kind="loss", duration_s=20 * US, reads=["y"],
         transient_bytes=act)  # fmt: skip
    g.op("fc2.bwd", backward=True, block=0, kind="gemm", duration_s=320 * US, reads=["a"],
         transient_bytes=2 * act)  # fmt: skip
    g.op("gelu.bwd", backward=True, block=0, kind="memory", duration_s=45 * US, reads=["h"],
         transient_bytes=3 * act)  # fmt: skip
    g.op("fc1.bwd", backward=True, block=0, kind="gemm", duration_s=320 * US, reads=["n2"],
         transient_bytes=2 * act)  # fmt: skip
    g.op("norm2.bwd", backward=True, block=0, kind="memory", duration_s=25 * US, reads=["res"],
         transient_bytes=3 * act)  # fmt: skip
    g.op("proj.bwd", backward=True, block=0, kind="gemm", duration_s=80 * US, reads=["att"],
         transient_bytes=3 * act)  # fmt: skip
    g.op("attn.bwd", backward=True, block=0, kind="attention", duration_s=400 * US,
         reads=["qkv", "att"], transient_bytes=2 * act)  # fmt: skip
    g.op("qkv.bwd", backward=True, block=0, kind="gemm", duration_s=240 * US, reads=["n1"],
         transient_bytes=2 * act)  # fmt: skip
    g.op("norm1.bwd", backward=True, block=0, kind="memory", duration_s=25 * US, reads=["x"],
         transient_bytes=3 * act)  # fmt: skip
    return g.build()


def all_plans(inst: Instance) -> np.ndarray:
    """Every valid plan (RECOMP only where something rebuilds the tensor), one per row."""
    choices = [(0, 1, 2) if math.isfinite(c) else (0, 1) for c in inst.tensor_recompute_s]
    return np.array(list(itertools.product(*choices)), dtype=np.int8).reshape(-1, inst.n_tensors)


def brute_force(inst: Instance, budget_bytes: int) -> tuple[float, np.ndarray | None]:
    """(optimal simulated step in seconds, an optimal plan): inf and None when nothing fits."""
    plans = all_plans(inst)
    res = simulate_many(inst, plans, Budget.bytes(budget_bytes))
    step = np.where(res.feasible, res.step_s, np.inf)
    k = int(np.argmin(step))
    if not math.isfinite(step[k]):
        return math.inf, None
    return float(step[k]), plans[k]


def small_catalog_instances() -> list[Instance]:
    """One small instance of each architecture the catalog models (GeLU / SwiGLU / BERT)."""
    return [
        build_model("gpt2-xl", layers=2, seq=256, batch=2),
        build_model("llama-7b", layers=2, seq=512, batch=1),
        build_model("bert-large", layers=1, seq=128, batch=2),
    ]
