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

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from slackswap.instance import Instance
from slackswap.models.graph import GraphBuilder
from slackswap.models.hardware import get_gpu, get_link, hardware
from slackswap.models.registry import ModelBuilder, instance_name, register_model
from slackswap.models.roofline import Roofline


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


# ---- one training step as a list of steps ------------------------------------------------------
#
# Every workload is the same shape: an embedding block, ``cfg.layers`` layers, a head. Each block
# is a list of steps; a step is a forward operator, the tensors it saves for backward and its
# backward operator (named ``<op>.bwd``, same kind and block). The backward pass runs the steps
# in reverse, so one list fixes both passes. The architecture (`TransformerConfig`: norm,
# GeLU MLP or SwiGLU, grouped-query attention, QK-norm, RoPE, dropout, causal mask, BERT's
# MLM transform) only decides which steps a block has and their sizes.


@dataclass(frozen=True)
class _Op:
    """An operator to record (seconds, FLOPs, bytes)."""

    name: str
    kind: str
    duration_s: float
    flops: float = 0.0
    reads: tuple[str, ...] = ()
    transient_bytes: float = 0


@dataclass(frozen=True)
class _Backward:
    """The backward operator of a step (its name and kind follow the forward one)."""

    duration_s: float
    flops: float = 0.0
    reads: tuple[str, ...] = ()
    transient_bytes: float = 0


@dataclass(frozen=True)
class _Saved:
    """A tensor saved for backward by its step's operator (bytes, seconds)."""

    name: str
    nbytes: float
    category: str
    block: int
    recompute_s: float = math.inf
    rebuild_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Step:
    """A forward operator, what it saves, and its backward operator (None: it has none)."""

    block: int
    forward: _Op
    saved: tuple[_Saved, ...] = ()
    backward: _Backward | None = None


def _saving(
    block: int,
    op: _Op,
    nbytes: float,
    category: str,
    backward: _Backward,
    out: str | None = None,
) -> _Step:
    """``op`` and its output ``out`` (default ``<op>.out``), saved, rebuilt by rerunning ``op``
    on its inputs."""
    saved = _Saved(out or op.name + ".out", nbytes, category, block, op.duration_s, op.reads)
    return _Step(block, op, (saved,), backward)


def _gemm(rf: Roofline, e: int, m: int, k: int, n: int) -> tuple[float, float]:
    """Seconds and FLOPs of an (m x k) @ (k x n) GEMM with ``e``-byte elements."""
    flops = 2.0 * m * k * n
    return rf.gemm(flops, (m * k + k * n + m * n) * e), flops


def _bwd_gemm(t_fwd: float) -> float:
    """A GEMM's backward: dgrad + wgrad, twice the forward's work, one launch counted once."""
    return 2 * (t_fwd - 5e-6) + 5e-6


@dataclass(frozen=True)
class _Costs:
    """Sizes (bytes), FLOPs and operator times (seconds) of one workload's layers."""

    rf: Roofline
    e: int  # bytes per element
    act: int  # one residual-stream tensor (tokens x hidden)
    mask: int  # a dropout mask, one byte per element
    qkv_bytes: int  # the QKV GEMM's output
    qk_bytes: int  # its q and k parts
    attn_bytes: int  # attention output
    lse_bytes: int  # FlashAttention's fp32 log-sum-exp rows
    mlp_act: int  # one MLP-width activation
    attn_flops: float
    t_attn_f: float
    t_attn_b: float
    t_norm: float
    t_norm_b: float
    t_drop: float
    t_drop_b: float
    t_mask: float
    t_add: float
    t_qkv: float
    f_qkv: float
    t_proj: float
    f_proj: float
    t_fc1: float
    f_fc1: float
    t_fc2: float
    f_fc2: float
    t_rope: float
    t_qknorm: float


def _costs(cfg: TransformerConfig, rf: Roofline, e: int) -> _Costs:
    N, h, m = cfg.tokens, cfg.hidden, cfg.mlp
    qw, kvw = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim  # GQA: kv_heads <= heads
    act = N * h * e
    mask = N * h
    qk_bytes = N * (qw + kvw) * e
    attn_flops = 4.0 * cfg.batch * cfg.seq * cfg.seq * qw / (2 if cfg.causal else 1)

    t_qkv, f_qkv = _gemm(rf, e, N, h, qw + 2 * kvw)
    t_proj, f_proj = _gemm(rf, e, N, qw, h)
    t_fc1, f_fc1 = _gemm(rf, e, N, h, m)
    t_fc2, f_fc2 = _gemm(rf, e, N, m, h)
    return _Costs(
        rf=rf,
        e=e,
        act=act,
        mask=mask,
        qkv_bytes=N * (qw + 2 * kvw) * e,
        qk_bytes=qk_bytes,
        attn_bytes=N * qw * e,
        lse_bytes=N * cfg.heads * 4,
        mlp_act=N * m * e,
        attn_flops=attn_flops,
        t_attn_f=rf.attention(attn_flops, backward=False),
        t_attn_b=rf.attention(2 * attn_flops, backward=True),
        t_norm=rf.memory(2 * act),
        t_norm_b=rf.memory(5 * act),  # input, grad in/out, plus the residual-gradient accumulate
        t_drop=rf.memory(2 * act + mask),
        t_drop_b=rf.memory(2 * act + mask),
        t_mask=rf.memory(mask),  # regenerate a mask from the RNG state
        t_add=rf.memory(3 * act),
        t_qkv=t_qkv,
        f_qkv=f_qkv,
        t_proj=t_proj,
        f_proj=f_proj,
        t_fc1=t_fc1,
        f_fc1=f_fc1,
        t_fc2=t_fc2,
        f_fc2=f_fc2,
        t_rope=rf.memory(2 * N * (qw + kvw) * e),
        t_qknorm=rf.memory(2 * qk_bytes),
    )


def _embedding(cfg: TransformerConfig, c: _Costs) -> list[_Step]:
    t_emb, act = c.rf.memory(2 * c.act), c.act
    out = _Saved("emb.out", act, "block_input", 0)
    if not cfg.dropout:
        return [_Step(-1, _Op("emb", "embedding", t_emb), (out,), _Backward(t_emb, 0.0, (), act))]
    mask = _Saved("emb.mask", c.mask, "dropout_mask", -1, c.t_mask)
    return [
        _Step(-1, _Op("emb", "embedding", t_emb, 0.0, (), act), (), _Backward(t_emb, 0.0, (), act)),
        _Step(-1, _Op("emb.drop", "memory", c.t_drop, 0.0, (), act), (mask, out),
              _Backward(c.t_drop_b, 0.0, ("emb.mask",), 2 * act)),
    ]  # fmt: skip


def _dropout(L: int, name: str, c: _Costs) -> _Step:
    """A layer's dropout: its mask is saved, regenerated from the RNG state to recompute."""
    mask = _Saved(name + ".mask", c.mask, "dropout_mask", L, c.t_mask)
    back = _Backward(c.t_drop_b, 0.0, (name + ".mask",), 3 * c.act)  # with the residual grad
    return _Step(L, _Op(name, "memory", c.t_drop, 0.0, (), 2 * c.act), (mask,), back)


def _norm(L: int, name: str, x: str, c: _Costs, gs: int) -> _Step:
    """A pre-norm (LayerNorm or RMSNorm: the same bytes) of the residual stream ``x``."""
    back = _Backward(c.t_norm_b, 0.0, (x,), gs + 2 * c.act)
    return _saving(L, _Op(name, "memory", c.t_norm, 0.0, (x,)), c.act, "elementwise", back)


def _attention(cfg: TransformerConfig, L: int, x: str, c: _Costs) -> tuple[list[_Step], str]:
    """Norm, QKV (QK-norm and RoPE where the architecture has them), attention, output
    projection, dropout and residual add; returns the steps and the residual's name."""
    p, gs, act = f"L{L}.", c.act, c.act  # gs: the residual-stream gradient, alive in backward
    n1 = p + "norm1.out"
    steps = [_norm(L, p + "norm1", x, c, gs)]
    # The GEMM's output is one buffer: with QK-norm its q and k parts are the saved qk.raw
    # (allocated as the output), so only v is transient here.
    pre_rope = cfg.rope or cfg.qk_norm
    transient = (c.qkv_bytes - c.qk_bytes if cfg.qk_norm else c.qkv_bytes) if pre_rope else 0
    raw: tuple[_Saved, ...] = ()
    if cfg.qk_norm:  # QK-norm's backward needs its input: the raw q and k, rebuilt by the GEMM
        raw = (_Saved(p + "qk.raw", c.qk_bytes, "gemm_output", L, c.t_qkv, (n1,)),)
    qkv_back = _Backward(_bwd_gemm(c.t_qkv), 2 * c.f_qkv, (n1,), gs + c.qkv_bytes + act)
    chain = [_Step(L, _Op(p + "qkv", "gemm", c.t_qkv, c.f_qkv, (n1,), transient), raw, qkv_back)]
    qkv_cost = c.t_qkv
    if cfg.qk_norm:
        back = _Backward(c.rf.memory(3 * c.qk_bytes), 0.0, (p + "qk.raw",), gs + 2 * c.qkv_bytes)
        op = _Op(p + "qknorm", "memory", c.t_qknorm, 0.0, (p + "qk.raw",), c.qkv_bytes)
        chain.append(_Step(L, op, (), back))
        qkv_cost += c.t_qknorm  # v comes straight from the GEMM: rebuild from norm1.out
    if cfg.rope:
        back = _Backward(c.t_rope, 0.0, (), gs + 2 * c.qkv_bytes)
        chain.append(_Step(L, _Op(p + "rope", "memory", c.t_rope, 0.0, (), c.qkv_bytes), (), back))
        qkv_cost += c.t_rope
    qkv = p + "qkv.out"
    out = _Saved(qkv, c.qkv_bytes, "gemm_output", L, qkv_cost, (n1,))
    chain[-1] = replace(chain[-1], saved=(*chain[-1].saved, out))
    steps += chain
    a = p + "attn.out"
    back = _Backward(c.t_attn_b, 2 * c.attn_flops, (qkv, a), gs + c.attn_bytes + c.qkv_bytes)
    op = _Op(p + "attn", "attention", c.t_attn_f, c.attn_flops, (qkv,))
    steps.append(_saving(L, op, c.attn_bytes + c.lse_bytes, "attention_output", back))
    back = _Backward(_bwd_gemm(c.t_proj), 2 * c.f_proj, (a,), gs + act + c.attn_bytes)
    steps.append(_Step(L, _Op(p + "proj", "gemm", c.t_proj, c.f_proj, (a,), act), (), back))
    # the mid-block residual is rebuilt by the projection, dropout and add from saved tensors
    cost, inputs = c.t_proj + c.t_add, [a, x]
    if cfg.dropout:
        steps.append(_dropout(L, p + "drop1", c))
        cost, inputs = cost + c.t_drop, [*inputs, p + "drop1.mask"]
    r = p + "resid"
    resid = _Saved(r, act, "residual", L, cost, tuple(inputs))
    steps.append(_Step(L, _Op(p + "add1", "memory", c.t_add, 0.0, (x,), act), (resid,)))
    return steps, r


def _mlp(cfg: TransformerConfig, L: int, r: str, x_next: str, c: _Costs) -> list[_Step]:
    """Norm, the MLP (GeLU, or SwiGLU's gate and up), FC2, dropout and the residual add that
    makes the next block's input ``x_next``."""
    p, gs, act, m = f"L{L}.", c.act, c.act, c.mlp_act
    n2 = p + "norm2.out"
    steps = [_norm(L, p + "norm2", r, c, gs)]
    fc1_back = _Backward(_bwd_gemm(c.t_fc1), 2 * c.f_fc1, (n2,), gs + m + act)
    if cfg.mlp_kind == "swiglu":
        # The SwiGLU backward makes the gate and up gradients at once; the gate gradient waits
        # in memory while the up GEMM's backward runs (its norm2.out gradient is then
        # accumulated into by the gate GEMM's backward).
        for part, pending in (("gate", 0), ("up", m)):
            back = replace(fc1_back, transient_bytes=gs + m + act + pending)
            op = _Op(p + part, "gemm", c.t_fc1, c.f_fc1, (n2,))
            steps.append(_saving(L, op, m, "gemm_output", back))
        ins = (p + "gate.out", p + "up.out")
        back = _Backward(c.rf.memory(5 * m), 0.0, ins, gs + 3 * m)
        op = _Op(p + "swiglu", "memory", c.rf.memory(3 * m), 0.0, ins)
        steps.append(_saving(L, op, m, "elementwise", back))
    else:
        steps.append(_saving(L, _Op(p + "fc1", "gemm", c.t_fc1, c.f_fc1, (n2,)), m, "gemm_output",
                             fc1_back))  # fmt: skip
        back = _Backward(c.rf.memory(3 * m), 0.0, (p + "fc1.out",), gs + 2 * m)
        op = _Op(p + "gelu", "memory", c.rf.memory(2 * m), 0.0, (p + "fc1.out",))
        steps.append(_saving(L, op, m, "elementwise", back))
    hidden = steps[-1].saved[0].name
    back = _Backward(_bwd_gemm(c.t_fc2), 2 * c.f_fc2, (hidden,), gs + act + m)
    steps.append(_Step(L, _Op(p + "fc2", "gemm", c.t_fc2, c.f_fc2, (hidden,), act), (), back))
    if cfg.dropout:
        steps.append(_dropout(L, p + "drop2", c))
    out = _Saved(x_next, act, "block_input", L + 1)
    steps.append(_Step(L, _Op(p + "add2", "memory", c.t_add, 0.0, (r,), act), (out,)))
    return steps


def _head(cfg: TransformerConfig, x: str, c: _Costs) -> list[_Step]:
    """Final norm, BERT's MLM transform (dense, GeLU, LayerNorm) where the architecture has
    it, the vocabulary projection of the ``head_fraction`` of tokens, and the loss."""
    H = cfg.layers  # the head is block H
    Nh = max(1, int(round(cfg.tokens * cfg.head_fraction)))
    act_h = Nh * cfg.hidden * c.e
    logits = Nh * cfg.vocab * c.e
    steps = [_norm(H, "head.norm", x, c, 0)]
    dec_in = "head.norm.out"
    if cfg.mlm_transform:
        t_dense, f_dense = _gemm(c.rf, c.e, Nh, cfg.hidden, cfg.hidden)
        back = _Backward(_bwd_gemm(t_dense), 2 * f_dense, (dec_in,), 2 * act_h)
        steps.append(_saving(H, _Op("head.dense", "gemm", t_dense, f_dense, (dec_in,)), act_h,
                             "gemm_output", back))  # fmt: skip
        for name, inp in (("head.gelu", "head.dense.out"), ("head.norm2", "head.gelu.out")):
            back = _Backward(c.rf.memory(3 * act_h), 0.0, (inp,), 2 * act_h)
            op = _Op(name, "memory", c.rf.memory(2 * act_h), 0.0, (inp,))
            steps.append(_saving(H, op, act_h, "elementwise", back))
        dec_in = "head.norm2.out"
    t_lm, f_lm = _gemm(c.rf, c.e, Nh, cfg.hidden, cfg.vocab)
    back = _Backward(_bwd_gemm(t_lm), 2 * f_lm, (dec_in,), logits + act_h)
    op = _Op("head.lm", "gemm", t_lm, f_lm, (dec_in,))
    steps.append(_saving(H, op, logits, "gemm_output", back, out="head.logits"))
    back = _Backward(c.rf.memory(2 * logits), 0.0, ("head.logits",), logits)
    op = _Op("head.loss", "loss", c.rf.memory(logits), 0.0, ("head.logits",))
    steps.append(_Step(H, op, (), back))
    return steps


def _steps(cfg: TransformerConfig, rf: Roofline, bytes_per_element: int) -> list[_Step]:
    """The forward steps of one training step of ``cfg``, in order (the backward pass runs them
    in reverse): embedding, ``cfg.layers`` layers, head."""
    c = _costs(cfg, rf, bytes_per_element)
    steps = _embedding(cfg, c)
    x = "emb.out"
    for L in range(cfg.layers):
        attention, r = _attention(cfg, L, x, c)
        x_next = f"L{L + 1}.in" if L + 1 < cfg.layers else "head.in"
        steps += attention + _mlp(cfg, L, r, x_next, c)
        x = x_next
    return steps + _head(cfg, x, c)


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
    meta: dict[str, Any] = {
        "model": cfg.name,
        "config": asdict(cfg),
        "gpu": g.key,
        "link": hw.link,
        "builder": "transformer",
    }
    b = GraphBuilder(name or _default_name(cfg, g.key, hw.link, hw.link_bw_Bps), hw, meta)
    steps = _steps(cfg, Roofline(g), g.bytes_per_element)
    for s in steps:
        f = s.forward
        b.op(f.name, block=s.block, kind=f.kind, duration_s=f.duration_s, flops=f.flops,
             reads=f.reads, transient_bytes=f.transient_bytes)  # fmt: skip
        for t in s.saved:
            b.saved(t.name, nbytes=t.nbytes, producer=f.name, category=t.category, block=t.block,
                    recompute_s=t.recompute_s, rebuild_inputs=t.rebuild_inputs)  # fmt: skip
    for s in reversed(steps):
        if s.backward is not None:
            k = s.backward
            b.op(s.forward.name + ".bwd", backward=True, block=s.block, kind=s.forward.kind,
                 duration_s=k.duration_s, flops=k.flops, reads=k.reads,
                 transient_bytes=k.transient_bytes)  # fmt: skip
    return b.build()


def _default_name(cfg: TransformerConfig, gpu: str, link: str, link_bw_Bps: float) -> str:
    """The catalog name: ``MODEL@GPU-LINK`` plus each of layers, seq, batch and link bandwidth
    that differs from the catalog configuration and the link's own figure."""
    base = TRANSFORMERS.get(cfg.name)

    def changed(key: str) -> int | None:
        v = getattr(cfg, key)
        return None if base is not None and getattr(base, key) == v else v

    bw = None if link_bw_Bps == get_link(link).bw_Bps else link_bw_Bps
    return instance_name(
        cfg.name, gpu, link, layers=changed("layers"), seq=changed("seq"),
        batch=changed("batch"), link_bw_Bps=bw,
    )  # fmt: skip


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


def _catalog_builder(model: str) -> ModelBuilder:
    """The catalog's builder of ``model`` (`slackswap.models.registry.ModelBuilder`)."""

    def build(
        gpu: str,
        link: str | None,
        *,
        seq: int | None,
        batch: int | None,
        layers: int | None,
        link_bw_Bps: float | None,
        name: str | None,
    ) -> Instance:
        cfg = transformer_config(model, seq=seq, batch=batch, layers=layers)
        return build_transformer(cfg, gpu, link, name=name, link_bw_Bps=link_bw_Bps)

    return build


for _name in TRANSFORMERS:
    register_model(_name, _catalog_builder(_name), "transformer (models/transformer.py)")
