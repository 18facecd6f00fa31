"""CLI command groups; each module registers its subcommands on the ``slackswap`` parser."""
