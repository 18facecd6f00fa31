"""The CLI's parser class: help that shows defaults, and "did you mean" for every choice.

Light on purpose (argparse and the standard library only): ``slackswap --help`` builds the top
parser with it before any command module is imported.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from slackswap.didyoumean import did_you_mean


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
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """The CLI's parser: `HelpFormatter` for it and, through ``add_subparsers``, every
    subcommand; a value outside an option's choices (a command name too) is refused with the
    closest choices named."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(c) for c in choices]
        raise argparse.ArgumentError(
            action,
            f"invalid choice: {value!r}{did_you_mean(value, names)} "
            f"(choose from {', '.join(names)})",
        )
