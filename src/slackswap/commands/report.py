"""``slackswap report RESULTS -o DIR``: the gap table and every figure the results support;
``--table FMT`` prints the summary for a paper instead, ``--compare A,B`` a paired test."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slackswap.analysis.checks import output_dir
from slackswap.analysis.gapanalysis import format_gaps, gaps
from slackswap.analysis.progress import add_progress_arguments, phase
from slackswap.analysis.report import FIGURE_NAMES, TRACE_PATTERN, write_report
from slackswap.analysis.results import read_results
from slackswap.analysis.stats import paired_comparison
from slackswap.analysis.tables import TABLE_FORMATS as _TABLE_FORMATS
from slackswap.analysis.tables import format_table
from slackswap.errors import UserError
from slackswap.textfile import check_output_path

#: The --table formats.
TABLE_FORMATS = _TABLE_FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="gap table and figures (PNG, SVG) from a results file",
        description=(
            "Print the gap table of a results file (best known plan, best bound, each solver's "
            "gaps, mean +- std over seeds) and, with -o DIR, draw the figures into DIR "
            "(throughput and gap against budget, time breakdown, gap heat map, planning time, "
            "performance profile, ECDF of runs reaching a gap, anytime curves). Nothing is "
            "rerun unless --rerun is given: the plan and timeline figures rerun one case, a "
            "search for its whole time limit."
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
    rr = p.add_mutually_exclusive_group()
    rr.add_argument(
        "--rerun", action="store_true",
        help="also draw the plan and timeline figures (and Chrome traces): they rerun one case, "
        "a search or exact solver for up to its time limit (off by default)",
    )  # fmt: skip
    rr.add_argument("--no-rerun", action="store_true", help="rerun nothing (the default)")
    p.add_argument(
        "--format", default="png,svg", help="image formats of the figures: png, svg, pdf "
        "(default png,svg); tables take --table",
    )  # fmt: skip
    p.add_argument(
        "--table", choices=TABLE_FORMATS, metavar="FMT",
        help="print the summary table instead of the gap table: markdown, latex (booktabs, best "
        "of each case in bold), csv or json (one object); mean +- std over seeds",
    )  # fmt: skip
    p.add_argument(
        "--compare",
        metavar="A,B",
        help="paired comparison of two solvers over the cases (mean step over seeds): wins, "
        "ties and the Wilcoxon signed-rank p-value",
    )
    add_progress_arguments(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    formats = tuple(f.strip().lower() for f in args.format.split(",") if f.strip())
    bad = [f for f in formats if f not in ("png", "svg", "pdf")]  # checked before the work
    if bad or not formats:
        hint = f" (for a table: --table {bad[0]})" if bad and bad[0] in TABLE_FORMATS else ""
        raise UserError(
            f"--format: {bad[0] if bad else args.format!r} is not png, svg or pdf{hint}"
        )
    pair = None
    if args.compare is not None:
        pair = [x.strip() for x in args.compare.split(",")]
        if len(pair) != 2 or not all(pair) or pair[0] == pair[1]:
            raise UserError(f"--compare: expected two solver labels A,B, got {args.compare!r}")
    if args.output is not None:
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
    if pair is not None:
        labels = set(df["solver"].astype(str))
        for name in pair:
            if name not in labels:
                raise UserError(
                    f"--compare: solver {name!r} is not in {args.results} "
                    f"(it has {', '.join(sorted(labels))})"
                )
    if args.table is not None:
        print(format_table(df, args.table, source=str(args.results)))
    else:
        print(format_gaps(gaps(df)))
    if pair is not None:
        # stderr with a machine-readable table on stdout, so the table stays parseable
        out = sys.stderr if args.table is not None else sys.stdout
        print(paired_comparison(df, pair[0], pair[1]).text(), file=out)
    if args.output is None:
        return 0

    phase("report", f"drawing the figures into {args.output}", args.progress)
    rep = write_report(
        df,
        args.output,
        breakdown_budget=args.breakdown_budget,
        instance=args.instance,
        rerun=args.rerun,
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
