"""Results files read back: every cell is checked by its column, a bad one is one line naming the
file, line and column (``report``, ``report -o`` that reruns a case, ``compare --resume``), and a
file saved with a UTF-8 byte-order mark reads as it was written and is never rewritten wrongly.
The fuzz replaces cells of a good file with odd text.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slackswap
from slackswap.analysis.results import read_results
from slackswap.cli import main
from slackswap.errors import UserError
from slackswap.rowschema import COLUMNS, FLOAT_COLUMNS
from tests.support.userinput import refused


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results file of four rows (two solvers, two budgets) on a 1-layer instance file."""
    d = tmp_path_factory.mktemp("results")
    slackswap.build_model("gpt2-xl", layers=1, seq=16, batch=1).save(d / "inst.json")
    out = d / "r.csv"
    assert main(["compare", str(d / "inst.json"), "--budgets", "200%,0.9", "--solvers",
                 "vdnn,checkpoint", "-o", str(out), "--no-progress"]) == 0  # fmt: skip
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig"))))


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


BAD_CELLS = {
    "instance_spec": ["not json", "[1, 2]", "5", '["name"]', '{"model": "gpt2-xl", "layers": "x"}',
                      '{"model": "gpt2-xl", "layers": true}', '{"path": 3}', '{"x": 1}',
                      "[" * 5000, '{"seq": ' + "9" * 5000 + "}", '{"gpu": "a100"}'],
    "solver_options": ["[1]", "not json", '"text"', "[" * 100_000],
    "step_s": ["x", "inf", "nan", "1e999"],
    "seed": ["1.5", "x", "1" + "0" * 40],
}  # fmt: skip
CASES = [(col, i) for col, values in BAD_CELLS.items() for i in range(len(values))]


@pytest.mark.parametrize(("column", "index"), CASES)
def test_a_bad_cell_is_one_line_naming_file_line_and_column(tmp_path, good, capsys, column, index):
    rows = _rows(good)
    rows[1][column] = BAD_CELLS[column][index]
    path = tmp_path / "r.csv"
    _write(path, rows)
    before = path.read_bytes()
    for argv in (["report", str(path)], ["report", str(path), "-o", str(tmp_path / "figs")]):
        line = refused(argv, capsys)
        assert f"{path}: line 3: column {column}: " in line, line
    inst = str(good.parent / "inst.json")
    line = refused(["compare", inst, "--budgets", "200%", "--solvers", "vdnn", "-o", str(path),
                    "--resume", "--no-progress"], capsys)  # fmt: skip
    assert f"column {column}" in line
    assert path.read_bytes() == before


def test_a_spec_naming_an_endless_file_is_one_line_on_rerun(tmp_path, good, capsys) -> None:
    rows = _rows(good)
    for r in rows:
        r["instance_spec"] = '{"path": "/dev/zero"}'
    path = tmp_path / "r.csv"
    _write(path, rows)
    line = refused(["report", str(path), "-o", str(tmp_path / "figs"), "--rerun"], capsys)
    assert "/dev/zero: is a character device" in line
    # without --rerun nothing is rebuilt: the figures from the rows alone
    assert main(["report", str(path), "-o", str(tmp_path / "rows"), "--format", "png"]) == 0


def test_a_byte_order_mark_is_read_and_kept_out_of_the_header(tmp_path, good, capsys) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + good.read_bytes())
    df = read_results(path)
    assert list(df["instance"]) == list(read_results(good)["instance"])
    assert df["instance"].notna().all()
    assert main(["report", str(path)]) == 0
    assert "nan" not in capsys.readouterr().out
    inst = str(good.parent / "inst.json")
    assert main(["compare", inst, "--budgets", "200%,0.9,0.8", "--solvers", "vdnn,checkpoint",
                 "-o", str(path), "--resume", "--no-progress"]) == 0  # fmt: skip
    header = path.read_text(encoding="utf-8-sig").splitlines()[0].split(",")
    assert tuple(header) == COLUMNS  # no "\ufeffinstance" column
    after = read_results(path)
    assert len(after) == 6 and after["instance"].notna().all()


# ---- fuzz -----------------------------------------------------------------------------------
ODD = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["{}", "[]", "null", "true", "1e308", "-0", "1" * 30, "{" * 70, '{"a": ['
                     "]}", '{"name": "gpt2-xl"}', '{"model": 1}', "\ufeff", "NaN", " 1 "]),
)  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(COLUMNS), ODD), max_size=4))
def test_fuzzed_results_cells_read_or_are_one_line(tmp_path_factory, good, edits) -> None:
    rows = _rows(good)
    for i, col, value in edits:
        rows[i][col] = value
    path = tmp_path_factory.mktemp("fz") / "r.csv"
    _write(path, rows)
    try:
        df = read_results(path)
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}: line "), str(exc)
        return
    # What was read is what its columns promise: a rerun can rebuild each row.
    for spec, options in zip(df["instance_spec"], df["solver_options"], strict=True):
        for cell in (spec, options):
            assert cell is pd.NA or isinstance(json.loads(cell), dict), cell
    for col in FLOAT_COLUMNS:
        assert np.isfinite(df[col].dropna()).all(), col


@pytest.mark.parametrize(
    "name", [" instance", "Instance", "instance\u200b", "\ufeff\ufeffinstance"]
)
def test_a_schema_column_under_a_near_name_is_refused_not_rewritten(tmp_path, good, capsys, name):
    path = tmp_path / "r.csv"
    text = good.read_text()
    path.write_text(text.replace("instance", name, 1))
    before = path.read_bytes()
    line = refused(["report", str(path)], capsys)
    assert "line 1: column " in line and "is not the results column 'instance'" in line
    inst = str(good.parent / "inst.json")
    refused(["compare", inst, "--budgets", "200%", "--solvers", "vdnn", "-o", str(path),
             "--resume", "--no-progress"], capsys)  # fmt: skip
    assert path.read_bytes() == before


def test_a_journal_line_with_a_huge_integer_is_a_cut_line(tmp_path) -> None:
    from slackswap.analysis.results import ResultsWriter, journal_path, read_rows

    path = tmp_path / "r.parquet"
    with ResultsWriter(path) as w:
        w.append(
            {c: None for c in COLUMNS}
            | {"job_id": "j0", "instance": "i", "solver": "s", "status": "feasible", "seed": 0}
        )
    journal_path(path).write_text('{"job_id": "j1", "seed": ' + "1" * 5000 + "}\n")
    assert [r["job_id"] for r in read_rows(path)] == ["j0"]
