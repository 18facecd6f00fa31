"""How figures and reports show a solver: registry metadata, so a new solver (a plug-in too)
needs no edit of the analysis code, which reads it from the registry entry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Display:
    """A solver's look in figures and tables (pass it to `register`).

    ``colour``/``marker``/``emphasis``: kept for callers of the registry; the figures draw
    every solver in its own colour-blind-safe colour, marker and line style by its place in
    ``order`` (`slackswap.analysis.styles`). ``order``: figures and tables list solvers by it (lower first; None after those
    that set one, in order of appearance). ``label``: the policy's name in prose and tables
    (``vDNN``); figures label a line by the run's label (name and changed options) so two
    configurations stay apart. ``featured``: the report reruns the featured solvers first (lower
    first) for its plan and timeline figures.
    """

    colour: str | None = None
    marker: str | None = None
    emphasis: bool = False
    order: float | None = None
    label: str | None = None
    featured: int | None = None
