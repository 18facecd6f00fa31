"""Results files: rows appended and durable per job, cut rows dropped, Parquet journal, types."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from slackswap.analysis.results import (
    COLUMNS,
    ResultsWriter,
    journal_path,
    read_results,
    read_rows,
)
from slackswap.errors import UserError


def row(i: int, **kw) -> dict:
    r = dict.fromkeys(COLUMNS)
    r.update(
        job_id=f"j{i}",
        instance="inst",
        solver="s",
        seed=i,
        status="feasible",
        budget_fraction=0.5,
        step_s=1.0 + i,
        ideal_s=1.0,
        plan_s=0.01,
        error=None,
    )
    r.update(kw)
    return r


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_rows_round_trip_with_types(tmp_path, suffix: str) -> None:
    path = tmp_path / f"r{suffix}"
    with ResultsWriter(path) as w:
        w.append(row(0, error="multi\nline", swap_bytes=123))
        w.append(row(1, step_s=float("inf")))
    df = read_results(path)
    assert list(df.columns) == list(COLUMNS)
    assert list(df["job_id"]) == ["j0", "j1"]
    assert df["step_s"].dtype == "float64" and pd.isna(df.loc[1, "step_s"])  # inf -> missing
    assert df.loc[0, "swap_bytes"] == 123 and str(df["swap_bytes"].dtype) == "Int64"
    assert df.loc[0, "error"] == "multi line"  # one line per row
    assert pd.isna(df.loc[1, "error"])


def test_csv_rows_are_on_disk_before_close(tmp_path) -> None:
    path = tmp_path / "r.csv"
    w = ResultsWriter(path)
    w.append(row(0))
    w.append(row(1))
    assert [r["job_id"] for r in read_rows(path)] == ["j0", "j1"]  # no close() yet
    w.close()


def test_csv_resume_drops_a_cut_row_and_keeps_the_rest(tmp_path) -> None:
    path = tmp_path / "r.csv"
    with ResultsWriter(path) as w:
        for i in range(3):
            w.append(row(i))
    text = path.read_text()
    path.write_text(text[: -len(text.splitlines()[-1]) // 2 - 1])  # cut the last row mid-way
    w = ResultsWriter(path, resume=True)
    assert w.done_ids == {"j0", "j1"}
    w.append(row(2))
    w.close()
    assert [r["job_id"] for r in read_rows(path)] == ["j0", "j1", "j2"]
    # without resume the file is refused, with overwrite it starts over
    with pytest.raises(UserError, match="--resume .* --overwrite"):
        ResultsWriter(path)
    assert len(read_rows(path)) == 3
    ResultsWriter(path, overwrite=True).close()
    assert read_rows(path) == []


def test_parquet_rows_live_in_the_journal_until_rewritten(tmp_path) -> None:
    path = tmp_path / "r.parquet"
    w = ResultsWriter(path)
    w.append(row(0))
    w.append(row(1))
    # killed now: the Parquet file is valid (maybe empty) and the journal holds the rows
    assert journal_path(path).exists()
    assert {r["job_id"] for r in read_rows(path)} == {"j0", "j1"}
    del w  # as in a killed process, its lock on the file goes with it (nothing is closed)
    # a cut journal line is dropped
    with open(journal_path(path), "a") as fh:
        fh.write(json.dumps(row(2))[:40])
    w2 = ResultsWriter(path, resume=True)
    assert w2.done_ids == {"j0", "j1"}
    w2.append(row(2))
    w2.close()
    assert not journal_path(path).exists()
    assert list(read_results(path)["job_id"]) == ["j0", "j1", "j2"]


def test_duplicate_job_ids_keep_the_first(tmp_path) -> None:
    path = tmp_path / "r.parquet"
    with ResultsWriter(path) as w:
        w.append(row(0, step_s=5.0))
    with open(journal_path(path), "w") as fh:  # a crash between rewrite and journal truncation
        fh.write(json.dumps(row(0, step_s=9.0)) + "\n")
    rows = read_rows(path)
    assert len(rows) == 1 and rows[0]["step_s"] == 5.0


def test_bad_results_paths(tmp_path) -> None:
    with pytest.raises(UserError, match="must end in .csv or .parquet"):
        ResultsWriter(tmp_path / "r.txt")
    with pytest.raises(UserError, match="no such results file"):
        read_results(tmp_path / "missing.csv")
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="not a slackswap results file"):
        read_results(other)
