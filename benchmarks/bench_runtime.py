"""The training path (`slackswap.runtime.prepare`) against PyTorch's own tools, CPU and GPU.

CPU half, for the tests' GPT (with dropout), PyTorch's ``nn.TransformerEncoder`` and a CNN with
batch-norm (`tests/support/profiling_factories.py`, at the sizes below): the median wall time of one
forward and backward (``--repeat`` steps, after the plan's checked first step and one warm-up)
unplanned; under the training path with a keep-all plan; ``torch.autograd.graph.save_on_cpu``
and the training path with every saved tensor swapped; ``torch.utils.checkpoint`` (non-reentrant)
on the profiled blocks and the training path recomputing what those blocks make; SlackSwap at
50% of P; the checked path (``apply``, every step checked operator by operator) with keep-all,
for scale; and saved-tensor hooks that copy each tensor out when packed and back when unpacked
(``copy-out-and-back hooks``: the least a swap does on a CPU, all-swap's yardstick); and hooks
that check each saved tensor's shape, dtype and storage size and count its storage's bytes
until it is freed (``counting hooks``, `CountingHooks`: the least a hook that measures the step
does, keep-all's yardstick). A held-out
``nn.TransformerDecoder`` (`HeldOutDecoder`) is the fourth model. "us/op over unplanned": the
time above the unplanned step per operator of the profile; "packs": the saved tensors the
training path's hooks see per step (autograd's saves, one per saved tensor a node keeps);
"us/pack in hooks": the time inside the hooks per pack, measured apart on the thread's CPU
clock (copies of swapped tensors and replayed operators included); "copy us/pack": the part
inside the copies to the host and back; "Python us/pack": the time in the hooks less the copies
and the torch operators a replay runs (each recorded operator's call), the Python the hooks run
per saved tensor (the timer's own cost included); "net": that less the timer's floor, the same
timer around saved-tensor hooks that do nothing, in the same step (2-6 us per pack on the
machines of the figures in benchmarks/README.md, where a warm loop gives 0.7-0.8 us a timed call).
A recomputation under ``torch.utils.checkpoint`` runs in checkpoint's own hooks, in none of
these columns: the step time holds it. GPU half (only with CUDA): the tests' default GPT profiled with ``--timing measured``, then keep-all, SlackSwap at 50% and
30% of P, offload-sync, offload-overlap, ``save_on_cpu`` and ``torch.utils.checkpoint`` on the
same blocks: measured step time and ``torch.cuda.max_memory_allocated`` above the step's start
beside the simulator's prediction.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_runtime.py --repeat 20
    PYTHONPATH=src .venv/bin/python benchmarks/bench_runtime.py --quick   # tiny sizes, 3 steps

``--warm`` times each CPU step right after an untimed run of the same step, with the collector
off for both (`interleaved`): a training loop's warm caches. By default each step is timed
after a full collection, which leaves the caches cold for the step's first Python.

``--quick`` (what ``benchmarks/gpu_check.sh --dry-run`` runs) checks that every case runs, at
the tests' tiny sizes; its figures mean nothing. ``--cpu-only`` / ``--gpu-only`` run one half.
"""

from __future__ import annotations

import argparse
import copy
import gc
import platform
import statistics
import sys
import time
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples import models as example_models  # noqa: E402
from slackswap.instance import Instance  # noqa: E402
from slackswap.plan import KEEP, RECOMP, SWAP, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import apply, prepare  # noqa: E402
from slackswap.runtime import copies as copies_module  # noqa: E402
from slackswap.runtime.copies import CopyEngine  # noqa: E402
from slackswap.runtime.training.fast import FastStep, pack_program  # noqa: E402
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import run  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402


class Case:
    """A model, its inputs and loss, and its profile."""

    def __init__(self, label: str, model: Any, inputs: tuple[Any, ...], loss_fn: Any,
                 **profile: Any) -> None:  # fmt: skip
        self.label = label
        self.model = model
        self.inputs = inputs
        self.loss_fn = loss_fn
        self.inst: Instance = profile_step(model, inputs, loss_fn, **profile)

    def blocks(self) -> list[torch.nn.Module]:
        return [self.model.get_submodule(b) for b in self.inst.meta["block_modules"]]


def _sum(out: torch.Tensor) -> torch.Tensor:
    return out.sum()


class HeldOutDecoder(torch.nn.Module):
    """PyTorch's ``nn.TransformerDecoder`` over token embeddings with a causal mask, reading a
    memory input, and a vocabulary head: a model the tests never tuned the runtime for."""

    def __init__(self, layers: int, hidden: int, heads: int, mlp: int, vocab: int):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        layer = torch.nn.TransformerDecoderLayer(hidden, heads, mlp, dropout=0.1,
                                                 batch_first=True)  # fmt: skip
        self.decoder = torch.nn.TransformerDecoder(layer, layers)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        x = self.decoder(self.emb(tokens), memory, tgt_mask=mask, tgt_is_causal=True)
        return self.head(x)


def decoder_case(quick: bool) -> Case:
    """`HeldOutDecoder` with next-token cross-entropy (the tests' sizes with ``quick``)."""
    torch.manual_seed(0)
    size = dict(layers=1, hidden=32, heads=2, mlp=64, vocab=64) if quick else dict(
        layers=2, hidden=128, heads=4, mlp=512, vocab=512)  # fmt: skip
    batch, seq = (2, 8) if quick else (4, 64)
    model = HeldOutDecoder(**size)
    tokens = torch.randint(0, size["vocab"], (batch, seq))
    memory = torch.randn(batch, seq, size["hidden"])
    targets = torch.roll(tokens, -1, dims=1)

    def loss(logits: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))  # fmt: skip

    return Case("nn.TransformerDecoder (held out)", model, (tokens, memory), loss)


def cpu_cases(quick: bool) -> list[Case]:
    if quick:
        m, x, lf = pf.gpt_dropout()
        enc, ex, el = pf.torch_encoder()
        cnn, img = pf.plain_cnn()
    else:
        m, x, lf = example_models.gpt(dropout=0.1, layers=2, hidden=128, heads=4, mlp=512, vocab=512,
                          seq=64, batch=4)  # fmt: skip
        torch.manual_seed(0)
        enc = pf.TorchEncoder(layers=2, hidden=128, heads=4, mlp=512)
        ex = (torch.randn(4, 64, 128),)
        labels = torch.randint(0, 10, (4,))

        def el(logits: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(logits, labels)

        torch.manual_seed(0)
        cnn, img = pf.PlainCNN(depth=8, width=16), torch.randn(4, 3, 32, 32)
    return [
        Case("GPT (tests', dropout 0.1)", m, x, lf),
        Case("nn.TransformerEncoder", enc, ex, el),
        Case("CNN with batch-norm", cnn, (img,), _sum),
        decoder_case(quick),
    ]


def _in_blocks(inst: Instance) -> np.ndarray:
    blocks = inst.meta["block_modules"]
    names = [inst.op_name[int(p)].rsplit("/", 1)[0] for p in inst.tensor_producer]
    return np.array([any(n == b or n.startswith(b + ".") for b in blocks) for n in names])


def uniform(inst: Instance, kind: str) -> Plan:
    n = inst.n_tensors
    recomputable = np.isfinite(inst.tensor_recompute_s)
    acts = {
        "keep": np.full(n, KEEP),
        "swap": np.full(n, SWAP),
        "blocks": np.where(recomputable & _in_blocks(inst), RECOMP, KEEP),
    }[kind]
    return Plan(inst, acts.astype(np.int8))


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def planned(case: Case, plan: Plan, budget: Any, **kw: Any) -> tuple[Callable[[], Any], Any]:
    """The training path's step context for ``plan`` (its checked first step already run)."""
    p = prepare(case.model, plan, budget, **kw)
    for q in case.model.parameters():
        q.grad = None
    with p.step():
        case.loss_fn(case.model(*case.inputs)).backward()
    return p.step, p


def checkpointed(case: Case) -> Any:
    """A copy of the model whose profiled blocks run under ``torch.utils.checkpoint``."""
    model = copy.deepcopy(case.model)
    for name in case.inst.meta["block_modules"]:
        block = model.get_submodule(name)
        fwd = block.forward

        def wrapped(*a: Any, _f: Any = fwd, **k: Any) -> Any:
            return checkpoint(_f, *a, use_reentrant=False, **k)

        block.forward = wrapped  # type: ignore[method-assign]
    return model


class _CheckpointedRun(torch.nn.Module):
    """Children of an ``nn.Sequential`` run as one ``torch.utils.checkpoint`` call."""

    def __init__(self, mods: list[torch.nn.Module]):
        super().__init__()
        self.mods = torch.nn.ModuleList(mods)

    def forward(self, x: Any) -> Any:
        def run(y: Any) -> Any:
            for m in self.mods:
                y = m(y)
            return y

        return checkpoint(run, x, use_reentrant=False)


def batch_norm_spans(case: Case) -> list[tuple[str, int, int]]:
    """Each profiled block that is a child of an ``nn.Sequential`` followed by a batch-norm,
    and whose tensors the block-recompute plan all recomputes, as (the ``nn.Sequential``'s
    path, the block's index, the batch-norm's): a convolution whose output its batch-norm
    saves, so ``torch.utils.checkpoint`` on the convolution alone would free nothing."""
    inst = case.inst
    acts = uniform(inst, "blocks").actions
    made_in = [inst.op_name[int(p)].rsplit("/", 1)[0] for p in inst.tensor_producer]
    out = []
    for name in inst.meta["block_modules"]:
        parent, _, child = name.rpartition(".")
        seq = case.model.get_submodule(parent)
        keys = list(seq._modules)
        if not isinstance(seq, torch.nn.Sequential) or child not in keys:
            continue
        k = keys.index(child)
        after = seq._modules[keys[k + 1]] if k + 1 < len(keys) else None
        made = [i for i, m in enumerate(made_in) if m == name or m.startswith(name + ".")]
        if (
            isinstance(after, torch.nn.modules.batchnorm._BatchNorm)
            and made
            and all(acts[i] == RECOMP for i in made)
        ):
            out.append((parent, k, k + 1))
    return out


def checkpointed_spans(case: Case, spans: list[tuple[str, int, int]]) -> Any:
    """A copy of the model in which each run of an ``nn.Sequential``'s children
    (`batch_norm_spans`) is one ``torch.utils.checkpoint`` call."""
    model = copy.deepcopy(case.model)
    for parent, i, j in spans:
        seq = model.get_submodule(parent)
        keys = list(seq._modules)
        mods = [seq._modules[k] for k in keys[i : j + 1]]
        seq._modules[keys[i]] = _CheckpointedRun(mods)  # type: ignore[assignment]
        for k in keys[i + 1 : j + 1]:
            seq._modules[k] = torch.nn.Identity()
    return model


def interleaved(
    case: Case,
    repeat: int,
    runs: list[tuple[str, Callable[[], Any], Any]],
    cuda: bool = False,
    warm: bool = False,
) -> dict[str, tuple[float, int]]:
    """Per label, (median seconds, highest max_memory_allocated above the step's start on CUDA)
    of one forward and backward inside ``ctx()`` on ``model`` (None: the case's). Every case
    runs once per round, ``repeat`` rounds after a warm-up one, so a change in the machine's
    load falls on all of them alike; each round starts one case further on, so every case
    takes every place in the round. Each timed step follows a full collection (``gc.collect``),
    so what an earlier case left is not collected inside it; that collection also leaves the
    CPU's caches cold, so the step's first Python (a planned step's set-up) runs several times
    slower than in a loop. ``warm``: the collection, then the same step once untimed, then the
    timed one, with the collector off for both (a loop's steady state, the caches holding the
    step's own code and objects)."""
    times: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    peaks: dict[str, list[int]] = {label: [] for label, _, _ in runs}

    def one_step(ctx: Callable[[], Any], model: torch.nn.Module) -> None:
        for p in model.parameters():
            p.grad = None
        with ctx():
            case.loss_fn(model(*case.inputs)).backward()

    for k in range(repeat + 1):
        # Each round starts at another case: a case's place in the round (what ran just before
        # it, how warm the caches are) moves its time by a percent or two, and a fixed order
        # would put that bias into the ratios.
        start = k % len(runs)
        for label, ctx, model in runs[start:] + runs[:start]:
            if label in SLOW and k > SLOW_ROUNDS:
                continue
            model = model if model is not None else case.model
            gc.collect()  # what an earlier case left is not collected inside this one's step
            try:
                if warm:
                    gc.disable()
                    one_step(ctx, model)
                for p in model.parameters():
                    p.grad = None
                _sync(cuda)
                base = torch.cuda.memory_allocated() if cuda else 0
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                with ctx():
                    case.loss_fn(model(*case.inputs)).backward()
                _sync(cuda)
                seconds = time.perf_counter() - t0
            finally:
                gc.enable()
            if k:
                times[label].append(seconds)
                if cuda:
                    peaks[label].append(torch.cuda.max_memory_allocated() - base)
    return {
        label: (statistics.median(times[label]), max(peaks[label], default=0))
        for label, _, _ in runs
    }


def hook_us_per_saved_tensor(case: Case, step: Callable[[], Any], planned: Any,
                             repeat: int) -> tuple[float, float, float]:  # fmt: skip
    """Medians over ``repeat`` steps, per saved tensor the training path's hooks see (its packs
    per step), in microseconds: the time inside the saved-tensor hooks (copies and replays
    included); the time inside the copies of swapped tensors to the host and back
    (``copy_to_host`` and `CopyEngine.fetch`); and the Python the hooks run, that time less
    the copies and the torch operators a replay runs (each recorded operator's call). Timed on
    the thread's CPU clock (``time.thread_time``), so the machine's load (time the thread
    waits for a core) does not count, as it would in a wall-clock figure."""
    spent = [0.0, 0.0, 0.0]  # in the hooks; in copies; in replayed operators
    timed = partial(_timed, spent=spent)

    learned = planned._learned
    records = learned.replay.records if learned is not None and learned.replay else {}
    funcs = {p: rec.func for p, rec in records.items()}
    fast = FastStep
    pack, unpack, fetch = fast._pack, fast._unpack, CopyEngine.fetch
    to_host = copies_module.copy_to_host
    hooks, copies, python = [], [], []
    fast._pack, fast._unpack = timed(pack, 0), timed(unpack, 0)  # type: ignore[method-assign]
    CopyEngine.fetch = timed(fetch, 1)  # type: ignore[method-assign]
    copies_module.copy_to_host = timed(to_host, 1)
    for p, rec in records.items():
        rec.func = timed(funcs[p], 2)
    try:
        for _ in range(repeat):
            spent[0] = spent[1] = spent[2] = 0.0
            for q in case.model.parameters():
                q.grad = None
            gc.collect()
            with step():
                case.loss_fn(case.model(*case.inputs)).backward()
            hooks.append(spent[0])
            copies.append(spent[1])
            python.append(spent[0] - spent[1] - spent[2])
    finally:
        fast._pack, fast._unpack = pack, unpack  # type: ignore[method-assign]
        CopyEngine.fetch = fetch  # type: ignore[method-assign]
        copies_module.copy_to_host = to_host
        for p, rec in records.items():
            rec.func = funcs[p]
    n = max(len(learned.expected) if learned is not None else 0, 1)
    return (statistics.median(hooks) / n * 1e6, statistics.median(copies) / n * 1e6,
            statistics.median(python) / n * 1e6)  # fmt: skip


def _timed(f: Callable[..., Any], k: int, spent: list[float]) -> Callable[..., Any]:
    """``f``, adding the thread CPU time each call takes to ``spent[k]``."""

    def wrapper(*a: Any, **kw: Any) -> Any:
        t0 = time.thread_time()
        try:
            return f(*a, **kw)
        finally:
            spent[k] += time.thread_time() - t0

    if hasattr(f, "_schema"):  # an operator: a rebuild program reads what it returns
        wrapper._schema = f._schema  # type: ignore[attr-defined]
    return wrapper


def timer_floor_us_per_pack(case: Case, repeat: int) -> float:
    """What the timer costs inside a step, per pack: the median over ``repeat`` steps of the
    time `hook_us_per_saved_tensor`'s timer measures in saved-tensor hooks that do nothing
    (pack and unpack hand the tensor back), per pack. Measured in the step itself, between the
    model's operators (cold caches), where `timer_us_per_call`'s warm loop measures less; the
    "Python us/pack" column includes it, the "net" column does not."""
    spent = [0.0]

    def same(t: Any) -> Any:
        return t

    pack, unpack = _timed(same, 0, spent), _timed(same, 0, spent)
    packs = [0]

    def counted(t: Any) -> Any:
        packs[0] += 1
        return pack(t)

    per_pack = []
    for _ in range(repeat):
        spent[0], packs[0] = 0.0, 0
        for q in case.model.parameters():
            q.grad = None
        gc.collect()
        with torch.autograd.graph.saved_tensors_hooks(counted, unpack):
            case.loss_fn(case.model(*case.inputs)).backward()
        per_pack.append(spent[0] / max(packs[0], 1) * 1e6)
    return statistics.median(per_pack)


def timer_us_per_call(calls: int = 20000) -> float:
    """What `hook_us_per_saved_tensor`'s timer adds to the time it measures per timed call, in
    microseconds: its own clock readings and wrapper around a call that does nothing, on the
    same thread CPU clock (the least of five tries: a warm cache, so at most what it adds in a
    step). Printed beside the table: the "Python us/pack" column includes it (about two timed
    calls per pack, a pack and an unpack, and one more per copy timed inside them)."""
    spent = [0.0]

    def nothing(h: Any) -> Any:
        return h

    wrapper = _timed(nothing, 0, spent)
    best = float("inf")
    for _ in range(5):
        spent[0] = 0.0
        for _ in range(calls):
            wrapper(None)
        best = min(best, spent[0] / calls * 1e6)
    return best


def copy_out_and_back() -> Any:
    """Saved-tensor hooks that copy each saved tensor out when packed and back when unpacked:
    the least a swap does on a CPU (the all-swap plan's baseline)."""

    def pack(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()

    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t.clone()

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


class CountingHooks:
    """Saved-tensor hooks that check each saved tensor's shape, dtype and storage size against
    ``expected`` (per pack, in order: shape, dtype, storage bytes or -1 for a tensor whose
    storage is not counted) and count its storage's bytes from its pack until it is freed (a
    weak reference on the storage, taken off in its callback), with the peak; the unpack hands
    the tensor back. The least a hook that measures the step does: keep-all's yardstick beside
    the unpatched step. A fresh object per step (``CountingHooks(expected)`` is the context)."""

    def __init__(self, expected: list[tuple[Any, Any, int]]):
        self.expected = expected
        self.pos = self.live_bytes = self.peak_bytes = 0
        #: id of each storage counted -> a weak reference to it (kept here: a dead reference
        #: calls back no more), which knows that id and the storage's bytes.
        self.alive: dict[int, _StorageRef] = {}

    def __enter__(self) -> CountingHooks:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, _same)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    def _gone(self, ref: _StorageRef) -> None:
        del self.alive[ref.key]
        self.live_bytes -= ref.nbytes

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        k = self.pos
        self.pos = k + 1
        shape, dtype, nbytes = self.expected[k]
        if t.shape != shape or t.dtype != dtype:
            raise RuntimeError(f"pack {k}: not the profiled step")
        if nbytes >= 0:
            storage = t.untyped_storage()
            if storage.nbytes() != nbytes:
                raise RuntimeError(f"pack {k}: not the profiled step")
            key = id(storage)
            if key in self.alive:  # counted once, as the step's tracker does
                return t
            ref = self.alive[key] = _StorageRef(storage, self._gone)
            ref.key, ref.nbytes = key, nbytes
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return t


class _StorageRef(weakref.ref):  # type: ignore[type-arg]
    __slots__ = ("key", "nbytes")
    key: int
    nbytes: int


def _same(t: Any) -> Any:
    return t


def counted_packs(learned: Any) -> list[tuple[Any, Any, int]]:
    """What `CountingHooks` checks per pack, from what a plan's first step learned: the fast
    step's own shape, dtype and storage bytes (-1: not counted) of each pack, in order."""
    program = learned.program or pack_program(learned)
    return [(shape, dtype, nbytes) for shape, dtype, nbytes, *_ in program]


#: `CountingHooks`: keep-all's yardstick beside the unplanned step (hooks cannot cost less and
#: still measure the step).
COUNT_HOOKS = "counting hooks"


#: Cases timed in the first `SLOW_ROUNDS` rounds only (for scale, not a target).
SLOW = {"keep-all, checked path (apply)"}
SLOW_ROUNDS = 5


#: ``torch.utils.checkpoint`` on each profiled block with the batch-norm that saves its output
#: (`batch_norm_spans`), where the model has such blocks: what checkpoint needs to free a
#: convolution's output.
SPANS = "torch.utils.checkpoint on the blocks with their batch-norm"

#: Saved-tensor hooks that copy each tensor out and back (`copy_out_and_back`): the all-swap
#: plan's target is at most 1.10x this step.
COPY_HOOKS = "copy-out-and-back hooks"

#: (case, the case its time is compared with) of the CPU half, in the order printed.
CPU_ROWS = (
    ("unplanned", ""),
    ("keep-all, training path", "unplanned"),
    (COUNT_HOOKS, "unplanned"),
    ("keep-all, training path", COUNT_HOOKS),
    ("save_on_cpu", "unplanned"),
    (COPY_HOOKS, "unplanned"),
    ("all-swap, training path", COPY_HOOKS),
    ("all-swap, training path", "save_on_cpu"),
    ("torch.utils.checkpoint on the blocks", "unplanned"),
    ("recompute the blocks, training path", "torch.utils.checkpoint on the blocks"),
    (SPANS, "unplanned"),
    ("recompute the blocks, training path", SPANS),
    ("SlackSwap 50%, training path", "unplanned"),
    ("keep-all, checked path (apply)", "unplanned"),
)


def cpu_half(repeat: int, quick: bool, warm: bool = False) -> None:
    print(f"CPU ({platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads), median of {repeat} interleaved rounds"
          + (", each timed step after an untimed one of its own (--warm)" if warm else ""))  # fmt: skip
    print(f"(the hook timer adds {timer_us_per_call():.2f} us per timed call to what it times, "
          "measured now; the Python us/pack column includes it)")  # fmt: skip
    print()
    print("| model | ops | saved | case | median ms | ratio | vs | fast | us/op over unplanned | "
          "packs | us/pack in hooks | copy us/pack | Python us/pack | Python us/pack, net |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    floors: dict[str, float] = {}
    for case in cpu_cases(quick):
        inst = case.inst
        fast: dict[str, str] = {}
        cols: dict[str, tuple[str, str, str, str, str]] = {}
        floor = floors[case.label] = timer_floor_us_per_pack(case, repeat)
        runs: list[tuple[str, Callable[[], Any], Any]] = [("unplanned", nullcontext, None)]
        plans = [("keep-all, training path", uniform(inst, "keep"), 1.0),
                 ("all-swap, training path", uniform(inst, "swap"), 1.0),
                 ("recompute the blocks, training path", uniform(inst, "blocks"), 1.0)]  # fmt: skip
        ss = run(inst, 0.5, "slackswap", time_limit=2.0, find_min_budget=False)
        if ss.plan is not None:
            plans.append(("SlackSwap 50%, training path", ss.plan, 0.5))
        for label, plan, b in plans:
            step, p = planned(case, plan, b)
            if label == "keep-all, training path":
                keep_all = p
            runs.append((label, step, None))
            fast[label] = str(p.fast)
            packs = len(p._learned.expected) if p._learned is not None else 0
            us = hook_us_per_saved_tensor(case, step, p, repeat)
            cols[label] = (str(packs), f"{us[0]:.2f}", f"{us[1]:.2f}", f"{us[2]:.2f}",
                           f"{us[2] - floor:.2f}")  # fmt: skip
        # The keep-all step's checks and counts, in hooks of their own (its first step learned
        # them: a plan that keeps everything always runs fast).
        assert keep_all._learned is not None
        runs.append((COUNT_HOOKS, partial(CountingHooks, counted_packs(keep_all._learned)), None))
        runs.append(("save_on_cpu", torch.autograd.graph.save_on_cpu, None))
        runs.append((COPY_HOOKS, copy_out_and_back, None))
        runs.append(("torch.utils.checkpoint on the blocks", nullcontext, checkpointed(case)))
        spans = batch_norm_spans(case)
        if spans:
            runs.append((SPANS, nullcontext, checkpointed_spans(case, spans)))
        runs.append(("keep-all, checked path (apply)",
                     partial(apply, uniform(inst, "keep"), 1.0, model=case.model), None))  # fmt: skip
        fast["keep-all, checked path (apply)"] = "no"
        got = interleaved(case, repeat, runs, warm=warm)
        plain = got["unplanned"][0]
        head = f"| {case.label} | {inst.n_ops} | {inst.n_tensors} |"
        for label, vs in CPU_ROWS:
            if SPANS in (label, vs) and SPANS not in got:
                continue
            if label not in got:
                print(f"{head} {label}: no plan | | | | | | | | | | |")
                continue
            t = got[label][0]
            ratio = f"{t / got[vs][0]:.3f}" if vs else "1"
            per_op = f"{(t - plain) / inst.n_ops * 1e6:.1f}" if vs else "0"
            packs, in_hooks, copy_us, py, net = cols.get(label, ("-",) * 5)
            print(f"{head} {label} | {t * 1e3:.2f} | {ratio} | {vs or '-'} | "
                  f"{fast.get(label, '-')} | {per_op} | {packs} | {in_hooks} | {copy_us} | "
                  f"{py} | {net} |")  # fmt: skip
    print()
    print("The timer's floor (`timer_floor_us_per_pack`: hooks that do nothing, timed in the "
          "step; the net column is the Python column less it): "
          + ", ".join(f"{k} {v:.2f} us/pack" for k, v in floors.items()))  # fmt: skip


def gpu_half(repeat: int, quick: bool) -> None:
    model, inputs, loss_fn = example_models.gpt(**(pf.TINY_GPT if quick else {}))
    model = model.cuda()
    inputs = tuple(t.cuda() for t in inputs)
    targets = torch.roll(inputs[0], -1, dims=1)

    def loss_cuda(logits: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(
            logits.view(-1, logits.shape[-1]), targets.view(-1)
        )

    name = torch.cuda.get_device_name()
    gpu = "h100" if ("H100" in name or "H200" in name) else "a100"
    case = Case("GPT", model, inputs, loss_cuda, gpu=gpu, timing="measured")
    inst = case.inst
    print(f"GPU {name}: the tests' GPT, {inst.n_ops} operators, median of {repeat} steps")
    print()
    print("| case | budget | simulated ms | measured ms | simulated peak MB | "
          "max_memory_allocated MB | fast |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    cases: list[tuple[str, Plan, float, str | None]] = [
        ("keep-all", uniform(inst, "keep"), 1.0, None)
    ]
    for b in (0.5, 0.3):
        rec = run(inst, b, "slackswap", time_limit=5.0)
        if rec.plan is not None:
            cases.append((f"SlackSwap {b:.0%}", rec.plan, b, None))
    for solver in ("offload-sync", "offload-overlap"):
        rec = run(inst, 1.0, solver, find_min_budget=False)
        if rec.plan is not None:
            # offload-overlap's runtime prefetches per layer, which the live executor does not
            # follow: it runs (and is simulated) barrier-free.
            rt = "sync" if solver == "offload-sync" else "barrier-free"
            cases.append((solver, Plan(inst, rec.plan.actions, rt), 1.0, rt))
    cases.append(("recompute the blocks", uniform(inst, "blocks"), 1.0, None))
    runs: list[tuple[str, Callable[[], Any], Any]] = [("unplanned", nullcontext, None)]
    sims: dict[str, tuple[str, str, str, str]] = {}
    for label, plan, b, rt in cases:
        sim = simulate(inst, plan, b, runtime=rt or plan.runtime)
        try:
            step, p = planned(case, plan, b, runtime=rt)
        except Exception as exc:  # noqa: BLE001 - one row per case, whatever fails
            print(f"| {label} | {b:.0%} | {sim.step_s * 1e3:.3f} | refused: {exc} | | | |")
            continue
        runs.append((label, step, None))
        sims[label] = (f"{b:.0%}", f"{sim.step_s * 1e3:.3f}", f"{sim.peak_bytes / 1e6:.1f}",
                       str(p.fast))  # fmt: skip
    runs.append(("save_on_cpu (every tensor)",
                 lambda: torch.autograd.graph.save_on_cpu(pin_memory=True), None))  # fmt: skip
    runs.append(("torch.utils.checkpoint on the blocks", nullcontext, checkpointed(case)))
    got = interleaved(case, repeat, runs, cuda=True)
    for label, _, _ in runs:
        t, peak = got[label]
        b, sim_ms, sim_mb, fast = sims.get(label, ("-", "-", "-", "-"))
        print(f"| {label} | {b} | {sim_ms} | {t * 1e3:.3f} | {sim_mb} | {peak / 1e6:.1f} | "
              f"{fast} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="timed steps per case (median)")
    ap.add_argument("--quick", action="store_true", help="tiny models, 3 steps: a smoke run")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: on a shared machine more threads "
                    "oversubscribe the cores and every figure moves)")  # fmt: skip
    ap.add_argument("--warm", action="store_true",
                    help="CPU half: time each step right after an untimed run of the same "
                    "step, the collector off (`interleaved`): a loop's warm caches, where the "
                    "default times each step after a full collection")  # fmt: skip
    half = ap.add_mutually_exclusive_group()
    half.add_argument("--cpu-only", action="store_true")
    half.add_argument("--gpu-only", action="store_true")
    args = ap.parse_args()
    repeat = args.repeat or (3 if args.quick else 20)
    torch.set_num_threads(args.threads)
    if not args.gpu_only:
        cpu_half(repeat, args.quick, warm=args.warm)
    if args.cpu_only:
        return
    if torch.cuda.is_available():
        print()
        gpu_half(repeat, args.quick)
    else:
        print("\nno CUDA device: GPU half skipped")


if __name__ == "__main__":
    main()
