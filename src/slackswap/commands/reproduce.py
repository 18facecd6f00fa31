"""``slackswap reproduce NAME``: the paper's numbers beside the toolkit's, with deviations."""

from __future__ import annotations

import argparse
import importlib

from slackswap.errors import UserError

# name -> module under slackswap.reproduce; each has add_arguments(parser) and main(args) -> int.
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
    rsub = p.add_subparsers(dest="report", metavar="REPORT")
    for name, help_text in REPORTS.items():
        try:
            module = importlib.import_module(f"slackswap.reproduce.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"slackswap.reproduce.{name}":
                continue  # report not built yet
            raise
        # argparse %-formats help strings (not descriptions): "40% of" must be escaped.
        rp = rsub.add_parser(name, help=help_text.replace("%", "%%"), description=help_text)
        module.add_arguments(rp)
        rp.set_defaults(func=module.main)
    p.set_defaults(func=_missing_report)


def _missing_report(args: argparse.Namespace) -> int:
    raise UserError("name a report: " + ", ".join(REPORTS))
