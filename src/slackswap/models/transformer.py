"""Transformer workloads at operator granularity (BERT, GPT-2, Llama, Qwen3) on a roofline.

Each GEMM, attention, norm, activation, dropout and residual add is its own operator. A GPT-style
layer saves 34 bytes per token per hidden unit in 16-bit (Korthikanti et al.): block input (2),
norm-1 output (2), Q/K/V (6), attention output (2), dropout mask (1), mid-block residual (2),
norm-2 output (2), FC1 output (8), GeLU output (8), dropout mask (1). Llama-style layers
(RMSNorm, SwiGLU, no dropout) save the gate, up and SwiGLU outputs instead.

Modelling choices (see the reproduction report):
- Recompute cost is the time of the operator chain that rebuilds the tensor from saved tensors:
  the producer, plus the producers of any unsaved intermediates (the mid-block residual needs the
  output projection, dropout and add). Dropout masks are regenerated from the RNG state (a
  write-only kernel). Block inputs are never recomputed (``inf``), as in the paper.
- Backward GEMMs cost 2x their forward FLOPs; FlashAttention backward 2x its forward FLOPs at 48%
  efficiency; memory-bound backward kernels move the bytes they read and write. Residual adds
  have no backward kernel: the norm at each branch point accumulates the residual gradient.
- Transient bytes: unsaved inputs and outputs of a forward operator (a GEMM output that is saved
  in part, QK-norm's raw q and k, counts only its unsaved part); in backward, the gradients of
  the operator's inputs and outputs plus the running residual-stream gradient, plus a branch's
  gradient made earlier and not yet consumed (SwiGLU's gate gradient while the up GEMM's backward
  runs). An operator's output gradient counts as its own buffer even where it is the
  residual-stream gradient itself (Llama's FC2 and output projection, no dropout between): the
  same upper-bound convention in every layer kind.
- BERT is modelled with the same pre-norm layer sequence (identical saved bytes per layer); its
  MLM head projects only the masked 15% of tokens to the vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from slackswap.models.graph import GraphBuilder
from slackswap.models.hardware import get_gpu, hardware
from slackswap.models.roofline import Roofline
from slackswap.problem import Instance


@dataclass(frozen=True)
class TransformerConfig:
    """Architecture and batch of a transformer workload."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    vocab: int
    seq: int
    batch: int
    mlp_kind: str = "gelu"  # "gelu" or "swiglu"
    norm: str = "layernorm"  # "layernorm" or "rmsnorm"
    dropout: bool = True
    causal: bool = True
    qk_norm: bool = False
    rope: bool = False
    head_fraction: float = 1.0  # share of tokens projected to the vocabulary (BERT MLM: 0.15)
    mlm_transform: bool = False  # BERT's dense + GeLU + LayerNorm before the decoder

    @property
    def tokens(self) -> int:
        return self.seq * self.batch

    def layer_params(self) -> int:
        """Weights of one layer's GEMMs (no norms or biases)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = h * (q + 2 * kv) + q * h
        mlp = (3 if self.mlp_kind == "swiglu" else 2) * h * self.mlp
        return attn + mlp


TRANSFORMERS: dict[str, TransformerConfig] = {
    c.name: c
    for c in (
        TransformerConfig(
            "bert-large",
            24,
            1024,
            16,
            16,
            64,
            4096,
            30522,
            512,
            32,
            causal=False,
            head_fraction=0.15,
            mlm_transform=True,
        ),
        TransformerConfig("gpt2-xl", 48, 1600, 25, 25, 64, 6400, 50257, 1024, 8),
        TransformerConfig(
            "llama-7b",
            32,
            4096,
            32,
            32,
            128,
            11008,
            32000,
            4096,
            2,
            mlp_kind="swiglu",
            norm="rmsnorm",
            dropout=False,
            rope=True,
        ),
        TransformerConfig(
            "qwen3-1.7b",
            28,
            2048,
            16,
            8,
            128,
            6144,
            151936,
            4096,
            1,
            mlp_kind="swiglu",
            norm="rmsnorm",
            dropout=False,
            rope=True,
            qk_norm=True,
        ),
        TransformerConfig(
            "qwen3-8b",
            36,
            4096,
            32,
            8,
            128,
            12288,
            151936,
            4096,
            1,
            mlp_kind="swiglu",
            norm="rmsnorm",
            dropout=False,
            rope=True,
            qk_norm=True,
        ),
        TransformerConfig(
            "llama-70b",
            80,
            8192,
            64,
            8,
            128,
            28672,
            32000,
            4096,
            1,
            mlp_kind="swiglu",
            norm="rmsnorm",
            dropout=False,
            rope=True,
        ),
    )
}


def build_transformer(
    cfg: TransformerConfig,
    gpu: str = "a100",
    link: str | None = None,
    name: str | None = None,
    link_bw_Bps: float | None = None,
) -> Instance:
    """The operator sequence of one training step of ``cfg`` on ``gpu`` (BF16, FlashAttention)."""
    g = get_gpu(gpu)
    hw = hardware(gpu, link, link_bw_Bps)
    rf = Roofline(g)
    e = g.bytes_per_element
    N, h = cfg.tokens, cfg.hidden
    qw, kvw, m = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.mlp
    act = N * h * e  # one residual-stream tensor, bytes
    qkv_bytes = N * (qw + 2 * kvw) * e
    mask = N * h  # dropout mask, one byte per element
    meta: dict[str, Any] = {
        "model": cfg.name,
        "config": asdict(cfg),
        "gpu": g.key,
        "link": hw.link,
        "builder": "transformer",
    }
    b = GraphBuilder(name or f"{cfg.name}@{g.key}-{hw.link}", hw, meta)

    def gemm_t(m_: int, k_: int, n_: int) -> tuple[float, float]:
        flops = 2.0 * m_ * k_ * n_
        return rf.gemm(flops, (m_ * k_ + k_ * n_ + m_ * n_) * e), flops

    attn_flops = 4.0 * cfg.batch * cfg.seq * cfg.seq * qw / (2 if cfg.causal else 1)
    t_attn_f = rf.attention(attn_flops, backward=False)
    t_attn_b = rf.attention(2 * attn_flops, backward=True)
    t_norm = rf.memory(2 * act)
    t_norm_b = rf.memory(5 * act)  # input, grad in/out, plus the residual-gradient accumulate
    t_drop = rf.memory(2 * act + mask)
    t_drop_b = rf.memory(2 * act + mask)
    t_mask = rf.memory(mask)  # regenerate a mask from the RNG state
    t_add = rf.memory(3 * act)
    t_qkv, f_qkv = gemm_t(N, h, qw + 2 * kvw)
    t_proj, f_proj = gemm_t(N, qw, h)
    t_fc1, f_fc1 = gemm_t(N, h, m)
    t_fc2, f_fc2 = gemm_t(N, m, h)
    mlp_act = N * m * e
    t_rope = rf.memory(2 * N * (qw + kvw) * e)
    qk_bytes = N * (qw + kvw) * e
    t_qknorm = rf.memory(2 * qk_bytes)

    # ---- forward ------------------------------------------------------------------------
    x = "emb.out"
    if cfg.dropout:
        b.op("emb", block=-1, kind="embedding", duration_s=rf.memory(2 * act), transient_bytes=act)
        b.op("emb.drop", block=-1, kind="memory", duration_s=t_drop, transient_bytes=act)
        b.saved(
            "emb.mask",
            nbytes=mask,
            producer="emb.drop",
            category="dropout_mask",
            block=-1,
            recompute_s=t_mask,
        )
        b.saved(x, nbytes=act, producer="emb.drop", category="block_input", block=0)
    else:
        b.op("emb", block=-1, kind="embedding", duration_s=rf.memory(2 * act))
        b.saved(x, nbytes=act, producer="emb", category="block_input", block=0)

    for L in range(cfg.layers):
        p = f"L{L}."
        b.op(p + "norm1", block=L, kind="memory", duration_s=t_norm, reads=[x])
        b.saved(
            p + "norm1.out",
            nbytes=act,
            producer=p + "norm1",
            category="elementwise",
            block=L,
            recompute_s=t_norm,
            rebuild_inputs=[x],
        )
        pre_rope = cfg.rope or cfg.qk_norm
        b.op(
            p + "qkv",
            block=L,
            kind="gemm",
            duration_s=t_qkv,
            flops=f_qkv,
            reads=[p + "norm1.out"],
            # The GEMM's output is one buffer: with QK-norm its q and k parts are the saved
            # qk.raw (allocated as the output), so only v is transient here.
            transient_bytes=(qkv_bytes - qk_bytes if cfg.qk_norm else qkv_bytes) if pre_rope else 0,
        )
        qkv_cost = t_qkv
        qkv_inputs = [p + "norm1.out"]
        if cfg.qk_norm:
            # QK-norm's backward needs its input: the raw q and k, rebuilt by the QKV GEMM.
            b.saved(
                p + "qk.raw",
                nbytes=qk_bytes,
                producer=p + "qkv",
                category="gemm_output",
                block=L,
                recompute_s=t_qkv,
                rebuild_inputs=[p + "norm1.out"],
            )
            b.op(
                p + "qknorm",
                block=L,
                kind="memory",
                duration_s=t_qknorm,
                reads=[p + "qk.raw"],
                transient_bytes=qkv_bytes,
            )
            qkv_cost += t_qknorm  # v comes straight from the GEMM: rebuild from norm1.out
        if cfg.rope:
            b.op(p + "rope", block=L, kind="memory", duration_s=t_rope, transient_bytes=qkv_bytes)
            qkv_cost += t_rope
        b.saved(
            p + "qkv.out",
            nbytes=qkv_bytes,
            producer=b._ops[-1].name,
            category="gemm_output",
            block=L,
            recompute_s=qkv_cost,
            rebuild_inputs=qkv_inputs,
        )
        b.op(
            p + "attn",
            block=L,
            kind="attention",
            duration_s=t_attn_f,
            flops=attn_flops,
            reads=[p + "qkv.out"],
        )
        lse = N * cfg.heads * 4  # FlashAttention's fp32 log-sum-exp rows
        b.saved(
            p + "attn.out",
            nbytes=N * qw * e + lse,
            producer=p + "attn",
            category="attention_output",
            block=L,
            recompute_s=t_attn_f,
            rebuild_inputs=[p + "qkv.out"],
        )
        b.op(
            p + "proj",
            block=L,
            kind="gemm",
            duration_s=t_proj,
            flops=f_proj,
            reads=[p + "attn.out"],
            transient_bytes=act,
        )
        resid_cost, resid_inputs = t_proj + t_add, [p + "attn.out", x]
        if cfg.dropout:
            b.op(p + "drop1", block=L, kind="memory", duration_s=t_drop, transient_bytes=2 * act)
            b.saved(
                p + "drop1.mask",
                nbytes=mask,
                producer=p + "drop1",
                category="dropout_mask",
                block=L,
                recompute_s=t_mask,
            )
            resid_cost += t_drop
            resid_inputs.append(p + "drop1.mask")
        b.op(p + "add1", block=L, kind="memory", duration_s=t_add, reads=[x], transient_bytes=act)
        r = p + "resid"
        b.saved(
            r,
            nbytes=act,
            producer=p + "add1",
            category="residual",
            block=L,
            recompute_s=resid_cost,
            rebuild_inputs=resid_inputs,
        )
        b.op(p + "norm2", block=L, kind="memory", duration_s=t_norm, reads=[r])
        b.saved(
            p + "norm2.out",
            nbytes=act,
            producer=p + "norm2",
            category="elementwise",
            block=L,
            recompute_s=t_norm,
            rebuild_inputs=[r],
        )
        if cfg.mlp_kind == "swiglu":
            for part in ("gate", "up"):
                b.op(
                    p + part,
                    block=L,
                    kind="gemm",
                    duration_s=t_fc1,
                    flops=f_fc1,
                    reads=[p + "norm2.out"],
                )
                b.saved(
                    p + part + ".out",
                    nbytes=mlp_act,
                    producer=p + part,
                    category="gemm_output",
                    block=L,
                    recompute_s=t_fc1,
                    rebuild_inputs=[p + "norm2.out"],
                )
            t_act = rf.memory(3 * mlp_act)
            b.op(
                p + "swiglu",
                block=L,
                kind="memory",
                duration_s=t_act,
                reads=[p + "gate.out", p + "up.out"],
            )
            b.saved(
                p + "swiglu.out",
                nbytes=mlp_act,
                producer=p + "swiglu",
                category="elementwise",
                block=L,
                recompute_s=t_act,
                rebuild_inputs=[p + "gate.out", p + "up.out"],
            )
            hidden_t = p + "swiglu.out"
        else:
            b.op(
                p + "fc1",
                block=L,
                kind="gemm",
                duration_s=t_fc1,
                flops=f_fc1,
                reads=[p + "norm2.out"],
            )
            b.saved(
                p + "fc1.out",
                nbytes=mlp_act,
                producer=p + "fc1",
                category="gemm_output",
                block=L,
                recompute_s=t_fc1,
                rebuild_inputs=[p + "norm2.out"],
            )
            t_act = rf.memory(2 * mlp_act)
            b.op(p + "gelu", block=L, kind="memory", duration_s=t_act, reads=[p + "fc1.out"])
            b.saved(
                p + "gelu.out",
                nbytes=mlp_act,
                producer=p + "gelu",
                category="elementwise",
                block=L,
                recompute_s=t_act,
                rebuild_inputs=[p + "fc1.out"],
            )
            hidden_t = p + "gelu.out"
        b.op(
            p + "fc2",
            block=L,
            kind="gemm",
            duration_s=t_fc2,
            flops=f_fc2,
            reads=[hidden_t],
            transient_bytes=act,
        )
        if cfg.dropout:
            b.op(p + "drop2", block=L, kind="memory", duration_s=t_drop, transient_bytes=2 * act)
            b.saved(
                p + "drop2.mask",
                nbytes=mask,
                producer=p + "drop2",
                category="dropout_mask",
                block=L,
                recompute_s=t_mask,
            )
        b.op(p + "add2", block=L, kind="memory", duration_s=t_add, reads=[r], transient_bytes=act)
        x = f"L{L + 1}.in" if L + 1 < cfg.layers else "head.in"
        b.saved(x, nbytes=act, producer=p + "add2", category="block_input", block=L + 1)

    # ---- head: final norm (+ BERT's MLM transform), vocabulary projection, loss ---------------
    H = cfg.layers  # the head is block H
    Nh = max(1, int(round(N * cfg.head_fraction)))
    act_h = Nh * h * e
    logits = Nh * cfg.vocab * e
    b.op("head.norm", block=H, kind="memory", duration_s=t_norm, reads=[x])
    b.saved(
        "head.norm.out",
        nbytes=act,
        producer="head.norm",
        category="elementwise",
        block=H,
        recompute_s=t_norm,
        rebuild_inputs=[x],
    )
    dec_in = "head.norm.out"
    head_ops: list[tuple[str, str, float, float, str]] = []  # (op, kind, time, flops, input)
    if cfg.mlm_transform:
        t_dense, f_dense = gemm_t(Nh, h, h)
        b.op("head.dense", block=H, kind="gemm", duration_s=t_dense, flops=f_dense, reads=[dec_in])
        b.saved(
            "head.dense.out",
            nbytes=act_h,
            producer="head.dense",
            category="gemm_output",
            block=H,
            recompute_s=t_dense,
            rebuild_inputs=[dec_in],
        )
        t_g = rf.memory(2 * act_h)
        b.op("head.gelu", block=H, kind="memory", duration_s=t_g, reads=["head.dense.out"])
        b.saved(
            "head.gelu.out",
            nbytes=act_h,
            producer="head.gelu",
            category="elementwise",
            block=H,
            recompute_s=t_g,
            rebuild_inputs=["head.dense.out"],
        )
        t_n = rf.memory(2 * act_h)
        b.op("head.norm2", block=H, kind="memory", duration_s=t_n, reads=["head.gelu.out"])
        b.saved(
            "head.norm2.out",
            nbytes=act_h,
            producer="head.norm2",
            category="elementwise",
            block=H,
            recompute_s=t_n,
            rebuild_inputs=["head.gelu.out"],
        )
        head_ops = [
            ("head.dense", "gemm", 2 * (t_dense - 5e-6) + 5e-6, 2 * f_dense, dec_in),
            ("head.gelu", "memory", rf.memory(3 * act_h), 0.0, "head.dense.out"),
            ("head.norm2", "memory", rf.memory(3 * act_h), 0.0, "head.gelu.out"),
        ]
        dec_in = "head.norm2.out"
    t_lm, f_lm = gemm_t(Nh, h, cfg.vocab)
    b.op("head.lm", block=H, kind="gemm", duration_s=t_lm, flops=f_lm, reads=[dec_in])
    b.saved(
        "head.logits",
        nbytes=logits,
        producer="head.lm",
        category="gemm_output",
        block=H,
        recompute_s=t_lm,
        rebuild_inputs=[dec_in],
    )
    t_loss = rf.memory(logits)
    b.op("head.loss", block=H, kind="loss", duration_s=t_loss, reads=["head.logits"])

    # ---- backward ---------------------------------------------------------------------------
    def bwd_gemm(t_fwd: float) -> float:
        return 2 * (t_fwd - 5e-6) + 5e-6  # dgrad + wgrad, one launch each counted once

    b.op(
        "head.loss.bwd",
        backward=True,
        block=H,
        kind="loss",
        duration_s=rf.memory(2 * logits),
        reads=["head.logits"],
        transient_bytes=logits,
    )
    b.op(
        "head.lm.bwd",
        backward=True,
        block=H,
        kind="gemm",
        duration_s=bwd_gemm(t_lm),
        flops=2 * f_lm,
        reads=[dec_in],
        transient_bytes=logits + act_h,
    )
    for op, kind, t, f, inp in reversed(head_ops):
        b.op(
            op + ".bwd",
            backward=True,
            block=H,
            kind=kind,
            duration_s=t,
            flops=f,
            reads=[inp],
            transient_bytes=2 * act_h,
        )
    b.op(
        "head.norm.bwd",
        backward=True,
        block=H,
        kind="memory",
        duration_s=t_norm_b,
        reads=[x],
        transient_bytes=2 * act,
    )

    for L in reversed(range(cfg.layers)):
        p = f"L{L}."
        xin = f"L{L}.in" if L > 0 else "emb.out"
        gs = act  # running residual-stream gradient, alive through the whole layer
        if cfg.dropout:
            b.op(
                p + "drop2.bwd",
                backward=True,
                block=L,
                kind="memory",
                duration_s=t_drop_b,
                reads=[p + "drop2.mask"],
                transient_bytes=gs + 2 * act,
            )
        if cfg.mlp_kind == "swiglu":
            b.op(
                p + "fc2.bwd",
                backward=True,
                block=L,
                kind="gemm",
                duration_s=bwd_gemm(t_fc2),
                flops=2 * f_fc2,
                reads=[p + "swiglu.out"],
                transient_bytes=gs + act + mlp_act,
            )
            b.op(
                p + "swiglu.bwd",
                backward=True,
                block=L,
                kind="memory",
                duration_s=rf.memory(5 * mlp_act),
                reads=[p + "gate.out", p + "up.out"],
                transient_bytes=gs + 3 * mlp_act,
            )
            # The SwiGLU backward makes the gate and up gradients at once; the gate gradient
            # waits in memory while the up GEMM's backward runs (its norm2.out gradient is then
            # accumulated into by the gate GEMM's backward).
            for part, pending in (("up", mlp_act), ("gate", 0)):
                b.op(
                    p + part + ".bwd",
                    backward=True,
                    block=L,
                    kind="gemm",
                    duration_s=bwd_gemm(t_fc1),
                    flops=2 * f_fc1,
                    reads=[p + "norm2.out"],
                    transient_bytes=gs + mlp_act + act + pending,
                )
        else:
            b.op(
                p + "fc2.bwd",
                backward=True,
                block=L,
                kind="gemm",
                duration_s=bwd_gemm(t_fc2),
                flops=2 * f_fc2,
                reads=[p + "gelu.out"],
                transient_bytes=gs + act + mlp_act,
            )
            b.op(
                p + "gelu.bwd",
                backward=True,
                block=L,
                kind="memory",
                duration_s=rf.memory(3 * mlp_act),
                reads=[p + "fc1.out"],
                transient_bytes=gs + 2 * mlp_act,
            )
            b.op(
                p + "fc1.bwd",
                backward=True,
                block=L,
                kind="gemm",
                duration_s=bwd_gemm(t_fc1),
                flops=2 * f_fc1,
                reads=[p + "norm2.out"],
                transient_bytes=gs + mlp_act + act,
            )
        b.op(
            p + "norm2.bwd",
            backward=True,
            block=L,
            kind="memory",
            duration_s=t_norm_b,
            reads=[p + "resid"],
            transient_bytes=gs + 2 * act,
        )
        if cfg.dropout:
            b.op(
                p + "drop1.bwd",
                backward=True,
                block=L,
                kind="memory",
                duration_s=t_drop_b,
                reads=[p + "drop1.mask"],
                transient_bytes=gs + 2 * act,
            )
        b.op(
            p + "proj.bwd",
            backward=True,
            block=L,
            kind="gemm",
            duration_s=bwd_gemm(t_proj),
            flops=2 * f_proj,
            reads=[p + "attn.out"],
            transient_bytes=gs + act + N * qw * e,
        )
        b.op(
            p + "attn.bwd",
            backward=True,
            block=L,
            kind="attention",
            duration_s=t_attn_b,
            flops=2 * attn_flops,
            reads=[p + "qkv.out", p + "attn.out"],
            transient_bytes=gs + N * qw * e + qkv_bytes,
        )
        if cfg.rope:
            b.op(
                p + "rope.bwd",
                backward=True,
                block=L,
                kind="memory",
                duration_s=t_rope,
                transient_bytes=gs + 2 * qkv_bytes,
            )
        if cfg.qk_norm:
            b.op(
                p + "qknorm.bwd",
                backward=True,
                block=L,
                kind="memory",
                duration_s=rf.memory(3 * qk_bytes),
                reads=[p + "qk.raw"],
                transient_bytes=gs + 2 * qkv_bytes,
            )
        b.op(
            p + "qkv.bwd",
            backward=True,
            block=L,
            kind="gemm",
            duration_s=bwd_gemm(t_qkv),
            flops=2 * f_qkv,
            reads=[p + "norm1.out"],
            transient_bytes=gs + qkv_bytes + act,
        )
        b.op(
            p + "norm1.bwd",
            backward=True,
            block=L,
            kind="memory",
            duration_s=t_norm_b,
            reads=[xin],
            transient_bytes=gs + 2 * act,
        )
    if cfg.dropout:
        b.op(
            "emb.drop.bwd",
            backward=True,
            block=-1,
            kind="memory",
            duration_s=t_drop_b,
            reads=["emb.mask"],
            transient_bytes=2 * act,
        )
    b.op(
        "emb.bwd",
        backward=True,
        block=-1,
        kind="embedding",
        duration_s=rf.memory(2 * act),
        transient_bytes=act,
    )
    return b.build()


def transformer_config(
    model: str, *, seq: int | None = None, batch: int | None = None, layers: int | None = None
) -> TransformerConfig:
    """A catalog configuration with optional overrides."""
    cfg = TRANSFORMERS[model]
    changes: dict[str, Any] = {}
    for key, v in (("seq", seq), ("batch", batch), ("layers", layers)):
        if v is not None:
            if v <= 0:
                raise ValueError(f"{key} must be positive, got {v}")
            changes[key] = v
    return replace(cfg, **changes) if changes else cfg


def checkpoint_bytes_per_layer(cfg: TransformerConfig, bytes_per_element: int = 2) -> int:
    """One layer's checkpoint (its input, batch x seq x hidden), bytes."""
    return cfg.tokens * cfg.hidden * bytes_per_element


def layer_forward_flops(cfg: TransformerConfig) -> float:
    """First-order forward FLOPs of one layer: 2 x tokens x weights + causal attention."""
    attn_width = cfg.heads * cfg.head_dim
    return 2.0 * cfg.tokens * cfg.layer_params() + 2.0 * cfg.batch * cfg.seq**2 * attn_width * (
        1 if cfg.causal else 2
    )
