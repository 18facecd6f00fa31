"""Done-when check of issue 31 on models the tests never saw: a pre-norm nn.TransformerDecoder and a
ResNet-style CNN with batch-norm; every static solver's plan applied inside torch.compile and checked
against torch's own partitioner (recomputed operators, saved bytes, loss and gradients).

    PYTHONPATH=src python benchmarks/compile_unseen.py aot_eager 50% decoder,resnet
    PYTHONPATH=src python benchmarks/compile_unseen.py inductor 50% decoder,resnet slackswap,recompute-only
"""

import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from slackswap.compile.step import check_compiled, instance_for
from slackswap.plan import Budget
from slackswap.solvers import REGISTRY, run


class Decoder(nn.Module):
    def __init__(self, vocab=256, hidden=64, heads=4, layers=2, seq=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        layer = nn.TransformerDecoderLayer(
            hidden, heads, 4 * hidden, dropout=0.0, batch_first=True, norm_first=True
        )
        self.dec = nn.TransformerDecoder(layer, layers)
        self.out = nn.Linear(hidden, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, ids, memory):
        x = self.emb(ids)
        return self.out(self.dec(x, memory, tgt_mask=self.mask, tgt_is_causal=True))


def decoder():
    torch.manual_seed(0)
    m = Decoder()
    ids = torch.randint(0, 256, (2, 32))
    memory = torch.randn(2, 16, 64)
    targets = torch.roll(ids, -1, 1)
    return m, (ids, memory), lambda y: F.cross_entropy(y.reshape(-1, 256), targets.reshape(-1))


class Basic(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.c1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(c_out)
        self.c2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(c_out)
        self.skip = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.layers = nn.Sequential(Basic(16, 16, 1), Basic(16, 32, 2), Basic(32, 32, 1))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


def resnet():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 16, 16)
    y = torch.randint(0, 10, (4,))
    return ResNetish(), (x,), lambda out: F.cross_entropy(out, y)


MODELS = {"decoder": decoder, "resnet": resnet}


def main() -> None:
    backend = sys.argv[1]
    budget = Budget.parse(sys.argv[2])
    names = sys.argv[3].split(",")
    solvers = (
        sys.argv[4].split(",")
        if len(sys.argv) > 4
        else [n for n in REGISTRY.names() if REGISTRY[n].tags.static_plan]
    )
    for name in names:
        model, inputs, loss_fn = MODELS[name]()
        inst = instance_for(model, inputs, backend, "a100", None)
        for s in solvers:
            t = time.time()
            rec = run(inst, budget, s, time_limit=10, seed=0)
            if rec.plan is None:
                print(
                    name,
                    s,
                    "no plan:",
                    rec.status,
                    (rec.error or rec.reason or "")[:80],
                    flush=True,
                )
                continue
            r = check_compiled(model, inputs, loss_fn, rec.plan, backend)
            print(
                name,
                s,
                dict(
                    keep=int((rec.plan.actions == 0).sum()),
                    swap=int((rec.plan.actions == 1).sum()),
                    recomp=int((rec.plan.actions == 2).sum()),
                ),
                "ops",
                r["recomputed_ops_planned"],
                r["recomputed_ops_measured"],
                "bytes",
                r["saved_bytes_planned"],
                r["saved_bytes_measured"],
                "off",
                r["offloaded_bytes_planned"],
                r["offloaded_bytes"],
                "bitwise",
                r["bitwise_identical"],
                "diff",
                r["grad_max_abs_diff"],
                "tol",
                r["tolerance"],
                "PASS" if r["checks_pass"] else "FAIL",
                f"{time.time() - t:.0f}s",
                flush=True,
            )


if __name__ == "__main__":
    main()
