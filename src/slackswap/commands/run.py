"""``slackswap run FACTORY --budget B --solver S``: run a plan on the real step, measured vs simulated."""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from typing import Any

from slackswap import profiling
from slackswap.analysis import checks
from slackswap.analysis.progress import add_progress_arguments, phase
from slackswap.console import format_bytes, format_percent, print_json
from slackswap.errors import UserError
from slackswap.instances.format import load_instance
from slackswap.models.hardware import hardware
from slackswap.plan import Budget, Plan
from slackswap.profiling import require_torch
from slackswap.profiling.factory import call_factory
from slackswap.runtime import RUNTIME_MODES, BudgetWarning, check_plan
from slackswap.solvers import REGISTRY, run

MS = 1e3


def _seconds(text: str) -> float:
    """``--time-limit``, bounded as ``solve`` bounds it (one line, exit 2)."""

    return checks.seconds(text, "--time-limit")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a solver's plan on a real PyTorch step and compare it with the simulator "
        "(needs torch)",
        description=(
            "Profile the step a factory returns (or read --instance), plan it with a solver "
            "(or read --plan), run the step under the plan with slackswap.runtime and print "
            "the measured peak activation memory and step time beside the simulated ones. "
            "--check also runs the step without a plan (same seed) and compares the loss, "
            "every parameter gradient and every buffer (batch-norm statistics), then trains "
            "--steps optimizer steps (AdamW; SGD when the model has sparse gradients) with and "
            "without the plan and compares every parameter, buffer and optimizer state tensor, "
            "bit for bit; any difference exits 1, naming the first."
        ),
    )
    p.add_argument("factory", metavar="SCRIPT_OR_MODULE:FACTORY", help="e.g. train.py:make")
    p.add_argument("--budget", required=True, help="fraction of P (0.4, 40%%) or bytes (2GB)")
    p.add_argument("--solver", default="slackswap", help="registered solver (default slackswap)")
    p.add_argument("--plan", help="run this plan file instead of solving (made for the instance)")
    p.add_argument("--instance", help="instance file of this step (default: profile it now)")
    p.add_argument(
        "--runtime",
        help="run the plan's actions under this runtime: barrier-free, layer-prefetch or sync "
        "(default: the plan's)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=1,
        help="planned steps to run (default 1); with --check, also the optimizer steps compared",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="compare with unplanned steps: loss, gradients, buffers, then --steps optimizer steps",
    )
    p.add_argument("--seed", type=_seed, default=0, help="torch seed for the factory and steps")
    p.add_argument("--time-limit", type=_seconds, default=10.0, help="solver seconds")
    p.add_argument("--gpu", default="a100", help="GPU whose roofline times the profile")
    p.add_argument("--link", default=None, help="host link (default: the GPU's)")
    p.add_argument(
        "--timing", choices=("roofline", "measured"), default="roofline", help="profile timing"
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="run the plan inside torch.compile: profile the compiled joint graph, apply the "
        "plan through torch's min-cut partitioner, and check against torch's own partitioner",
    )
    p.add_argument(
        "--backend",
        choices=("aot_eager", "inductor"),
        default="inductor",
        help="with --compile: the torch.compile backend (default inductor)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_progress_arguments(p)
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    torch = require_torch()
    if args.compile:
        # function-level: the compile path imports torch, an optional dependency (checked above)
        from slackswap.commands.run_compiled import cmd_run_compiled

        return cmd_run_compiled(args)
    # function-level: runtime.measure imports torch, an optional dependency (checked just above)
    from slackswap.runtime.measure import (
        has_sparse_gradients,
        max_abs_diff,
        run_step,
        step_difference,
        train_difference,
        train_steps,
    )

    if args.steps < 1:
        raise UserError(f"--steps = {args.steps}: must be at least 1")
    budget = Budget.parse(args.budget)
    args.solver = REGISTRY.canonical(args.solver)  # any case, as catalogue names
    if args.plan is None and args.solver not in REGISTRY:
        raise UserError(f"--solver {args.solver!r}: unknown (one of {', '.join(REGISTRY.names())})")
    if args.runtime is not None and args.runtime not in RUNTIME_MODES:
        raise UserError(f"--runtime {args.runtime!r}: one of {', '.join(RUNTIME_MODES)}")
    try:
        hardware(args.gpu, args.link)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    torch.manual_seed(args.seed)
    phase("run", f"building the model of {args.factory}", args.progress)
    model, inputs, loss_fn = call_factory(args.factory)
    if args.instance:
        inst = load_instance(args.instance)
    else:
        phase("run", f"profiling its training step ({args.timing} times of {args.gpu})",
              args.progress)  # fmt: skip
        inst = profiling.profile_step(  # the package imports torch here, on first use
            model, inputs, loss_fn, gpu=args.gpu, link=args.link, timing=args.timing
        )
    if args.plan:
        plan = Plan.load(args.plan, inst)
        solver = f"plan:{args.plan}"
    else:
        # Without a plan, the smallest budget that fits is bisected (as `solve` does).
        phase("run", f"planning with {args.solver} at {budget}, up to {args.time_limit:g} s",
              args.progress)  # fmt: skip
        rec = run(inst, budget, args.solver, time_limit=args.time_limit, seed=args.seed)
        if rec.plan is None or rec.step_s is None:  # no plan, or one that does not fit
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
    runtime = args.runtime or plan.runtime
    if runtime not in RUNTIME_MODES:
        raise UserError(
            f"the {solver} plan is for the {runtime!r} runtime, which slackswap.runtime does not "
            "run; pass --runtime barrier-free to run its actions barrier-free"
        )
    predicted = check_plan(plan, budget, runtime=runtime)  # refuses before anything runs

    def step(planned: bool) -> Any:
        return run_step(model, inputs, loss_fn, plan if planned else None, budget,
                        seed=args.seed, runtime=runtime)  # fmt: skip

    phase("run", f"running the step without a plan, then {args.steps} under it", args.progress)
    baseline = step(False)
    with warnings.catch_warnings():
        # Said once below, in one line each, from the stats of every step.
        warnings.simplefilter("ignore", BudgetWarning)
        runs = [step(True) for _ in range(args.steps)]
    stats = runs[0].stats
    worst = max(runs, key=lambda r: r.stats.over_budget_bytes if r.stats else 0).stats
    loss_diff = grad_diff = None
    identical = None
    difference: str | None = None
    optimizer = None
    if args.check:
        loss_diff, grad_diff = max_abs_diff(runs[0], baseline)
        for r in runs:
            difference = difference or step_difference(r, baseline)
        if difference is None:
            phase("run", f"training {args.steps} optimizer step(s) without the plan, then under it",
                  args.progress)  # fmt: skip

            def train(planned: bool) -> Any:
                return train_steps(model, inputs, loss_fn, plan if planned else None, budget,
                                   steps=args.steps, sparse=has_sparse_gradients(baseline),
                                   seed=args.seed, runtime=runtime)  # fmt: skip

            reference = train(False)
            optimizer = reference.optimizer
            found = train_difference(train(True), reference)
            if found is not None:
                difference = f"{found} after {args.steps} {optimizer} step(s)"
        identical = difference is None
    device = str(next(iter(model.parameters())).device)
    out = {
        "instance": inst.name,
        "solver": solver,
        "runtime": runtime,
        "budget": str(budget),
        "budget_bytes": predicted.budget_bytes,
        "device": device,
        "steps": args.steps,
        "simulated_peak_bytes": predicted.simulated_peak_bytes,
        "measured_peak_bytes": max(r.peak_bytes for r in runs),
        "keep_all_simulated_peak_bytes": inst.peak_bytes,
        "keep_all_measured_peak_bytes": baseline.peak_bytes,
        "simulated_step_s": predicted.simulated_step_s,
        "measured_step_s": statistics.median(r.step_s for r in runs),
        "keep_all_measured_step_s": baseline.step_s,
        "swapped_bytes": stats.swapped_bytes if stats else 0,
        "recomputed_bytes": stats.recomputed_bytes if stats else 0,
        "loss_abs_diff": loss_diff,
        "grad_max_abs_diff": grad_diff,
        "bitwise_identical": identical,
        "first_difference": difference,
        "check_optimizer": optimizer,
        "cuda_peak_bytes": _max_or_none(r.cuda_peak_bytes for r in runs),
        "over_budget_bytes": worst.over_budget_bytes if worst else 0,
        "held_tensors": stats.held_tensors if stats else [],
        "held_bytes": stats.held_bytes if stats else 0,
    }
    if args.json:
        print_json(out)
    else:
        _print_table(out, inst.meta.get("timing", "roofline"))
    if out["held_tensors"]:
        names = ", ".join(repr(n) for n in out["held_tensors"][:3])
        more = len(out["held_tensors"]) - 3
        print(
            f"slackswap: warning: {len(out['held_tensors'])} saved tensor(s) planned to swap or "
            f"recompute ({format_bytes(out['held_bytes'])}) stayed referenced outside autograd "
            f"(a forward hook or a variable?), never freed: {names}"
            + (f" and {more} more" if more > 0 else ""),
            file=sys.stderr,
        )
    if out["over_budget_bytes"] > 0:
        at = f" at {worst.peak_op!r}" if worst and worst.peak_op else ""
        print(
            f"slackswap: warning: the step peaked at {out['measured_peak_bytes']} B{at}, "
            f"{out['over_budget_bytes']} B over the budget {out['budget_bytes']} B "
            f"(simulated {out['simulated_peak_bytes']} B)",
            file=sys.stderr,
        )
        return 1
    return 1 if identical is False else 0


def _max_or_none(values: Any) -> int | None:
    got = [v for v in values if v is not None]
    return max(got) if got else None


def _print_table(r: dict[str, Any], timing: str) -> None:
    print(
        f"{r['instance']}: {r['solver']} at {r['budget']} ({format_bytes(r['budget_bytes'])}), "
        f"{r['runtime']} runtime, on {r['device']}, {r['steps']} step(s)"
    )
    print(f"{'':28s}{'simulated':>12s}{'measured':>12s}")
    print(
        f"{'peak activations':28s}{format_bytes(r['simulated_peak_bytes']):>12s}"
        f"{format_bytes(r['measured_peak_bytes']):>12s}"
    )
    print(
        f"{'keep-all peak':28s}{format_bytes(r['keep_all_simulated_peak_bytes']):>12s}"
        f"{format_bytes(r['keep_all_measured_peak_bytes']):>12s}"
    )
    print(
        f"{'step (ms)':28s}{r['simulated_step_s'] * MS:12.3f}{r['measured_step_s'] * MS:12.3f}"
        f"   (simulated: {timing} times of the profile's GPU; measured: this device)"
    )
    if r["cuda_peak_bytes"] is not None:
        print(
            f"{'allocator peak (CUDA)':28s}{'':>12s}{format_bytes(r['cuda_peak_bytes']):>12s}"
            "   (max_memory_allocated: also gradients and kernel workspace)"
        )
    else:
        print("kernel workspace: not measured (no allocator counter on this device)")
    over = r["over_budget_bytes"]
    print(f"over budget: {format_bytes(over)}" if over else "within the budget")
    held = f", held outside autograd {format_bytes(r['held_bytes'])}" if r["held_bytes"] else ""
    print(
        f"swapped {format_bytes(r['swapped_bytes'])}, "
        f"recomputed {format_bytes(r['recomputed_bytes'])}{held}"
    )
    if r["bitwise_identical"] is not None:
        verdict = "bitwise identical" if r["bitwise_identical"] else "DIFFERENT"
        print(
            f"check against the unplanned step: loss, gradients and buffers {verdict} "
            f"(|loss diff| {r['loss_abs_diff']:.3g}, max |grad diff| {r['grad_max_abs_diff']:.3g})"
        )
        if r["check_optimizer"] is not None and r["bitwise_identical"]:
            print(
                f"after {r['steps']} {r['check_optimizer']} step(s): parameters, buffers and "
                "optimizer state bitwise identical"
            )
        if r["first_difference"] is not None:
            print(f"first difference: {r['first_difference']}")


def _seed(text: str) -> int:
    """A seed as ``solve`` takes it: a torch seed beyond 64 bits failed inside torch."""

    return checks.seed(text, "--seed")
