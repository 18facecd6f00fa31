"""``slackswap report RESULTS -o DIR``: the gap table and every figure the results support."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slackswap.analysis.checks import output_dir
from slackswap.analysis.gapanalysis import format_gaps, gaps
from slackswap.analysis.progress import add_progress_arguments, phase
from slackswap.analysis.report import FIGURE_NAMES, TRACE_PATTERN, write_report
from slackswap.analysis.results import read_results
from slackswap.errors import UserError
from slackswap.textfile import check_output_path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="gap table and figures (PNG, SVG) from a results file",
        description=(
            "Print the gap table of a results file (best known plan, best bound, each solver's "
            "gaps) and, with -o DIR, draw the figures into DIR."
        ),
    )
    p.add_argument("results", metavar="RESULTS", help="results file (.csv or .parquet)")
    p.add_argument(
        "-o", "--output", metavar="DIR", help="directory for the figures (default: none drawn)"
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace figures already in DIR (else refused)"
    )
    p.add_argument(
        "--breakdown-budget", type=float, default=0.4, metavar="F",
        help="budget (fraction of P) of the time-breakdown bars (default 0.4)",
    )  # fmt: skip
    p.add_argument(
        "--instance",
        help="instance of the plan and timeline figures (default: gpt2-xl, else first)",
    )
    p.add_argument(
        "--no-rerun", action="store_true",
        help="skip the plan and timeline figures (they rerun one case)",
    )  # fmt: skip
    p.add_argument("--format", default="png,svg", help="image formats (default png,svg)")
    add_progress_arguments(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    formats = tuple(f.strip().lower() for f in args.format.split(",") if f.strip())
    if args.output is not None:  # checked before the work, not after it
        bad = [f for f in formats if f not in ("png", "svg", "pdf")]
        if bad or not formats:
            raise UserError(f"--format: {bad[0] if bad else args.format!r} is not png, svg or pdf")
        if not 0 < args.breakdown_budget <= 1.5:
            raise UserError(
                f"--breakdown-budget must be a fraction of P, got {args.breakdown_budget}"
            )
    df = read_results(args.results)
    if df.empty:
        raise UserError(f"{args.results}: no result rows, nothing to report")
    names = list(dict.fromkeys(df["instance"].astype(str)))
    if args.instance is not None and args.instance not in names:
        raise UserError(
            f"--instance {args.instance!r}: not in {args.results} (it has {', '.join(names)})"
        )
    if args.output is not None:  # before the gap table and the figures: nothing half done
        _check_output(args.output, formats, overwrite=args.overwrite)
    print(format_gaps(gaps(df)))
    if args.output is None:
        return 0

    phase("report", f"drawing the figures into {args.output}", args.progress)
    rep = write_report(
        df,
        args.output,
        breakdown_budget=args.breakdown_budget,
        instance=args.instance,
        rerun=not args.no_rerun,
        formats=formats,
        progress=lambda what: phase("report", what, args.progress),
    )
    for note in rep.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {len(rep.files)} files to {args.output}", file=sys.stderr)
    return 0


def _check_output(directory: str, formats: tuple[str, ...], *, overwrite: bool) -> None:
    """Refuse to replace figures or traces already in ``directory`` unless ``overwrite``."""

    names = [f"{n}.{fmt}" for n in FIGURE_NAMES for fmt in formats]
    d = check_output_path(Path(directory), "-o")
    if d.is_dir():
        names += [t.name for t in d.glob(TRACE_PATTERN)]
    output_dir(directory, "-o", names, overwrite=overwrite)
