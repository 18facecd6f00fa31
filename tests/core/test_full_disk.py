"""A full disk ends `compare` (fresh or resumed, CSV or Parquet) and `report -o` with one line
and exit 2 that says how much was written; what was written stays readable."""

from __future__ import annotations

import builtins
import errno
from pathlib import Path
from typing import Any

import pytest

from slackswap.analysis import results as results_mod
from slackswap.analysis.results import ResultsWriteError, ResultsWriter, read_rows
from slackswap.cli import main

pytestmark = pytest.mark.usefixtures("toys")  # the toy solvers, registered (conftest)


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


class _FullDisk:
    """A file opened for writing on a disk with room for ``room["lines"]`` more lines: writes
    are buffered, a flush or close that would pass the room fails as a full disk does."""

    def __init__(self, fh: Any, room: dict[str, int]) -> None:
        self._fh, self._room, self._pending = fh, room, ""

    def write(self, text: str) -> int:
        self._pending += text
        return len(text)

    def flush(self) -> None:
        lines = self._pending.count("\n")
        if lines > self._room["lines"]:
            raise _enospc()
        self._room["lines"] -= lines
        self._fh.write(self._pending)
        self._pending = ""
        self._fh.flush()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._fh.close()

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def _full_after(monkeypatch, lines: int) -> None:
    room = {"lines": lines}
    real_open = builtins.open

    def fake_open(path, mode="r", *args, **kwargs):
        fh = real_open(path, mode, *args, **kwargs)
        return _FullDisk(fh, room) if ("w" in mode or "a" in mode) else fh

    monkeypatch.setattr(results_mod, "open", fake_open, raising=False)


def _compare(out: Path, budgets: str, *extra: str) -> int:
    return main(
        ["compare", "vgg16", "--budgets", budgets, "--solvers", "toy-keep", "-o", str(out),
         "--no-progress", "--no-min-budget", *extra]
    )  # fmt: skip


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and "Traceback" not in "\n".join(err), err
    return err[-1]


def test_csv_compare_on_a_full_disk_is_one_line_with_the_rows_written(
    tmp_path, monkeypatch, capsys
) -> None:
    out = tmp_path / "r.csv"
    _full_after(monkeypatch, 1 + 2)  # the header and two rows
    assert _compare(out, "1.0,0.8,0.6,0.4") == 2
    line = _one_line(capsys)
    assert "No space left on device" in line and "2 rows written" in line, line
    monkeypatch.undo()
    assert len(read_rows(out)) == 2
    assert _compare(out, "1.0,0.8,0.6,0.4", "--resume") == 0
    assert len(read_rows(out)) == 4


def test_csv_resume_on_a_full_disk_counts_found_and_new_rows(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.csv"
    assert _compare(out, "1.0,0.8") == 0
    _full_after(monkeypatch, 1)  # one more row fits
    assert _compare(out, "1.0,0.8,0.6,0.4", "--resume") == 2
    line = _one_line(capsys)
    assert "3 rows written (1 by this run, 2 found)" in line, line
    monkeypatch.undo()
    assert len(read_rows(out)) == 3


def test_parquet_compare_on_a_full_disk_keeps_the_journal(tmp_path, monkeypatch, capsys):
    import pyarrow.parquet as pq

    out = tmp_path / "r.parquet"
    calls = {"n": 0}
    real = pq.write_table

    def write_table(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1:  # the empty file at the start fits, the rewrite at the end not
            raise _enospc()
        return real(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", write_table)
    assert _compare(out, "1.0,0.8,0.6") == 2
    line = _one_line(capsys)
    assert "No space left on device" in line and "3 rows written" in line, line
    monkeypatch.undo()
    assert len(read_rows(out)) == 3  # the Parquet file plus its journal
    assert not list(tmp_path.glob("*.tmp"))


def test_a_full_disk_at_the_first_rewrite_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "r.csv"
    # an old header (the required columns, not today's all): resume rewrites the file
    out.write_text("job_id,instance,solver,status\nj0,x,vdnn,feasible\n")
    before = out.read_bytes()
    _full_after(monkeypatch, 0)
    with pytest.raises(ResultsWriteError, match="nothing written, the file is as it was"):
        ResultsWriter(out, resume=True)
    assert out.read_bytes() == before
    monkeypatch.undo()
    ResultsWriter(out, resume=True).close()  # the lock was let go


def test_report_figures_on_a_full_disk(tmp_path, monkeypatch, capsys) -> None:
    import slackswap.textfile as textfile

    out = tmp_path / "r.csv"
    assert _compare(out, "1.0,0.8") == 0
    real = textfile._atomic_write
    calls = {"n": 0}

    def atomic_write(path, blob):
        calls["n"] += 1
        if calls["n"] > 2:
            raise _enospc()
        real(path, blob)

    monkeypatch.setattr(textfile, "_atomic_write", atomic_write)
    code = main(["report", str(out), "-o", str(tmp_path / "figs"), "--no-rerun"])
    line = _one_line(capsys)
    assert code == 2 and "No space left on device" in line, line
    assert "2 files written before it" in line, line
