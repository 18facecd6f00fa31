"""``slackswap reproduce table3``: SlackSwap, its ablations, the genetic search, planning time.

Every cell prints the paper's throughput (% of ideal) beside the toolkit's on the A100 / PCIe 4.0
catalog instances, with the deviation; the tolerance is 2.5 points. The genetic-search columns
run the registry's ``ga`` / ``ga-random`` solvers for ``--ga-seconds`` per cell (the paper: 45 s;
the default 0 skips them so the report takes seconds). Planning time is the median wall time of
``--repeats`` SlackSwap plans per case after one warm-up (compiled kernels loaded; CPU time of
the planning thread, so other processes on a shared machine do not inflate it; wall-clock
figures are in benchmarks/README.md), against the paper's Python timings and the issue's 10 ms
target.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

from slackswap.console import format_table, print_json
from slackswap.instances.catalog import load
from slackswap.plan import Budget
from slackswap.reproduce._batch import add_batch_arguments, run_cases
from slackswap.reproduce._cells import Cell, print_table
from slackswap.simulator import simulate
from slackswap.solvers import REGISTRY, run
from slackswap.solvers.deadline import Deadline

TOLERANCE_POINTS = 2.5
PLAN_TARGET_MS = 10.0

#: (model, budget fraction) -> SlackSwap, swap-first, recompute-only, barriers, GA seeded,
#: GA random (None: no feasible plan in 45 s), plan ms (the paper's Python planner).
PAPER: dict[tuple[str, float], tuple[float, float, float, float, float, float | None, float]] = {
    ("bert-large", 0.5): (96.3, 94.7, 93.1, 59.1, 96.4, 94.5, 67),
    ("bert-large", 0.2): (87.2, 85.4, 84.2, 55.5, 87.3, None, 83),
    ("gpt2-xl", 0.5): (97.6, 96.6, 93.5, 62.2, 97.6, 95.1, 119),
    ("gpt2-xl", 0.2): (88.1, 85.7, 84.1, 56.3, 88.3, None, 168),
    ("llama-7b", 0.5): (99.6, 99.5, 91.5, 66.9, 99.6, 99.6, 78),
    ("llama-7b", 0.2): (93.4, 85.5, 82.7, 61.7, 93.8, None, 95),
}
COLUMNS = (
    ("slackswap", "SlackSwap"),
    ("swap-first", "swap-first"),
    ("recompute-only", "recompute-only"),
    ("barriers", "barriers"),
    ("ga", "GA seeded"),
    ("ga-random", "GA random"),
)

WHY = {
    "barriers": (
        "the toolkit's 'barriers' runtime follows vDNN as the paper's Sec. 2.1 describes it: a "
        "layer's offloads overlap that layer's own compute and hold only the next layer, and "
        "backward prefetches the closest preceding offloaded layer (op_layer = the transformer "
        "block). With that rule the same runtime comes close to the paper's Titan X check "
        "(vDNN-all 21.4% against 22%, vDNN-conv 1.1% against 3.4%) and reproduces the GPT-2 XL "
        "vDNN row of Table 2, but SlackSwap's plan hides most of its copies behind the block it "
        "belongs to, so the ablation loses far less than the paper's 32-37 points. The paper's "
        "figure implies nearly every copy was exposed, which no single synchronisation rule "
        "here reproduces together with the Titan X check (`reproduce table3 "
        "--explain-barriers` also shows every operator as a layer). A sweep of 16 rules (layer "
        "= block or operator; the next layer waits for copies read first or last by the layer "
        "before; backward prefetch of the closest offloaded layer, one layer ahead, or ending "
        "before the next layer) found none meeting this table, Table 2 and the Titan X check "
        "at once: every operator a layer, first-reader waits and one-layer-ahead prefetch bring "
        "this ablation to 61.9/57.0/63.8/57.3/65.2/62.6% and the Llama-7B vDNN row of Table 2 "
        "within 15%, but put vDNN-conv on the Titan X at 14.0% (paper 3.4%); we do not tune "
        "the rule for one ablation."
    ),
    "ga": (
        "the genetic search depends on its wall-clock budget and on the machine: the toolkit's "
        "simulator scores plans far faster than the paper's (20,000-34,000 a second on a 2-core "
        "VM instead of 150-310), so a given --ga-seconds explores more; with --ga-seconds below "
        "45 it explores less than the paper's search per plan scored in the paper's time"
    ),
    "ga-random": (
        "the toolkit's ga-random repairs every genome before scoring (repair=True: the planner's "
        "Pass 2 rule recomputes the cheapest idle tensors until the static profile fits), which "
        "lets a random start reach feasible plans at 20% within seconds; the paper's random-start "
        "search had no such repair and found none in 45 s (the plain search: "
        "`slackswap solve INSTANCE --solver ga-random --option repair=false`)"
    ),
}


def plan_ms(model: str, frac: float, repeats: int) -> float:
    """Median CPU time (ms) of the thread running SlackSwap's solve (all repair rounds), after
    one warm-up: on a shared machine wall time also counts other processes' turns."""

    inst = load(model)
    solver = REGISTRY["slackswap"].make()
    budget = Budget.fraction(frac)
    solver.solve(inst, budget, deadline=Deadline.never(), seed=0)
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.thread_time()
        solver.solve(inst, budget, deadline=Deadline.never(), seed=0)
        times.append(time.thread_time() - t0)
    return statistics.median(times) * 1e3


def table3_cells(
    ga_seconds: float = 0.0, repeats: int = 5, args: argparse.Namespace | None = None
) -> list[Cell]:
    """The throughput cells (and, with ``repeats``, the planning-time cells). The solves run as
    batch jobs (``args``: ``--jobs``, progress; see `run_cases`), the planning-time plans after
    them, one at a time."""

    ga = ("ga", "ga-random")
    cases = [
        (model, frac, solver, ga_seconds if solver in ga else None)
        for model, frac in PAPER
        for solver, _ in COLUMNS
        if solver not in ga or ga_seconds > 0
    ]
    done = run_cases(cases, args=args, desc="table3")
    cells = []
    for (model, frac), paper in PAPER.items():
        row = f"{model} {frac * 100:.0f}%"
        for k, (solver, label) in enumerate(COLUMNS):
            if solver in ga and ga_seconds <= 0:
                continue
            thr = done[model, frac, solver]["throughput"]
            got = None if thr is None else thr * 100
            why = WHY.get(solver, "")
            cells.append(Cell(row, label, paper[k], got, "% of ideal", TOLERANCE_POINTS, why=why))
        if repeats > 0:
            ms = plan_ms(model, frac, repeats)
            cells.append(
                Cell(row, "plan ms", paper[6], ms, "ms", why=_plan_why(),
                     verdict=ms < PLAN_TARGET_MS, target=f"the {PLAN_TARGET_MS:g} ms target")
            )  # fmt: skip
    return cells


def _plan_why() -> str:
    return (
        f"the paper times a Python planner; the toolkit compiles both passes (numba) and the "
        f"event model, so its planning time is not compared with the paper's: the cell is "
        f"judged against a {PLAN_TARGET_MS:g} ms target"
    )


def explain_barriers() -> list[dict[str, Any]]:
    """SlackSwap's plan under barriers with op_layer = block (the models) and = every operator."""

    out = []
    for (model, frac), paper in PAPER.items():
        inst = load(model)
        rec = run(inst, frac, "slackswap", find_min_budget=False)
        if rec.plan is None:
            continue
        per_op = replace(inst, op_layer=np.arange(inst.n_ops, dtype=np.int32))
        row: dict[str, Any] = {"case": f"{model} {frac * 100:.0f}%", "paper": paper[3]}
        for label, target in (("block", inst), ("operator", per_op)):
            sim = simulate(target, rec.plan.actions, frac, runtime="barriers")
            row[label] = sim.throughput * 100 if sim.feasible else None
        out.append(row)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ga-seconds",
        type=float,
        default=0.0,
        help="seconds per genetic-search cell (the paper: 45); 0 skips the GA columns",
    )
    p.add_argument(
        "--repeats", type=int, default=5, help="timed plans per case for plan ms (0 skips)"
    )
    p.add_argument(
        "--explain-barriers",
        action="store_true",
        help="also replay SlackSwap's plans under barriers synchronised per block and per op",
    )
    p.add_argument("--json", action="store_true", help="cells as JSON")
    add_batch_arguments(p)


def main(args: argparse.Namespace) -> int:
    cells = table3_cells(ga_seconds=args.ga_seconds, repeats=args.repeats, args=args)
    barriers = explain_barriers() if args.explain_barriers else None
    if args.json:
        out: dict[str, Any] = {"cells": [c.as_dict() for c in cells]}
        if barriers is not None:
            out["barriers_by_granularity"] = barriers
        print_json(out)
        return 0
    title = (
        "Table 3 (A100, PCIe 4.0): throughput in % of ideal, tolerance "
        f"{TOLERANCE_POINTS:g} points; plan ms: median CPU time of {args.repeats} SlackSwap plans"
    )
    print_table(cells, digits=2, title=title)
    if barriers is not None:
        print("\nbarriers: SlackSwap's plan synchronised per block (the models) vs per operator")
        table = [(r["case"], r["paper"], _pct(r["block"]), _pct(r["operator"])) for r in barriers]
        print(format_table(table, ("case", "paper", "per block", "per operator")))
    return 0


def _pct(v: float | None) -> str:
    return "none" if v is None else f"{v:.2f}"
