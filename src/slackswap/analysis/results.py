"""Results files: one row per finished job, appended as it completes (CSV or Parquet).

CSV: each row is one ``write`` of one complete line, flushed at once, so a killed sweep leaves
every finished job in the file (a half-written last line, if any, is cut on resume).

Parquet cannot be appended to in place, so a Parquet results file has a journal beside it
(``NAME.parquet.journal``, JSON lines, flushed per row): every finished row goes to the journal
at once, and the Parquet file is rewritten atomically (temporary file, then rename) from all rows
at most every few seconds and when the sweep ends, after which the journal is emptied. Readers
(`read_results`, ``--resume``) take the Parquet file plus the journal, so nothing finished is
lost; rows are deduplicated by ``job_id`` (the first one wins).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slackswap.problem import UserError
from slackswap.solvers.base import RunRecord

#: Columns a results file adds to the `RunRecord` row (see `Job.columns` and `execute`).
EXTRA_KEYS = (
    "job_id", "budget", "solver_name", "solver_options", "instance_spec", "model", "gpu",
    "link", "link_bw_Bps", "seq", "batch", "layers", "n_ops", "n_tensors", "saved_bytes",
    "instance_peak_bytes", "hideable_fraction", "wall_s",
)  # fmt: skip
COLUMNS: tuple[str, ...] = (*RunRecord.ROW_KEYS, *EXTRA_KEYS)

FLOAT_COLUMNS = frozenset(
    {
        "budget_fraction", "step_s", "ideal_s", "throughput", "recompute_s", "fwd_stall_s",
        "bwd_stall_s", "d2h_bytes", "h2d_bytes", "peak_bytes", "plan_s", "lower_bound_s",
        "gap", "time_limit_s", "claimed_step_s", "link_bw_Bps", "hideable_fraction", "wall_s",
    }
)  # fmt: skip
INT_COLUMNS = frozenset(
    {
        "budget_bytes", "seed", "swap_bytes", "recompute_bytes", "min_budget_bytes",
        "evaluations", "seq", "batch", "layers", "n_ops", "n_tensors", "saved_bytes",
        "instance_peak_bytes",
    }
)  # fmt: skip
#: Columns that change from run to run of the same job (compare rows without them).
TIMING_COLUMNS = ("plan_s", "wall_s")

SUFFIXES = (".csv", ".parquet", ".pq")
MAX_TEXT = 600  # characters of an error or reason kept in a row (compiler errors run to pages)


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise UserError(f"{path}: results file must end in .csv or .parquet (got {suffix or 'none'!r})")


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """The row in column order; strings on one line, non-finite floats as missing."""
    out: dict[str, Any] = {}
    for k in COLUMNS:
        v: Any = row.get(k)
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, str):  # CSV cannot tell "" from missing: "" is missing everywhere
            v = v.replace("\r", " ").replace("\n", " ") or None
            if v is not None and k in ("error", "reason") and len(v) > MAX_TEXT:
                v = v[: MAX_TEXT - 3] + "..."
        elif isinstance(v, np.generic):
            v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                v = None
        out[k] = v
    return out


class ResultsWriter:
    """Appends finished rows to a results file; ``done_ids`` lists jobs already there."""

    def __init__(self, path: str | os.PathLike[str], *, resume: bool = False) -> None:
        self.path = Path(path)
        self.kind = _kind(self.path)
        self.rows: list[dict[str, Any]] = []  # rows already in the file (and the journal)
        if resume and (self.path.exists() or self._journal_path().exists()):
            self.rows = read_rows(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._last_flush = time.monotonic()
        self._flush_cost = 0.0
        self._dirty = False
        if self.kind == "csv":
            self._open_csv()
        else:
            self._write_parquet()  # a valid file from the start (resumed rows, or none)
            self._journal = open(self._journal_path(), "w", encoding="utf-8")  # noqa: SIM115

    # ---- public ---------------------------------------------------------------------------
    @property
    def done_ids(self) -> set[str]:
        return {r["job_id"] for r in self.rows if r.get("job_id")}

    def append(self, row: dict[str, Any]) -> None:
        """Add one finished job's row durably (flushed before returning)."""
        clean = _clean(row)
        self.rows.append(clean)
        if self.kind == "csv":
            buf = io.StringIO()
            csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n").writerow(clean)
            self._fh.write(buf.getvalue())
            self._fh.flush()
        else:
            self._journal.write(json.dumps(clean, default=str) + "\n")
            self._journal.flush()
            self._dirty = True
            # Rewrite at most every 2 s, and never spend more than ~5% of the time rewriting.
            if time.monotonic() - self._last_flush >= max(2.0, 20.0 * self._flush_cost):
                self.flush()

    def flush(self) -> None:
        if self.kind == "parquet" and self._dirty:
            self._write_parquet()
            self._journal.seek(0)
            self._journal.truncate()
            self._journal.flush()
            self._dirty = False

    def close(self) -> None:
        if self.kind == "csv":
            self._fh.close()
        else:
            self.flush()
            self._journal.close()
            self._journal_path().unlink(missing_ok=True)

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ------------------------------------------------------------------------
    def _journal_path(self) -> Path:
        return journal_path(self.path)

    def _open_csv(self) -> None:
        if self.rows:
            # Rewrite what was read (repairs a cut last line, adopts today's columns), then append.
            _atomic_csv(self.path, self.rows)
            self._fh = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        else:
            self._fh = open(self.path, "w", encoding="utf-8", newline="")  # noqa: SIM115
            self._fh.write(",".join(COLUMNS) + "\n")
            self._fh.flush()

    def _write_parquet(self) -> None:
        t0 = time.perf_counter()
        table = _arrow_table(self.rows)
        import pyarrow.parquet as pq

        tmp = self.path.with_name(self.path.name + ".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, self.path)
        self._flush_cost = time.perf_counter() - t0
        self._last_flush = time.monotonic()


def journal_path(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    return p.with_name(p.name + ".journal")


def _atomic_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow(_clean(r))
    os.replace(tmp, path)


def _arrow_schema() -> Any:
    import pyarrow as pa

    def typ(c: str) -> Any:
        if c in FLOAT_COLUMNS:
            return pa.float64()
        if c in INT_COLUMNS:
            return pa.int64()
        return pa.string()

    return pa.schema([(c, typ(c)) for c in COLUMNS])


def _arrow_table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    typed = [{k: _typed(k, r.get(k)) for k in COLUMNS} for r in rows]
    return pa.Table.from_pylist(typed, schema=_arrow_schema())


def _typed(col: str, v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if col in FLOAT_COLUMNS:
        return float(v)
    if col in INT_COLUMNS:
        return int(v)
    return str(v)


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete row of a results file (plus its journal), deduplicated by ``job_id``."""
    p = Path(path)
    kind = _kind(p)
    rows: list[dict[str, Any]] = []
    if kind == "csv":
        if p.exists():
            rows = _read_csv_rows(p)
    else:
        if p.exists():
            import pyarrow.parquet as pq

            try:
                rows = pq.read_table(p).to_pylist()
            except Exception as exc:
                raise UserError(f"{p}: not a readable Parquet file ({exc})") from None
        jp = journal_path(p)
        if jp.exists():
            rows += _read_journal(jp)
    return _dedupe([{k: _typed(k, r.get(k)) for k in COLUMNS} for r in rows])


def _read_csv_rows(p: Path) -> list[dict[str, Any]]:
    text = p.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a row cut by a kill: drop it, it reruns
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        return []
    if "job_id" not in reader.fieldnames:
        raise UserError(f"{p}: not a slackswap results file (no 'job_id' column)")
    out = []
    for r in reader:
        out.append({k: (None if r.get(k) in (None, "") else _from_text(k, r[k])) for k in COLUMNS})
    return out


def _from_text(col: str, s: str) -> Any:
    if col in FLOAT_COLUMNS:
        return float(s)
    if col in INT_COLUMNS:
        return int(float(s)) if ("e" in s or "." in s) else int(s)
    return s


def _read_journal(p: Path) -> list[dict[str, Any]]:
    out = []
    for line in p.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # cut by a kill
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


def _dedupe(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[Any] = set()
    out = []
    for r in rows:
        key = r.get("job_id")
        if key is not None and key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out


def rows_to_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with the results schema (float, nullable int and string columns)."""
    df = pd.DataFrame([_clean(r) for r in rows], columns=list(COLUMNS))
    for c in COLUMNS:
        if c in FLOAT_COLUMNS:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        elif c in INT_COLUMNS:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
        else:
            df[c] = df[c].astype("string")
    return df


def read_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A results file (CSV or Parquet, with its journal) as a DataFrame, one row per job."""
    p = Path(path)
    if not p.exists() and not journal_path(p).exists():
        raise UserError(f"{p}: no such results file")
    return rows_to_frame(read_rows(p))
