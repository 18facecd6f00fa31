"""Test-only torch models and variants for the profiler and runtime tests (the example
models themselves live in examples/models.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# The example models' factories as well: tests look a factory up by name in this module.
from examples.models import bert, cnn, gpt, vgg  # noqa: F401

# Tiny sizes for the runtime tests, which run each model under many plans.
TINY_GPT = dict(layers=2, hidden=64, heads=4, mlp=256, vocab=128, seq=32, batch=2)


def gpt_hooked():
    """The tiny GPT with a forward hook on each MLP's first projection keeping its output
    (``activations[name] = output``, as feature-extraction code does): a reference outside
    autograd that no plan can free."""
    model, inputs, loss_fn = gpt(**TINY_GPT)
    model.activations = {}  # type: ignore[assignment]

    def keep(name: str):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, args: object, output: torch.Tensor) -> None:
            model.activations[name] = output  # type: ignore[index, operator]

        return hook

    for i, blk in enumerate(model.blocks):
        blk.fc1.register_forward_hook(keep(f"blocks.{i}.fc1"))  # type: ignore[union-attr]
    return model, inputs, loss_fn


def gpt_dropout():
    """The GPT with dropout (p = 0.1) after attention and MLP, at tiny sizes."""
    return gpt(dropout=0.1, **TINY_GPT)


class TorchEncoder(nn.Module):
    """PyTorch's own nn.TransformerEncoder (with dropout) and a classification head."""

    def __init__(self, layers: int = 2, hidden: int = 64, heads: int = 4, mlp: int = 128):
        super().__init__()
        layer = nn.TransformerEncoderLayer(hidden, heads, mlp, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


def torch_encoder():
    """(model, (x,), loss_fn): nn.TransformerEncoder on random features, cross-entropy."""
    torch.manual_seed(0)
    model = TorchEncoder()
    x = torch.randn(2, 32, 64)
    labels = torch.randint(0, 10, (2,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


class TorchDecoder(nn.Module):
    """PyTorch's own nn.TransformerDecoderLayer (causal self-attention, cross-attention over a
    memory input, dropout) over token embeddings, and a vocabulary head."""

    def __init__(self, hidden: int = 32, heads: int = 2, mlp: int = 64, vocab: int = 64):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        layer = nn.TransformerDecoderLayer(hidden, heads, mlp, dropout=0.1, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, 1)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        return self.head(self.decoder(self.emb(tokens), memory, tgt_mask=mask, tgt_is_causal=True))


def torch_decoder():
    """(model, (tokens, memory), loss_fn): nn.TransformerDecoder, next-token cross-entropy.
    Its self-attention gets one tensor as query, key and value."""
    torch.manual_seed(0)
    model = TorchDecoder()
    tokens = torch.randint(0, 64, (2, 8))
    memory = torch.randn(2, 8, 32)
    targets = torch.roll(tokens, -1, dims=1)
    return (
        model,
        (tokens, memory),
        lambda logits: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)),
    )


def tiny_cnn():
    """The CNN at batch 2 on 16x16 images (runtime tests)."""
    return cnn(batch=2, image=16)


def not_a_module():
    return "model", torch.zeros(1)


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("shape mismatch in Broken.forward")


def broken():
    return Broken(), torch.zeros(2, 4)


class PlainCNN(nn.Module):
    """A stem, ``depth`` conv-BN-ReLU stages at one resolution, then pooling and a linear head:
    activations of many layers at full resolution dominate, as in a VGG-style network."""

    def __init__(self, depth: int = 8, width: int = 8, classes: int = 10):
        super().__init__()
        stages = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU(inplace=True)]
        for _ in range(depth):
            stages += [nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
        self.features = nn.Sequential(*stages)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def plain_cnn():
    """(model, images): the runtime tests' CNN, batch 2 on 16x16 images."""
    torch.manual_seed(0)
    return PlainCNN(), torch.randn(2, 3, 16, 16)


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: conv-BN-ReLU(in place), conv-BN, residual add, ReLU(in
    place)."""

    def __init__(self, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class TinyResNet(nn.Module):
    """A torchvision-like ResNet (no torchvision): stem conv-BN-ReLU, basic blocks, pooling and a
    linear head; its batch-norm layers update running statistics in every training step."""

    def __init__(self, width: int = 8, blocks: int = 3, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(*(BasicBlock(width) for _ in range(blocks)))
        self.fc = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer1(self.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _classifying(make: Callable[[], nn.Module]) -> tuple[Any, ...]:
    """(model, images, loss_fn): ``make()`` seeded, cross-entropy over 10 classes, batch 2 on
    16x16 images."""
    torch.manual_seed(0)
    model = make()
    images = torch.randn(2, 3, 16, 16)
    labels = torch.randint(0, 10, (2,))
    return model, (images,), lambda logits: F.cross_entropy(logits, labels)


def resnet():
    """(model, images, loss_fn): a tiny ResNet step with cross-entropy, batch 2 on 16x16."""
    return _classifying(TinyResNet)


class Fire(nn.Module):
    """SqueezeNet's Fire module: a 1x1 squeeze, then 1x1 and 3x3 expands, each with an in-place
    ReLU, concatenated: the block's output is made by its last operator."""

    def __init__(self, width: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Conv2d(width, squeeze, 1)
        self.squeeze_relu = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand, 1)
        self.expand1x1_relu = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand, 3, padding=1)
        self.expand3x3_relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_relu(self.squeeze(x))
        return torch.cat(
            [self.expand1x1_relu(self.expand1x1(x)), self.expand3x3_relu(self.expand3x3(x))], 1
        )


class FireNet(nn.Module):
    """A SqueezeNet-like network: a stem, Fire blocks each followed by a max-pooling (which
    saves the block's output, outside the block), then pooling and a linear head."""

    def __init__(self, width: int = 8, blocks: int = 2, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 2 * width, 3, padding=1)
        self.fires = nn.ModuleList(Fire(2 * width, width // 2, width) for _ in range(blocks))
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        for fire in self.fires:
            x = F.max_pool2d(fire(x), 2, ceil_mode=True)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def fire_net():
    """(model, images, loss_fn): `FireNet` with cross-entropy, batch 2 on 16x16 images."""
    return _classifying(FireNet)


class ScaledBlock(nn.Module):
    """A residual block whose output is its sum scaled by a parameter: the multiplication saves
    the sum, inside the block."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.fc(self.norm(x))) * self.scale


class PatchMerging(nn.Module):
    """Swin's patch merging in one dimension: the even and odd positions concatenated, read
    from the input through strided views (which save nothing), then normed and reduced."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(2 * width)
        self.reduce = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reduce(self.norm(torch.cat([x[:, 0::2], x[:, 1::2]], -1)))


class MergeNet(nn.Module):
    """`ScaledBlock`s, a `PatchMerging` after them and a linear head: a block's output reaches
    the step only through the merging's views, so the rebuild of the merging's concatenation
    reads the tensors the last block made."""

    def __init__(self, width: int = 16, blocks: int = 2, classes: int = 4):
        super().__init__()
        self.blocks = nn.Sequential(*(ScaledBlock(width) for _ in range(blocks)))
        self.merge = PatchMerging(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.merge(self.blocks(x)).mean(1))


def merge_net():
    """(model, tokens, loss_fn): `MergeNet` with cross-entropy over 4 classes, batch 2 of 8
    positions."""
    torch.manual_seed(0)
    model = MergeNet()
    x = torch.randn(2, 8, 16)
    labels = torch.randint(0, 4, (2,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


class TinyLSTM(nn.Module):
    """An embedding, a recurrent layer (``nn.LSTM`` or ``nn.GRU``) and a linear head."""

    def __init__(self, rnn: str = "lstm", layers: int = 1, bidirectional: bool = False):
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        cls = nn.LSTM if rnn == "lstm" else nn.GRU
        self.rnn = cls(16, 16, num_layers=layers, bidirectional=bidirectional, batch_first=True)
        self.head = nn.Linear(16 * (2 if bidirectional else 1), 32)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.emb(ids))
        return self.head(out)


def _rnn(rnn: str, layers: int, bidirectional: bool):
    torch.manual_seed(0)
    model = TinyLSTM(rnn, layers, bidirectional)
    ids = torch.randint(0, 32, (2, 8))
    targets = torch.randint(0, 32, (2, 8))

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, 32), targets.reshape(-1))

    return model, (ids,), loss_fn


# A replica of Hugging Face's GPT-2 (eager attention) in plain torch: Conv1D projections as
# ``addmm`` on a flattened input, the "gelu_new" tanh approximation written out op by op,
# explicit causal masking with ``where``, softmax, attention/residual/embedding dropout, and the
# LM head tied to the token embedding when asked.
GPT2_CONFIG = dict(layers=2, n_embd=128, heads=4, vocab=512, seq=64, batch=2)


class Conv1D(nn.Module):
    """GPT-2's projection: ``addmm(bias, x.view(-1, nx), weight)`` with weight (nx, nf)."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


class GPT2Attention(nn.Module):
    def __init__(self, n_embd: int, heads: int, seq: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.head_dim = n_embd // heads
        self.c_attn = Conv1D(3 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer(
            "bias", torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq),
            persistent=False,
        )  # fmt: skip

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(t.size()[:-1] + (self.heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_embd = x.size(-1)
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q, k, v = self._split(q), self._split(k), self._split(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        s = q.size(-2)
        causal = self.bias[:, :, :s, :s]
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(causal, w.to(w.dtype), mask_value)
        w = self.attn_dropout(nn.functional.softmax(w, dim=-1))
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        a = a.view(a.size()[:-2] + (n_embd,))
        return self.resid_dropout(self.c_proj(a))


class GPT2MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float):
        super().__init__()
        self.c_fc = Conv1D(4 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, 4 * n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(gelu_new(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, n_embd: int, heads: int, seq: int, dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = GPT2Attention(n_embd, heads, seq, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = GPT2MLP(n_embd, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LM(nn.Module):
    def __init__(
        self, layers: int, n_embd: int, heads: int, vocab: int, seq: int,
        dropout: float = 0.1, tied: bool = True,
    ):  # fmt: skip
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(seq, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(GPT2Block(n_embd, heads, seq, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def gpt2(tied: bool = True, **overrides: int):
    """(model, (ids,), loss_fn): a GPT-2-style causal-LM step, loss on shifted logits."""
    cfg = {**GPT2_CONFIG, **overrides}
    torch.manual_seed(0)
    model = GPT2LM(cfg["layers"], cfg["n_embd"], cfg["heads"], cfg["vocab"], cfg["seq"], tied=tied)
    ids = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]))

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        shift = logits[..., :-1, :].contiguous()
        labels = ids[..., 1:].contiguous()
        return F.cross_entropy(shift.view(-1, shift.size(-1)), labels.view(-1))

    return model, (ids,), loss_fn


def lstm():
    """(model, ids, loss_fn): a one-layer nn.LSTM language model step."""
    return _rnn("lstm", 1, False)


def lstm_deep():
    """A two-layer bidirectional nn.LSTM."""
    return _rnn("lstm", 2, True)


def gru():
    """A two-layer bidirectional nn.GRU."""
    return _rnn("gru", 2, True)


class CheckpointedMLP(nn.Module):
    """An input layer, then Linear-GELU-Linear blocks each run under ``torch.utils.checkpoint``
    (the input layer makes a reentrant block's input require grad, as it must)."""

    def __init__(self, reentrant: bool, blocks: int = 3, width: int = 32):
        super().__init__()
        self.reentrant = reentrant
        self.inp = nn.Linear(width, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
            for _ in range(blocks)
        )
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        x = self.inp(x)
        for blk in self.blocks:
            x = x + checkpoint(blk, x, use_reentrant=self.reentrant)
        return self.head(x)


def checkpoint_reentrant():
    """(model, x): blocks under torch.utils.checkpoint(use_reentrant=True)."""
    torch.manual_seed(0)
    return CheckpointedMLP(True), torch.randn(4, 32)


def checkpoint_nonreentrant():
    """(model, x): blocks under torch.utils.checkpoint(use_reentrant=False)."""
    torch.manual_seed(0)
    return CheckpointedMLP(False), torch.randn(4, 32)


class _TwoInputBlock(nn.Module):
    """A block of two inputs: ``x`` read first in the forward pass (so last in the backward
    pass), ``ctx`` (an encoder's output, as in a decoder's cross-attention) in the middle."""

    def __init__(self, width: int):
        super().__init__()
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        h = self.q(x) + self.k(ctx)
        return x + self.down(torch.nn.functional.gelu(self.up(h)))


class CrossCheckpointed(nn.Module):
    """An encoder, then two `_TwoInputBlock`s under ``torch.utils.checkpoint(use_reentrant=False)``
    (as a Hugging Face encoder-decoder with gradient checkpointing), each given the running
    hidden state and the encoder's output, then a head."""

    def __init__(self, width: int = 32, blocks: int = 2):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
        self.inp = nn.Linear(width, width)
        self.blocks = nn.ModuleList(_TwoInputBlock(width) for _ in range(blocks))
        self.head = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        ctx = self.enc(x)
        h = self.inp(x)
        for blk in self.blocks:
            h = checkpoint(blk, h, ctx, use_reentrant=False)
        return self.head(h)


def checkpoint_cross_inputs():
    """(model, x): non-reentrant checkpointed blocks of two inputs each."""
    torch.manual_seed(0)
    return CrossCheckpointed(), torch.randn(8, 32)


class ReentrantFirstBlock(nn.Module):
    """A reentrant-checkpointed block whose input requires grad without a layer of the model
    before it: the model's input (``x.requires_grad_()``, as the checkpoint's docs ask) or an
    embedding's output; then a head outside any checkpoint, whose activations a plan moves."""

    def __init__(self, embedding: bool, blocks: int = 2, width: int = 64):
        super().__init__()
        self.emb = nn.Embedding(128, width) if embedding else None
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
            for _ in range(blocks)
        )
        self.head = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        if self.emb is not None:
            x = self.emb(x)
        for blk in self.blocks:
            x = x + checkpoint(blk, x, use_reentrant=True)
        return self.head(x)


def checkpoint_input_grad():
    """(model, x): reentrant blocks on the model's input, a leaf that requires grad."""
    torch.manual_seed(0)
    return ReentrantFirstBlock(False), torch.randn(2, 16, 64).requires_grad_()


def checkpoint_embedding():
    """(model, ids, loss_fn): reentrant blocks on an embedding's output, a cross-entropy loss."""
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 16))
    targets = torch.randint(0, 8, (2, 16))
    return (
        ReentrantFirstBlock(True),
        ids,
        lambda out: F.cross_entropy(out.reshape(-1, 8), targets.reshape(-1)),
    )


class _RotatedLayer(nn.Module):
    """An MLP on its input turned by a rotary-style ``cos`` and ``sin``, given by keyword."""

    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor, *, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x * cos + x.flip(-1) * sin)))


class ReentrantClosure(nn.Module):
    """Reentrant-checkpointed layers that read a rotary ``cos`` and ``sin``, made once per
    step without grad, through a closure (``functools.partial`` keyword arguments, as Hugging
    Face's gradient checkpointing hands its layers their position embeddings): autograd saves
    them only in backward, when each checkpoint re-runs its layer. ``head_reads``: the head
    also multiplies by ``cos``, so autograd saves it in the forward pass too, and lets it go
    (the head's backward) before the checkpoints save it again."""

    def __init__(self, head_reads: bool, layers: int = 2, width: int = 32, reentrant: bool = True):
        super().__init__()
        self.head_reads = head_reads
        self.reentrant = reentrant
        self.emb = nn.Embedding(64, width)
        self.register_buffer("inv_freq", torch.linspace(0.1, 1.0, width))
        self.layers = nn.ModuleList(_RotatedLayer(width) for _ in range(layers))
        self.head = nn.Linear(width, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from functools import partial

        from torch.utils.checkpoint import checkpoint

        x = self.emb(ids)
        with torch.no_grad():
            angle = torch.arange(ids.shape[1], dtype=torch.float32)[:, None] * self.inv_freq
            cos, sin = angle.cos(), angle.sin()
        for layer in self.layers:
            x = x + checkpoint(partial(layer, cos=cos, sin=sin), x, use_reentrant=self.reentrant)
        out = self.head(x)
        return out * cos[:, :8] if self.head_reads else out


def checkpoint_closure():
    """(model, ids): reentrant layers reading ``cos`` and ``sin`` through a closure."""
    torch.manual_seed(0)
    return ReentrantClosure(False), torch.randint(0, 64, (2, 16))


def checkpoint_closure_head():
    """(model, ids): as `checkpoint_closure`, and the head saves ``cos`` in the forward pass."""
    torch.manual_seed(0)
    return ReentrantClosure(True), torch.randint(0, 64, (2, 16))


def checkpoint_closure_head_nonreentrant():
    """(model, ids): as `checkpoint_closure_head`, the layers under a non-reentrant checkpoint
    (whose function, and so the closure, goes with each layer's backward)."""
    torch.manual_seed(0)
    return ReentrantClosure(True, reentrant=False), torch.randint(0, 64, (2, 16))


class _CrossBlock(nn.Module):
    """A residual MLP on ``x`` gated by a projection of ``memory`` (cross-attention's inputs)."""

    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.cross = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x))) * torch.sigmoid(self.cross(memory))


class ReentrantCross(nn.Module):
    """A reentrant-checkpointed encoder, then a reentrant-checkpointed block given its output
    as a second argument (BART's decoder layer and the encoder's output): only that
    checkpoint saves it, and its node holds it (and the gradient handed to the node) while
    the block's backward runs as an inner backward pass, after the node's own last operator."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.emb = nn.Embedding(64, width)
        self.encoder = nn.Sequential(nn.Linear(width, 2 * width), nn.Tanh(),
                                     nn.Linear(2 * width, width))  # fmt: skip
        self.block = _CrossBlock(width)
        self.head = nn.Linear(width, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        x = self.emb(ids)
        memory = checkpoint(self.encoder, x, use_reentrant=True)
        x = checkpoint(self.block, x, memory, use_reentrant=True)  # the residual inside
        return self.head(x)


def checkpoint_cross():
    """(model, ids): a reentrant block given a checkpointed encoder's output as an argument."""
    torch.manual_seed(0)
    return ReentrantCross(), torch.randint(0, 64, (2, 16))


class SparseEmbeddingModel(nn.Module):
    """``nn.Embedding(sparse=True)`` (a sparse gradient), a hidden layer and a head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16, sparse=True)
        self.fc = nn.Linear(16, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.fc(self.emb(ids))).mean(dim=1))


def sparse_embedding():
    """(model, ids): a step whose embedding gets a sparse gradient."""
    torch.manual_seed(0)
    return SparseEmbeddingModel(), torch.randint(0, 64, (4, 6))


class FunctionalBatchNorm(nn.Module):
    """Batch-norm through ``F.batch_norm`` with running statistics that are plain tensor
    attributes, not registered buffers (as some hand-written layers keep them)."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.stats_mean = torch.zeros(width)
        self.stats_var = torch.ones(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(self.conv(x), self.stats_mean, self.stats_var, training=True)
        return self.conv2(torch.relu(y)).mean(dim=(2, 3))


def functional_batch_norm():
    """(model, images): F.batch_norm updating statistics the module does not register."""
    torch.manual_seed(0)
    return FunctionalBatchNorm(), torch.randn(2, 3, 8, 8)


def gpt2_untied():
    return gpt2(tied=False)
