"""Benchmark: event-model evaluations per second (the genetic search's fitness), one core.

For each catalog instance it scores a population of random plans (each tensor keep / swap /
recomp with equal odds, recomp only where the recompute cost is finite) at a budget of 50% of P
through ``simulate_many(n_jobs=1)`` and reports microseconds per plan: the best and the median of
``--repeats`` timed batches, in wall time and in CPU time of the calling thread (the steadier
figure on a shared machine), plus plans per second from the best wall time. Then the growth as
GPT-2 XL's layer count doubles, and the two-thread figure on GPT-2 XL.
Target: GPT-2 XL at 50% in at most 50 us per plan (20,000 plans per second) on one core.

    .venv/bin/python benchmarks/bench_simulator.py [--plans 400] [--repeats 15]
        [--instances gpt2-xl,bert-large] [--layers 6,12,24,48,96] [--budget 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import slackswap
from slackswap.instance import Instance
from slackswap.instances.catalog import build_model, catalog_names
from slackswap.simulator import simulate_many


def random_plans(inst: Instance, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    acts = rng.integers(0, 3, (n, inst.n_tensors)).astype(np.int8)
    acts[:, np.isinf(inst.tensor_recompute_s)] %= 2
    return acts


def time_batches(
    inst: Instance, acts: np.ndarray, budget: float, repeats: int, n_jobs: int = 1
) -> dict[str, float]:
    """Microseconds per plan over ``repeats`` batches (first call compiles/loads; not timed)."""
    simulate_many(inst, acts[:2], budget, n_jobs=n_jobs)
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.thread_time()
        res = simulate_many(inst, acts, budget, n_jobs=n_jobs)
        wall.append((time.perf_counter() - w0) / len(acts) * 1e6)
        cpu.append((time.thread_time() - c0) / len(acts) * 1e6)
    return {
        "wall_best": min(wall),
        "wall_median": statistics.median(wall),
        "cpu_best": min(cpu),
        "cpu_median": statistics.median(cpu),
        "feasible": float(np.mean(res.feasible)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plans", type=int, default=400, help="plans per timed batch")
    ap.add_argument("--repeats", type=int, default=15, help="timed batches per case")
    ap.add_argument("--instances", default=",".join(catalog_names()))
    ap.add_argument("--layers", default="6,12,24,48,96", help="GPT-2 XL layer counts")
    ap.add_argument("--budget", type=float, default=0.5, help="fraction of P")
    args = ap.parse_args(argv)

    print(f"random plans at {args.budget:.0%} of P, {args.plans} per batch, {args.repeats} batches")
    print("| instance | ops | tensors | feasible | us/plan wall best | median | CPU best | "
          "CPU median | plans/s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.instances.split(","):
        inst = slackswap.load(name)
        t = time_batches(inst, random_plans(inst, args.plans), args.budget, args.repeats)
        print(
            f"| {name} | {inst.n_ops} | {inst.n_tensors} | {t['feasible']:.0%} | "
            f"{t['wall_best']:.1f} | {t['wall_median']:.1f} | {t['cpu_best']:.1f} | "
            f"{t['cpu_median']:.1f} | {1e6 / t['wall_best']:,.0f} |"
        )
        sys.stdout.flush()

    print("\nGPT-2 XL as the layers double (same sequence and batch)")
    print("| layers | ops | tensors | us/plan CPU best | CPU median | us per layer | ratio |")
    print("|---|---|---|---|---|---|---|")
    prev = None
    for layers in (int(x) for x in args.layers.split(",")):
        inst = build_model("gpt2-xl", layers=layers)
        t = time_batches(inst, random_plans(inst, args.plans), args.budget, args.repeats)
        ratio = "" if prev is None else f"{t['cpu_best'] / prev:.2f}"
        print(
            f"| {layers} | {inst.n_ops} | {inst.n_tensors} | {t['cpu_best']:.1f} | "
            f"{t['cpu_median']:.1f} | {t['cpu_best'] / layers:.2f} | {ratio} |"
        )
        prev = t["cpu_best"]
        sys.stdout.flush()

    inst = slackswap.load("gpt2-xl")
    acts = random_plans(inst, 4 * args.plans)
    one = time_batches(inst, acts, args.budget, args.repeats, n_jobs=1)
    two = time_batches(inst, acts, args.budget, args.repeats, n_jobs=2)
    print(
        f"\nGPT-2 XL, {len(acts)} plans per batch: n_jobs=1 {1e6 / one['wall_best']:,.0f} plans/s, "
        f"n_jobs=2 {1e6 / two['wall_best']:,.0f} plans/s (best wall)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
