"""Start-up of the command line: two source trees alternating, fresh processes, wall seconds.

    git archive <commit> src | tar -x -C /tmp/before
    python benchmarks/bench_startup.py --before /tmp/before/src --after src --rounds 5

Prints one Markdown row per command: median and minimum for each tree. The trees alternate
within every round, so a change in the machine's load lands on both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = (
    ["--help"],
    ["solve", "--help"],
    ["solvers"],
    ["simulate", "--help"],
    ["runtimes"],
    ["compare", "--help"],
    ["reproduce", "--help"],
)
IMPORTS = (
    "slackswap.cli",
    "slackswap.commands.solve",
    "slackswap.reproduce.table1",
    "slackswap.testing",
)


def wall(argv: list[str], src: str) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the `src` folder of the tree before")
    ap.add_argument("--after", required=True, help="the `src` folder of the tree after")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cases = [
        (f"slackswap {' '.join(c)}", [sys.executable, "-m", "slackswap.cli", *c]) for c in COMMANDS
    ]
    cases += [(f'python -c "import {m}"', [sys.executable, "-c", f"import {m}"]) for m in IMPORTS]
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for tree, src in (("before", args.before), ("after", args.after)):
            for name, argv in cases:
                times.setdefault((name, tree), []).append(wall(argv, os.path.abspath(src)))
    print("| command | before: median s (min) | after: median s (min) |")
    print("|---|---|---|")
    for name, _ in cases:
        b, a = times[(name, "before")], times[(name, "after")]
        print(
            f"| `{name}` | {statistics.median(b):.3f} ({min(b):.3f}) "
            f"| {statistics.median(a):.3f} ({min(a):.3f}) |"
        )


if __name__ == "__main__":
    main()
