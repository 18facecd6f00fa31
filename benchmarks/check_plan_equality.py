"""SlackSwap's plans before and after a planner change: dump them with one checkout, compare with
another (exit status 1 and the differing keys when any array differs).

Covers Algorithm 1 alone (actions, fits, failing operator, overflow, both link schedules) for
both candidate orders, with and without Pass 1, three guards, ten budgets; and the full solves of
``slackswap``, ``swap-first`` and ``recompute-only``; over the catalog, GPT-2 XL at 6 to 768
layers (3,072 with ``--deep``) and Llama / BERT at 4, 16 and 64 layers.

    PYTHONPATH=<old checkout>/src python benchmarks/check_plan_equality.py dump /tmp/plans.npz
    PYTHONPATH=src python benchmarks/check_plan_equality.py compare /tmp/plans.npz
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from slackswap.instance import Instance
from slackswap.instances.catalog import build_model, catalog_names, load
from slackswap.plan import Budget
from slackswap.solvers import REGISTRY, Solution
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.planner._memory import static_arrays
from slackswap.solvers.planner._passes import plan_passes

FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: Past this many operators, full solves only at these budgets (each solve replays plans).
SOLVE_ALL_MAX_OPS = 20_000
SOLVE_FRACTIONS_DEEP = (0.1, 0.3)


def instances(deep: bool) -> dict[str, Instance]:
    out = {name: load(name) for name in catalog_names()}
    for layers in (6, 12, 48, 192, 768) + ((3072,) if deep else ()):
        out[f"gpt2-xl,layers={layers}"] = build_model("gpt2-xl", layers=layers)
    for layers in (4, 16, 64):
        out[f"llama-7b,layers={layers}"] = build_model("llama-7b", layers=layers)
        out[f"bert-large,layers={layers}"] = build_model("bert-large", layers=layers)
    return out


def plans(deep: bool) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, inst in instances(deep).items():
        sa = static_arrays(inst)
        for f in FRACTIONS:
            m = Budget.fraction(f).bytes_for(inst)
            variants = [("rho", False, 0.02)] + [
                (order, True, guard)
                for order in ("rho", "production")
                for guard in (0.0, 0.02, 0.1)
            ]
            for order, pass1, guard in variants:
                r = plan_passes(sa, m, inst.peak_bytes, order=order, pass1=pass1, guard=guard)
                key = f"{name}|{f}|{order}|{pass1}|{guard}"
                out[key + "|actions"] = r.actions
                out[key + "|fit"] = np.array([r.fits, r.fail_op, r.overflow_bytes], dtype=np.int64)
                out[key + "|d2h_end_s"] = r.d2h_end_s
                out[key + "|h2d_start_s"] = r.h2d_start_s
            if inst.n_ops <= SOLVE_ALL_MAX_OPS or f in SOLVE_FRACTIONS_DEEP:
                for key in ("slackswap", "swap-first", "recompute-only"):
                    sol = (
                        REGISTRY[key]
                        .make()
                        .solve(inst, Budget.fraction(f), deadline=Deadline.never(), seed=0)
                    )
                    plan = sol.plan if isinstance(sol, Solution) else sol
                    out[f"{name}|{f}|solve:{key}"] = (
                        np.array([-1]) if plan is None else np.asarray(plan.actions)
                    )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("dump", "compare"))
    p.add_argument("path")
    p.add_argument("--deep", action="store_true", help="also GPT-2 XL at 3,072 layers")
    args = p.parse_args()
    t0 = time.perf_counter()
    now = plans(args.deep)
    print(f"{len(now)} arrays in {time.perf_counter() - t0:.0f} s")
    if args.mode == "dump":
        np.savez_compressed(args.path, **now)  # type: ignore[arg-type]
        return 0
    ref = np.load(args.path)
    if set(ref.files) != set(now):
        print("different keys:", sorted(set(ref.files) ^ set(now))[:20])
        return 1
    bad = [
        k
        for k in ref.files
        if not np.array_equal(ref[k], now[k], equal_nan=ref[k].dtype.kind == "f")
    ]
    print(f"arrays that differ: {len(bad)}", bad[:20])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
