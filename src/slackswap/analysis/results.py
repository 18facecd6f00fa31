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
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slackswap.analysis.resultslock import ResultsLock
from slackswap.errors import UserError
from slackswap.rowschema import COLUMNS, FLOAT_COLUMNS, INT_COLUMNS, REQUIRED_COLUMNS, STATUSES
from slackswap.textfile import check_output_path, node_kind, read_user_text, replace_target
from slackswap.userdoc import parse_json
from slackswap.validation import CONTROL_CHARACTERS

#: Columns that change from run to run of the same job (compare rows without them).
TIMING_COLUMNS = ("plan_s", "wall_s")

#: Largest results file read (bytes): 200,000 jobs (the most one sweep holds) of ~2 KB rows.
MAX_RESULTS_BYTES = 1 << 30
MAX_TEXT = 600  # characters of an error or reason kept in a row (compiler errors run to pages)


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise UserError(f"{path}: results file must end in .csv or .parquet (got {suffix or 'none'!r})")


def _clean(row: dict[str, Any], columns: tuple[str, ...] = COLUMNS) -> dict[str, Any]:
    """The row in column order; strings on one line, non-finite floats as missing."""
    out: dict[str, Any] = {}
    for k in columns:
        v: Any = row.get(k)
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, str):  # CSV cannot tell "" from missing: "" is missing everywhere
            v = v.replace("\r", " ").replace("\n", " ") or None
            if v is not None and CONTROL_CHARACTERS.search(v):  # a NUL ends a CSV reader
                v = CONTROL_CHARACTERS.sub(lambda m: repr(m.group())[1:-1], v)
            if v is not None and k in ("error", "reason") and len(v) > MAX_TEXT:
                v = v[: MAX_TEXT - 3] + "..."
        elif isinstance(v, np.generic):
            v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                v = None
        if k in INT_COLUMNS and v is not None and not _fits_int64(v):
            # Validation before a sweep keeps such values out; a row that could not be read
            # back must never reach the file, so this is a bug, said loudly.
            raise ValueError(
                f"results row {row.get('job_id')}: {k} = {v!r} is not a 64-bit integer"
            )
        out[k] = v
    return out


def _fits_int64(v: Any) -> bool:
    if isinstance(v, float):
        return v.is_integer() and -(2**63) <= v < 2**63
    return isinstance(v, int) and -(2**63) <= v < 2**63


class ResultsWriteError(UserError):
    """The results file could not be written (a full disk): one line, the rows written kept."""


class ResultsWriter:
    """Appends finished rows to a results file; ``done_ids`` lists jobs already there.

    An existing results file is continued (``resume``), replaced (``overwrite``) or refused:
    nothing already written is lost by default. The writer holds a lock on the file while it is
    open (`ResultsLock`: by the file, not the name, so links and ``..`` meet it too), so a
    second writer is refused at once and rows of two processes never interleave. Columns a user added to a CSV file are kept on resume.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, resume: bool = False, overwrite: bool = False
    ) -> None:
        self.path = Path(path)
        self.kind = _kind(self.path)
        check_output_path(self.path, beside_bytes=len(".") + len(".journal"))
        _refuse_node(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{self.path}: cannot create its directory ({exc.strerror})") from None
        self._lock: ResultsLock | None = ResultsLock(self.path)
        self._lock.acquire()
        self.rows: list[dict[str, Any]] = []  # rows already in the file (and the journal)
        self._found = 0  # of them, those there before this writer opened the file
        try:
            try:
                self._open(resume, overwrite)
            except OSError as exc:  # a full disk on the first rewrite: the file is as it was
                raise self._write_error(exc, opening=True) from None
            # A rewrite made a new file (inode): the lock follows the data.
            self._lock.hold(self.path)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, resume: bool, overwrite: bool) -> None:
        self.columns: tuple[str, ...] = COLUMNS  # COLUMNS, then any a user added
        self._last_flush = time.monotonic()
        self._flush_cost = 0.0
        self._dirty = False
        holds = _holds_data(self.path) or _holds_data(self._journal_path())
        if holds and not (resume or overwrite):
            raise UserError(
                f"{self.path} already holds results: pass --resume to continue it or "
                "--overwrite to replace it"
            )
        fresh = overwrite or not holds
        if not fresh:
            self.rows, extra, intact = _read_for_resume(self.path)
            self._found = len(self.rows)
            self.columns = (*COLUMNS, *extra)
        if self.kind == "csv":
            if fresh or not intact:
                # Fresh, or repair a cut last line / adopt today's columns: rewrite what was read
                # atomically, then append. An intact file is appended to as it is.
                _atomic_csv(self.path, self.rows, self.columns)
            self._fh = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        else:
            if fresh:
                self._journal_path().unlink(missing_ok=True)
            self._write_parquet()  # a valid file from the start (resumed rows, or none)
            self._journal = open(self._journal_path(), "w", encoding="utf-8")  # noqa: SIM115

    # ---- public ---------------------------------------------------------------------------
    @property
    def done_ids(self) -> set[str]:
        return {r["job_id"] for r in self.rows if r.get("job_id")}

    def append(self, row: dict[str, Any]) -> None:
        """Add one finished job's row durably (flushed before returning).

        A write that fails (a full disk) raises `ResultsWriteError`, one line saying how many
        rows the file holds; those stay, and ``--resume`` continues from them."""
        clean = _clean(row, self.columns)
        try:
            if self.kind == "csv":
                buf = io.StringIO()
                csv.DictWriter(buf, fieldnames=self.columns, lineterminator="\n").writerow(clean)
                self._fh.write(buf.getvalue())
                self._fh.flush()
            else:
                self._journal.write(json.dumps(clean, default=str) + "\n")
                self._journal.flush()
        except OSError as exc:
            raise self._write_error(exc) from None
        self.rows.append(clean)
        if self.kind == "parquet":
            self._dirty = True
            # Rewrite at most every 2 s, and never spend more than ~5% of the time rewriting.
            if time.monotonic() - self._last_flush >= max(2.0, 20.0 * self._flush_cost):
                self.flush()

    def flush(self) -> None:
        if self.kind == "parquet" and self._dirty:
            try:
                self._write_parquet()
                self._journal.seek(0)
                self._journal.truncate()
                self._journal.flush()
            except OSError as exc:  # the journal still holds every row
                raise self._write_error(exc) from None
            self._dirty = False

    def close(self) -> None:
        """Finish the file; a failure (a full disk) is a `ResultsWriteError`, the lock let go
        and the rows already reported kept."""
        if self._lock is None:
            return
        try:
            if self.kind == "csv":
                self._close_quietly(self._fh)
            else:
                try:
                    self.flush()
                finally:
                    self._close_quietly(self._journal)
                self._journal_path().unlink(missing_ok=True)
        finally:
            self._lock.release()
            self._lock = None

    def _close_quietly(self, fh: Any) -> None:
        """Close ``fh``; what it still buffers could not be written (the write failed and was
        said), so a second failure is not a new one."""
        try:
            fh.close()
        except OSError as exc:
            try:
                os.close(fh.fileno())
            except (OSError, ValueError):
                pass
            raise self._write_error(exc) from None

    def _write_error(self, exc: OSError, *, opening: bool = False) -> ResultsWriteError:
        what = exc.strerror or str(exc)
        if opening:
            done = "nothing written, the file is as it was"
        else:
            new = len(self.rows) - self._found
            done = (
                f"{len(self.rows)} rows written ({new} by this run, {self._found} found); "
                "they are kept: make room and rerun with --resume"
            )
        return ResultsWriteError(f"{self.path}: cannot write results ({what}); {done}")

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ------------------------------------------------------------------------
    def _journal_path(self) -> Path:
        return journal_path(self.path)

    def _write_parquet(self) -> None:
        t0 = time.perf_counter()
        table = _arrow_table(self.rows, self.columns)
        import pyarrow.parquet as pq

        target = replace_target(self.path)  # a symbolic link's target is rewritten, not the link
        tmp = target.with_name(target.name + ".tmp")
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if self._lock is not None:
            self._lock.hold(target)
        self._flush_cost = time.perf_counter() - t0
        self._last_flush = time.monotonic()


def _refuse_node(path: Path) -> None:
    """A results file is a regular file (links followed): it is read back for ``--resume`` and
    ``report``, so a device, FIFO or socket cannot be one."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{path}: is {node_kind(mode)}, not a results file (a regular file)")


def _holds_data(p: Path) -> bool:
    try:
        return p.stat().st_size > 0
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UserError(f"{p}: cannot read ({exc.strerror})") from None


def _read_for_resume(p: Path) -> tuple[list[dict[str, Any]], tuple[str, ...], bool]:
    """Rows, the columns a user added (in file order), and whether a CSV file can be appended
    to as it is (today's header, no cut last line)."""
    if _kind(p) == "csv":
        table = _read_csv(p) if p.exists() else _CsvTable([], (), True)
        extra = tuple(c for c in table.header if c not in COLUMNS)
        intact = table.complete and table.header == (*COLUMNS, *extra)
        return _dedupe(table.rows), extra, intact
    rows, extra = _read_parquet(p)
    return rows, extra, True


def journal_path(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    return p.with_name(p.name + ".journal")


def _atomic_csv(path: Path, rows: list[dict[str, Any]], columns: tuple[str, ...]) -> None:
    """Write the whole file through a temporary file and a rename: never half-written (a
    symbolic link's target is rewritten, the link kept)."""
    path = replace_target(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
            w.writeheader()
            for r in rows:
                w.writerow(_clean(r, columns))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _arrow_table(rows: list[dict[str, Any]], columns: tuple[str, ...] = COLUMNS) -> Any:
    import pyarrow as pa

    def typ(c: str) -> Any:
        if c in FLOAT_COLUMNS:
            return pa.float64()
        if c in INT_COLUMNS:
            return pa.int64()
        return pa.string()

    schema = pa.schema([(c, typ(c)) for c in COLUMNS])
    typed = [{k: _typed(k, r.get(k)) for k in COLUMNS} for r in rows]
    table = pa.Table.from_pylist(typed, schema=schema)
    for c in columns[len(COLUMNS) :]:  # a user's own columns keep their values as they were
        table = table.append_column(c, pa.array([r.get(c) for r in rows]))
    return table


def _typed(col: str, v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if col in FLOAT_COLUMNS:
        return float(v)
    if col in INT_COLUMNS:
        return int(v)
    return str(v)


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete row of a results file (plus its journal), deduplicated by ``job_id``.

    A file that is not a readable results file (bad cell, broken quoting, not UTF-8, a
    directory) is refused with one line naming the file, line and column."""
    p = Path(path)
    if _kind(p) == "csv":
        return _dedupe(_read_csv(p).rows) if p.exists() else []
    return _read_parquet(p)[0]


def _read_parquet(p: Path) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    rows: list[dict[str, Any]] = []
    extra: tuple[str, ...] = ()
    if p.is_dir():
        raise UserError(f"{p}: is a directory, not a results file")
    if p.exists():
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(p)
        except Exception as exc:
            raise UserError(f"{p}: not a readable Parquet file ({exc})") from None
        if "job_id" not in table.column_names:
            raise UserError(f"{p}: not a slackswap results file (no 'job_id' column)")
        _check_required_columns(p, tuple(table.column_names))
        extra = tuple(c for c in table.column_names if c not in COLUMNS)
        rows = table.to_pylist()
    jp = journal_path(p)
    if jp.exists():
        rows += _read_journal(jp)
    out = []
    for r in rows:
        try:
            row = {k: _typed(k, r.get(k)) for k in COLUMNS}
            for col in ("instance_spec", "solver_options", "history"):
                if row[col] is not None:
                    _from_text(col, row[col])
            _check_row(row)
        except (TypeError, ValueError, OverflowError):
            raise UserError(f"{p}: row {r.get('job_id')!r} has a value of the wrong type") from None
        except _BadCell as exc:
            raise UserError(f"{p}: row {r.get('job_id')!r}: {exc}") from None
        row.update({k: r.get(k) for k in extra})
        out.append(row)
    return _dedupe(out), extra


class _CsvTable:
    def __init__(self, rows: list[dict[str, Any]], header: tuple[str, ...], complete: bool):
        self.rows, self.header, self.complete = rows, header, complete


def _read_csv(p: Path) -> _CsvTable:
    text = read_user_text(p, "a results file", max_bytes=MAX_RESULTS_BYTES)
    # A byte-order mark (spreadsheets save one) is not part of the first column's name.
    text = text.removeprefix("\ufeff")
    complete = not text or text.endswith("\n")
    if not complete:
        text = text[: text.rfind("\n") + 1]  # a row cut by a kill: drop it, it reruns
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise UserError(f"{p}: line {line}: a NUL byte; not a slackswap results file")
    reader = csv.reader(io.StringIO(text), strict=True)
    try:
        header = tuple(next(reader, []))
        if not header:
            return _CsvTable([], (), complete)
        if "job_id" not in header:
            raise UserError(f"{p}: not a slackswap results file (no 'job_id' column)")
        _check_header(p, header)
        _check_required_columns(p, header)
        out = []
        for cells in reader:
            if len(cells) != len(header):
                raise UserError(
                    f"{p}: line {reader.line_num}: {len(cells)} cells where the header names "
                    f"{len(header)} (a broken or hand-edited row?)"
                )
            r = dict(zip(header, cells, strict=True))
            row = {k: (None if r.get(k) in (None, "") else _from_text(k, r[k])) for k in COLUMNS}
            row.update({k: (r[k] or None) for k in header if k not in COLUMNS})
            _check_row(row)
            out.append(row)
    except csv.Error as exc:
        raise UserError(f"{p}: line {reader.line_num}: {exc} (broken quoting?)") from None
    except _BadCell as exc:
        raise UserError(f"{p}: line {reader.line_num}: {exc}") from None
    return _CsvTable(out, header, complete)


_SCHEMA_BY_FOLDED = {c.lower(): c for c in COLUMNS}


def _check_header(p: Path, header: tuple[str, ...]) -> None:
    """Refuse a column name that is a schema column's with stray spaces, marks or case: read as
    a user's own column it would leave the schema's empty, and a resume would rewrite it so."""
    for name in header:
        if name in COLUMNS:
            continue
        folded = name.strip().strip("\ufeff\u200b").strip().lower()
        if folded in _SCHEMA_BY_FOLDED:
            raise UserError(
                f"{p}: line 1: column {name!r} is not the results column "
                f"{_SCHEMA_BY_FOLDED[folded]!r} (rename it; the file is left as it is)"
            )


def _check_required_columns(p: Path, header: tuple[str, ...]) -> None:
    """Refuse a file without one of `REQUIRED_COLUMNS` (read on, its rows would say nothing)."""
    for name in REQUIRED_COLUMNS:
        if name not in header:
            raise UserError(
                f"{p}: line 1: no {name!r} column; a results file has "
                f"{', '.join(REQUIRED_COLUMNS)} (not a slackswap results file, or a cut header?)"
            )


class _BadCell(Exception):
    pass


def _check_row(row: dict[str, Any]) -> None:
    """A `_BadCell` when the status is none of `STATUSES` (an empty one included)."""
    status = row.get("status")
    if status in (None, ""):
        raise _BadCell("column status is empty (every row says what came of its job)")
    if status not in STATUSES:
        raise _BadCell(
            f"column status: {_short(str(status))} is not a status (one of "
            f"{', '.join(sorted(STATUSES))})"
        )


def _from_text(col: str, s: str) -> Any:
    if col in FLOAT_COLUMNS:
        try:
            v = float(s)
        except ValueError:
            raise _BadCell(f"column {col}: {_short(s)} is not a number") from None
        if not math.isfinite(v):  # never written (a missing value is an empty cell)
            raise _BadCell(f"column {col}: {_short(s)} is not a finite number")
        return v
    if col in INT_COLUMNS:
        try:
            v = int(s) if not ("e" in s or "E" in s or "." in s) else float(s)
        except ValueError:
            raise _BadCell(f"column {col}: {_short(s)} is not an integer") from None
        if not _fits_int64(v):
            raise _BadCell(f"column {col}: {_short(s)} is not a 64-bit integer")
        return int(v)
    if col == "instance_spec":
        return _json_cell(col, s, _check_spec)
    if col == "solver_options":  # any object: each solver checks its options when rerun
        return _json_cell(col, s, lambda options: None)
    if col == "history":
        return _history_cell(s)
    return s


def _history_cell(s: str) -> str:
    """``s`` when it is a search history (`slackswap.solvers.running.history_json`): a JSON list
    of [seconds >= 0, plans evaluated >= 0, best step s > 0 or null]; else a `_BadCell`."""
    try:
        value = parse_json(s, "column history")
    except UserError as exc:
        raise _BadCell(str(exc)) from None
    if not isinstance(value, list):
        raise _BadCell(f"column history: {_short(s)} is not a JSON list")
    for i, point in enumerate(value):
        ok = isinstance(point, list) and len(point) == 3
        if ok:
            t, n, best = point
            ok = (
                _number(t) and t >= 0
                and isinstance(n, int) and not isinstance(n, bool) and n >= 0
                and (best is None or (_number(best) and best > 0))
            )  # fmt: skip
        if not ok:
            raise _BadCell(
                f"column history: point {i} {_short(json.dumps(point))} is not "
                "[seconds, plans evaluated, best step s or null]"
            )
    return s


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


#: What each key of a recorded instance spec holds (see `slackswap.analysis.jobs.InstanceRef`).
_SPEC_TEXT_KEYS = ("name", "path", "model", "gpu", "link", "label")
_SPEC_INT_KEYS = ("seq", "batch", "layers", "tokens")


def _json_cell(col: str, s: str, check: Any) -> str:
    """``s`` (kept as text) when it is a JSON object ``check`` accepts; else a `_BadCell`."""
    try:
        value = parse_json(s, f"column {col}")
    except UserError as exc:
        raise _BadCell(str(exc)) from None
    if not isinstance(value, dict):
        raise _BadCell(f"column {col}: {_short(s)} is not a JSON object")
    problem = check(value)
    if problem:
        raise _BadCell(f"column {col}: {_short(s)}: {problem}")
    return s


def _check_spec(spec: dict[str, Any]) -> str | None:
    """Why ``spec`` cannot name an instance, or None (``{}``: a hand-built instance)."""
    for k, v in spec.items():
        if k in _SPEC_TEXT_KEYS:
            if v is not None and not isinstance(v, str):
                return f"{k} must be text, not {v!r}"
        elif k in _SPEC_INT_KEYS:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                return f"{k} must be a positive integer, not {v!r}"
        elif k == "link_bw_GBps":
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            if v is not None and not (ok and v > 0):
                return f"{k} must be a positive number, not {v!r}"
        else:
            return f"unknown key {k!r}"
    if spec and not any(isinstance(spec.get(k), str) for k in ("name", "path", "model")):
        return "names no catalog name, path or model"
    return None


def _short(s: str) -> str:
    return repr(s if len(s) <= 60 else s[:57] + "...")


def _read_journal(p: Path) -> list[dict[str, Any]]:
    out = []
    text = read_user_text(p, "a results journal", max_bytes=MAX_RESULTS_BYTES)
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # cut by a kill
        try:
            row = parse_json(line, str(p))
        except UserError:
            break  # a line the writer never finished (or one it could not have written)
        if isinstance(row, dict):
            out.append(row)
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


def rows_to_frame(
    rows: Iterable[dict[str, Any]], extra_columns: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Rows as a DataFrame with the results schema (float, nullable int and string columns),
    then ``extra_columns`` (a user's own) as they are."""
    columns = (*COLUMNS, *extra_columns)
    df = pd.DataFrame([_clean(r, columns) for r in rows], columns=list(columns))
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
    if _kind(p) == "csv":
        table = _read_csv(p)
        extra = tuple(c for c in table.header if c not in COLUMNS)
        return rows_to_frame(_dedupe(table.rows), extra)
    rows, extra = _read_parquet(p)
    return rows_to_frame(rows, extra)
