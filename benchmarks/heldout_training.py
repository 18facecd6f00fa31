"""The training path on models nobody tuned it for (Hugging Face's, and PyTorch's own GRU and
LSTM): every static solver's plan, fast steps against unplanned training, bit for bit.

    .venv/bin/pip install transformers   # not a dependency of slackswap
    PYTHONPATH=src .venv/bin/python benchmarks/heldout_training.py
    PYTHONPATH=src .venv/bin/python benchmarks/heldout_training.py --models opt,gpt2 --steps 4
    PYTHONPATH=src .venv/bin/python benchmarks/heldout_training.py --autocast
    PYTHONPATH=src .venv/bin/python benchmarks/heldout_training.py --models gru,lstm  # torch only
    PYTHONPATH=src .venv/bin/python benchmarks/heldout_training.py --models llama --checkpointing reentrant

Per model (built from a small config, no weights downloaded, in training mode with the config's
dropout), profiled on one batch of token ids with next-token cross-entropy: each static solver
(`slackswap.solvers.REGISTRY`) at each budget (``--budgets``, fractions of P; a solver that
finds no plan there is run again at the smallest budget it reports), every distinct plan the
simulator finds feasible. Each plan trains ``--steps`` AdamW steps under `prepare` (the checked
first step, then fast ones), a new batch each step, against the same steps unplanned from the
same start and RNG seeds. Prints a Markdown row per plan: bitwise or not, whether the steps
after the first ran fast (`PlannedStep.fast`, else its ``reason``), the rebuilds per step and
the largest bytes a step went over its budget, and how far the checked first step's measured
peak (every operator's outputs) ended from the simulator's (the profile's memory model against
the real step: 0 when they agree). Exit status 1 when a plan's training differs or
raises. ``--autocast``: the profile and every step (forward and backward) inside
``torch.autocast("cpu", torch.bfloat16, cache_enabled=False)``. ``--checkpointing``: the Hugging
Face model's own ``gradient_checkpointing_enable`` (``torch.utils.checkpoint``, reentrant or
not) under each plan.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from slackswap.plan import Budget, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import prepare  # noqa: E402
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import run  # noqa: E402
from slackswap.solvers.registry import REGISTRY  # noqa: E402

BATCH, SEQ, VOCAB = 2, 16, 128
MODELS = ("gpt2", "llama", "bert", "opt", "gptneox", "distilbert", "bart", "mistral", "qwen2",
          "phi", "gptneo", "bloom", "roberta", "electra", "albert", "gemma", "falcon",
          "deberta", "gru", "lstm")  # fmt: skip


class LogitsOf(torch.nn.Module):
    """A Hugging Face model called on token ids alone, returning its logits."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=ids).logits  # type: ignore[no-any-return]


class RecurrentLM(torch.nn.Module):
    """PyTorch's own ``nn.GRU`` (bidirectional) or ``nn.LSTM`` (2 layers, dropout) over token
    embeddings, with a vocabulary head: no Hugging Face needed. On the CPU a GRU cell writes its
    gates in place into slices of one storage (``unsafe_chunk``)."""

    def __init__(self, cell: str):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 32)
        if cell == "gru":
            self.rnn: torch.nn.Module = torch.nn.GRU(32, 32, batch_first=True, bidirectional=True)
            width = 64
        else:
            self.rnn = torch.nn.LSTM(32, 32, num_layers=2, batch_first=True, dropout=0.1)
            width = 32
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(ids))[0])  # type: ignore[no-any-return]


def build(name: str) -> torch.nn.Module:
    """Model ``name`` from a small config (2 layers, or one encoder and one decoder layer;
    hidden 64, 4 heads)."""
    torch.manual_seed(0)
    if name in ("gru", "lstm"):
        model: torch.nn.Module = RecurrentLM(name)
        model.train()
        return model
    import transformers as hf

    small = dict(vocab_size=VOCAB, max_position_embeddings=64)
    makers: dict[str, Callable[[], Any]] = {
        "gpt2": lambda: hf.GPT2LMHeadModel(
            hf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
                          bos_token_id=0, eos_token_id=0)),  # fmt: skip
        "llama": lambda: hf.LlamaForCausalLM(
            hf.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=128, attention_dropout=0.1,
                           **small)),  # fmt: skip
        "bert": lambda: hf.BertForMaskedLM(
            hf.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                          intermediate_size=128, **small)),  # fmt: skip
        "opt": lambda: hf.OPTForCausalLM(
            hf.OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                         word_embed_proj_dim=64, **small)),  # fmt: skip
        "gptneox": lambda: hf.GPTNeoXForCausalLM(
            hf.GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                             intermediate_size=128, hidden_dropout=0.1, attention_dropout=0.1,
                             **small)),  # fmt: skip
        "distilbert": lambda: hf.DistilBertForMaskedLM(
            hf.DistilBertConfig(n_layers=2, dim=64, n_heads=4, hidden_dim=128, **small)),
        "bart": lambda: hf.BartForConditionalGeneration(
            hf.BartConfig(encoder_layers=1, decoder_layers=1, d_model=64,
                          encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=128, decoder_ffn_dim=128, **small)),
        "mistral": lambda: hf.MistralForCausalLM(
            hf.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=128, **small)),
        "qwen2": lambda: hf.Qwen2ForCausalLM(
            hf.Qwen2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=128, **small)),
        "phi": lambda: hf.PhiForCausalLM(
            hf.PhiConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                         intermediate_size=128, resid_pdrop=0.1, embd_pdrop=0.1, **small)),
        "gptneo": lambda: hf.GPTNeoForCausalLM(
            hf.GPTNeoConfig(num_layers=2, hidden_size=64, num_heads=4, window_size=8,
                            attention_types=[[["global", "local"], 1]], intermediate_size=128,
                            **small)),
        "bloom": lambda: hf.BloomForCausalLM(
            hf.BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=VOCAB,
                           hidden_dropout=0.1, attention_dropout=0.1)),
        "roberta": lambda: hf.RobertaForMaskedLM(
            hf.RobertaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                             intermediate_size=128, vocab_size=VOCAB, pad_token_id=1,
                             max_position_embeddings=80)),
        "electra": lambda: hf.ElectraForMaskedLM(
            hf.ElectraConfig(num_hidden_layers=2, hidden_size=64, embedding_size=32,
                             num_attention_heads=4, intermediate_size=128, **small)),
        "albert": lambda: hf.AlbertForMaskedLM(
            hf.AlbertConfig(num_hidden_layers=2, hidden_size=64, embedding_size=32,
                            num_attention_heads=4, intermediate_size=128, **small)),
        "gemma": lambda: hf.GemmaForCausalLM(
            hf.GemmaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                           num_key_value_heads=1, head_dim=16, intermediate_size=128, **small)),
        "falcon": lambda: hf.FalconForCausalLM(
            hf.FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                            vocab_size=VOCAB, hidden_dropout=0.1, attention_dropout=0.1)),
        "deberta": lambda: hf.DebertaV2ForMaskedLM(
            hf.DebertaV2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                               intermediate_size=128, **small)),
    }  # fmt: skip
    model = LogitsOf(makers[name]())
    model.train()
    return model


def batches(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (BATCH, SEQ), generator=g) for _ in range(n)]


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    targets = torch.roll(ids, -1, dims=1)
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))


#: The region the profile and each step run in (`--autocast`), else none.
REGION: Callable[[], AbstractContextManager[Any]] = nullcontext


def autocast_region() -> AbstractContextManager[Any]:
    return torch.autocast("cpu", torch.bfloat16, cache_enabled=False)


def train(model: torch.nn.Module, steps: int, plan: Plan | None = None,
          budget: Budget | None = None) -> tuple[list[torch.Tensor], Any, list[Any]]:  # fmt: skip
    """``steps`` AdamW steps on token batches (`train_on`)."""
    data = [(ids, ids) for ids in batches(steps)]
    return train_on(model, data, next_token_loss, plan, budget, region=REGION)


def train_on(
    model: torch.nn.Module,
    data: list[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    plan: Plan | None = None,
    budget: Budget | None = None,
    region: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> tuple[list[torch.Tensor], Any, list[Any]]:
    """An AdamW step per (input, target) of ``data`` on a copy of ``model`` (under ``plan``
    when given), the RNG seeded alike before each step: every tensor the run ends with
    (losses, parameters, buffers, optimizer state), the `PlannedStep` and each step's stats."""
    model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    planned = prepare(model, plan, budget) if plan is not None and budget is not None else None
    out: list[torch.Tensor] = []
    stats = []
    for k, (x, target) in enumerate(data):
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(100 + k)
        with region():
            if planned is None:
                loss = loss_fn(model(x), target)
                loss.backward()
            else:
                with planned.step() as st:
                    loss = loss_fn(model(x), target)
                    loss.backward()
                stats.append(st)
        out.append(loss.detach())
        opt.step()
    out += [p.detach().clone() for p in model.parameters()]
    out += [b.detach().clone() for b in model.buffers()]
    for p in model.parameters():
        out += [v.clone() for v in opt.state[p].values() if isinstance(v, torch.Tensor)]
    return out, planned, stats


def bitwise(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape
        and torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))
        for x, y in zip(a, b, strict=True)
    )  # fmt: skip


#: The header of `plan_row`'s table.
ROW_HEADER = (
    "| model | plan | bitwise | fast after step 1 | rebuilds per step | most over budget (B) "
    "| step 1: measured - simulated peak (B) |\n|---|---|---|---|---|---|---|"
)


def plan_row(name: str, label: str, same: bool, planned: Any, stats: list[Any]) -> str:
    """A Markdown row for one plan's run: bitwise or not, whether the steps after the first
    ran fast (else why not), the rebuilds per step, the most a step went over its budget, and
    how far the checked first step's measured peak ended from the simulator's."""
    fast = "yes" if planned.fast else f"no: {planned.reason}"
    rebuilds = " ".join(str(s.rebuilds) for s in stats)
    over = max(s.over_budget_bytes for s in stats)
    first = stats[0]
    gap = (first.measured_peak_bytes or 0) - first.simulated_peak_bytes
    return f"| {name} | {label} | {'yes' if same else 'NO'} | {fast} | {rebuilds} | {over} | {gap:+d} |"


def run_plans(
    name: str,
    plans: dict[str, tuple[Plan, Budget]],
    ref: list[torch.Tensor],
    train_plan: Callable[[Plan, Budget], tuple[list[torch.Tensor], Any, list[Any]]],
) -> int:
    """Train under each of ``plans`` (``train_plan(plan, budget)``, as `train_on` returns) and
    print its `plan_row` against the unplanned run's tensors ``ref`` (a row saying so when it
    raises); how many plans differ or raised."""
    failed = 0
    for label, (plan, budget) in plans.items():
        try:
            got, planned, stats = train_plan(plan, budget)
        except Exception as exc:  # a row for it, and the status says so
            failed += 1
            print(f"| {name} | {label} | raised {type(exc).__name__}: {exc} | | | | |")
            continue
        same = bitwise(got, ref)
        failed += not same
        print(plan_row(name, label, same, planned, stats))
    sys.stdout.flush()  # a model's rows show as they come
    return failed


def finished(failed: int) -> int:
    """Print how many plans differed or raised, last; the run's exit status (1 when any)."""
    print()
    print(f"{failed} plan(s) differ or raised")
    return 1 if failed else 0


def static_plans(inst: Any, budgets: list[float]) -> dict[str, tuple[Plan, Budget]]:
    """Every distinct feasible plan of each static solver at each budget (or, where it finds
    none, at the smallest budget it reports)."""
    out: dict[str, tuple[Plan, Budget]] = {}
    seen: set[bytes] = set()
    for b in budgets:
        for entry in REGISTRY:
            if not entry.tags.static_plan:
                continue
            budget = Budget.fraction(b)
            rec = run(inst, budget, entry.name, time_limit=0.5, find_min_budget=True)
            if rec.plan is None and rec.min_budget_bytes is not None:
                budget = Budget.fraction(max(b, rec.min_budget_bytes / inst.peak_bytes) * 1.001)
                rec = run(inst, budget, entry.name, time_limit=0.5, find_min_budget=False)
            if rec.plan is None:
                continue
            acts = np.asarray(rec.plan.actions)
            if acts.tobytes() in seen or not simulate(inst, acts, budget).feasible:
                continue
            seen.add(acts.tobytes())
            out[f"{entry.name} @ {budget}"] = (Plan(inst, acts), budget)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--budgets", default="0.6,0.4")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--autocast", action="store_true", help="bfloat16 autocast, no cache")
    ap.add_argument("--checkpointing", choices=("reentrant", "nonreentrant"),
                    help="the Hugging Face model's own gradient checkpointing")  # fmt: skip
    args = ap.parse_args()
    global REGION
    if args.autocast:
        REGION = autocast_region
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    failed = 0
    print(ROW_HEADER)
    for name in args.models.split(","):
        model = build(name)
        if args.checkpointing:
            inner = getattr(model, "inner", None)  # PyTorch's GRU and LSTM have none
            if not getattr(inner, "supports_gradient_checkpointing", False):
                print(f"| {name} | (no gradient checkpointing in Hugging Face's model) | | | | | |")
                continue
            reentrant = args.checkpointing == "reentrant"
            inner.gradient_checkpointing_enable(  # type: ignore[operator]
                gradient_checkpointing_kwargs={"use_reentrant": reentrant}
            )
            model.train()
        ids = batches(1)[0]
        try:
            ref, _, _ = train(model, args.steps)
        except RuntimeError as exc:  # torch's own step, no plan (LSTM under bfloat16 autocast
            # on a CPU whose oneDNN has no such primitive): nothing of slackswap's to try
            why = str(exc).splitlines()[0][:120]
            print(f"| {name} | (its own step raises here, with no plan: {why}) | | | | | |")
            continue
        with REGION():
            inst = profile_step(model, (ids,), lambda out, ids=ids: next_token_loss(out, ids))
        plans = static_plans(inst, [float(x) for x in args.budgets.split(",")])
        failed += run_plans(name, plans, ref,
                            lambda plan, budget, m=model: train(m, args.steps, plan, budget))  # fmt: skip
    return finished(failed)


if __name__ == "__main__":
    sys.exit(main())
