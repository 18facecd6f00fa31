"""SlackSwap against the best baseline over every catalog model, GPU, link and budget 10-90% of P.

For each ``MODEL@GPU-LINK`` instance and budget, SlackSwap's throughput (ideal step / simulated
step) is held against the best of the baselines (vDNN, SuperNeurons, SwapAdvisor, block
checkpointing, synchronous and overlapped checkpoint offload). All six are deterministic
policies with no search or time limit (the search solvers ``ga``, ``milp`` and ``cpsat`` are not
baselines here), so each case is one plan and one replay per solver. A case is an exception when
SlackSwap is more than ``--tolerance`` (0.1%, relative) below that best, or finds no plan where a
baseline does. ``--repair`` picks SlackSwap's repair: ``full`` (the default: late prefetches read
from operator waits, then the memory branch when the runtime held a late prefetch back for
memory), ``op-waits`` (``memory_branch=False``: late prefetches read from operator waits
only) or ``paper`` (both off: only stalls of rebuilds name a late prefetch).

    nice .venv/bin/python benchmarks/bench_fastlink_sweep.py            # 1,260 cases x 7 solvers
    nice .venv/bin/python benchmarks/bench_fastlink_sweep.py --repair op-waits
    nice .venv/bin/python benchmarks/bench_fastlink_sweep.py --markdown  # the README's table
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from typing import Any

BASELINES = ("vdnn", "superneurons", "swapadvisor", "checkpoint", "offload-sync", "offload-overlap")
BUDGETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
REPAIRS: dict[str, dict[str, bool]] = {
    "full": {},
    "op-waits": {"memory_branch": False},
    "paper": {"memory_branch": False, "op_waits": False},
}


def sweep(
    models: list[str], gpus: list[str], links: list[str], repair: str, tolerance: float
) -> dict[str, Any]:
    from slackswap.instances.catalog import load
    from slackswap.solvers import run

    options = REPAIRS[repair]
    cases = []
    solver_s: dict[str, float] = defaultdict(float)
    t0 = time.perf_counter()
    for model in models:
        for gpu in gpus:
            for link in links:
                name = f"{model}@{gpu}-{link}"
                print(f"  {name} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
                inst = load(name)
                for frac in BUDGETS:
                    t = time.perf_counter()
                    ours = run(inst, frac, "slackswap", options=options, find_min_budget=False)
                    solver_s["slackswap"] += time.perf_counter() - t
                    best_thr, best_by = None, None
                    for b in BASELINES:
                        t = time.perf_counter()
                        rec = run(inst, frac, b, find_min_budget=False)
                        solver_s[b] += time.perf_counter() - t
                        if rec.throughput is not None and (
                            best_thr is None or rec.throughput > best_thr
                        ):
                            best_thr, best_by = rec.throughput, b
                    short = None
                    if best_thr is not None and ours.throughput is not None:
                        short = 1.0 - ours.throughput / best_thr
                    cases.append(
                        {
                            "instance": name, "budget": frac, "slackswap": ours.throughput,
                            "best_baseline": best_thr, "best_by": best_by, "shortfall": short,
                            "slackswap_bwd_stall_s": ours.bwd_stall_s,
                            "slackswap_recompute_s": ours.recompute_s,
                        }
                    )  # fmt: skip
    exceptions = [
        c
        for c in cases
        if (c["best_baseline"] is not None and c["slackswap"] is None)
        or (c["shortfall"] is not None and c["shortfall"] > tolerance)
    ]
    by_link = Counter(c["instance"].rsplit("-", 1)[1] for c in exceptions)
    return {
        "cases": cases,
        "repair": repair,
        "tolerance": tolerance,
        "wall_s": time.perf_counter() - t0,
        "solver_s": dict(solver_s),
        "exceptions": exceptions,
        "exceptions_by_link": dict(by_link),
        "worst_shortfall": max((c["shortfall"] or 0.0) for c in cases),
        "slackswap_ahead": sum(1 for c in cases if (c["shortfall"] or 0.0) < -tolerance),
        "no_plan_anywhere": sum(
            1 for c in cases if c["slackswap"] is None and c["best_baseline"] is None
        ),
    }


def _pts(x: float | None) -> str:
    """A throughput difference in points of ideal (%), '-' when there is none."""
    return "-" if x is None else f"{100 * x:+.3f}"


def markdown_table(out: dict[str, Any], links: list[str]) -> str:
    """Per model and GPU (rows) and link (columns): the worst SlackSwap - best baseline over the
    budgets, in points of ideal throughput; '-' where nobody plans at any budget."""
    worst: dict[tuple[str, str], float] = {}
    for c in out["cases"]:
        if c["best_baseline"] is None:
            continue
        diff = (c["slackswap"] or 0.0) - c["best_baseline"]
        key = (c["instance"].rsplit("-", 1)[0], c["instance"].rsplit("-", 1)[1])
        worst[key] = min(diff, worst.get(key, diff))
    rows = list(dict.fromkeys(c["instance"].rsplit("-", 1)[0] for c in out["cases"]))
    lines = ["| model@GPU | " + " | ".join(links) + " |", "|---" * (len(links) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r} | " + " | ".join(_pts(worst.get((r, lk))) for lk in links) + " |")
    return "\n".join(lines)


def main() -> int:
    from slackswap.instances.catalog import catalog_names
    from slackswap.models.hardware import GPUS, LINKS

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(catalog_names()))
    p.add_argument("--gpus", default=",".join(GPUS))
    p.add_argument("--links", default=",".join(LINKS))
    p.add_argument("--repair", choices=tuple(REPAIRS), default="full")
    p.add_argument("--tolerance", type=float, default=0.001, help="relative (0.001 = 0.1%%)")
    p.add_argument("--json", action="store_true", help="every case, as JSON")
    p.add_argument("--markdown", action="store_true", help="also the worst-case table")
    args = p.parse_args()
    links = args.links.split(",")
    out = sweep(args.models.split(","), args.gpus.split(","), links, args.repair, args.tolerance)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    times = ", ".join(f"{k} {v:.1f}" for k, v in sorted(out["solver_s"].items()))
    print(
        f"{len(out['cases'])} cases in {out['wall_s']:.0f} s (repair {args.repair}; seconds per "
        f"solver, plan + replay: {times}); SlackSwap more than {100 * args.tolerance:g}% below "
        f"the best baseline (or no plan where one has): {len(out['exceptions'])} "
        f"{out['exceptions_by_link']}; worst shortfall {100 * out['worst_shortfall']:.3f}%; "
        f"SlackSwap ahead by more than that: {out['slackswap_ahead']}; no plan from anyone: "
        f"{out['no_plan_anywhere']}"
    )
    for c in out["exceptions"]:
        ours = "-" if c["slackswap"] is None else f"{100 * c['slackswap']:.3f}"
        stall, rec = c["slackswap_bwd_stall_s"], c["slackswap_recompute_s"]
        print(
            f"  {c['instance']:<24} {c['budget']:.0%}  slackswap {ours}%  best "
            f"{c['best_by']} {100 * c['best_baseline']:.3f}%  bwd stall "
            f"{'-' if stall is None else f'{stall * 1e3:.2f} ms'}  recompute "
            f"{'-' if rec is None else f'{rec * 1e3:.2f} ms'}"
        )
    if args.markdown:
        print(markdown_table(out, links))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
