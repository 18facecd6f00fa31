"""``slackswap compare``: run solvers over instances x budgets x seeds (the batch runner)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from slackswap.analysis import checks
from slackswap.analysis.gapanalysis import gaps
from slackswap.analysis.jobs import SolverSpec, Sweep, parse_budgets, ref_from_arg
from slackswap.analysis.progress import add_progress_arguments, failure_summary
from slackswap.analysis.runner import run_sweep
from slackswap.analysis.sweepfile import load_sweep, parse_solvers
from slackswap.console import add_execution_arguments, format_bytes, format_percent, format_table
from slackswap.errors import UserError
from slackswap.plan import Budget
from slackswap.solvers import REGISTRY
from slackswap.solvers.running import EXACT_TIME_LIMIT_S
from slackswap.userdoc import parse_option_value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="run solvers over instances x budgets x seeds, in parallel",
        description=(
            "Run every (instance, budget, solver, seed) job, append each finished row to the "
            "results file, and print a table (or one JSON object per line with --json)."
        ),
    )
    p.add_argument("instances", nargs="*", metavar="INSTANCE", help="catalog name or file")
    p.add_argument(
        "--budgets",
        help="fractions of the peak P or bytes: 1.0,0.5,11GB, 50%%, or a range 1.0:0.1:-0.1 "
        "(required without --sweep)",
    )
    p.add_argument(
        "--solvers",
        help="comma-separated solver names, see `slackswap solvers` (required without --sweep)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="SOLVER.KEY=VALUE",
        help="a solver option (VALUE read as JSON, else text); repeatable",
    )
    p.add_argument(
        "--time-limit",
        metavar="S",
        help=f"seconds per solve (default: {EXACT_TIME_LIMIT_S:g} for exact solvers, none for "
        "the others, which end by their own rules; searches and exact solvers use it)",
    )
    p.add_argument(
        "--job-timeout",
        metavar="S",
        help="hard wall-clock limit per job (default: 2 x time limit + 30 s; none without one)",
    )
    p.add_argument("--seeds", help="comma-separated seeds (default 0)")
    p.add_argument("--json", action="store_true", help="one JSON object per line and job")
    p.add_argument("-o", "--output", metavar="FILE", help="results file (.csv or .parquet)")
    add_execution_arguments(p)
    p.add_argument("--resume", action="store_true", help="skip jobs already in the results file")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing results file (else refused)"
    )
    p.add_argument(
        "--sweep", metavar="FILE", help="a sweep file (.toml or .yaml); options given here win"
    )
    mb = p.add_mutually_exclusive_group()
    mb.add_argument(
        "--min-budget",
        dest="no_min_budget",
        action="store_false",
        default=False,  # either order of the two: bisect unless --no-min-budget
        help="bisect the smallest feasible budget of infeasible runs (the default here)",
    )
    mb.add_argument(
        "--no-min-budget", action="store_true", help="do not bisect it (faster on infeasible runs)"
    )
    add_progress_arguments(p)
    p.set_defaults(func=main)


def build_sweep(args: argparse.Namespace) -> Any:
    """The sweep the arguments describe (a sweep file, overridden by explicit options)."""

    sweep = load_sweep(args.sweep) if args.sweep else None
    refs = [ref_from_arg(name) for name in args.instances]
    if sweep is None:
        if not refs:
            raise UserError("name at least one INSTANCE (or give --sweep FILE)")
        if not args.budgets:
            raise UserError("--budgets is required (e.g. 1.0,0.5,0.2 or 1.0:0.1:-0.1)")
        if not args.solvers:
            raise UserError("--solvers is required (e.g. slackswap,vdnn; see `slackswap solvers`)")
        sweep = Sweep(instances=refs, budgets=[], solvers=[])
    else:
        sweep.instances = [*sweep.instances, *refs]
    if args.budgets:
        sweep.budgets = parse_budgets(args.budgets)
    if args.solvers:
        sweep.solvers = parse_solvers(args.solvers)
    if args.option:
        sweep.solvers = _apply_options(sweep.solvers, args.option)
    if args.seeds is not None:
        sweep.seeds = checks.seeds(args.seeds, "--seeds")
    if args.time_limit is not None:
        sweep.time_limit = checks.seconds(args.time_limit, "--time-limit")
    if args.job_timeout is not None:
        sweep.job_timeout = checks.seconds(args.job_timeout, "--job-timeout")
    if args.no_min_budget:
        sweep.find_min_budget = False
    if args.output is not None:
        if not args.output.strip():
            raise UserError(f"-o: expected a results file name, got {args.output!r}")
        sweep.output = args.output
    if sweep.output:  # --resume reads and extends it; any other input it must not be
        inputs = {"the sweep file": args.sweep}
        inputs.update({f"the instance file {name}": name for name in args.instances})
        checks.not_an_input(Path(sweep.output), "-o", inputs)
    for note in sweep.check():
        checks.warn(note)
    return sweep


def _apply_options(solvers: list[Any], items: list[str]) -> list[Any]:
    extra: dict[str, dict[str, Any]] = {}
    for item in items:
        target, eq, value = item.partition("=")
        name, dot, key = target.rpartition(".")
        if not eq or not dot or not name or not key:
            raise UserError(f"--option {item!r}: expected SOLVER.KEY=VALUE")
        name = REGISTRY.canonical(name)
        parsed = parse_option_value(value, f"--option {target}")
        extra.setdefault(name, {})[key] = parsed
    names = {s.name for s in solvers}
    for name in extra:
        if name not in names:
            raise UserError(f"--option names solver {name!r}, which is not in --solvers")
    return [
        SolverSpec.of(s.name, {**dict(s.options), **extra.get(s.name, {})}, s.time_limit)
        for s in solvers
    ]


def main(args: argparse.Namespace) -> int:
    sweep = build_sweep(args)
    if args.resume and not sweep.output:
        raise UserError("--resume needs a results file: -o FILE (or output in the sweep file)")
    if args.resume and args.overwrite:
        raise UserError("--resume continues the results file, --overwrite replaces it: pick one")
    if args.scheduler and args.backend != "dask":
        raise UserError("--scheduler needs --backend dask")

    def emit(row: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(row, allow_nan=False, default=_json_default) + "\n")
        sys.stdout.flush()

    df = run_sweep(
        sweep,
        results=sweep.output,
        resume=args.resume,
        overwrite=args.overwrite,
        jobs=args.jobs,
        backend=args.backend,
        scheduler=args.scheduler,
        progress=args.progress,
        on_row=emit if args.json else None,
        desc="compare",
    )
    if not args.json:
        print(format_results(df))
        print()
        print(format_key(df))
    for line in case_summary(df):
        print(line, file=sys.stderr if args.json else sys.stdout)
    for line in failure_summary(df.to_dict("records")):
        print(f"slackswap: {line}" if not line.startswith(" ") else line, file=sys.stderr)
    if sweep.output:
        print(f"results: {sweep.output} ({len(df)} rows)", file=sys.stderr)
    return 0


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def format_results(df: Any) -> str:
    """The per-job table (ms, %, bytes) for the terminal; rows without a plan say why and, when
    known, the smallest budget that fits that solver."""

    def f(x: Any, scale: float, digits: int) -> str:
        return "-" if pd.isna(x) else f"{scale * float(x):.{digits}f}"

    def nbytes(x: Any) -> str:
        return "-" if pd.isna(x) else format_bytes(float(x))

    # Plans scored: a column only when some row is a search (the GA), whose count it is.
    searched = "evaluations" in df and bool(df["evaluations"].notna().any())
    planless = bool(df["step_s"].isna().any())
    rows = []
    for r in df.itertuples(index=False):
        plans = (
            [] if not searched else ["-" if pd.isna(r.evaluations) else f"{int(r.evaluations):,}"]
        )
        why = [] if not planless else _no_plan_columns(r, format_bytes, format_percent)
        rows.append(
            [
                r.instance,
                _budget_cell(r, format_bytes, format_percent),
                r.solver,
                r.seed,
                r.status,
                _text(getattr(r, "stopped_by", None)),
                f(r.step_s, 1e3, 1),
                f(r.throughput, 100, 1),
                f(r.gap, 100, 2),
                f(r.recompute_s, 1e3, 1),
                f(r.fwd_stall_s, 1e3, 1),
                f(r.bwd_stall_s, 1e3, 1),
                nbytes(r.d2h_bytes),
                f(r.plan_s, 1e3, 1),
                *plans,
                *why,
            ]
        )
    header = [
        "instance", "budget", "solver", "seed", "status", "stopped by", "step ms", "thr %",
        "gap bound %", "recomp ms", "fwd stall ms", "bwd stall ms", "D2H", "plan ms",
    ]  # fmt: skip
    header += ["plans"] if searched else []
    header += ["fits from", "no plan: why"] if planless else []
    return format_table(rows, header)


#: What the table's columns hold, printed under it (the README's Results section says more).
KEY = (
    "step ms: simulated training step (lower is better); thr %: ideal step / step (higher is "
    "better); gap bound %: step above the solver's own proven lower bound, exact solvers only "
    "(lower is better; 0 = proven optimal); recomp ms, fwd/bwd stall ms: time recomputing and "
    "waiting for copies (lower is better); D2H: bytes copied to the host; plan ms: planning "
    "time; plans: plans a search evaluated; status: optimal | feasible (a plan that fits) | "
    "infeasible | timeout (no plan by the time limit) | error; stopped by: what ended the run"
)


def _text(x: Any) -> str:
    import pandas as pd

    return "-" if x is None or pd.isna(x) else str(x)


def format_key(df: Any) -> str:
    """The table's key, and which solvers ran once per case because the seed never changes
    their plans (``seed_independent``)."""
    import textwrap

    lines = textwrap.wrap("key: " + KEY, 100, break_on_hyphens=False)
    seeds = df["seed"].dropna().nunique() if "seed" in df else 0
    if "seed_independent" in df:
        once_rows = df["seed_independent"].fillna(0).astype(int) == 1  # NA: a row from an old file
        once = list(dict.fromkeys(df.loc[once_rows, "solver"].astype(str)))
        if once:
            text = (
                f"ran once per case, the seed never changes their plans (seed-independent): "
                f"{', '.join(once)}"
            )
            if seeds > 1:
                text += f"; the other solvers ran once per seed ({seeds} seeds)"
            lines += textwrap.wrap(text, 100, break_on_hyphens=False)
    return "\n".join(lines)


def case_summary(df: Any) -> list[str]:
    """One line per (instance, budget): the solver with the fastest plan, its step and
    throughput, and how far it is from the best proven lower bound on the step."""

    g = gaps(df)
    out = []
    for (inst, b), sub in g.groupby(["instance", "budget_fraction"], sort=False):
        where = f"{inst} at {100 * float(b):g}% of P"
        best = sub[sub["solver"] == sub["best_solver"]]
        if best.empty:
            out.append(f"best: {where}: no solver found a plan")
            continue
        r = best.iloc[0]
        bound = "the ideal step" if r["bound_source"] == "ideal" else f"{r['bound_source']}'s bound"
        out.append(
            f"best: {where}: {r['best_solver']} {1e3 * float(r['best_known_s']):.2f} ms "
            f"(throughput {100 * float(r['throughput']):.1f}%), "
            f"{100 * float(r['certified_gap']):.3g}% above the best lower bound ({bound})"
        )
    return out


def _budget_cell(r: Any, format_bytes: Any, format_percent: Any) -> str:
    """A budget as given: a share of P in %, bytes as bytes (with their share of P)."""

    key = getattr(r, "budget", None)  # the job's budget as given (absent from a bare record)
    if pd.isna(r.budget_fraction):
        return str(key)
    try:
        given = Budget.parse(str(key))
    except ValueError:  # none, or a key written before bare numbers above 1 were refused
        given = Budget.fraction(float(r.budget_fraction))
    if given.kind == "bytes" and not pd.isna(r.budget_bytes):
        return f"{format_bytes(float(r.budget_bytes))} ({format_percent(r.budget_fraction)})"
    return format_percent(float(r.budget_fraction))


def _no_plan_columns(r: Any, format_bytes: Any, format_percent: Any) -> list[str]:
    """For a row without a plan: the smallest budget that fits (bytes, % of P) and the reason."""

    if not pd.isna(r.step_s):
        return ["", ""]
    fits = "-"
    if not pd.isna(r.min_budget_bytes) and not pd.isna(r.budget_fraction) and r.budget_bytes:
        share = float(r.min_budget_bytes) / float(r.budget_bytes) * float(r.budget_fraction)
        fits = f"{format_bytes(float(r.min_budget_bytes))} ({format_percent(share)})"
    error = r.error if isinstance(r.error, str) and r.error else ""
    reason = r.reason if isinstance(r.reason, str) and r.reason else ""
    return [fits, (error or reason or r.status).splitlines()[0]]
