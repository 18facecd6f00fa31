"""Certified gaps of the exact solvers on the catalog workloads (issue 5's Done-when).

For each workload and budget: SlackSwap's plan, ``milp`` and ``cpsat`` with a time limit; each
solver's throughput, its own bound, its certified gap to the best bound of the case, and its
planning time. Prints a Markdown table for ``benchmarks/README.md``.

    .venv/bin/python benchmarks/bench_exact.py --time-limit 60
"""

from __future__ import annotations

import argparse
import math
import platform
import time

from slackswap.reproduce.gaps import certified_gaps

CASES = [
    ("bert-large", 0.5),
    ("bert-large", 0.2),
    ("gpt2-xl", 0.5),
    ("gpt2-xl", 0.2),
    ("llama-7b", 0.5),
    ("llama-7b", 0.2),
    ("vgg16", 0.5),
    ("vgg16", 0.2),
    ("vgg16", 0.8),
    ("vgg16", 0.7),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--solvers", default="slackswap,milp,cpsat")
    p.add_argument("--cases", default="", help="model:fraction,... (default: all)")
    args = p.parse_args()
    solvers = args.solvers.split(",")
    cases = CASES
    if args.cases:
        cases = [(c.split(":")[0], float(c.split(":")[1])) for c in args.cases.split(",")]
    print(f"machine: {platform.processor() or platform.machine()}, time limit {args.time_limit} s")
    print()
    print(
        "| workload | budget | ceiling % | solver | status | throughput % | own bound % | "
        "certified gap % | plan s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for model, frac in cases:
        rows = certified_gaps([model], [frac], solvers, time_limit=args.time_limit)
        for r in rows:
            best = r["best_lower_bound_s"]
            if best is not None and math.isinf(best):
                ceiling = "infeasible"
            else:
                ceiling = f"{100 * r['ideal_s'] / best:.2f}" if best else "-"
            own = r["lower_bound_s"]
            own_s = (
                "-"
                if own is None
                else ("inf" if math.isinf(own) else f"{100 * r['ideal_s'] / own:.2f}")
            )
            thr = "-" if r["throughput"] is None else f"{100 * r['throughput']:.2f}"
            gap = "-" if r["certified_gap"] is None else f"{100 * r['certified_gap']:.3f}"
            print(
                f"| {model} | {frac:.0%} | {ceiling} | {r['solver']} | {r['status']} | {thr} | "
                f"{own_s} | {gap} | {r['plan_s']:.1f} |",
                flush=True,
            )
    print()
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
