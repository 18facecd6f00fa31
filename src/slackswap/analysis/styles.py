"""How figures draw solvers: a distinct colour, marker and line style each, colour-blind safe.

Colours are the Okabe-Ito palette (black first, its yellow left out: too pale on white) then
Paul Tol's muted colours; a solver's style is its place in the figure's solver list (the
registry's display order, `solver_order`), so every figure of one report draws a solver alike.
Past the 12 colours the line style changes and the 13 markers shift against the colours. Lines that coincide stay
visible: the first solver is drawn widest with the largest markers at the bottom and each next
one thinner on top, so a tie shows as a thin line inside a wider one of another colour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Okabe & Ito (2008) without yellow, then Tol's "muted" scheme: all distinguishable with the
#: common colour-vision deficiencies.
PALETTE = (
    "#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7",
    "#882255", "#999933", "#44AA99", "#332288", "#AA4499",
)  # fmt: skip
#: One more marker than colours: colour and marker together repeat only after 156 solvers, so
#: points drawn without a line (where the line style cannot show) stay apart too.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">", "p", "*", "d")
LINESTYLES = ("-", "--", "-.", ":")


def solver_styles(solvers: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each solver's matplotlib line style (``color``, ``marker``, ``linestyle``,
    ``linewidth``, ``markersize``, ``zorder``), distinct for every solver in ``solvers``."""
    out = {}
    n = len(PALETTE)
    for i, solver in enumerate(dict.fromkeys(solvers)):
        out[solver] = {
            "color": PALETTE[i % n],
            "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[(i // n) % len(LINESTYLES)],
            # wide and large at the bottom, thinner and smaller on top: ties stay visible
            "linewidth": max(1.0, 3.0 - 0.4 * i),
            "markersize": max(3.5, 8.0 - 0.8 * i),
            "zorder": 2 + 0.01 * i,
        }
    return out


def solver_style(solver: str, others: Sequence[str] = ()) -> dict[str, Any]:
    """The style of ``solver`` among ``others`` (it alone when ``others`` does not name it)."""
    names = list(others) if solver in others else [*others, solver]
    return solver_styles(names)[solver]


def scatter_style(style: dict[str, Any]) -> dict[str, Any]:
    """A line style as `Axes.scatter` keywords (colour and marker)."""
    return {"color": style["color"], "marker": style["marker"]}


def distinct(styles: Sequence[tuple[Any, ...]]) -> bool:
    """True when no two style tuples are equal (the legends' test helper)."""
    return len(set(styles)) == len(styles)
