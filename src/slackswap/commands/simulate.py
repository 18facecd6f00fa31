"""``slackswap simulate``: score one plan on one instance at one budget in the event model."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from slackswap.analysis.checks import output_file
from slackswap.commands.common import load_instance_arg
from slackswap.console import format_bytes, format_table, print_json
from slackswap.errors import UserError
from slackswap.plan import Budget, Plan
from slackswap.simulator.api import simulate
from slackswap.simulator.chrome_trace import write_chrome_trace
from slackswap.simulator.policies import RUNTIMES

if TYPE_CHECKING:
    from slackswap.simulator.result import SimResult

MS = 1e3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate one plan at one budget (step time, stalls, copies, peak memory)",
        description=(
            "Simulate one training step of a plan in the event model. Exit status 0 when the "
            "plan fits, 1 when it does not, 2 for bad input."
        ),
    )
    p.add_argument("instance", help="instance file or catalog name (gpt2-xl, llama-7b@h100-pcie5)")
    p.add_argument("plan", help="plan file (JSON, from `slackswap solve -o`), or keep-all")
    p.add_argument(
        "--budget",
        required=True,
        help="fraction of the peak P (0.5), percent (50%%, 150%%) or bytes (11GB)",
    )
    p.add_argument(
        "--runtime",
        default=None,
        help=f"simulator execution policy (default: the plan's; see `slackswap runtimes`): {', '.join(RUNTIMES)}",
    )
    p.add_argument(
        "--trace", metavar="FILE", help="write the timeline as Chrome trace JSON (open in Perfetto)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --trace file")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.trace is not None:  # checked before the work, not after it
        output_file(
            args.trace,
            "--trace",
            overwrite=args.overwrite,
            inputs={"the instance": args.instance, "the plan": args.plan},
        )
    inst = load_instance_arg(args.instance)
    budget = Budget.parse(args.budget)
    if args.plan == "keep-all":
        plan = Plan.keep_all(inst)
    else:
        plan = Plan.load(args.plan, inst)
    result = simulate(inst, plan, budget, runtime=args.runtime, timeline=bool(args.trace))
    if args.trace:
        try:
            write_chrome_trace(args.trace, inst, result)
        except OSError as exc:
            raise UserError(f"--trace {args.trace}: cannot write ({exc.strerror})") from None
        print(f"wrote trace: {args.trace} (Chrome trace JSON)", file=sys.stderr)
    if args.json:
        print_json({"instance": inst.name, "budget": str(budget), **result.to_dict()})
    else:
        print(_table(inst.name, str(budget), result))
    return 0 if result.feasible else 1


def _table(name: str, budget: str, r: SimResult) -> str:
    rows = [
        ("instance", name),
        ("runtime", r.runtime),
        ("budget", f"{budget} = {format_bytes(r.budget_bytes)}"),
        ("feasible", "yes" if r.feasible else "no"),
        ("step (ms)", f"{r.step_s * MS:.3f}" if r.feasible else "inf"),
        ("ideal (ms)", f"{r.ideal_s * MS:.3f}"),
        ("throughput (%)", f"{r.throughput * 100:.2f}"),
        ("recompute (ms)", f"{r.recompute_s * MS:.3f}"),
        (
            "fwd stall (ms)",
            f"{r.fwd_stall_s * MS:.3f} (copy {r.fwd_stall_copy_s * MS:.3f}, "
            f"memory {r.fwd_stall_mem_s * MS:.3f})",
        ),
        (
            "bwd stall (ms)",
            f"{r.bwd_stall_s * MS:.3f} (copy {r.bwd_stall_copy_s * MS:.3f}, "
            f"memory {r.bwd_stall_mem_s * MS:.3f})",
        ),
        ("D2H", format_bytes(r.d2h_bytes)),
        ("H2D", format_bytes(r.h2d_bytes)),
        ("evictions", str(r.evictions)),
        ("peak", format_bytes(r.peak_bytes)),
    ]
    table = format_table(rows, ("metric", "value"))
    return table if r.feasible else f"{table}\ninfeasible: {r.reason}"
