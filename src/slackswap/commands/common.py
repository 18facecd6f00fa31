"""Helpers shared by the CLI commands: loading instances, parsing budgets, printing tables."""

from __future__ import annotations

# Tables, JSON and the argparse helpers the reports share live in slackswap.console (the reports
# and analysis sit below the commands); the commands import them from here as before.
from slackswap.commands.parser import HelpFormatter, Parser
from slackswap.instance import Instance
from slackswap.instances.catalog import load

__all__ = ["HelpFormatter", "Parser", "load_instance_arg"]


def load_instance_arg(name_or_path: str) -> Instance:
    """An instance from a CLI argument; user errors surface as one line, exit 2."""

    return load(name_or_path)
