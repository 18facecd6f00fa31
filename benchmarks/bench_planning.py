"""SlackSwap planning time on every Table 3 case: median wall time of a whole solve.

A solve is Algorithm 1 plus the Sec. 3.4 validation-and-repair rounds (each round one event-model
replay, plus a timeline replay when it repairs late prefetches). Compiled kernels are loaded by one
warm-up solve per case before timing. Also reports the passes alone (one run of Algorithm 1) and
the number of rounds.

    .venv/bin/python benchmarks/bench_planning.py [--repeats 31] [--solver slackswap] [--json]

Target: median under 10 ms on every case; the paper's Python planner took 67-168 ms.

``--scale 192,768,3072`` instead plans GPT-2 XL with that many layers at 30% of P (each size in
its own process, so its peak resident set is its own): the first solve on the fresh instance
(it also builds the simulator's and the planner's per-instance arrays), then the median wall
and CPU time of the warm solves and of Algorithm 1 alone with the time in each pass, the peak
Python memory of one warm solve (tracemalloc) and the process's peak resident set
(``resource.getrusage``). Target: at most 0.4 s at 3,072 layers (67,594 operators).

    .venv/bin/python benchmarks/bench_planning.py --scale 192,768,3072 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc

CASES = [(m, f) for m in ("bert-large", "gpt2-xl", "llama-7b") for f in (0.5, 0.2)]
TARGET_MS = 10.0
#: Budget of the ``--scale`` rows, a fraction of P (issue 36's measurement).
SCALE_FRACTION = 0.3
#: Seconds the warm SlackSwap solve may take at 3,072 layers.
SCALE_TARGET_S = 0.4


def scale_one(layers: int, repeats: int) -> dict[str, object]:
    """One depth: cold and warm solves, Algorithm 1 and its passes, memory."""
    import slackswap.solvers.planner._passes as passes
    from slackswap.instances.catalog import build_model
    from slackswap.plan import Budget
    from slackswap.solvers import REGISTRY, Solution
    from slackswap.solvers.deadline import Deadline
    from slackswap.solvers.planner._memory import static_arrays

    inst = build_model("gpt2-xl", layers=layers)
    budget = Budget.fraction(SCALE_FRACTION)
    solver = REGISTRY["slackswap"].make()
    t0 = time.perf_counter()
    out = solver.solve(inst, budget, deadline=Deadline.never(), seed=0)
    cold_s = time.perf_counter() - t0
    rounds = len(out.info["rounds"]) if isinstance(out, Solution) else 0
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        solver.solve(inst, budget, deadline=Deadline.never(), seed=0)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    # Algorithm 1 alone, with the CPU time inside each pass's compiled kernel
    spent = {"pass1_kernel": 0.0, "pass2_kernel": 0.0}
    originals = {name: getattr(passes, name) for name in spent}

    def timed(name: str):  # type: ignore[no-untyped-def]
        def call(*args):  # type: ignore[no-untyped-def]
            c0 = time.thread_time()
            try:
                return originals[name](*args)
            finally:
                spent[name] += time.thread_time() - c0

        return call

    sa = static_arrays(inst)
    m = budget.bytes_for(inst)
    alone = []
    for name in spent:
        setattr(passes, name, timed(name))
    try:
        for _ in range(repeats):
            c0 = time.thread_time()
            passes.plan_passes(sa, m, inst.peak_bytes)
            alone.append(time.thread_time() - c0)
    finally:
        for name, f in originals.items():
            setattr(passes, name, f)
    tracemalloc.start()
    solver.solve(inst, budget, deadline=Deadline.never(), seed=0)
    py_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "layers": layers,
        "ops": inst.n_ops,
        "tensors": inst.n_tensors,
        "rounds": rounds,
        "cold_s": cold_s,
        "wall_median_s": statistics.median(wall),
        "cpu_median_s": statistics.median(cpu),
        "passes_cpu_median_s": statistics.median(alone),
        "pass1_cpu_s": spent["pass1_kernel"] / repeats,
        "pass2_cpu_s": spent["pass2_kernel"] / repeats,
        "solve_py_peak_bytes": py_peak,
        "rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # KiB on Linux
        "load": os.getloadavg()[0],
    }


def scale(sizes: list[int], repeats: int) -> None:
    print(
        f"slackswap on gpt2-xl at {SCALE_FRACTION:.0%} of P, {repeats} warm solves per size; "
        f"{platform.processor() or platform.machine()}"
    )
    print()
    print(
        "| layers | ops | tensors | rounds | first solve s | warm solve median ms (wall / CPU) | "
        "Algorithm 1 CPU ms | Pass 1 ms | Pass 2 ms | solve Python peak MB | process peak RSS MB "
        "| load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--scale-one", str(n), "--repeats", str(repeats)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"| {r['layers']:,} | {r['ops']:,} | {r['tensors']:,} | {r['rounds']} | "
            f"{r['cold_s']:.2f} | {r['wall_median_s'] * 1e3:.1f} / {r['cpu_median_s'] * 1e3:.1f} | "
            f"{r['passes_cpu_median_s'] * 1e3:.1f} | {r['pass1_cpu_s'] * 1e3:.1f} | "
            f"{r['pass2_cpu_s'] * 1e3:.1f} | {r['solve_py_peak_bytes'] / 1e6:.0f} | "
            f"{r['rss_bytes'] / 1e6:.0f} | {r['load']:.1f} |",
            flush=True,
        )


def bench(solver_name: str, repeats: int) -> list[dict[str, object]]:
    from slackswap.instances.catalog import load
    from slackswap.plan import Budget
    from slackswap.solvers import REGISTRY, Solution
    from slackswap.solvers.deadline import Deadline
    from slackswap.solvers.planner._memory import static_arrays
    from slackswap.solvers.planner._passes import plan_passes

    rows: list[dict[str, object]] = []
    for model, frac in CASES:
        inst = load(model)
        solver = REGISTRY[solver_name].make()
        budget = Budget.fraction(frac)
        out = solver.solve(inst, budget, deadline=Deadline.never(), seed=0)  # warm-up
        rounds = len(out.info["rounds"]) if isinstance(out, Solution) else 0
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.thread_time()
            solver.solve(inst, budget, deadline=Deadline.never(), seed=0)
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        sa = static_arrays(inst)
        m = budget.bytes_for(inst)
        passes = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            plan_passes(sa, m, inst.peak_bytes)
            passes.append(time.perf_counter() - t0)
        times.sort()
        rows.append(
            {
                "case": f"{model} {frac * 100:.0f}%",
                "ops": inst.n_ops,
                "tensors": inst.n_tensors,
                "rounds": rounds,
                "median_ms": statistics.median(times) * 1e3,
                "p90_ms": times[int(0.9 * (len(times) - 1))] * 1e3,
                "cpu_median_ms": statistics.median(cpu) * 1e3,
                "passes_median_ms": statistics.median(passes) * 1e3,
            }
        )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=31)
    p.add_argument("--solver", default="slackswap")
    p.add_argument("--json", action="store_true")
    p.add_argument("--scale", default="", help="GPT-2 XL layer counts, e.g. 192,768,3072")
    p.add_argument("--scale-one", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.scale_one:
        print(json.dumps(scale_one(args.scale_one, args.repeats)))
        return 0
    if args.scale:
        scale([int(v) for v in args.scale.split(",")], args.repeats)
        return 0
    rows = bench(args.solver, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    cpu_name = platform.processor() or platform.machine()
    print(f"{args.solver}, {args.repeats} timed solves per case after a warm-up; {cpu_name}")
    print(
        f"{'case':16s} {'ops':>5s} {'tensors':>7s} {'rounds':>6s} {'median ms':>9s} "
        f"{'p90 ms':>7s} {'cpu ms':>7s} {'passes ms':>9s}"
    )
    for r in rows:
        print(
            f"{r['case']:16s} {r['ops']:5d} {r['tensors']:7d} {r['rounds']:6d} "
            f"{r['median_ms']:9.2f} {r['p90_ms']:7.2f} {r['cpu_median_ms']:7.2f} "
            f"{r['passes_median_ms']:9.2f}"
        )
    worst = max(float(r["median_ms"]) for r in rows)  # type: ignore[arg-type]
    worst_cpu = max(float(r["cpu_median_ms"]) for r in rows)  # type: ignore[arg-type]
    print(
        f"worst median: {worst:.2f} ms wall, {worst_cpu:.2f} ms CPU of this thread (not inflated "
        f"by other processes on the cores); target {TARGET_MS:g} ms"
    )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
