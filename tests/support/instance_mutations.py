"""Hypothesis strategies that mutate a good instance file into the bad ones a fuzz should try.

`mutated_files(good)` draws the bytes of a file: one to three edits of the JSON document (a
value replaced by an odd one, a field deleted, a reference pointed elsewhere, a field set alike
on every operator or tensor, a list cut short or an entry repeated), sometimes followed by an
edit of the text itself (bytes that are not UTF-8, truncation, deep nesting).
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from hypothesis import strategies as st

Path = tuple[str | int, ...]

#: Values a field should never hold, and some it may: every type, sign, size and oddity.
ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 7, 2**31, 2**31 - 1, -(2**31) - 1, 2**53 + 1, 2**62,
    2**63 - 1, 2**63, 2**64, 10**400, -(10**400), 0.0, -0.0, 0.5, 5e-324, 1e-300, 1e-9, 3600.0,
    3600.5, 1e15, 1e18, 1e308, -1e308, math.inf, -math.inf, math.nan, "", "x", "forward",
    "backward", "gemm", "residual", "\ud800", "caf\u00e9", [], {}, [[]], [["x"]], {"a": {"b": 1}},
    [1, 2], ["x", "y"],
)  # fmt: skip

#: Factors a numeric field is scaled by: within its physical range, or pushed out of it.
SCALES = (0.0, -1.0, 1e-300, 1e-12, 0.5, 2.0, 10.0, 1e6, 1e12, 1e300)


def paths(doc: Any) -> list[Path]:
    """Every position in a JSON document (objects' keys, lists' indices), the root excluded."""
    out: list[Path] = []
    stack: list[tuple[Path, Any]] = [((), doc)]
    while stack:
        path, v = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, child in items:
            out.append((*path, k))
            stack.append(((*path, k), child))
    return sorted(out, key=repr)  # a stable order: hypothesis shrinks by index


def _parent(doc: Any, path: Path) -> Any:
    for k in path[:-1]:
        doc = doc[k]
    return doc


def _get(doc: Any, path: Path) -> Any:
    return _parent(doc, path)[path[-1]]


def _set(doc: Any, path: Path, value: Any) -> None:
    _parent(doc, path)[path[-1]] = value


def _nested(depth: int) -> Any:
    v: Any = 0
    for _ in range(depth):
        v = [v]
    return v


def scaled(old: int | float, scale: float) -> int | float:
    """``old * scale``; an integer past float's range (an earlier edit's 10**400) is scaled by the
    integer part of ``scale`` instead, which float arithmetic cannot hold."""
    try:
        return old * scale
    except OverflowError:
        return old * int(scale)


@st.composite
def _odd_value(draw: st.DrawFn, old: Any) -> Any:
    """An odd value for a field that holds ``old``: always a fresh object, never one of
    ``ODD_VALUES`` itself, which a later edit of the document would change for every draw after
    it (hypothesis then replays a draw that no longer makes the same choices)."""
    if isinstance(old, int | float) and not isinstance(old, bool) and draw(st.booleans()):
        return scaled(old, draw(st.sampled_from(SCALES)))
    if draw(st.integers(0, 19)) == 0:
        return _nested(draw(st.sampled_from([40, 200, 900])))  # past the reader's 500 levels
    return copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))


def _rows(doc: dict, group: str) -> list:
    """``doc[group]`` when an earlier edit left it a list, else none."""
    rows = doc.get(group)
    return rows if isinstance(rows, list) else []


@st.composite
def _edit(draw: st.DrawFn, doc: dict) -> None:
    """Apply one edit to ``doc`` in place."""
    kind = draw(
        st.sampled_from(["value", "value", "delete", "ref", "all", "cut", "repeat", "reorder"])
    )
    groups = [g for g in ("ops", "tensors") if isinstance(doc.get(g), list) and doc[g]]
    if kind in ("value", "delete") or not groups:
        where = paths(doc)
        if not where:
            return
        path = draw(st.sampled_from(where))
        if kind == "delete":
            parent = _parent(doc, path)
            del parent[path[-1]]
        else:
            _set(doc, path, draw(_odd_value(_get(doc, path))))
        return
    group = draw(st.sampled_from(groups))
    rows = doc[group]
    if kind == "ref":  # point a reference at another (existing) operator or tensor
        op_names = [o.get("name") for o in _rows(doc, "ops") if isinstance(o, dict)]
        t_names = [t.get("name") for t in _rows(doc, "tensors") if isinstance(t, dict)]
        i = draw(st.integers(0, len(rows) - 1))
        row = rows[i]
        if not isinstance(row, dict):
            return
        keys = ["reads"] if group == "ops" else [
            "producer", "last_fwd_reader", "first_bwd_reader", "last_bwd_reader", "rebuild_inputs"
        ]  # fmt: skip
        key = draw(st.sampled_from(keys))
        if key in ("reads", "rebuild_inputs"):
            if not t_names:
                return
            new = draw(st.lists(st.sampled_from(t_names), max_size=3))
            old = row.get(key)
            keep = old if isinstance(old, list) and draw(st.booleans()) else []
            row[key] = [*keep, *new]
        elif op_names:
            row[key] = draw(st.sampled_from(op_names))
    elif kind == "all":  # the same value on every row (all durations 0, all costs 1e308)
        key = draw(
            st.sampled_from(
                ["duration_s", "flops", "transient_bytes", "phase", "block"]
                if group == "ops"
                else ["bytes", "recompute_s", "category", "block", "rebuild_inputs"]
            )
        )
        first = rows[0].get(key) if isinstance(rows[0], dict) else None
        value = draw(_odd_value(first))
        for row in rows:
            if isinstance(row, dict):
                row[key] = copy.deepcopy(value)  # a later edit of one row changes that row only
    elif kind == "cut":  # fewer rows than the references expect, or none
        doc[group] = rows[: draw(st.integers(0, len(rows) - 1))]
    elif kind == "repeat":
        i = draw(st.integers(0, len(rows) - 1))
        rows.insert(draw(st.integers(0, len(rows))), copy.deepcopy(rows[i]))
    else:  # swap two rows: an operator out of order, a tensor list reordered
        i, j = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, len(rows) - 1))
        rows[i], rows[j] = rows[j], rows[i]


def _dumps(doc: Any, ascii_only: bool) -> str:
    try:  # NaN and Infinity written as Python's json reads them
        return json.dumps(doc, indent=0, ensure_ascii=ascii_only)
    except (RecursionError, ValueError):
        return "[]"


@st.composite
def mutated_files(draw: st.DrawFn, good: dict) -> bytes:
    """The bytes of a file: ``good`` after one to three edits, its text sometimes spoiled."""
    doc = copy.deepcopy(good)
    for _ in range(draw(st.integers(1, 3))):
        draw(_edit(doc))
    # Escaped (\\ud800, valid UTF-8) or raw (a lone surrogate's bytes, not UTF-8).
    data = _dumps(doc, draw(st.booleans())).encode("utf-8", "surrogatepass")
    spoil = draw(st.sampled_from(["none"] * 6 + ["bytes", "cut", "nest"]))
    if spoil == "bytes":  # not UTF-8: a stray continuation byte, Latin-1, a 0xff
        at = draw(st.integers(0, len(data)))
        data = (
            data[:at] + draw(st.sampled_from([b"\x80", b"\xe9", b"\xff\xfe", b"\xc3"])) + data[at:]
        )
    elif spoil == "cut":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif spoil == "nest":
        depth = draw(st.sampled_from([500, 1000, 5000, 100_000]))
        data = b"[" * depth + data + b"]" * depth
    return data
