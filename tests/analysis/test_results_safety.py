"""Results files are never lost: existing files are refused (or continued, or replaced on
request), one writer at a time holds the file, corrupt files give one line, user columns stay."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

import slackswap
from slackswap.analysis.results import ResultsWriter, read_results, read_rows
from slackswap.cli import main
from slackswap.errors import UserError
from slackswap.rowschema import COLUMNS

SRC = Path(slackswap.__file__).resolve().parents[1]  # the slackswap under test


pytestmark = pytest.mark.usefixtures("toys")  # the toy solvers, registered (conftest)


def row(job_id: str, **kw) -> dict:
    r = dict.fromkeys(COLUMNS)
    r.update(job_id=job_id, instance="inst", solver="s", seed=0, status="feasible", step_s=1.0)
    r.update(kw)
    return r


def compare(out: Path, budgets: str, *extra: str) -> int:
    return main(
        ["compare", "vgg16", "--budgets", budgets, "--solvers", "toy-keep", "-o", str(out),
         "--no-progress", "--no-min-budget", *extra]
    )  # fmt: skip


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_compare_never_replaces_existing_results_by_default(tmp_path, capsys, suffix) -> None:
    out = tmp_path / f"r{suffix}"
    assert compare(out, "1.0,0.5,0.2") == 0
    capsys.readouterr()
    assert compare(out, "0.4") == 2  # the case: this used to leave 1 row of 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resume" in err and "--overwrite" in err
    assert sorted(read_results(out)["budget"]) == ["0.2", "0.5", "1"]
    assert compare(out, "0.4", "--resume") == 0
    assert sorted(read_results(out)["budget"]) == ["0.2", "0.4", "0.5", "1"]
    assert compare(out, "0.4", "--overwrite") == 0
    assert list(read_results(out)["budget"]) == ["0.4"]


def _precious(path: Path) -> Path:
    path.write_text("precious\n")
    return path


@pytest.mark.parametrize(
    "writer",
    ["solve", "simulate", "instance", "report", "fig4"],
)
def test_every_writer_refuses_an_existing_file(tmp_path, capsys, writer) -> None:
    results = tmp_path / "r.csv"
    with ResultsWriter(results) as w:
        w.append(row("j0"))
    if writer == "solve":
        target = _precious(tmp_path / "plan.json")
        argv = ["solve", "vgg16", "--budget", "1.0", "--solver", "checkpoint", "-o", str(target)]
    elif writer == "simulate":
        target = _precious(tmp_path / "step.json")
        argv = ["simulate", "vgg16", "keep-all", "--budget", "1.0", "--trace", str(target)]
    elif writer == "instance":
        target = _precious(tmp_path / "i.json")
        argv = ["instance", "build", "gpt2-xl", "--layers", "1", "-o", str(target)]
    elif writer == "report":
        (tmp_path / "figs").mkdir()
        target = _precious(tmp_path / "figs" / "gap_heatmap.svg")
        argv = ["report", str(results), "-o", str(tmp_path / "figs"), "--no-rerun"]
    else:
        (tmp_path / "fig4").mkdir()
        target = tmp_path / "fig4" / "fig4.csv"
        results.rename(target)
        argv = ["reproduce", "fig4", "-o", str(tmp_path / "fig4"), "--instances", "vgg16",
                "--solvers", "checkpoint", "--no-progress"]  # fmt: skip
    before = target.read_bytes()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "--overwrite" in captured.err and captured.err.count("\n") == 1
    assert target.read_bytes() == before
    assert captured.out == ""  # refused before the work, not after it


def test_a_second_writer_is_refused_until_the_first_closes(tmp_path) -> None:
    path = tmp_path / "r.csv"
    first = ResultsWriter(path)
    first.append(row("a"))
    with pytest.raises(UserError, match="another slackswap process is writing"):
        ResultsWriter(path, resume=True)
    first.close()
    with ResultsWriter(path, resume=True) as second:
        assert second.done_ids == {"a"}


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from slackswap.analysis.results import ResultsWriter
    from slackswap.rowschema import COLUMNS
    from slackswap.errors import UserError

    path, who, ready, done = sys.argv[1:5]

    def row(i):
        r = dict.fromkeys(COLUMNS)
        r.update(job_id=f"{who}{i}", instance="inst", solver="s", seed=i, status="feasible")
        return r

    if who == "b":  # start once the first writer is writing
        while not Path(ready).exists():
            time.sleep(0.01)
    try:
        w = ResultsWriter(path, resume=True)
    except UserError as exc:
        print("refused:", exc)
        if who == "b":
            Path(done).touch()
        sys.exit(2)
    w.append(row(0))
    if who == "a":
        Path(ready).touch()
    t0 = time.monotonic()
    i = 1
    while i < 40 or (who == "a" and not Path(done).exists() and time.monotonic() - t0 < 60):
        w.append(row(i))
        i += 1
        time.sleep(0.005)
    w.close()
    if who == "b":
        Path(done).touch()
    print("wrote", i)
    """
)


def test_two_processes_on_one_results_file_lose_and_garble_nothing(tmp_path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    path, ready, done = tmp_path / "r.csv", tmp_path / "ready", tmp_path / "done"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = {
        who: subprocess.Popen(
            [sys.executable, str(script), str(path), who, str(ready), str(done)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for who in ("a", "b")
    }
    outs = {who: p.communicate(timeout=120) for who, p in procs.items()}
    rows = read_rows(path)
    ids = [r["job_id"] for r in rows]
    assert len(ids) == len(set(ids))
    expected: set[str] = set()
    for who, (out, err) in outs.items():
        if out.startswith("wrote"):
            expected |= {f"{who}{i}" for i in range(int(out.split()[1]))}
        else:
            assert procs[who].returncode == 2 and "another slackswap process is writing" in out, err
    assert set(ids) == expected  # every row of every writer that ran, and nothing else
    assert outs["a"][0].startswith("wrote") and outs["b"][0].startswith("refused")


CORRUPT = {
    "bad numeric cell": lambda text: text.replace(",1.0,", ",one,", 1),
    "NUL byte": lambda text: text.replace("inst", "in\0st", 1),
    "misquoted row": lambda text: text + '"j9,"inst\n',
    "40-digit integer": lambda text: text.replace(",0,", ",1" + "0" * 39 + ",", 1),
}


@pytest.mark.parametrize("damage", sorted(CORRUPT))
def test_a_corrupt_results_file_is_one_line_on_resume_and_report(tmp_path, capsys, damage):
    path = tmp_path / "r.csv"
    with ResultsWriter(path) as w:
        w.append(row("j0"))
    path.write_text(CORRUPT[damage](path.read_text()))
    before = path.read_bytes()
    with pytest.raises(UserError, match=r"^\S*r\.csv: line \d"):
        ResultsWriter(path, resume=True)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("slackswap: error: ") and err.count("\n") == 1
    assert path.read_bytes() == before  # refused, not "repaired" away


def test_non_utf8_and_directory_results_files(tmp_path) -> None:
    path = tmp_path / "r.csv"
    path.write_bytes(b"job_id,instance\n\xff\xfe,x\n")
    with pytest.raises(UserError, match="not UTF-8"):
        read_results(path)
    with pytest.raises(UserError, match="not UTF-8"):
        ResultsWriter(path, resume=True)
    d = tmp_path / "d.csv"
    d.mkdir()
    with pytest.raises(UserError, match="is a directory"):
        read_results(d)
    with pytest.raises(UserError, match="is a directory"):
        ResultsWriter(d, resume=True)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_resume_keeps_columns_a_user_added(tmp_path, suffix) -> None:
    path = tmp_path / f"r{suffix}"
    with ResultsWriter(path) as w:
        w.append(row("j0"))
    df = read_results(path)
    df["my_note"] = ["keep me"]
    if suffix == ".csv":
        df.to_csv(path, index=False)
    else:
        df.to_parquet(path, index=False)
    with ResultsWriter(path, resume=True) as w:
        w.append(row("j1"))
    back = read_results(path)
    assert list(back["job_id"]) == ["j0", "j1"]
    assert back.loc[0, "my_note"] == "keep me" and pd.isna(back.loc[1, "my_note"])
