"""CLI command groups; each module registers its subcommands on the ``slackswap`` parser."""

# The command modules import the library inside their command functions, on purpose: building
# the parser (even for ``slackswap --help``) imports every command module and every report
# module under slackswap.reproduce, and top-level imports would load numba, pandas and
# matplotlib for it.
