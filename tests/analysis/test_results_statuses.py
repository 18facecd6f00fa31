"""Results files are validated on read (``report``, ``compare --resume``, `read_results`): every
row's status is one of the known statuses, the required columns are there, and a name or message
with a control character is written so that it reads back. A bad file is one line naming the
file, line (CSV) or row (Parquet) and column, and nothing is rewritten."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

import slackswap
from slackswap import rowschema
from slackswap.analysis.results import ResultsWriter, read_results, read_rows
from slackswap.cli import main
from slackswap.errors import UserError
from slackswap.solvers import Status
from tests.support.userinput import refused

#: Statuses the fuzz campaign of issue 34 slipped through ``report`` and ``--resume``.
BAD_STATUSES = ["-inf", "<NA>", "NaN", "1e400", "True", "Optimal", "timeout ", "done"]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results file of two rows (two solvers) on a 1-layer instance file."""
    d = tmp_path_factory.mktemp("results")
    slackswap.build_model("gpt2-xl", layers=1, seq=16, batch=1).save(d / "inst.json")
    out = d / "r.csv"
    assert main(["compare", str(d / "inst.json"), "--budgets", "0.9", "--solvers",
                 "vdnn,checkpoint", "-o", str(out), "--no-progress"]) == 0  # fmt: skip
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def _write(path: Path, rows: list[dict[str, str]], columns: list[str] | None = None) -> None:
    names = columns or list(rows[0])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=names, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _resume(good: Path, path: Path) -> list[str]:
    inst = str(good.parent / "inst.json")
    return ["compare", inst, "--budgets", "0.9", "--solvers", "vdnn", "-o", str(path),
            "--resume", "--no-progress"]  # fmt: skip


def test_every_status_a_run_records_is_a_known_status() -> None:
    # The readers' list (rowschema.STATUSES) must grow with the enum the runs write.
    assert {s.value for s in Status} <= rowschema.STATUSES


def test_the_file_compare_wrote_reads_back(good) -> None:
    df = read_results(good)
    assert len(df) == 2 and set(df["status"]) <= rowschema.STATUSES


@pytest.mark.parametrize("status", BAD_STATUSES)
def test_an_unknown_status_is_refused_by_report_and_resume(tmp_path, good, capsys, status):
    rows = _rows(good)
    rows[1]["status"] = status
    path = tmp_path / "r.csv"
    _write(path, rows)
    before = path.read_bytes()
    line = refused(["report", str(path)], capsys)
    assert f"{path}: line 3: column status: {status!r} is not a status" in line, line
    assert "optimal" in line  # it says which statuses are known
    line = refused(_resume(good, path), capsys)
    assert "line 3: column status" in line
    assert path.read_bytes() == before  # nothing rewritten


def test_an_empty_status_is_refused(tmp_path, good, capsys) -> None:
    rows = _rows(good)
    rows[0]["status"] = ""
    path = tmp_path / "r.csv"
    _write(path, rows)
    line = refused(["report", str(path)], capsys)
    assert "line 2: column status is empty" in line


@pytest.mark.parametrize("column", [c for c in rowschema.REQUIRED_COLUMNS if c != "job_id"])
def test_a_file_without_a_required_column_is_refused(tmp_path, good, capsys, column) -> None:
    rows = _rows(good)
    path = tmp_path / "r.csv"
    _write(path, rows, [c for c in rows[0] if c != column])
    before = path.read_bytes()
    line = refused(["report", str(path)], capsys)
    assert f"line 1: no {column!r} column" in line, line
    refused(_resume(good, path), capsys)
    assert path.read_bytes() == before


@pytest.mark.parametrize("status", ["NaN", "True"])
def test_a_parquet_row_with_an_unknown_status_is_refused(tmp_path, status) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "r.parquet"
    base = dict.fromkeys(rowschema.COLUMNS) | {"instance": "i", "solver": "s", "seed": 0}
    with ResultsWriter(path) as w:
        w.append(base | {"job_id": "j0", "status": "feasible"})
        w.append(base | {"job_id": "j1", "status": status})
    with pytest.raises(UserError, match=rf"row 'j1': column status: {status!r} is not a status"):
        read_results(path)


def test_a_control_character_in_a_message_reads_back(tmp_path) -> None:
    # A solver's error text may hold anything; a NUL in a CSV cell would end the reader.
    path = tmp_path / "r.csv"
    row = dict.fromkeys(rowschema.COLUMNS) | {
        "job_id": "j0", "instance": "i", "solver": "s", "seed": 0, "status": "error",
        "error": "ValueError: bad name 'a\x00b\x1b'",
    }  # fmt: skip
    with ResultsWriter(path) as w:
        w.append(row)
    assert "\x00" not in path.read_text()
    (back,) = read_rows(path)
    assert back["error"] == "ValueError: bad name 'a\\x00b\\x1b'"


def test_an_instance_name_with_a_nul_never_reaches_a_results_file(tmp_path, capsys) -> None:
    # The case: a NUL in the instance name made a CSV that report then refused. The
    # name is refused at load now, so no such file is ever made.
    inst = slackswap.build_model("gpt2-xl", layers=1, seq=16, batch=1).to_dict()
    inst["name"] = "gpt2\x00xl"
    src = tmp_path / "inst.json"
    src.write_text(json.dumps(inst))
    out = tmp_path / "r.csv"
    line = refused(["compare", str(src), "--budgets", "0.9", "--solvers", "vdnn", "-o", str(out),
                    "--no-progress"], capsys)  # fmt: skip
    assert "name = 'gpt2\\x00xl': holds the control character \\x00" in line, line
    assert not out.exists()
