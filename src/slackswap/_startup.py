"""The first code of ours the ``slackswap`` command runs: the package's ``__init__`` calls
`take_sigint_if_command` before any other import, so a Ctrl-C during the imports that follow
ends with one line and exit status 130 (`slackswap.interrupts` replaces the handler with its
full one as soon as it is imported).

Only modules the interpreter has already loaded at start-up are used here (``os``, ``sys``,
``time``, the C half of ``signal``): ``signal`` itself imports ``enum``, and ``typing`` imports
``re``, tens of milliseconds during which a Ctrl-C would still be Python's traceback.
"""

import _signal
import os
import sys
import time

EXIT_INTERRUPTED = 130
LINE = "slackswap: interrupted"

#: The interpreter options that take the next argument as their value.
_OPTIONS_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})
_COMMAND_MODULES = frozenset({"slackswap", "slackswap.__main__"})


def started_as_command(orig_argv: "list[str] | None" = None) -> bool:
    """Whether this interpreter was started as the ``slackswap`` command (``python -m
    slackswap``, or the console script, which the kernel runs as ``python .../slackswap``),
    read from its original command line. A library caller's ``import slackswap`` never is."""
    argv = list(getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv)[1:]
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return i + 1 < len(argv) and argv[i + 1] in _COMMAND_MODULES
        if arg.startswith("-m"):
            return arg[2:] in _COMMAND_MODULES
        if arg.startswith("-c") or arg == "-":
            return False
        if not arg.startswith("-"):  # the script: the console script is named after us
            return os.path.splitext(os.path.basename(arg))[0] == "slackswap"
        i += 2 if arg in _OPTIONS_WITH_VALUE else 1
    return False


def _end_at_once(signum: int, frame: object) -> None:
    try:
        os.write(2, (LINE + "\n").encode())
    except OSError:
        pass
    os._exit(EXIT_INTERRUPTED)


def take_sigint_if_command() -> None:
    """When started as the command: a Ctrl-C from now on ends the process at once, with the
    line and exit status 130 (nothing needs cleaning before the command runs)."""
    if started_as_command():
        _signal.signal(_signal.SIGINT, _end_at_once)
        window("package")


def window(name: str) -> None:
    """Sleep here when ``SLACKSWAP_TEST_SLEEP_IN`` names this window (tests only); first write
    the file ``SLACKSWAP_TEST_SLEEP_FLAG`` names, if any, so a test knows the sleep began."""
    wanted = os.environ.get("SLACKSWAP_TEST_SLEEP_IN")
    if not wanted:
        return
    which, _, seconds = wanted.partition(":")
    if which == name:
        flag = os.environ.get("SLACKSWAP_TEST_SLEEP_FLAG")
        if flag:
            with open(flag, "w") as fh:
                fh.write(name)
        time.sleep(float(seconds or 3.0))
