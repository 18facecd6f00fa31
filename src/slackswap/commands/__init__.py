"""CLI command groups; each module registers its subcommands on the ``slackswap`` parser.

A command's module is imported only when that command is chosen (`slackswap.commands.lazy`,
the command line's one lazy boundary), so each imports the library at its top: ``slackswap
--help`` never imports them.
"""
