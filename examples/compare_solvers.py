"""Run a small comparison and draw what a paper on planners shows: the performance profile, the
ECDF of runs reaching a gap, the anytime curves, a table of mean +- std over seeds and a paired
test.

    python examples/compare_solvers.py [--sweep FILE] [--out DIR] [--time-limit S]

Defaults: ``examples/compare_sweep.toml`` and ``compare-out/``. The results file
(``DIR/results.csv``) can be read again with ``slackswap report DIR/results.csv``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from slackswap.analysis import comparefigs as CF
from slackswap.analysis import figures as F
from slackswap.analysis import load_sweep, run_sweep
from slackswap.analysis.stats import paired_comparison
from slackswap.analysis.tables import format_table

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> list[Path]:
    """Run the sweep, write the three figures as PNG into the output folder and print the
    table and the paired comparison; returns the figure files."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", default=str(HERE / "compare_sweep.toml"))
    ap.add_argument("--out", default="compare-out")
    ap.add_argument("--time-limit", type=float, help="seconds per solve (default: the file's)")
    args = ap.parse_args(argv)
    sweep = load_sweep(args.sweep)
    if args.time_limit is not None:
        sweep.time_limit = args.time_limit
    out = Path(args.out)
    df = run_sweep(sweep, results=out / "results.csv", overwrite=True, progress=False)
    files = []
    for name, draw in (
        ("performance_profile", CF.performance_profile),
        ("ecdf_gap", CF.ecdf_gap),
        ("anytime", CF.anytime),
    ):
        files += F.save(draw(df), out, name, ("png",))
    print(format_table(df, "markdown"))
    print(paired_comparison(df, "slackswap", "ga").text())
    return files


if __name__ == "__main__":
    for path in main():
        print(f"wrote {path}")
