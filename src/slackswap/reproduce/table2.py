"""``slackswap reproduce table2``: where the time goes at 40% of the peak, every policy.

Step, recompute and forward / backward stall times as multiples of the ideal step, and the bytes
copied device-to-host (GB), for GPT-2 XL and Llama-7B on the A100 / PCIe 4.0 catalog instances.
Tolerance (the issue's): 15%, or 0.03 absolute for values under 0.2. Each row is the registry
solver of that name, scored in the one event model.
"""

from __future__ import annotations

import argparse
import inspect
from dataclasses import replace
from typing import Any

import numpy as np

import slackswap
from slackswap.console import print_json
from slackswap.reproduce._batch import add_batch_arguments, run_cases
from slackswap.reproduce._cells import Cell, print_table
from slackswap.simulator import simulate
from slackswap.solvers import REGISTRY, run

BUDGET = 0.4
REL_TOL, ABS_TOL, SMALL = 0.15, 0.03, 0.2

#: (model, solver) -> step, recomp, fwd stall, bwd stall (multiples of ideal), D2H GB.
PAPER: dict[tuple[str, str], tuple[float, float, float, float, float]] = {
    ("gpt2-xl", "vdnn"): (4.52, 0.000, 1.85, 1.67, 22.3),
    ("gpt2-xl", "superneurons"): (1.90, 0.027, 0.43, 0.44, 5.1),
    ("gpt2-xl", "swapadvisor"): (2.82, 0.000, 0.99, 0.83, 14.0),
    ("gpt2-xl", "checkpoint"): (1.16, 0.163, 0.00, 0.00, 0.0),
    ("gpt2-xl", "slackswap"): (1.05, 0.053, 0.00, 0.00, 3.3),
    ("llama-7b", "vdnn"): (2.14, 0.000, 0.62, 0.52, 35.2),
    ("llama-7b", "superneurons"): (1.43, 0.009, 0.27, 0.15, 11.3),
    ("llama-7b", "swapadvisor"): (1.20, 0.000, 0.19, 0.01, 21.6),
    ("llama-7b", "checkpoint"): (1.18, 0.176, 0.00, 0.00, 0.0),
    ("llama-7b", "slackswap"): (1.01, 0.008, 0.00, 0.00, 13.0),
}
COLUMNS = ("step", "recomp", "fwd stall", "bwd stall", "D2H GB")

#: Why a row's cells may differ: the solver's own documented modelling decision, where known.
WHY: dict[str, str] = {
    "slackswap": (
        "SlackSwap's step is ideal + recompute (no stall), so its recompute and step cells move "
        "together; differences trace to the workload model's recompute costs (the producer "
        "chain of each tensor on the roofline), not to the planner"
    ),
}


def block_times(model: str, block: int | None = None) -> tuple[float, float, float]:
    """One transformer block's copy time (its saved bytes over the link), forward and backward
    compute (seconds); the middle block unless given."""

    inst = slackswap.load(model)
    nf = inst.n_forward_ops
    L = int(inst.op_layer[:nf].max()) // 2 if block is None else block
    layer, d = inst.op_layer, inst.op_duration_s
    copy_s = float(inst.tensor_bytes[inst.tensor_block == L].sum()) / inst.hardware.link_bw_Bps
    return copy_s, float(d[:nf][layer[:nf] == L].sum()), float(d[nf:][layer[nf:] == L].sum())


def vdnn_why() -> str:
    """Why vDNN's Llama-7B backward stall misses, in the catalog instances' own numbers."""

    g_c, g_f, g_b = block_times("gpt2-xl")
    l_c, l_f, l_b = block_times("llama-7b")
    gpt = slackswap.load("gpt2-xl")
    g_rec = run(gpt, BUDGET, "vdnn", find_min_budget=False)
    inst = slackswap.load("llama-7b")
    rec = run(inst, BUDGET, "vdnn", find_min_budget=False)
    assert rec.plan is not None and rec.bwd_stall_s is not None and g_rec.bwd_stall_s is not None
    offload_all = all(
        r.d2h_bytes is not None and r.d2h_bytes >= i.saved_bytes
        for r, i in ((rec, inst), (g_rec, gpt))
    )
    full = simulate(inst, rec.plan, 1.0)  # the same plan with all of P: memory never binds
    ideal, g_ideal = inst.ideal_step_s, gpt.ideal_step_s
    layers = int(inst.op_layer[: inst.n_forward_ops].max())
    g_layers = int(gpt.op_layer[: gpt.n_forward_ops].max())
    paper_block = PAPER["llama-7b", "vdnn"][3] * ideal / layers  # the paper's stall per block
    share = max(0.0, l_c - paper_block) / l_b  # of a block's backward the paper's prefetch hides
    # GPT-2 XL if its prefetches hid only that share too: each block loses the rest of its overlap.
    g_alt = (g_rec.bwd_stall_s + g_layers * (1 - share) * g_b) / g_ideal
    per_op = run(
        replace(inst, op_layer=np.arange(inst.n_ops, dtype=np.int32)),
        BUDGET,
        "vdnn",
        find_min_budget=False,
    )
    assert per_op.bwd_stall_s is not None
    ms = 1e3
    return (
        f"vDNN runs {'vDNN-all' if offload_all else 'a partial offload'} on both models at 40% "
        f"(barriers runtime). Per block the copy takes {g_c * ms:.1f} ms against "
        f"{g_f * ms:.1f} ms forward and {g_b * ms:.1f} ms backward compute on GPT-2 XL, "
        f"{l_c * ms:.1f} ms against {l_f * ms:.1f} / {l_b * ms:.1f} ms on Llama-7B. A block's "
        f"offloads overlap that block and the next waits, so each block stalls copy - forward; "
        f"the prefetch of block L-1 starts with block L's backward and overlaps all of it, so "
        f"each stalls copy - backward ({(g_c - g_b) * ms:.1f} and {(l_c - l_b) * ms:.1f} ms). "
        f"GPT-2 XL is copy-bound; Llama-7B's backward hides most of its copy, so its backward "
        f"stall is small and hinges on how much backward compute a prefetch overlaps. The "
        f"paper's {PAPER['llama-7b', 'vdnn'][3]:.2f} ideal steps are about "
        f"{paper_block * ms:.0f} ms per block ({layers} blocks), as if a prefetch hid only "
        f"{share:.0%} of a block's backward; hiding only that share on GPT-2 XL would put its "
        f"backward stall near {g_alt:.2f} (paper {PAPER['gpt2-xl', 'vdnn'][3]:.2f}, toolkit "
        f"{g_rec.bwd_stall_s / g_ideal:.2f}), so no one overlap rule gives both rows and we do "
        f"not tune the runtime to this one. Memory plays no part: the plan holds at most "
        f"{full.peak_bytes / 1e9:.1f} GB and gives the same backward stall with all of P "
        f"({full.bwd_stall_s / ideal:.3f} vs {rec.bwd_stall_s / ideal:.3f} at 40%). The inputs "
        f"match the paper (D2H bytes here, ideal step and f in Table 1) and the Llama layer's "
        f"backward follows the chain rule (tests/models/test_models_transformer.py). Finer vDNN layers "
        f"(every operator its own layer) raise the backward stall only to "
        f"{per_op.bwd_stall_s / ideal:.2f}"
    )


def measure(model: str, solver: str) -> tuple[float, float, float, float, float] | None:
    """The toolkit's row, or None when the solver finds no plan at 40%."""

    return ratios(run(model, BUDGET, solver, find_min_budget=False).to_row())


def ratios(row: dict[str, Any]) -> tuple[float, float, float, float, float] | None:
    """A results row as the table's cells (multiples of the ideal step, GB), None without a
    plan."""
    if row["step_s"] is None:
        return None
    ideal = row["ideal_s"]
    return (
        row["step_s"] / ideal,
        row["recompute_s"] / ideal,
        row["fwd_stall_s"] / ideal,
        row["bwd_stall_s"] / ideal,
        row["d2h_bytes"] / 1e9,
    )


def solver_note(solver: str) -> str:
    """The paragraph of the solver's docstring that states its measured deviations, if any."""

    paras = [
        " ".join(p.split()) for p in (inspect.getdoc(REGISTRY[solver].cls) or "").split("\n\n")
    ]
    for needle in ("known deviation", "table 2", "deviat", "differs"):
        for para in paras:
            if needle in para.lower():
                return para
    return ""


def table2_cells(args: argparse.Namespace | None = None) -> list[Cell]:
    """Every cell; the solves run as batch jobs (``args``: ``--jobs``, progress; see
    `run_cases`)."""

    rows = run_cases(
        [(model, BUDGET, solver, None) for model, solver in PAPER], args=args, desc="table2"
    )
    cells = []
    for (model, solver), paper in PAPER.items():
        got = ratios(rows[model, BUDGET, solver])
        why = WHY.get(solver) or (vdnn_why() if solver == "vdnn" else solver_note(solver))
        row = f"{model} {REGISTRY[solver].title}"
        for k, col in enumerate(COLUMNS):
            unit = "GB" if col == "D2H GB" else "x ideal"
            cells.append(
                Cell(row, col, paper[k], None if got is None else got[k], unit,
                     abs_tol=ABS_TOL, rel_tol=REL_TOL, rel_floor=SMALL, why=why)
            )  # fmt: skip
    return cells


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="cells as JSON")
    add_batch_arguments(p)


def main(args: argparse.Namespace) -> int:
    cells = table2_cells(args)
    if args.json:
        out: dict[str, Any] = {"budget_fraction": BUDGET, "cells": [c.as_dict() for c in cells]}
        print_json(out)
        return 0
    print_table(
        cells,
        digits=3,
        title=(
            "Table 2 (A100, PCIe 4.0, 40% of P): multiples of the ideal step and GB copied out; "
            f"tolerance {REL_TOL * 100:.0f}%, or {ABS_TOL:g} absolute below {SMALL:g}"
        ),
    )
    return 0
