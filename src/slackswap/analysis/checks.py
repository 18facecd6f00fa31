"""One validation of run settings (seconds, seeds, flags, sweep sizes, output paths) for every
entry point: ``solve``, ``compare``, sweep files and `run_sweep`, so that one bad value gets
one wording everywhere and is refused before any work starts. Budgets are checked by
`slackswap.plan.Budget` (the same wording for ``solve --budget`` and ``compare --budgets``).
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from slackswap.errors import MAX_SECONDS, MAX_SEED, UserError
from slackswap.textfile import check_output_path, is_stream, refuse_unwritable_node

#: Most budgets one ``--budgets`` range may expand to, and most jobs one sweep may hold.
MAX_BUDGETS = 10_000
#: Most seeds one ``--seeds`` list or sweep file may hold (as many as budgets).
MAX_SEEDS = MAX_BUDGETS
MAX_JOBS = 200_000


def comma_list(text: str, name: str) -> list[str]:
    """The entries of ``"a,b,c"``, stripped; an empty entry (``"1.0,,0.5"``, a trailing comma)
    is refused rather than skipped: it is most often a value left out by mistake."""
    items = [item.strip() for item in text.split(",")]
    for i, item in enumerate(items):
        if not item and len(items) > 1:
            raise UserError(
                f"{name} {text!r}: entry {i + 1} of {len(items)} is empty (a comma too many?)"
            )
    return items


def seconds(value: Any, name: str) -> float:
    """A positive, finite number of seconds up to `MAX_SECONDS`, from text or a number."""
    v: float | None = None
    if isinstance(value, str):
        try:
            v = float(value)
        except ValueError:
            v = None
    elif isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_):
        v = float(value)  # numpy numbers too
    if v is None or not (math.isfinite(v) and 0 < v <= MAX_SECONDS):
        raise UserError(
            f"{name}: expected a positive number of seconds (at most {MAX_SECONDS:g}), "
            f"got {value!r}"
        )
    return v


def seed(value: Any, name: str) -> int:
    """An integer seed from 0 to `MAX_SEED`, from text or an integer."""
    v: int | None = None
    if isinstance(value, str):
        try:
            v = int(value.strip())
        except ValueError:
            v = None
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        v = int(value)  # numpy integers too
    if v is None or not 0 <= v <= MAX_SEED:
        raise UserError(f"{name}: expected an integer seed from 0 to {MAX_SEED}, got {value!r}")
    return v


def seeds(value: Any, name: str) -> list[int]:
    """Seeds from ``"0,1,2"`` or a list; at least one, at most `MAX_SEEDS`; an empty entry is
    refused (`comma_list`)."""
    items = comma_list(value, name) if isinstance(value, str) else value
    if not isinstance(items, list):
        items = [items]
    if len(items) > MAX_SEEDS:
        raise UserError(f"{name}: {len(items):,} seeds; at most {MAX_SEEDS:,} run at once")
    for i, s in enumerate(items):
        if isinstance(s, str) and not s.strip() and len(items) > 1:
            raise UserError(f"{name}: entry {i + 1} of {len(items)} is empty")
    out = [seed(s, name) for s in items if not (isinstance(s, str) and not s.strip())]
    if not out:
        raise UserError(f"{name}: expected integer seeds like 0,1,2, got {value!r}")
    return out


def flag(value: Any, name: str) -> bool:
    """A true/false setting: only a real boolean (the string "false" is not false-y enough)."""
    if not isinstance(value, bool | np.bool_):
        raise UserError(f"{name}: expected true or false, got {value!r}")
    return bool(value)


def text(value: str | None, name: str) -> str | None:
    """A name given on the command line, refused when it is not valid Unicode (bytes that are
    not UTF-8 arrive as lone surrogates): a file could not hold it, or be read back."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"{name} {value!r}: not valid UTF-8 text") from None
    return value


def sweep_size(counts: dict[str, int]) -> int:
    """The number of jobs of a product of axes; refused above `MAX_JOBS` before it is built."""
    total = 1
    for n in counts.values():
        total *= n
    if total > MAX_JOBS:
        parts = " x ".join(f"{n} {axis}" for axis, n in counts.items())
        raise UserError(
            f"the sweep has {total:,} jobs ({parts}); at most {MAX_JOBS:,} run at once: split it"
        )
    return total


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one existing file (through links and ``..`` too)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # either missing, unreadable, or a name with a NUL
        return False


def not_an_input(path: Path, name: str, inputs: dict[str, Any]) -> None:
    """Refuse an output path that is one of the command's input files (``inputs``: what each
    is, "the instance" -> its path or catalog name): writing it would destroy what was read,
    so even ``--overwrite`` does not allow it."""
    for what, given in inputs.items():
        if isinstance(given, str | os.PathLike) and same_file(path, given):
            raise UserError(
                f"{name} {os.fspath(path)}: is {what} this command reads; write the output "
                "to another file"
            )


def output_file(
    path: Any, name: str, *, overwrite: bool, inputs: dict[str, Any] | None = None
) -> Path:
    """Check, before any work, that a single output file can be written to ``path``.

    Refuses an empty name, a name or path too long, a directory, a socket or block device, a
    parent that is a file or not writable, and an existing file unless ``overwrite`` (nothing
    already written is lost by default). A character device or FIFO (``/dev/null``) is written
    in place, replacing nothing, so it needs no ``overwrite`` (see `slackswap.textfile`). A
    path that is one of the command's ``inputs`` (what -> path) is refused even with
    ``overwrite`` (`not_an_input`).
    """
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"{name}: expected a file name, got {text!r}")
    p = check_output_path(text, name)
    not_an_input(p, name, inputs or {})
    if p.is_dir():
        raise UserError(f"{name} {text}: is a directory; name a file")
    refuse_unwritable_node(p, name)
    if is_stream(p):
        return p
    if p.exists() and not overwrite:
        raise UserError(f"{name} {text}: the file exists; pass --overwrite to replace it")
    writable_parent(p, name)
    return p


def writable_parent(p: Path, name: str) -> None:
    """Make the folders above ``p`` and try a file there: a place that cannot be written
    (permission, a file in the way, a read-only or virtual file system) is refused now."""
    parent = p.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise UserError(f"{name} {p}: cannot write in {parent} ({exc.strerror})") from None


def output_dir(path: Any, name: str, files: list[str], *, overwrite: bool) -> Path:
    """Check a directory that will receive ``files`` (names): none of them is replaced unless
    ``overwrite``; the directory is a directory (or can be made)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"{name}: expected a directory name, got {text!r}")
    d = check_output_path(text, name)
    for f in files:
        check_output_path(d / f, name)
    if d.exists() and not d.is_dir():
        raise UserError(f"{name} {text}: is a file, not a directory")
    if d.is_dir():
        writable_parent(d / "x", name)
        taken = sorted(f for f in files if (d / f).exists())
        if taken and not overwrite:
            more = f" and {len(taken) - 1} more" if len(taken) > 1 else ""
            raise UserError(
                f"{name} {text}: it already holds {taken[0]}{more}; pass --overwrite to "
                "replace them (or name another directory)"
            )
    else:
        writable_parent(d / "x", name)
    return d


def above_peak(budget: str, over: list[tuple[str, float]]) -> str:
    """The warning for a budget above the no-swap peak P of instances (name, fraction of P)."""
    shown = ", ".join(f"{name}: {100 * f:.0f}%" for name, f in over[:3])
    more = f" and {len(over) - 3} more" if len(over) > 3 else ""
    return (
        f"budget {budget} is above the no-swap peak P ({shown}{more}): keep-all fits, "
        "there is nothing to plan"
    )


def warn(message: str) -> None:
    """One warning line on stderr, in the CLI's voice."""
    print(f"slackswap: warning: {message}", file=sys.stderr)
