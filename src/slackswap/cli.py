"""The ``slackswap`` command: a thin layer over the library, one module per command group."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from slackswap import __version__, interrupts
from slackswap.commands.lazy import LazyCommands
from slackswap.commands.parser import Parser  # its help shows defaults, in every subcommand
from slackswap.errors import UserError
from slackswap.textfile import one_line

#: Every command: its module under slackswap.commands (imported only when the command is chosen,
#: `slackswap.commands.lazy`) and the one line ``slackswap --help`` shows for it. A module's
#: ``register(subparsers)`` adds its commands and sets ``func`` on them.
COMMANDS = {
    "instance": ("slackswap.commands.instance", "build or inspect instances"),
    "linkbudget": (
        "slackswap.commands.instance",
        "Eq. 1 across GPU generations and workloads (Fig. 1)",
    ),
    "offload": (
        "slackswap.commands.instance",
        "checkpoint-offload calculator (the companion essay)",
    ),
    "simulate": (
        "slackswap.commands.simulate",
        "simulate one plan at one budget (step time, stalls, copies, peak memory)",
    ),
    "solvers": ("slackswap.commands.solve", "list the registered solvers, their tags and options"),
    "runtimes": (
        "slackswap.commands.solve",
        "list the simulator's execution policies (runtimes) and the solvers whose plans run on "
        "each",
    ),
    "solve": (
        "slackswap.commands.solve",
        "plan one instance at one budget with one solver and score it in the simulator",
    ),
    "compare": (
        "slackswap.commands.compare",
        "run solvers over instances x budgets x seeds, in parallel",
    ),
    "report": ("slackswap.commands.report", "gap table and figures (PNG, SVG) from a results file"),
    "profile": (
        "slackswap.commands.profile",
        "profile one training step of a torch model into an instance file (needs torch)",
    ),
    "run": (
        "slackswap.commands.run",
        "run a solver's plan on a real PyTorch step and compare it with the simulator "
        "(needs torch)",
    ),
    "reproduce": ("slackswap.commands.reproduce", "reproduce a table or figure of the paper"),
}

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
    if status in (parser.epilog or ""):  # a report's stub, filled in place when it loads
        return
    parser.epilog = f"{parser.epilog}\n\n{status}" if parser.epilog else status
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _add_epilogs(sub, f"{path} {name}")


def build_parser(*, every_command: bool = False) -> argparse.ArgumentParser:
    """The ``slackswap`` parser. A command's module is imported when argparse dispatches to it
    (`LazyCommands`); ``every_command`` loads them all now (tests walk every help page)."""
    parser = Parser(
        prog="slackswap",
        description="Plan activation memory in DNN training: keep, swap or recompute.",
    )
    parser.add_argument("--version", action="version", version=f"slackswap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", action=LazyCommands)
    assert isinstance(sub, LazyCommands)  # for the type checker: argparse types it as its own
    for name, (module, summary) in COMMANDS.items():
        sub.add_lazy(name, module, summary)
    helper = sub.add_parser("help", help="show the help of a command: slackswap help [COMMAND]")
    helper.add_argument("topic", nargs="*", metavar="COMMAND", help="a command (and subcommand)")
    helper.set_defaults(func=lambda args: _help(parser, args.topic))
    _add_epilogs(parser)
    sub.on_load = _add_epilogs
    if every_command:
        sub.load_all()
    return parser


def _help(parser: argparse.ArgumentParser, topic: list[str]) -> int:
    """``slackswap help solve`` is ``slackswap solve --help``; an unknown name is refused as an
    unknown command is (exit 2, the closest names)."""
    try:
        parser.parse_args([*topic, "--help"])
    except SystemExit as done:  # --help ends in SystemExit(0) once printed; a bad name in 2
        return int(done.code or 0)
    return 0


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
    interrupts.install()
    sys.exit(main())
