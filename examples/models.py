"""Example models for `slackswap profile` and `slackswap run` (the README's commands):
a small GPT, BERT, CNN and VGG, each a factory returning (model, inputs[, loss_fn]).

    slackswap profile examples/models.py:gpt -o mine.json
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# The GPT mirrors slackswap.models.transformer's GPT layer without dropout: token + position
# embedding, pre-norm layers (LayerNorm, fused QKV, causal SDPA, projection, residual add,
# LayerNorm, FC1, GeLU, FC2, residual add), final LayerNorm, vocabulary projection, cross-entropy.
GPT_CONFIG = dict(layers=2, hidden=256, heads=4, mlp=1024, vocab=1024, seq=256, batch=2)


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        # Dropout modules only when asked: p = 0 would still run the dropout operators.
        self.drop1 = nn.Dropout(dropout) if dropout else nn.Identity()
        self.drop2 = nn.Dropout(dropout) if dropout else nn.Identity()
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, mlp)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(mlp, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop1(self.proj(a.transpose(1, 2).reshape(b, s, h)))
        return x + self.drop2(self.fc2(self.act(self.fc1(self.norm2(x)))))


class TinyGPT(nn.Module):
    def __init__(
        self,
        layers: int,
        hidden: int,
        heads: int,
        mlp: int,
        vocab: int,
        seq: int,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, mlp, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.lm = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm(self.norm(x))


def gpt(dropout: float = 0.0, **overrides: int):
    """(model, (ids,), loss_fn): one causal-LM step with cross-entropy on shifted ids."""
    cfg = {**GPT_CONFIG, **overrides}
    torch.manual_seed(0)
    model = TinyGPT(
        cfg["layers"], cfg["hidden"], cfg["heads"], cfg["mlp"], cfg["vocab"], cfg["seq"], dropout
    )
    ids = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]))
    targets = torch.roll(ids, -1, dims=1)

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return model, (ids,), loss_fn


class BertLayer(nn.Module):
    """A post-norm BERT encoder layer with explicit attention (softmax, attention dropout)."""

    def __init__(self, hidden: int, heads: int, mlp: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, mlp)
        self.fc2 = nn.Linear(mlp, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        probs = self.drop(torch.softmax(q @ k.transpose(-1, -2) / d**0.5, dim=-1))
        a = (probs @ v).transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.drop(self.out(a)))
        return self.norm2(x + self.drop(self.fc2(F.gelu(self.fc1(x)))))


class TinyBert(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, mlp: int, vocab: int, seq: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, mlp, 0.1) for _ in range(layers))
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tok(ids) + self.pos(pos))
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def bert():
    """(model, (ids,), loss_fn): a masked-LM-style step of a tiny BERT encoder with dropout."""
    torch.manual_seed(0)
    model = TinyBert(layers=2, hidden=64, heads=4, mlp=256, vocab=128, seq=32)
    ids = torch.randint(0, 128, (2, 32))
    targets = torch.randint(0, 128, (2, 32))

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return model, (ids,), loss_fn


class ConvStage(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.bn(self.conv(x))))


class SmallCNN(nn.Module):
    def __init__(self, widths: tuple[int, ...] = (8, 16, 32), classes: int = 10, image: int = 32):
        super().__init__()
        chans = (3, *widths)
        self.stages = nn.Sequential(
            *(ConvStage(a, b) for a, b in zip(chans, chans[1:], strict=False))
        )
        side = image // 2 ** len(widths)
        self.head = nn.Linear(widths[-1] * side * side, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.stages(x), 1))


def cnn(batch: int = 4, image: int = 32):
    """(model, images): the default loss (sum of the logits) drives the step."""
    torch.manual_seed(0)
    return SmallCNN(image=image), torch.randn(batch, 3, image, image)


# A small VGG laid out as torchvision's (features: 3x3 convolutions with a bias, in-place ReLU,
# max-pool per stage; classifier: Linear, ReLU, Linear, ReLU, Linear), without dropout or the
# adaptive average pool, as slackswap.models.vgg builds it.
VGG_CONFIG = dict(stages=((4, 4), (8,)), fc=16, classes=5, image=8, batch=2)


class TinyVGG(nn.Module):
    def __init__(
        self, stages: tuple[tuple[int, ...], ...], fc: int, classes: int, image: int
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for widths in stages:
            for cout in widths:
                layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]
                cin = cout
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        side = image // 2 ** len(stages)
        self.classifier = nn.Sequential(
            nn.Linear(cin * side * side, fc),
            nn.ReLU(inplace=True),
            nn.Linear(fc, fc),
            nn.ReLU(inplace=True),
            nn.Linear(fc, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def vgg(**overrides: object):
    """(model, (images,), loss_fn): one classification step with cross-entropy."""
    cfg = {**VGG_CONFIG, **overrides}
    torch.manual_seed(0)
    model = TinyVGG(cfg["stages"], cfg["fc"], cfg["classes"], cfg["image"])
    images = torch.randn(cfg["batch"], 3, cfg["image"], cfg["image"])
    labels = torch.randint(0, cfg["classes"], (cfg["batch"],))

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels)

    return model, (images,), loss_fn
