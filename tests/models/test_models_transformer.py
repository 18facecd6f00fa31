"""Transformer model structure: chain-rule order, backward reads and gradient buffers."""

import pytest

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model
from slackswap.models.transformer import TRANSFORMERS

MODELS = ("bert-large", "gpt2-xl", "llama-7b", "qwen3-8b")


def small(model: str) -> Instance:
    return build_model(model, layers=3, seq=128, batch=2)


@pytest.mark.parametrize("model", MODELS)
def test_backward_is_the_reverse_of_forward(model: str) -> None:
    """Every backward operator belongs to a forward one, in exactly the reverse order."""
    inst = small(model)
    nf = inst.n_forward_ops
    fwd = list(inst.op_name[:nf])
    bwd = [n.removesuffix(".bwd") for n in inst.op_name[nf:]]
    assert all(n.endswith(".bwd") for n in inst.op_name[nf:])
    assert set(bwd) <= set(fwd)
    assert bwd == [n for n in reversed(fwd) if n in set(bwd)]


@pytest.mark.parametrize("model", MODELS)
def test_backward_reads_what_its_forward_operator_read_or_made(model: str) -> None:
    """Autograd saves an operator's inputs or outputs, so its backward reads nothing else; and
    a transformer layer's backward reads only its own layer's tensors (vDNN's unit)."""
    inst = small(model)
    nf = inst.n_forward_ops
    ptr, idx = inst.op_reads_csr
    pos = {n: i for i, n in enumerate(inst.op_name)}
    for j in range(nf, inst.n_ops):
        f = pos[inst.op_name[j].removesuffix(".bwd")]
        fwd_io = set(idx[ptr[f] : ptr[f + 1]]) | set((inst.tensor_producer == f).nonzero()[0])
        reads = set(idx[ptr[j] : ptr[j + 1]])
        assert reads <= fwd_io, inst.op_name[j]
        if 0 <= inst.op_layer[j] < TRANSFORMERS[model].layers and reads:
            assert set(inst.tensor_block[list(reads)]) == {inst.op_layer[j]}, inst.op_name[j]


def test_llama_swiglu_backward_holds_the_pending_gate_gradient() -> None:
    """The SwiGLU backward makes the gate and up gradients together; the gate gradient is alive
    while the up GEMM's backward runs, so that operator holds one more MLP-sized buffer."""
    cfg = TRANSFORMERS["llama-7b"]
    inst = small("llama-7b")
    pos = {n: i for i, n in enumerate(inst.op_name)}
    mlp_act = 128 * 2 * cfg.mlp * 2
    act = 128 * 2 * cfg.hidden * 2
    for L in range(3):
        p = f"L{L}."
        up, gate, swiglu = (
            inst.op_transient_bytes[pos[p + n]] for n in ("up.bwd", "gate.bwd", "swiglu.bwd")
        )
        assert pos[p + "swiglu.bwd"] < pos[p + "up.bwd"] < pos[p + "gate.bwd"]
        assert up == gate + mlp_act
        # running residual gradient + the gate gradient + the up gradient + the norm2.out gradient
        assert up == act + mlp_act + mlp_act + act
        assert swiglu == act + 3 * mlp_act


def test_qk_norm_gemm_output_is_counted_once() -> None:
    """With QK-norm the QKV GEMM's q and k are the saved qk.raw; the GEMM allocates its output
    once (qk.raw as a saved tensor, v as a transient), not q and k twice."""
    cfg = TRANSFORMERS["qwen3-8b"]
    inst = small("qwen3-8b")
    tokens, e = 128 * 2, 2
    qkv_bytes = tokens * (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim * e
    for L in range(3):
        j = list(inst.op_name).index(f"L{L}.qkv")
        produced = inst.tensor_bytes[inst.tensor_producer == j].sum()
        assert inst.op_transient_bytes[j] + produced == qkv_bytes
    # Llama (RoPE, no QK-norm): the whole pre-RoPE output is transient, nothing saved yet.
    inst = small("llama-7b")
    j = list(inst.op_name).index("L0.qkv")
    assert not (inst.tensor_producer == j).any()
    lcfg = TRANSFORMERS["llama-7b"]
    assert inst.op_transient_bytes[j] == tokens * 3 * lcfg.hidden * e


#: Content hashes of 2-layer instances (seq 128, batch 2) as the per-architecture builder made
#: them before it became one step list (commit 2cc3cfe): every architecture feature (MLM head,
#: dropout, SwiGLU, GQA, QK-norm, RoPE) on BF16 and FP32 GPUs. A deliberate model change
#: updates them; `benchmarks/check_transformer_instances.py` compares every catalog model and
#: hardware pair against another checkout.
PINNED_HASHES = {
    (
        "bert-large",
        "a100",
        None,
    ): "f421ab45fd5c725212d1c4dff7df4ab2ab79e924111a5b8f9fd48227dc74c8d3",
    (
        "bert-large",
        "h100",
        "c2c",
    ): "f3d1ba4449fc791ab6a2643387a711b2cc1c33befecd644a24aa20d52118b68d",
    (
        "bert-large",
        "titanx",
        "pcie3",
    ): "30bb23f36568100ef76aed1bd5e76a829e77bc0109abf426f247d75280cae5fc",
    ("gpt2-xl", "a100", None): "d162222076f9423007e70d3d63c66bbc22b938cb496af5b1a6980b02aad91c0b",
    ("gpt2-xl", "h100", "c2c"): "1164ff64ffe3e70bf0c0cf38f6c656002465f93999c1d4f56dbd82a7c5549713",
    (
        "gpt2-xl",
        "titanx",
        "pcie3",
    ): "498bd3971b43d9e9305d671c107cd223a82e9717498e772fe70003423fd10637",
    ("llama-7b", "a100", None): "2fb150b01bc069798036b78e408e55849ffa4b65e0a6a8ed934852859c65b215",
    ("llama-7b", "h100", "c2c"): "86fe79c6710d38bab5528dfd5f83703a5c1f9695e7674ec0bbcf844c83b39dc9",
    (
        "llama-7b",
        "titanx",
        "pcie3",
    ): "e12c498e4d1a56816d5230bcd5e32a7a32b4660f869f5e4b4d9b7fa72072b7f8",
    (
        "qwen3-1.7b",
        "a100",
        None,
    ): "032ae3ce1d93f94a292cdb0566f67b47a26b73219086b61352550eb543f3122f",
    (
        "qwen3-1.7b",
        "h100",
        "c2c",
    ): "7b93d592e6a9c60caaffcb94cc336473cb2700a3e1cc65e2671fd626cdc004af",
    (
        "qwen3-1.7b",
        "titanx",
        "pcie3",
    ): "92050a337c56db033c04b8f0a943f82d406bc23950a523a5ca3a3beefccd7a66",
    ("qwen3-8b", "a100", None): "5132c9d67ec47ef37372ec3d26a4abfe1a8f8c77d0f9b5a2c817e9d4213f84f2",
    ("qwen3-8b", "h100", "c2c"): "6d695eabae229dfbca7aa89127859279ea4441cccf2dc47508c0008bd011577e",
    (
        "qwen3-8b",
        "titanx",
        "pcie3",
    ): "de05eabbf6a2b0c6085eadfe3fa43d99e9c48a3795f5a973655c9fa354a7fe1b",
    ("llama-70b", "a100", None): "76b48376ea46e13bd6a60f1c379f52ef9f4f8eba0a648ccecaca639a1087a215",
    (
        "llama-70b",
        "h100",
        "c2c",
    ): "505b8065b13de5c8b560f22ff9d3c206e27e0cf587d00b5c0ef56c741e6194c1",
    (
        "llama-70b",
        "titanx",
        "pcie3",
    ): "519f1b4f1bc4eff6cb557cb18636aaae820ca63d31e29265060f26d6f79f9908",
}


@pytest.mark.parametrize(("model", "gpu", "link"), list(PINNED_HASHES))
def test_instances_are_the_pinned_ones(model: str, gpu: str, link: str | None) -> None:
    inst = build_model(model, gpu, link, layers=2, seq=128, batch=2)
    assert inst.content_hash == PINNED_HASHES[(model, gpu, link)]
