"""``slackswap reproduce NAME``: the paper's numbers beside the toolkit's, with deviations."""

from __future__ import annotations

import argparse

from slackswap.commands.lazy import LazyCommands
from slackswap.errors import UserError

# name -> module under slackswap.reproduce (imported only when that report is chosen); each has
# add_arguments(parser) and main(args) -> int.
REPORTS = {
    "table1": "Table 1 and the checkpoint-offload essay's figures (workload models)",
    "table2": "Table 2: where the time goes at 40% of the peak",
    "table3": "Table 3: SlackSwap, ablations, genetic search, planning time",
    "fig4": "Figure 4: throughput against memory budget, every policy",
    "fig6": "Figure 6: sensitivity to link bandwidth and sequence length",
    "gaps": "Certified optimality gaps from the exact solvers' lower bounds",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="reproduce a table or figure of the paper")
    rsub = p.add_subparsers(dest="report", metavar="REPORT", action=LazyCommands)
    assert isinstance(rsub, LazyCommands)  # for the type checker: argparse types it as its own
    for name, help_text in REPORTS.items():
        rsub.add_lazy(name, f"slackswap.reproduce.{name}", help_text)
    p.set_defaults(func=_missing_report)


def _missing_report(args: argparse.Namespace) -> int:
    raise UserError("name a report: " + ", ".join(REPORTS))
