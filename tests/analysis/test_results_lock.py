"""The results lock belongs to the file, not to the name: two writers reaching one results file
through a symbolic link, a hard link or ``..`` are refused, and ``--overwrite`` from another
name never removes rows a running writer has reported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import slackswap
from slackswap.analysis.results import ResultsWriter, read_rows
from slackswap.errors import UserError
from slackswap.rowschema import COLUMNS

SRC = Path(slackswap.__file__).resolve().parents[1]

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from slackswap.analysis.results import ResultsWriter
    from slackswap.rowschema import COLUMNS
    from slackswap.errors import UserError

    path, who, ready, done, mode = sys.argv[1:6]

    def row(i):
        r = dict.fromkeys(COLUMNS)
        r.update(job_id=f"{who}{i}", instance="inst", solver="s", seed=i, status="feasible")
        return r

    if who == "b":  # start once the first writer has reported rows
        while not Path(ready).exists():
            time.sleep(0.01)
    try:
        w = ResultsWriter(path, resume=mode == "resume", overwrite=mode == "overwrite")
    except UserError as exc:
        print("refused:", exc)
        Path(done).touch()
        sys.exit(2)
    for i in range(20):
        w.append(row(i))
    if who == "a":
        Path(ready).touch()
    t0 = time.monotonic()
    i = 20
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


def _aliases(tmp_path: Path, kind: str, suffix: str) -> tuple[Path, Path, Path]:
    """(the real file, name A, name B): A and B reach the real file by different names."""
    real = tmp_path / "d" / f"r{suffix}"
    real.parent.mkdir()
    ResultsWriter(real).close()  # the file exists, so a hard link can be made
    if kind == "symlink":
        alias = tmp_path / f"alias{suffix}"
        alias.symlink_to(real)
    elif kind == "hardlink":
        alias = tmp_path / "other" / f"h{suffix}"
        alias.parent.mkdir()
        os.link(real, alias)
    else:  # `..` through a linked directory: lexically ./r, really d/r
        (tmp_path / "d" / "sub").mkdir()
        (tmp_path / "lnk").symlink_to(tmp_path / "d" / "sub")
        alias = tmp_path / "lnk" / ".." / f"r{suffix}"
    return real, alias, real


def _run_two(tmp_path: Path, a: Path, b: Path, mode_b: str) -> dict[str, tuple[int, str, str]]:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    ready, done = tmp_path / "ready", tmp_path / "done"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = {
        who: subprocess.Popen(
            [sys.executable, str(script), str(path), who, str(ready), str(done), mode],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for who, path, mode in (("a", a, "resume"), ("b", b, mode_b))
    }
    out = {}
    for who, p in procs.items():
        o, e = p.communicate(timeout=120)
        out[who] = (p.returncode, o, e)
    return out


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("kind", ["symlink", "hardlink", "dotdot"])
@pytest.mark.parametrize("mode_b", ["resume", "overwrite"])
def test_a_second_writer_through_another_name_is_refused(tmp_path, kind, suffix, mode_b) -> None:
    real, alias, _ = _aliases(tmp_path, kind, suffix)
    out = _run_two(tmp_path, alias, real, mode_b)
    assert out["a"][0] == 0 and out["a"][1].startswith("wrote"), out["a"]
    code, stdout, stderr = out["b"]
    assert code == 2 and "another slackswap process is writing" in stdout, out["b"]
    wrote = int(out["a"][1].split()[1])
    # Every row A reported, none of B's (read through A's name: an atomic Parquet rewrite gives
    # A a new file, so a hard link to the old one no longer reaches its rows).
    rows = [r["job_id"] for r in read_rows(alias)]
    assert rows == [f"a{i}" for i in range(wrote)]


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "dotdot"])
def test_the_other_name_is_refused_in_one_process_and_free_after_close(tmp_path, kind) -> None:
    real, alias, _ = _aliases(tmp_path, kind, ".csv")
    first = ResultsWriter(real, resume=True)
    for other in (alias, real):
        for flags in ({"resume": True}, {"overwrite": True}):
            with pytest.raises(UserError, match="another slackswap process is writing"):
                ResultsWriter(other, **flags)
    first.close()
    with ResultsWriter(alias, resume=True) as second:
        assert second.done_ids == set()


def test_a_hard_link_made_after_a_rewrite_meets_the_lock(tmp_path) -> None:
    # A fresh writer replaces the file (a new inode): the lock follows the new file.
    path = tmp_path / "r.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    first = ResultsWriter(path, overwrite=True)
    os.link(path, tmp_path / "late.csv")
    with pytest.raises(UserError, match="through another name"):
        ResultsWriter(tmp_path / "late.csv", resume=True)
    first.close()
