"""A reproduced table cell (the paper's value, the toolkit's, the deviation) and how to print it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from slackswap.console import format_table, print_json


@dataclass(frozen=True)
class Cell:
    """One cell. ``abs_tol`` is in the cell's unit; ``rel_tol`` applies where ``abs_tol`` is None
    or the paper's value is at least ``rel_floor`` (Table 2: 15%, or 0.03 below 0.2)."""

    row: str  # e.g. "gpt2-xl 50%"
    column: str  # e.g. "SlackSwap"
    paper: float | None  # None: the paper reports no feasible plan ("none")
    toolkit: float | None  # None: the toolkit found no plan
    unit: str
    abs_tol: float | None = None
    rel_tol: float | None = None
    rel_floor: float = 0.0
    why: str = ""  # explanation where the cell differs (or a note that always applies)
    verdict: bool | None = None  # set when the cell is judged by another rule (a target)
    target: str = ""  # that rule, as the table shows it ("the 10 ms target")

    @property
    def mark(self) -> str:
        """The table's verdict: against the paper (``ok``/``DIFFERS``), or against the cell's
        own target, named (a time the paper's Python planner is not meant to match)."""
        if self.verdict is not None:
            return f"{'meets' if self.verdict else 'MISSES'} {self.target or 'its target'}"
        return "ok" if self.ok else "DIFFERS"

    @property
    def deviation(self) -> float | None:
        if self.paper is None or self.toolkit is None:
            return None
        return self.toolkit - self.paper

    @property
    def ok(self) -> bool:
        if self.verdict is not None:
            return self.verdict
        if self.paper is None or self.toolkit is None:
            return self.paper is None and self.toolkit is None
        dev = abs(self.toolkit - self.paper)
        if self.rel_tol is not None and abs(self.paper) >= self.rel_floor:
            return dev <= self.rel_tol * abs(self.paper) + 1e-12
        return self.abs_tol is not None and dev <= self.abs_tol + 1e-12

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["deviation"] = self.deviation
        d["ok"] = self.ok
        d["judged_by"] = (self.target or "its target") if self.verdict is not None else "the paper"
        return d


def _fmt(v: float | None, digits: int) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "none"
    return f"{v:.{digits}f}"


def render(cells: Sequence[Cell], *, as_json: bool, digits: int = 2, title: str = "") -> None:
    """Print the cells as a table (then the explanations of differing cells) or as JSON."""
    if as_json:
        print_json([c.as_dict() for c in cells])
        return
    print_table(cells, digits=digits, title=title)


def print_table(cells: Sequence[Cell], *, digits: int = 2, title: str = "") -> None:
    """The cells as a fixed-width table, a count, and why each differing group differs."""
    if title:
        print(title)
    rows = []
    for c in cells:
        # a cell judged by a target is not compared with the paper: no deviation shown
        dev = c.deviation if c.verdict is None else None
        rows.append(
            (c.row, c.column, _fmt(c.paper, digits), _fmt(c.toolkit, digits),
             "" if dev is None else f"{dev:+.{digits}f}", c.unit, c.mark)
        )  # fmt: skip
    print(format_table(rows, ("case", "column", "paper", "toolkit", "deviation", "unit", "")))
    n_bad = sum(not c.ok for c in cells)
    targets = sum(c.verdict is not None for c in cells)
    judged = " or meet their target" if targets else ""
    print(f"\n{len(cells) - n_bad} of {len(cells)} cells within tolerance{judged}.")
    seen: dict[str, list[str]] = {}
    for c in cells:
        if c.why and (not c.ok or c.verdict is not None):
            seen.setdefault(c.why, []).append(f"{c.row} {c.column}")
    for why, where in seen.items():
        print(f"\nwhy ({', '.join(where[:4])}{', ...' if len(where) > 4 else ''}): {why}")
