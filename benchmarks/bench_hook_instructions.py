"""Instructions the training path's saved-tensor hooks execute per step, counted by valgrind's
callgrind: a figure that does not move with the machine's load, for before-and-after
comparisons of the hooks' Python on a shared, noisy machine.

    git worktree add /tmp/before <commit>
    PYTHONPATH=src .venv/bin/python benchmarks/bench_hook_instructions.py \
        --before /tmp/before/src --after src

Per model of `bench_hook_python` (`bench_runtime`'s CPU half under SlackSwap at 50% of P) and
per tree, one process under ``valgrind --tool=callgrind`` with instrumentation off until the
plan's checked step and two fast steps have run (profiling and planning under callgrind would
take an hour); then ``--steps`` fast steps are counted, only inside PyTorch's calls of the
hooks (``PySavedVariableHooks::call_pack_hook`` and ``call_unpack_hook``, everything they call
included). Of that count, the replayed operators (``invokeOperatorFromPython``, how a recorded
``OpOverload`` is called) and the clones (``THPVariable_clone``: the copies of swapped tensors
out and back, and the scratch copies a rebuild makes) are set aside; the rest is the hooks' own
work: Python, the torch calls it makes for views, storages, weak references and RNG states. The
two trees run the same operators and copies, so the difference in the rest is what a change
saved, the same on every run. Instructions are not time (a cache miss costs more than an add),
so this complements `bench_hook_python`'s timings rather than replacing them. About 6 minutes
per model and tree on the 2-core VM (two at a time).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MODELS = ("GPT (tests', dropout 0.1)", "nn.TransformerEncoder", "CNN with batch-norm",
          "nn.TransformerDecoder (held out)")  # fmt: skip
HOOKS = ("torch::autograd::PySavedVariableHooks::call_pack_hook*",
         "torch::autograd::PySavedVariableHooks::call_unpack_hook*")  # fmt: skip
#: Inclusive costs set aside: the replayed operators' calls, and the clones.
OPERATORS = "torch::jit::invokeOperatorFromPython"
CLONES = "torch::autograd::THPVariable_clone"


def child(model: int, steps: int) -> None:
    """Run the model's checked step and two fast steps, turn callgrind's instrumentation on,
    run ``steps`` fast steps; print the packs per step."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_hook_python import slackswap_at_half

    _, case, step, planned = slackswap_at_half(model)

    def run(n: int) -> None:
        for _ in range(n):
            for q in case.model.parameters():
                q.grad = None
            with step():
                case.loss_fn(case.model(*case.inputs)).backward()

    run(2)
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True,
                   capture_output=True)  # fmt: skip
    run(steps)
    print(f"packs {len(planned._learned.expected)}")


def inclusive(annotated: str, function: str) -> int:
    """The first inclusive count ``callgrind_annotate --inclusive=yes`` prints for a function
    whose name starts with ``function`` (0 when it never ran)."""
    for line in annotated.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:(.*)", line)
        if m and m.group(2).startswith(function):
            return int(m.group(1).replace(",", ""))
    return 0


def measure(src: str, model: int, steps: int, out: Path) -> dict[str, float]:
    """One tree and model under callgrind: instructions per step in the hooks, in the replayed
    operators, in the clones, and the rest (per step and per pack)."""
    # One hash seed, so sets of strings iterate alike in every run: with a random seed each,
    # two runs of one tree differed by 2.4%; with this one, two runs gave the same count.
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), PYTHONHASHSEED="0")
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
           *[f"--toggle-collect={h}" for h in HOOKS], f"--callgrind-out-file={out}",
           sys.executable, __file__, "--child", str(model), "--steps", str(steps)]  # fmt: skip
    run = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    packs = int(re.findall(r"^packs (\d+)$", run.stdout, re.MULTILINE)[-1])
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)],
                               check=True, capture_output=True, text=True).stdout  # fmt: skip
    totals = re.search(r"([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", annotated)
    assert totals is not None, f"callgrind_annotate printed no total for {out}"
    total = int(totals[1].replace(",", ""))
    ops, clones = inclusive(annotated, OPERATORS), inclusive(annotated, CLONES)
    rest = (total - ops - clones) / steps
    return {"total": total / steps, "operators": ops / steps, "clones": clones / steps,
            "rest": rest, "per_pack": rest / packs, "packs": packs}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="the old tree's src folder (omit: the new tree alone)")
    ap.add_argument("--after", default="src", help="the new tree's src folder (default: src)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--models", default="0,1,2,3", help="which models, by index (default: all)")
    ap.add_argument("--out", default="/tmp/slackswap-callgrind", help="callgrind's files")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.steps)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trees = [("after", args.after)] + ([("before", args.before)] if args.before else [])
    models = [int(m) for m in args.models.split(",")]
    jobs = [(m, name, src) for m in models for name, src in trees]
    with ThreadPoolExecutor(max_workers=2) as pool:  # one core each
        futures = {(m, name): pool.submit(measure, src, m, args.steps, out / f"{name}-{m}.out")
                   for m, name, src in jobs}  # fmt: skip
        got = {key: f.result() for key, f in futures.items()}
    print("| model | tree | packs | in the hooks | operators | clones | the rest | per pack |")
    print("|---|---|---|---|---|---|---|---|")
    for m, name, _ in jobs:
        r = got[(m, name)]
        print(f"| {MODELS[m]} | {name} | {r['packs']:.0f} | {r['total']:,.0f} | "
              f"{r['operators']:,.0f} | {r['clones']:,.0f} | {r['rest']:,.0f} | "
              f"{r['per_pack']:,.0f} |")  # fmt: skip
    if args.before:
        for m in models:
            a, b = got[(m, "after")], got[(m, "before")]
            print(f"{MODELS[m]}: the rest {a['rest'] / b['rest']:.3f}x before")


if __name__ == "__main__":
    main()
