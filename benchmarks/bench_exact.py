"""Certified gaps of the exact solvers on the catalog workloads (how far each is from optimal).

For each workload and budget: SlackSwap's plan, ``milp`` and ``cpsat`` with a time limit; each
solver's throughput, its own bound, its certified gap to the best bound of the case, and its
planning time; per case, the best plan any solver found to the best bound. Prints a Markdown
table for ``benchmarks/README.md``.

    .venv/bin/python benchmarks/bench_exact.py --time-limit 60

``--scale 48,192,768`` instead builds GPT-2 XL with that many layers at 30% of P (the
depth the full LP cannot take) and reports, per size, the depth bound engine alone (`BoundProgram` build, then the coarse LP,
`CoarseBound`, that ``milp`` uses past `FULL_LP_MAX_OPS` operators, under the time share
``milp`` gives it: seconds, its peak Python memory by tracemalloc and the process's peak resident
set, which includes HiGHS) and then ``milp``'s and SlackSwap's plans with the best plan to the
best bound. Each size runs in its own process so the resident-set figure is its own.

    .venv/bin/python benchmarks/bench_exact.py --scale 48,192,768 --time-limit 60

The process's peak RSS is read twice: after the bound engine alone, and after ``milp``'s whole
run (what issue 36 bounds: 2 GB at 3,072 layers, 240 s). The 3,072-layer row:

    .venv/bin/python benchmarks/bench_exact.py --scale 192,768 --time-limit 60
    .venv/bin/python benchmarks/bench_exact.py --scale 3072 --time-limit 240
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc

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


#: Budget of the scale runs, a fraction of P (the issue's measurement).
SCALE_FRACTION = 0.3
#: Share of the time limit ``milp`` gives its relaxation (`slackswap.solvers.exact.milp`).
LP_SHARE = 0.4


def scale_one(layers: int, time_limit: float) -> dict[str, object]:
    """One size: the bound engine alone (time, memory), then milp and SlackSwap's plans."""
    from slackswap.instances.catalog import build_model
    from slackswap.plan import Budget
    from slackswap.solvers import run
    from slackswap.solvers.deadline import Deadline
    from slackswap.solvers.exact._coarse import coarse_bound
    from slackswap.solvers.exact._lp import BoundProgram

    inst = build_model("gpt2-xl", layers=layers)
    budget = Budget.fraction(SCALE_FRACTION)
    tracemalloc.start()
    t0 = time.perf_counter()
    model = BoundProgram(inst, budget.bytes_for(inst))
    t1 = time.perf_counter()
    lp = coarse_bound(model, Deadline.begin(LP_SHARE * time_limit))
    t2 = time.perf_counter()
    py_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    milp = run(inst, budget, "milp", time_limit=time_limit, find_min_budget=False)
    milp_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the whole run's peak
    ss = run(inst, budget, "slackswap", find_min_budget=False)
    steps = [r.step_s for r in (milp, ss) if r.step_s is not None]
    bounds = [b for b in (milp.lower_bound_s, lp.bound_s) if b is not None]
    best_step = min(steps) if steps else None
    best_bound = max(bounds) if bounds else None
    return {
        "layers": layers,
        "ops": inst.n_ops,
        "tensors": inst.n_tensors,
        "build_s": t1 - t0,
        "lp_s": t2 - t1,
        "lp_status": lp.status,
        "lp_rounds": lp.rounds,
        "lp_rows": lp.rows,
        "lp_gap": (best_step / lp.bound_s - 1) if best_step and lp.bound_s else None,
        "py_peak_bytes": py_peak,
        "rss_bytes": rss_kib * 1024,
        "milp_rss_bytes": milp_rss_kib * 1024,
        "milp_found_by": milp.info.get("found_by"),
        "slackswap_plan_s": ss.plan_s,
        "milp_engine": milp.info.get("lp_engine"),
        "milp_status": milp.status.value,
        "milp_plan_s": milp.plan_s,
        "milp_gap": (milp.step_s / milp.lower_bound_s - 1)
        if milp.step_s and milp.lower_bound_s
        else None,
        "best_gap": (best_step / best_bound - 1) if best_step and best_bound else None,
        "load": os.getloadavg()[0],
    }


def scale(sizes: list[int], time_limit: float) -> None:
    print(
        f"machine: {platform.processor() or platform.machine()}, gpt2-xl at "
        f"{SCALE_FRACTION:.0%} of P, time limit {time_limit} s (coarse LP's share: "
        f"{LP_SHARE * time_limit:.0f} s)"
    )
    print()
    print(
        "| layers | ops | tensors | model build s | coarse LP s | coarse LP status | coarse LP "
        "rows | Python peak MB | process peak RSS MB | coarse bound to best plan % | milp LP | "
        "milp status | milp s | milp gap % | milp peak RSS MB | milp plan from | SlackSwap s | "
        "best plan to best bound % | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--scale-one", str(n), "--time-limit", str(time_limit)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])

        def pct(v: object) -> str:
            return "-" if v is None else f"{100 * float(v):.3f}"  # type: ignore[arg-type]

        print(
            f"| {r['layers']} | {r['ops']} | {r['tensors']} | {r['build_s']:.2f} | "
            f"{r['lp_s']:.2f} | {r['lp_status']} | {r['lp_rows']} | "
            f"{r['py_peak_bytes'] / 1e6:.0f} | {r['rss_bytes'] / 1e6:.0f} | {pct(r['lp_gap'])} | "
            f"{r['milp_engine']} | {r['milp_status']} | {r['milp_plan_s']:.1f} | "
            f"{pct(r['milp_gap'])} | {r['milp_rss_bytes'] / 1e6:.0f} | {r['milp_found_by']} | "
            f"{r['slackswap_plan_s']:.2f} | {pct(r['best_gap'])} | {r['load']:.1f} |",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--solvers", default="slackswap,milp,cpsat")
    p.add_argument("--cases", default="", help="model:fraction,... (default: all)")
    p.add_argument("--scale", default="", help="GPT-2 XL layer counts, e.g. 48,192,768")
    p.add_argument("--scale-one", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.scale_one:
        print(json.dumps(scale_one(args.scale_one, args.time_limit)))
        return
    if args.scale:
        scale([int(v) for v in args.scale.split(",")], args.time_limit)
        return
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
        gaps = [r["certified_gap"] for r in rows if r["certified_gap"] is not None]
        best_gap = f"{100 * min(gaps):.3f}" if gaps else "-"
        print(f"| {model} | {frac:.0%} | | best plan to best bound | | | | {best_gap} | |")
    print()
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
