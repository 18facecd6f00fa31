"""The ``slackswap`` command: a thin layer over the library, one module per command group."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from slackswap import __version__, interrupts
from slackswap.commands.common import Parser  # its help shows defaults, in every subcommand
from slackswap.errors import UserError
from slackswap.textfile import one_line

# Each module defines ``register(subparsers)`` and sets ``func`` on the parsers it adds.
COMMAND_MODULES = (
    "slackswap.commands.instance",  # instance build|info, linkbudget, offload
    "slackswap.commands.simulate",  # simulate
    "slackswap.commands.solve",  # solvers, solve
    "slackswap.commands.compare",  # compare (batch runner)
    "slackswap.commands.report",  # report
    "slackswap.commands.profile",  # profile
    "slackswap.commands.run",  # run (a plan on a real PyTorch step)
    "slackswap.commands.reproduce",  # reproduce table1|table2|table3|fig4|fig6
)

EXIT_USAGE = 2

#: Exit statuses every command shares, then what some commands add (by their command line).
EXIT_STATUSES = (
    "Exit status: 0 done; 2 bad input (a one-line error on stderr); 130 interrupted (Ctrl-C)"
)
EXIT_STATUS_EXTRA = {
    "solve": "1 when no plan fits the budget (or the solver failed)",
    "simulate": "1 when the plan does not fit the budget",
    "run": "1 when --check finds the planned step's loss or gradients differ",
    "compare": "failed jobs do not change it (the summary on stderr names them)",
    "slackswap": "see each command's --help for what it adds",
}


def exit_status_epilog(command: str) -> str:
    """The exit statuses a command's --help lists (``command``: its command line)."""
    extra = EXIT_STATUS_EXTRA.get(command)
    return f"{EXIT_STATUSES}; {extra}." if extra else f"{EXIT_STATUSES}."


def _add_epilogs(parser: argparse.ArgumentParser, path: str = "slackswap") -> None:
    status = exit_status_epilog(path.removeprefix("slackswap ") if " " in path else path)
    parser.epilog = f"{parser.epilog}\n\n{status}" if parser.epilog else status
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _add_epilogs(sub, f"{path} {name}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="slackswap",
        description="Plan activation memory in DNN training: keep, swap or recompute.",
    )
    parser.add_argument("--version", action="version", version=f"slackswap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        # A command group that fails to import is an error, not a command quietly missing.
        importlib.import_module(name).register(sub)
    _add_epilogs(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad input, with a one-line message; 130 after
    a Ctrl-C, whatever it interrupted)."""

    try:
        # Inside the try: an argument's type check or a bad plug-in may raise UserError (one
        # line, exit 2).
        interrupts.window("imports")
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        interrupts.command_starts()
        interrupts.window("command")
        status = int(args.func(args) or 0)
        interrupts.command_ends()
        interrupts.window("exit")
    except KeyboardInterrupt:
        interrupts.say_interrupted()
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        # After a Ctrl-C, whatever failed (an import cut short: "ImportError: initialization
        # failed"; a worker stopped mid-job) failed because of it.
        if interrupts.was_interrupted():
            interrupts.say_interrupted()
            return 130
        if isinstance(exc, UserError):
            print(f"slackswap: error: {one_line(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
        raise
    if interrupts.was_interrupted():  # a Ctrl-C that the code it hit swallowed
        interrupts.say_interrupted()
        return 130
    return status


if __name__ == "__main__":  # the console script's entry is slackswap.__main__:main
    from slackswap import interrupts

    interrupts.install()
    sys.exit(main())
