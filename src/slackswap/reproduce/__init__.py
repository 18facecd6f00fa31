"""Reproduction reports: each module prints paper value, toolkit value and deviation."""

# As in slackswap.commands: the parser imports every report module to add its arguments, so the
# reports import the solvers, simulator and analysis inside main(), not at the top.
