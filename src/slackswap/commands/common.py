"""Helpers shared by the CLI commands: loading instances, parsing budgets, printing tables."""

from __future__ import annotations

import argparse
from typing import Any

# Tables, JSON and the argparse helpers the reports share live in slackswap.console (the reports
# and analysis sit below the commands); the commands import them from here as before.
from slackswap.instance import Instance
from slackswap.instances.catalog import load


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows every option's default and marks required options.

    A default is shown unless the help already names one, the option is a flag (its default is
    not being given; a flag's help says when it is the default behaviour), or the default says
    nothing (None or an empty list: an option that is unset).
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if text == argparse.SUPPRESS:
            return text
        if action.required and action.option_strings:
            text += " (required)"
        default = action.default
        shown = "default" in text.lower()
        if (
            not shown
            and action.option_strings
            and action.nargs != 0
            and default not in (None, argparse.SUPPRESS)
            and default != []
        ):
            text += " (default: %(default)s)"
        return text

    def _split_lines(self, text: str, width: int) -> list[str]:
        # As argparse does, but never at a hyphen: "bert-large", "llama-7b@h100-pcie5" stay whole.
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """The CLI's parser: `HelpFormatter` for it and, through ``add_subparsers``, every subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def load_instance_arg(name_or_path: str) -> Instance:
    """An instance from a CLI argument; user errors surface as one line, exit 2."""

    return load(name_or_path)
