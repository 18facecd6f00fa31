"""The Python a fast step's hooks run per saved tensor under SlackSwap at 50%: two source trees,
alternating, each in fresh processes.

    git worktree add /tmp/before <commit>
    PYTHONPATH=src .venv/bin/python benchmarks/bench_hook_python.py \
        --before /tmp/before/src --after src --rounds 2

Per round and per model of `bench_runtime`'s CPU half (the tests' GPT, ``nn.TransformerEncoder``,
the CNN with batch-norm, the held-out ``nn.TransformerDecoder``), each tree in a process of its
own: profile, plan with SlackSwap at 50% of P, run the checked first step, then
`bench_runtime.hook_us_per_saved_tensor` (``--tries`` times over ``--steps`` steps; its Python
column: thread CPU time in the hooks less the copies and the replayed operators' calls, the
timer included). One bench run per tree cannot tell a 10-20% change in that column from the
noise between processes; trees run one after the other per model can. Prints a Markdown row
per model: each tree's tries.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_hook_python.py --by-kind

instead splits one tree's Python per pack by what each hook call did (`by_kind`): a pack by
its place in the pack program (`slackswap.runtime.training.fast.pack_program`), an unpack by
whether it rebuilt the tensor, copied it back, found it resident or was handed the tensor
itself. Timed on ``time.perf_counter_ns`` (a few tens of ns a reading, where the thread CPU
clock costs a system call), the copies and the replayed operators' calls left out, so the
total is close to the "net of the timer" column.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_hook_python.py --by-function

splits it instead by the fast step's functions the hooks run through (`by_function`): each
one's exclusive time in the step (its own lines, the functions listed below it, the copies and
the replayed operators left out), per call and per step, where `--by-kind` says which hook
call it was. Every timed call adds its timer (about 0.3 us) to its caller's time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

MODELS = ("GPT (tests', dropout 0.1)", "nn.TransformerEncoder", "CNN with batch-norm",
          "nn.TransformerDecoder (held out)")  # fmt: skip


def slackswap_at_half(model: int) -> tuple[Any, Any, Any, Any]:
    """`bench_runtime`'s CPU case ``model`` (one thread), its SlackSwap plan at 50% of P, and
    the training path's step context after the checked first step: (the bench module, the
    case, the step context, the planned step)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_runtime as bench

    from slackswap.solvers import run

    torch.set_num_threads(1)
    case = bench.cpu_cases(False)[model]
    ss = run(case.inst, 0.5, "slackswap", time_limit=2.0, find_min_budget=False)
    assert ss.plan is not None, f"{case.label}: SlackSwap found no plan at 50% of P"
    step, planned = bench.planned(case, ss.plan, 0.5)
    return bench, case, step, planned


def child(model: int, tries: int, steps: int) -> None:
    """Measure one model with the slackswap on ``sys.path``; print the tries as JSON."""
    bench, case, step, planned = slackswap_at_half(model)
    got = [bench.hook_us_per_saved_tensor(case, step, planned, steps)[2] for _ in range(tries)]
    print(json.dumps(got))


def by_kind(model: int, steps: int) -> None:
    """Print, for one model under SlackSwap at 50%, the hooks' Python per step split by what
    each hook call did (see the module docstring)."""
    import time

    _, case, step, planned = slackswap_at_half(model)

    from slackswap.plan import RECOMP
    from slackswap.runtime import copies
    from slackswap.runtime.entry import Handle
    from slackswap.runtime.training import fast

    kinds = {fast.PASS: "pass", fast.HANDLE: "handle", fast.SWAP_FIRST: "swap, first",
             fast.RECOMP_FIRST: "recompute, first", fast.KEEP_FIRST: "keep, first",
             fast.KEEP_READ_FIRST: "keep (a rebuild reads it), first",
             fast.SWAP_HELD_FIRST: "swap, held on the device, first"}  # fmt: skip
    clock = time.perf_counter_ns
    spent: dict[str, int] = {}
    calls: dict[str, int] = {}
    left_out = [0]  # the copies' and replayed operators' time inside the hook call now

    def outside(f: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = clock()
            try:
                return f(*a, **kw)
            finally:
                left_out[0] += clock() - t0

        if hasattr(f, "_schema"):  # an operator: a rebuild program reads what it returns
            wrapper._schema = f._schema  # type: ignore[attr-defined]
        return wrapper

    def timed(kind: str, f: Any, *a: Any) -> Any:
        left_out[0] = 0
        t0 = clock()
        try:
            return f(*a)
        finally:
            spent[kind] = spent.get(kind, 0) + clock() - t0 - left_out[0]
            calls[kind] = calls.get(kind, 0) + 1

    pack, unpack = fast.FastStep._pack, fast.FastStep._unpack

    def pack_by_kind(self: Any, t: Any) -> Any:
        k = self.pos
        kind = kinds[self._program[k][4]] if k < len(self._program) else "beyond the program"
        return timed("pack: " + kind, pack, self, t)

    def unpack_by_kind(self: Any, h: Any) -> Any:
        if h.__class__ is not Handle:
            kind = "the tensor itself"
        elif h.entry.device is not None:
            kind = "resident"
        else:
            kind = "rebuilt" if h.entry.action == RECOMP else "copied back"
        return timed("unpack: " + kind, unpack, self, h)

    learned = planned._learned
    records = learned.replay.records if learned.replay is not None else {}
    funcs = {p: rec.func for p, rec in records.items()}
    fetch, to_host = copies.CopyEngine.fetch, copies.copy_to_host
    fast.FastStep._pack, fast.FastStep._unpack = pack_by_kind, unpack_by_kind  # type: ignore[method-assign]
    copies.CopyEngine.fetch = outside(fetch)  # type: ignore[method-assign]
    copies.copy_to_host = outside(to_host)
    for p, rec in records.items():
        rec.func = outside(funcs[p])
    try:
        _warm_then_timed_steps(case, step, steps, (spent, calls))
    finally:
        fast.FastStep._pack, fast.FastStep._unpack = pack, unpack  # type: ignore[method-assign]
        copies.CopyEngine.fetch = fetch  # type: ignore[method-assign]
        copies.copy_to_host = to_host
        for p, rec in records.items():
            rec.func = funcs[p]
    n = len(learned.expected)
    total = sum(spent.values()) / steps / 1e3
    print(f"{case.label}: {n} packs, {total:.1f} us of Python a step, {total / n:.2f} us per pack")
    _print_tally("hook call", spent, calls, steps)


def _warm_then_timed_steps(
    case: Any, step: Any, steps: int, tallies: tuple[dict[str, int], ...]
) -> None:
    """Three warm-up steps, then ``steps`` timed ones, the ``tallies`` emptied before each
    part (each step: gradients set to None, forward and backward under ``step()``)."""
    for warm in (True, False):
        for tally in tallies:
            tally.clear()
        for _ in range(3 if warm else steps):
            for q in case.model.parameters():
                q.grad = None
            with step():
                case.loss_fn(case.model(*case.inputs)).backward()


def _print_tally(what: str, spent: dict[str, int], calls: dict[str, int], steps: int) -> None:
    """A Markdown row per label, most time first: calls a step, us each, us a step."""
    print(f"| {what} | calls a step | us each | us a step |")
    print("|---|---|---|---|")
    for label in sorted(spent, key=lambda k: -spent[k]):
        each = spent[label] / calls[label] / 1e3
        print(
            f"| {label} | {calls[label] / steps:.1f} | {each:.2f} | "
            f"{spent[label] / steps / 1e3:.1f} |"
        )


class ExclusiveTimer:
    """Times wrapped functions exclusively: a call's time less that of the wrapped calls made
    inside it. ``spent`` and ``calls`` per label, in the clock's units; a call wrapped with the
    label "" is left out of every label's time, its own included (the copies, the operators)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.spent: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self._inner = [0]  # per wrapped call running now, the time of the wrapped calls in it

    def wrap(self, label: str, f: Any) -> Any:
        clock, inner, spent, calls = self.clock, self._inner, self.spent, self.calls

        def wrapper(*a: Any, **kw: Any) -> Any:
            inner.append(0)
            t0 = clock()
            try:
                return f(*a, **kw)
            finally:
                took = clock() - t0
                within = inner.pop()
                inner[-1] += took
                if label:
                    spent[label] = spent.get(label, 0) + took - within
                    calls[label] = calls.get(label, 0) + 1

        if hasattr(f, "_schema"):  # an operator: a rebuild program reads what it returns
            wrapper._schema = f._schema  # type: ignore[attr-defined]
        return wrapper


def by_function(model: int, steps: int) -> None:
    """Print, for one model under SlackSwap at 50%, the exclusive time per step of each of the
    fast step's functions the hooks run through (see the module docstring)."""
    import time

    _, case, step, planned = slackswap_at_half(model)

    from slackswap.runtime import copies, memory, rebuild, rebuild_program
    from slackswap.runtime.training import fast

    timer = ExclusiveTimer(time.perf_counter_ns)
    timed, spent, calls = timer.wrap, timer.spent, timer.calls

    # (owner, attribute, label): the label "" leaves the call out (the copies, the operators)
    patched = [
        (fast.FastStep, "_pack", "FastStep._pack"),
        (fast.FastStep, "_unpack", "FastStep._unpack"),
        (fast.FastStep, "_materialise", "FastStep._materialise"),
        (fast.FastStep, "_rebuild", "FastStep._rebuild"),
        (fast.FastStep, "_done", "FastStep._done"),
        (fast.FastStep, "_note_rng", "FastStep._note_rng"),
        (fast._Entries, "__missing__", "_Entries.__missing__ (a new Entry)"),
        (rebuild.Rebuilder, "rebuild", "Rebuilder.rebuild"),
        (rebuild_program.RebuildProgram, "run", "RebuildProgram.run (the written program)"),
        (rebuild_program.RebuildProgram, "holds", "RebuildProgram.holds"),
        (rebuild_program, "set_rng", "set_rng"),
        (memory.SavedBytesTracker, "add", "SavedBytesTracker.add"),
        (copies.CopyEngine, "offload", "CopyEngine.offload"),
        (copies.CopyEngine, "fetch", ""),
        (copies, "copy_to_host", ""),
    ]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patched]
    for (owner, attr, label), (_, _, f) in zip(patched, saved, strict=True):
        setattr(owner, attr, timed(label, f))
    learned = planned._learned
    records = learned.replay.records if learned.replay is not None else {}
    funcs = {p: rec.func for p, rec in records.items()}
    for p, rec in records.items():
        rec.func = timed("", funcs[p])
    try:
        _warm_then_timed_steps(case, step, steps, (spent, calls))
    finally:
        for owner, attr, f in saved:
            setattr(owner, attr, f)
        for p, rec in records.items():
            rec.func = funcs[p]
    n = len(learned.expected)
    total = sum(spent.values()) / steps / 1e3
    print(f"{case.label}: {n} packs, {total:.1f} us a step in these functions (timers included)")
    _print_tally("function (exclusive)", spent, calls, steps)


def measure(src: str, model: int, tries: int, steps: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    cmd = [sys.executable, __file__, "--child", str(model), "--tries", str(tries),
           "--steps", str(steps)]  # fmt: skip
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [float(x) for x in json.loads(out.strip().splitlines()[-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="the old tree's src folder")
    ap.add_argument("--after", default="src", help="the new tree's src folder (default: src)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--by-kind-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--by-kind", action="store_true",
                    help="split this tree's Python per pack by what each hook call did")  # fmt: skip
    ap.add_argument("--by-function-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--by-function", action="store_true",
                    help="split this tree's hook time by the fast step's functions")  # fmt: skip
    args = ap.parse_args()
    for split, flag in (
        (args.by_kind, "--by-kind-child"),
        (args.by_function, "--by-function-child"),
    ):
        if split:
            for m in range(len(MODELS)):
                subprocess.run([sys.executable, __file__, flag, str(m), "--steps",
                                str(args.steps)], check=True)  # fmt: skip
            return
    if args.by_kind_child is not None:
        by_kind(args.by_kind_child, args.steps)
        return
    if args.by_function_child is not None:
        by_function(args.by_function_child, args.steps)
        return
    if args.child is not None:
        child(args.child, args.tries, args.steps)
        return
    if args.before is None:
        ap.error("--before is required")
    trees = (("after", args.after), ("before", args.before))
    got: dict[tuple[int, str], list[list[float]]] = {}
    for _ in range(args.rounds):
        for m in range(len(MODELS)):
            for name, src in trees:
                got.setdefault((m, name), []).append(measure(src, m, args.tries, args.steps))
    print("| model | after: Python us/pack (tries; rounds) | before: Python us/pack |")
    print("|---|---|---|")
    for m, label in enumerate(MODELS):
        cells = ["; ".join(" ".join(f"{x:.2f}" for x in r) for r in got[(m, name)])
                 for name, _ in trees]  # fmt: skip
        print(f"| {label} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
