"""Transformer model structure: chain-rule order, backward reads and gradient buffers."""

import pytest

from slackswap.instances.catalog import build_model
from slackswap.models.transformer import TRANSFORMERS
from slackswap.problem import Instance

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
