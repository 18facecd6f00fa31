"""Start-up of the command line: two source trees alternating, fresh processes.

    git archive <commit> src | tar -x -C /tmp/before
    python benchmarks/bench_startup.py --before /tmp/before/src --after src --rounds 5

Prints one Markdown row per command and tree: the median and minimum wall seconds, and the
median CPU seconds (user + system) of the process, which is what it would take on an idle core
(wall seconds on a shared machine also count other processes' turns). The trees alternate within
every round, so a change in the machine's load lands on both. The first row, the interpreter
alone, is the floor under every command.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = (
    ["--version"],
    ["--help"],
    ["help", "solve"],
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


def timed(argv: list[str], src: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one fresh process."""
    env = {**os.environ, "PYTHONPATH": src}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the `src` folder of the tree before")
    ap.add_argument("--after", required=True, help="the `src` folder of the tree after")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cases = [("python -c pass", [sys.executable, "-c", "pass"])]
    cases += [
        (f"slackswap {' '.join(c)}", [sys.executable, "-m", "slackswap", *c]) for c in COMMANDS
    ]
    cases += [(f'python -c "import {m}"', [sys.executable, "-c", f"import {m}"]) for m in IMPORTS]
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_ in range(args.rounds + 1):
        for tree, src in (("before", args.before), ("after", args.after)):
            for name, argv in cases:
                took = timed(argv, os.path.abspath(src))
                if round_:  # the first round only fills each tree's numba and bytecode caches
                    times.setdefault((name, tree), []).append(took)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "| command | before: wall median s (min) | before: CPU s "
        "| after: wall median s (min) | after: CPU s |"
    )
    print("|---|---|---|---|---|")
    for name, _ in cases:
        cells = []
        for tree in ("before", "after"):
            walls = [w for w, _ in times[(name, tree)]]
            cpus = [c for _, c in times[(name, tree)]]
            cells.append(
                f"{statistics.median(walls):.3f} ({min(walls):.3f}) | {statistics.median(cpus):.3f}"
            )
        print(f"| `{name}` | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
