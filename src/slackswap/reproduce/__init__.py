"""Reproduction reports: each module prints paper value, toolkit value and deviation."""
