"""SlackSwap against the best baseline over every catalog model, GPU, link and budget 10-90% of P.

For each ``MODEL@GPU-LINK`` instance and budget, SlackSwap's throughput (ideal step / simulated
step) is held against the best of the static and runtime baselines (vDNN, SuperNeurons,
SwapAdvisor, block checkpointing, synchronous and overlapped checkpoint offload). A case is an
exception when SlackSwap is more than ``--tolerance`` (0.1%, relative) below that best, or finds
no plan where a baseline does. ``--paper-repair`` runs SlackSwap's repair as before issue 17
(only stalls of rebuilds name a late prefetch), to show what the fix changed.

    nice .venv/bin/python benchmarks/bench_fastlink_sweep.py   # 1,260 cases x 7 solvers
    nice .venv/bin/python benchmarks/bench_fastlink_sweep.py --paper-repair
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any

BASELINES = ("vdnn", "superneurons", "swapadvisor", "checkpoint", "offload-sync", "offload-overlap")
BUDGETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def sweep(
    models: list[str], gpus: list[str], links: list[str], paper_repair: bool, tolerance: float
) -> dict[str, Any]:
    from slackswap.instances.catalog import load
    from slackswap.solvers import run

    options = {"op_waits": False} if paper_repair else {}
    cases = []
    t0 = time.perf_counter()
    for model in models:
        for gpu in gpus:
            for link in links:
                name = f"{model}@{gpu}-{link}"
                print(f"  {name} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
                inst = load(name)
                for frac in BUDGETS:
                    ours = run("slackswap", inst, frac, options=options, find_min_budget=False)
                    best_thr, best_by = None, None
                    for b in BASELINES:
                        rec = run(b, inst, frac, find_min_budget=False)
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
        "cases": len(cases),
        "paper_repair": paper_repair,
        "tolerance": tolerance,
        "wall_s": time.perf_counter() - t0,
        "exceptions": exceptions,
        "exceptions_by_link": dict(by_link),
        "worst_shortfall": max((c["shortfall"] or 0.0) for c in cases),
        "slackswap_ahead": sum(1 for c in cases if (c["shortfall"] or 0.0) < -tolerance),
        "no_plan_anywhere": sum(
            1 for c in cases if c["slackswap"] is None and c["best_baseline"] is None
        ),
    }


def main() -> int:
    from slackswap.instances.catalog import MODELS
    from slackswap.models.hardware import GPUS, LINKS

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--gpus", default=",".join(GPUS))
    p.add_argument("--links", default=",".join(LINKS))
    p.add_argument("--paper-repair", action="store_true", help="SlackSwap with op_waits=False")
    p.add_argument("--tolerance", type=float, default=0.001, help="relative (0.001 = 0.1%%)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    out = sweep(
        args.models.split(","),
        args.gpus.split(","),
        args.links.split(","),
        args.paper_repair,
        args.tolerance,
    )
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"{out['cases']} cases in {out['wall_s']:.0f} s; SlackSwap more than "
        f"{100 * args.tolerance:g}% below the best baseline (or no plan where one has): "
        f"{len(out['exceptions'])} {out['exceptions_by_link']}; worst shortfall "
        f"{100 * out['worst_shortfall']:.3f}%; SlackSwap ahead by more than that: "
        f"{out['slackswap_ahead']}; no plan from anyone: {out['no_plan_anywhere']}"
    )
    for c in out["exceptions"]:
        ours = "-" if c["slackswap"] is None else f"{100 * c['slackswap']:.3f}"
        stall = c["slackswap_bwd_stall_s"]
        print(
            f"  {c['instance']:<24} {c['budget']:.0%}  slackswap {ours}%  best "
            f"{c['best_by']} {100 * c['best_baseline']:.3f}%  bwd stall "
            f"{'-' if stall is None else f'{stall * 1e3:.2f} ms'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
