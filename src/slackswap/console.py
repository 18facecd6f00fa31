"""Console output and argument helpers shared by the commands and the reports: tables, JSON."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np


def print_json(obj: Any) -> None:
    """Print ``obj`` as valid JSON: a number that is not finite (inf, nan) is written ``null``.

    Python's ``json`` would write ``Infinity`` / ``NaN``, which JSON does not have.
    """
    json.dump(_finite(obj), sys.stdout, indent=1, allow_nan=False, default=_jsonable)
    sys.stdout.write("\n")


def _finite(o: Any) -> Any:
    """``o`` with every non-finite float (numpy's too) replaced by None, containers copied."""
    if isinstance(o, float | np.floating):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_finite(v) for v in o]
    if isinstance(o, np.ndarray):
        return _finite(o.tolist())
    return o


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


_BYTE_UNITS = (("GB", 1e9), ("MB", 1e6), ("KB", 1e3))


def format_bytes(nbytes: float) -> str:
    """Bytes for people, to 3 significant digits in B, KB, MB or GB (decimal units, as the
    budgets' ``16GB``): ``74.4 GB``, ``1.50 MB``, ``512 B``; GB beyond 999 keep every digit."""
    if not math.isfinite(nbytes):
        return str(nbytes)
    sign, size = ("-" if nbytes < 0 else ""), abs(float(nbytes))
    rounded = float(f"{size:.3g}")  # 999.7 KB rounds to 1000 KB: shown as 1.00 MB
    for unit, scale in _BYTE_UNITS:
        if rounded >= scale:
            value = rounded / scale if unit != "GB" or rounded < 1e12 else size / scale
            digits = max(0, 2 - math.floor(math.log10(value)))
            return f"{sign}{value:.{digits}f} {unit}"
    return f"{sign}{size:.0f} B"


def format_percent(fraction: float) -> str:
    """A fraction as a percentage to 3 significant digits (``74.4%``, ``100%``, ``0.5%``)."""
    if not math.isfinite(fraction):
        return str(fraction)
    return f"{float(f'{100 * fraction:.3g}'):g}%"


def format_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain fixed-width table (right-aligned numbers)."""
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for k, r in enumerate(cells):
        lines.append(
            "  ".join(
                c.rjust(w) if k and _numeric(c) else c.ljust(w)
                for c, w in zip(r, widths, strict=True)
            ).rstrip()
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _numeric(s: str) -> bool:
    try:
        float(s.rstrip("%x"))
        return True
    except ValueError:
        return False


def positive_int(text: str) -> int:
    """argparse type: a positive integer (argparse reports a bad value and exits 2)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a positive number."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


#: Jobs a sweep runs at once unless ``--jobs`` says otherwise, in every command. One: a search
#: or exact solver uses every core it is given (the genetic search runs two island workers,
#: CP-SAT its own threads), so jobs side by side on a small machine would each get less of the
#: time limit they are judged by, and their planning times would not compare.
DEFAULT_JOBS = 1


def add_execution_arguments(p: argparse.ArgumentParser) -> None:
    """``--jobs``, ``--backend`` and ``--scheduler``: how a sweep's jobs run (compare, reproduce)."""
    p.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help="jobs run at once (default 1 in every command: a search or exact solver uses the "
        "cores it is given, so parallel jobs would share the time limits they are judged by)",
    )
    p.add_argument(
        "--backend",
        choices=("joblib", "dask"),
        default="joblib",
        help="joblib: worker processes here; dask: a cluster (--scheduler) or a local one",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="Dask scheduler, tcp://host:8786 (default: a local cluster; needs --backend dask)",
    )
