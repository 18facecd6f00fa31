"""``python -m slackswap`` and the ``slackswap`` console script.

SIGINT is taken before anything heavy is imported (`slackswap.interrupts`): a Ctrl-C at any
moment, even during the imports, ends with one line and exit status 130.
"""

from slackswap import interrupts

if __name__ == "__main__":  # python -m: first, before anything else is imported
    interrupts.install()

import sys  # noqa: E402


def main() -> int:
    """The command line's entry point: the exit status of `slackswap.cli.main`."""
    interrupts.install()  # the console script calls this, having imported only this module
    interrupts.window("start")
    # lazy: imported after install(), so a Ctrl-C during the imports ends with one line
    from slackswap.cli import main as cli_main

    status = cli_main()
    interrupts.set_exit_status(status)  # the last exit hook ends the process with it
    interrupts.window("shutdown")  # then the interpreter's own: atexit hooks, workers joined
    return status


if __name__ == "__main__":
    sys.exit(main())
