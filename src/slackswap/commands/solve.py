"""``slackswap solvers`` and ``slackswap runtimes`` (the registries) and ``slackswap solve`` (one
instance, budget, solver)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from typing import Any, NoReturn

from slackswap.analysis import checks
from slackswap.analysis.progress import JobProgress, add_progress_arguments
from slackswap.analysis.warmup import warm_up
from slackswap.commands.common import load_instance_arg
from slackswap.console import format_bytes, format_percent, print_json
from slackswap.errors import UserError
from slackswap.plan import Budget
from slackswap.simulator.policies import execution_modes, get_runtime, runtime_names
from slackswap.solvers import REGISTRY, Status, describe_solvers
from slackswap.solvers.running import EXACT_TIME_LIMIT_S, run
from slackswap.userdoc import parse_option_value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "solvers",
        help="list the registered solvers, their tags and options",
        description=(
            "List every registered solver (built in and plug-ins): its description, the "
            "runtime its plans are for, its tags (exact, deterministic, uses the time limit, "
            "static plan) and its options with their defaults, as solve --option and compare "
            "--option take them."
        ),
    )
    p.add_argument("--json", action="store_true", help="one JSON list")
    p.set_defaults(func=cmd_solvers)

    r = sub.add_parser(
        "runtimes",
        help="list the simulator's execution policies (runtimes) and the solvers whose plans run on each",
        description=(
            "A runtime is how a step runs a plan (when copies start, what waits); a solver "
            "makes the plan. A solver may share its runtime's name (the barriers solver is "
            "SlackSwap's plan on the barriers runtime)."
        ),
    )
    r.add_argument("--json", action="store_true", help="one JSON list")
    r.set_defaults(func=cmd_runtimes)

    s = sub.add_parser(
        "solve",
        help="plan one instance at one budget with one solver and score it in the simulator",
        description=(
            "Plan one instance at one budget and score the plan in the event model. "
            "Exit status 0 when a plan fits, 1 when none does (or the solver failed), "
            "2 for bad input."
        ),
    )
    s.add_argument("instance", help="instance file or catalog name (gpt2-xl, llama-7b@h100-pcie5)")
    s.add_argument(
        "--budget",
        required=True,
        help="fraction of the peak P (0.5), percent (50%%, 150%%) or bytes (11GB)",
    )
    s.add_argument(
        "--solver", default="slackswap", help="registered solver (see `slackswap solvers`)"
    )
    s.add_argument(
        "--time-limit",
        type=_seconds,
        default=None,
        help=f"seconds for searches and exact solvers (default: {EXACT_TIME_LIMIT_S:g} for exact "
        "solvers, none for the others, which end by their own rules)",
    )
    s.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    s.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="solver option (repeatable); VALUE is read as JSON, else as a string",
    )
    s.add_argument("-o", "--output", help="write the plan here (JSON)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    s.add_argument("--json", action="store_true", help="print the result row as one JSON object")
    add_progress_arguments(s)
    s.set_defaults(func=cmd_solve)


def _seconds(text: str) -> float:
    """``--time-limit``, checked as ``compare`` and sweep files check it (one line, exit 2)."""

    return checks.seconds(text, "--time-limit")


def _seed(text: str) -> int:
    return checks.seed(text, "--seed")


def parse_options(items: list[str]) -> dict[str, Any]:
    """``["max_rounds=3", "order=production"]`` -> ``{"max_rounds": 3, "order": "production"}``."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UserError(f"--option {item!r}: expected KEY=VALUE")
        out[key] = parse_option_value(raw, f"--option {key}")
    return out


def cmd_solvers(args: argparse.Namespace) -> int:
    entries = describe_solvers()
    if args.json:
        print_json(entries)
        return 0
    print("\n\n".join(solver_entry(e) for e in entries))
    return 0


def cmd_runtimes(args: argparse.Namespace) -> int:
    real = execution_modes()
    entries: list[dict[str, Any]] = [
        {
            "name": name,
            "description": get_runtime(name).description,
            "solvers": [e.name for e in REGISTRY if e.runtime == name],
            "real_runtime": name in real,
        }
        for name in runtime_names()
    ]
    if args.json:
        print_json(entries)
        return 0
    blocks = []
    for e in entries:
        run_by = "slackswap run and the simulator" if e["real_runtime"] else "the simulator"
        lines = [
            _wrap(f"{e['name']}: {e['description']}", 2),
            _wrap(f"  solvers  {', '.join(e['solvers']) or '-'}", 11),
            _wrap(f"  run by   {run_by}", 11),
        ]
        blocks.append("\n".join(lines))
    print("\n\n".join(blocks))
    return 0


def _wrap(text: str, indent: int, width: int = 100) -> str:
    return textwrap.fill(
        text, width, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False
    )


def solver_entry(e: dict[str, Any], width: int = 100) -> str:
    """One solver for the terminal: its name and description, then its tags and options, each
    wrapped to ``width`` columns (the options of the genetic search alone run to 300)."""

    t = e["tags"]
    tags = [k for k in ("exact", "deterministic", "honours_time_limit", "uses_time_limit") if t[k]]
    if not t["static_plan"]:
        tags.append("runtime-policy")
    if t["needs"]:
        tags.append("needs=" + "+".join(t["needs"]))
    opts = ", ".join(f"{k}={v!r}" for k, v in e["options"].items())
    indent = " " * 11

    def field(label: str, text: str) -> str:
        return textwrap.fill(
            text,
            width,
            initial_indent=f"  {label:<9}",
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )

    return "\n".join(
        [
            textwrap.fill(
                f"{e['name']}: {e['description']}",
                width,
                subsequent_indent="  ",
                break_on_hyphens=False,
            ),
            field("runtime", e["runtime"]),
            field("tags", " ".join(tags) or "-"),
            field("options", opts or "-"),
        ]
    )


def cmd_solve(args: argparse.Namespace) -> int:
    if args.output is not None:  # checked before the work, not after it
        checks.output_file(
            args.output, "-o", overwrite=args.overwrite, inputs={"the instance": args.instance}
        )
    inst = load_instance_arg(args.instance)
    budget = Budget.parse(args.budget)
    nbytes = budget.bytes_for(inst)  # a budget no device holds: refused here
    if nbytes > inst.peak_bytes:
        checks.warn(checks.above_peak(args.budget, [(inst.name, nbytes / inst.peak_bytes)]))
    options = parse_options(args.option)
    args.solver = REGISTRY.canonical(args.solver)  # any case, as catalogue names
    REGISTRY[args.solver].make(**options)  # unknown solver or bad option: a UserError, exit 2
    warm_up([args.solver])  # compile or load the kernels before the solve is timed
    tags = REGISTRY[args.solver].tags
    # A search or exact solver may take its whole time limit: say what runs (quick ones only
    # with --progress).
    mode = args.progress if (tags.uses_time_limit or tags.exact or args.progress) else False
    with JobProgress(1, desc="solve", mode=mode) as progress:
        # the limit `run` will give: the one named, else the driver's default for exact solvers
        seconds = args.time_limit
        if seconds is None and tags.exact:
            seconds = EXACT_TIME_LIMIT_S
        limit = "" if seconds is None else f", up to {seconds:g} s"
        progress.start(f"{args.solver} on {inst.name} at {budget}{limit}")
        try:
            rec = run(
                inst,
                budget,
                args.solver,
                time_limit=args.time_limit,
                seed=args.seed,
                options=options,
            )
        except KeyboardInterrupt:
            _exit_interrupted()
        progress.finished(rec.to_row())
    if args.output:
        if rec.plan is None:
            print(
                f"slackswap: no plan to write to {args.output} ({rec.status.value})",
                file=sys.stderr,
            )
        else:
            try:
                rec.plan.save(args.output)
            except OSError as exc:
                raise UserError(f"-o {args.output}: cannot write ({exc.strerror})") from None
            print(f"wrote plan: {args.output}", file=sys.stderr)  # stderr: --json keeps stdout
    if args.json:
        row = rec.to_row()
        row.pop("history", None)  # the results file's JSON text; here a list, searches only
        if rec.history:
            row["history"] = history_rows(rec.history)
        print_json(row)
    else:
        print(summary(rec))
    ok = rec.status in (Status.FEASIBLE, Status.OPTIMAL) or (
        rec.status is Status.TIMEOUT and rec.step_s is not None
    )
    return 0 if ok else 1


def _exit_interrupted() -> NoReturn:
    """Ctrl-C during a solve: say so and end the process now, with status 130. Not through the
    interpreter's shutdown, which would wait for an engine that cannot be cancelled (HiGHS) to
    reach its time limit (see `slackswap.solvers.exact._interrupt`); nothing is written yet."""
    print("slackswap: interrupted", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(130)


def history_rows(history: Any) -> list[list[Any]]:
    """A search history as JSON rows: [seconds, plans evaluated, best step (s) or null]."""
    return [[s, n, b if math.isfinite(b) else None] for s, n, b in history]


def summary(rec: Any) -> str:
    """A few lines for people: status, step, throughput, what moved, planning time."""
    lines = [
        f"{rec.instance}  budget {format_bytes(rec.budget_bytes)} "
        f"({format_percent(rec.budget_fraction)} of P)  solver {rec.solver}  seed {rec.seed}",
        f"status      {rec.status.value} (stopped by: {rec.stopped_by})",
    ]
    if rec.step_s is not None:
        lines += [
            f"step        {rec.step_s * 1e3:.1f} ms (ideal {rec.ideal_s * 1e3:.1f} ms)",
            f"throughput  {rec.throughput * 100:.2f}% of ideal",
            f"recompute   {rec.recompute_s * 1e3:.1f} ms; stalls fwd {rec.fwd_stall_s * 1e3:.1f}"
            f" ms, bwd {rec.bwd_stall_s * 1e3:.1f} ms",
        ]
    if rec.swap_bytes is not None:
        lines.append(
            f"plan        swap {format_bytes(rec.swap_bytes)}, recompute "
            f"{format_bytes(rec.recompute_bytes)} ({rec.runtime} runtime)"
        )
    if rec.lower_bound_s is not None:
        gap = "" if rec.gap is None else f", gap {rec.gap * 100:.2f}%"
        lines.append(f"bound       {rec.lower_bound_s * 1e3:.1f} ms{gap}")
    lines.append(f"planning    {rec.plan_s * 1e3:.1f} ms")
    if rec.evaluations is not None:
        # The history lists each improvement, then the run's end (which repeats the best).
        found = [h for h in rec.history if math.isfinite(h[2])]
        best = ""
        if found:
            at = next(h for h in found if h[2] == found[-1][2])
            best = f"; its best step first found after {at[0]:.2f} s ({at[1]:,} plans)"
        lines.append(f"search      {rec.evaluations:,} plans evaluated{best}")
    if rec.reason:
        lines.append(f"reason      {rec.reason}")
    if rec.min_budget_bytes is not None and rec.step_s is None:
        lines.append(
            f"smallest    {format_bytes(rec.min_budget_bytes)} fits this solver "
            f"({format_percent(rec.min_budget_bytes / (rec.budget_bytes / rec.budget_fraction))}"
            " of P)"
        )
    if rec.error:
        lines.append(f"error       {rec.error}")
    return "\n".join(lines)
