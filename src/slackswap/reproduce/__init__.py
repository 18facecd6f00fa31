"""Reproduction reports: each module prints paper value, toolkit value and deviation.

A report's module is imported only when ``slackswap reproduce NAME`` names it
(`slackswap.commands.lazy`), so each imports what it uses at the top.
"""
