"""``slackswap run FACTORY --compile``: a plan inside torch.compile, checked against torch's own
partitioner. Imports torch: `run` imports it only once torch is found."""

from __future__ import annotations

import argparse
from typing import Any

import torch

from slackswap.analysis.progress import phase
from slackswap.compile.step import check_compiled, instance_for
from slackswap.console import format_bytes, format_percent, print_json
from slackswap.errors import UserError
from slackswap.instances.format import load_instance
from slackswap.plan import Budget, Plan
from slackswap.profiling.factory import call_factory
from slackswap.simulator import simulate
from slackswap.solvers import REGISTRY, run
from slackswap.torchstep.compileapi import require_supported_torch


def cmd_run_compiled(args: argparse.Namespace) -> int:
    """The ``--compile`` path of ``slackswap run`` (exit 1 when a check fails)."""
    require_supported_torch()
    budget = Budget.parse(args.budget)
    args.solver = REGISTRY.canonical(args.solver)
    if args.plan is None and args.solver not in REGISTRY:
        raise UserError(f"--solver {args.solver!r}: unknown (one of {', '.join(REGISTRY.names())})")
    torch.manual_seed(args.seed)
    phase("run", f"building the model of {args.factory}", args.progress)
    model, inputs, loss_fn = call_factory(args.factory)
    inputs = tuple(inputs) if isinstance(inputs, list | tuple) else (inputs,)
    if args.instance:
        inst = load_instance(args.instance)
    else:
        phase("run", f"capturing its compiled joint graph ({args.backend})", args.progress)
        inst = instance_for(model, inputs, args.backend, args.gpu, args.link)
    if args.plan:
        plan = Plan.load(args.plan, inst)
        solver = f"plan:{args.plan}"
    else:
        phase("run", f"planning with {args.solver} at {budget}", args.progress)
        rec = run(inst, budget, args.solver, time_limit=args.time_limit, seed=args.seed)
        if rec.plan is None or rec.step_s is None:
            fits = ""
            if rec.min_budget_bytes is not None:
                share = format_percent(rec.min_budget_bytes / inst.peak_bytes)
                fits = f"; the smallest budget that fits it: {format_bytes(rec.min_budget_bytes)}"
                fits += f" ({share} of P)"
            raise UserError(
                f"--solver {args.solver}: no plan at budget {budget} "
                f"({rec.error or rec.reason or rec.status}){fits}"
            )
        plan, solver = rec.plan, args.solver
    sim = simulate(inst, plan, budget)
    phase("run", "compiling with torch's partitioner, then under the plan", args.progress)
    checks = check_compiled(model, inputs, loss_fn, plan, args.backend, seed=args.seed)
    out: dict[str, Any] = {
        "instance": inst.name,
        "solver": solver,
        "budget": str(budget),
        "budget_bytes": budget.bytes_for(inst),
        "keep_all_simulated_peak_bytes": inst.peak_bytes,
        "simulated_peak_bytes": int(sim.peak_bytes),
        "simulated_step_s": float(sim.step_s),
        "feasible": bool(sim.feasible),
        **plan.counts(),
        **checks,
    }
    if args.json:
        print_json(out)
    else:
        _print(out)
    return 0 if checks["checks_pass"] else 1


def _print(r: dict[str, Any]) -> None:
    print(
        f"{r['instance']}: {r['solver']} at {r['budget']} ({format_bytes(r['budget_bytes'])}), "
        f"compiled with {r['backend']} (keep {r['keep']}, swap {r['swap']}, recomp {r['recomp']})"
    )
    print(f"{'':28s}{'planned':>12s}{'measured':>12s}")
    print(
        f"{'saved for backward':28s}{format_bytes(r['saved_bytes_planned']):>12s}"
        f"{format_bytes(r['saved_bytes_measured']):>12s}"
    )
    print(
        f"{'offloaded':28s}{format_bytes(r['offloaded_bytes_planned']):>12s}"
        f"{format_bytes(r['offloaded_bytes']):>12s}"
    )
    print(
        f"{'recomputed forward ops':28s}{r['recomputed_ops_planned']:>12d}"
        f"{r['recomputed_ops_measured']:>12d}"
    )
    print(f"simulated step {r['simulated_step_s'] * 1e3:.3f} ms, peak "
          f"{format_bytes(r['simulated_peak_bytes'])}")  # fmt: skip
    same = "bitwise identical" if r["bitwise_identical"] else "different"
    print(
        f"against torch's default partitioner: loss and gradients {same} (|loss diff| "
        f"{r['loss_abs_diff']:.3g}, max |grad diff| {r['grad_max_abs_diff']:.3g}, "
        f"tolerance {r['tolerance']:.3g})"
    )
    if r["measured_peak_bytes"] is not None:
        print(f"allocator peak (CUDA): {format_bytes(r['measured_peak_bytes'])}")
    print("checks pass" if r["checks_pass"] else "CHECKS FAIL")
