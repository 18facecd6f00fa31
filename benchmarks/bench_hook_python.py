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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

MODELS = ("GPT (tests', dropout 0.1)", "nn.TransformerEncoder", "CNN with batch-norm",
          "nn.TransformerDecoder (held out)")  # fmt: skip


def child(model: int, tries: int, steps: int) -> None:
    """Measure one model with the slackswap on ``sys.path``; print the tries as JSON."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_runtime as bench

    from slackswap.solvers import run

    torch.set_num_threads(1)
    case = bench.cpu_cases(False)[model]
    ss = run(case.inst, 0.5, "slackswap", time_limit=2.0, find_min_budget=False)
    assert ss.plan is not None, f"{case.label}: SlackSwap found no plan at 50% of P"
    step, planned = bench.planned(case, ss.plan, 0.5)
    got = [bench.hook_us_per_saved_tensor(case, step, planned, steps)[2] for _ in range(tries)]
    print(json.dumps(got))


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
    args = ap.parse_args()
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
