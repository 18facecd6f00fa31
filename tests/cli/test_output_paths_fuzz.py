"""Output paths: every command's output goes through one writer (`slackswap.textfile`).

A regular file or a new path is written atomically; a symbolic link's target is written and the
link kept; a character device or FIFO is written in place and stays what it is (a FIFO nobody
reads is refused, never waited on); a name or path longer than the system allows, or a parent
that is a file, is one line and exit 2 before any work. The fixed examples are the ones the
input-surface fuzz campaign found; the fuzz draws paths of odd components.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slackswap
from slackswap.analysis import checks
from slackswap.errors import UserError
from slackswap.textfile import check_output_path, write_output
from tests.support.userinput import is_char_device, null_device, refused


@pytest.fixture(scope="module")
def inst_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inst") / "inst.json"
    slackswap.build_model("gpt2-xl", layers=1, seq=16, batch=1).save(path)
    return path


def simulate_trace(inst: Path, trace: Path) -> list[str]:
    return ["simulate", str(inst), "keep-all", "--budget", "200%", "--trace", str(trace),
            "--overwrite"]  # fmt: skip


def test_trace_to_a_device_node_writes_there_and_keeps_the_node(tmp_path, inst_file) -> None:
    from slackswap.cli import main

    node = null_device(tmp_path / "null")
    assert main(simulate_trace(inst_file, node)) == 0
    assert is_char_device(node)  # not replaced by a regular file
    # without --overwrite too: writing to a stream replaces nothing
    assert main(simulate_trace(inst_file, node)[:-1]) == 0
    assert is_char_device(node)


def test_every_writer_keeps_a_device_node(tmp_path, inst_file) -> None:
    from slackswap.cli import main

    node = null_device(tmp_path / "null.json")
    assert main(["instance", "build", "gpt2-xl", "--layers", "1", "-o", str(node)]) == 0
    assert main(["solve", str(inst_file), "--budget", "200%", "-o", str(node)]) == 0
    slackswap.build_model("gpt2-xl", layers=1).save(node)
    assert is_char_device(node)


def test_results_file_on_a_device_node_is_refused(tmp_path, inst_file, capsys) -> None:
    node = null_device(tmp_path / "null.csv")
    line = refused(["compare", str(inst_file), "--budgets", "200%", "--solvers", "vdnn",
                    "-o", str(node), "--overwrite", "--no-progress"], capsys)  # fmt: skip
    assert "character device" in line
    assert is_char_device(node)


def test_a_full_device_is_one_line_and_stays_a_device(tmp_path, inst_file, capsys) -> None:
    try:
        os.mknod(tmp_path / "full", stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full
    except PermissionError:
        pytest.skip("mknod needs root")
    line = refused(simulate_trace(inst_file, tmp_path / "full"), capsys)
    assert "No space left on device" in line
    assert is_char_device(tmp_path / "full")


def test_fifo_without_a_reader_is_refused_not_waited_on(tmp_path, inst_file, capsys) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = refused(simulate_trace(inst_file, fifo), capsys)
    assert "no process is reading" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_fifo_with_a_reader_is_written_in_place(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    ready = threading.Event()

    def read() -> None:
        # Read and write ends both held (Linux): no EOF before the writer comes; read until
        # all the bytes arrived.
        fd = os.open(fifo, os.O_RDWR)
        ready.set()
        data = b""
        while len(data) < 100_000:
            data += os.read(fd, 100_000 - len(data))
        os.close(fd)
        got.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(5)
    write_output(fifo, "x" * 100_000)  # more than a pipe's buffer: written whole
    reader.join(5)
    assert got == [b"x" * 100_000]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_is_followed_and_kept(tmp_path, inst_file) -> None:
    from slackswap.cli import main

    target = tmp_path / "real" / "trace.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert main(simulate_trace(inst_file, link)) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("{")  # the target holds the trace
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "new.json")
    write_output(dangling, "new\n")
    assert dangling.is_symlink() and (tmp_path / "new.json").read_text() == "new\n"


@pytest.mark.parametrize("where", ["name", "path"])
def test_too_long_names_are_one_line_in_every_command(tmp_path, inst_file, capsys, where):
    long = "a" * 300 if where == "name" else "/".join(["b" * 200] * 25)
    out = tmp_path / long
    inst = str(inst_file)
    commands = [
        ["solve", inst, "--budget", "200%", "-o", f"{out}.json"],
        ["simulate", inst, "keep-all", "--budget", "200%", "--trace", f"{out}.json"],
        ["instance", "build", "gpt2-xl", "--layers", "1", "-o", f"{out}.json"],
        ["compare", inst, "--budgets", "200%", "--solvers", "vdnn", "-o", f"{out}.csv"],
    ]
    for argv in commands:
        line = refused(argv, capsys)
        assert "this system allows" in line, line
        assert len(line) < 400  # the path is shortened in the message
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'instances = ["{inst}"]\nbudgets = ["200%"]\nsolvers = ["vdnn"]\n'
                     f'output = "{long}.csv"\n')  # fmt: skip
    assert "this system allows" in refused(["compare", "--sweep", str(sweep)], capsys)
    results = tmp_path / "r.csv"
    from slackswap.cli import main

    assert main(["compare", inst, "--budgets", "200%", "--solvers", "vdnn", "-o", str(results),
                 "--no-progress"]) == 0  # fmt: skip
    assert "this system allows" in refused(["report", str(results), "-o", str(out)], capsys)


def test_a_parent_that_is_a_file_is_one_line(tmp_path, inst_file, capsys) -> None:
    (tmp_path / "file").write_text("x")
    line = refused(["solve", str(inst_file), "--budget", "200%", "-o",
                    str(tmp_path / "file" / "sub" / "plan.json")], capsys)  # fmt: skip
    assert "not a directory" in line


# ---- fuzz -----------------------------------------------------------------------------------
COMPONENTS = st.one_of(
    st.sampled_from(["a", ".", "..", "file", "dir", "null", "fifo", "link", "dangling", " "]),
    st.text(alphabet=st.characters(blacklist_characters="/\0"), min_size=1, max_size=8),
    st.integers(250, 400).map(lambda n: "n" * n),
)


def _landscape(root: Path) -> None:
    """A directory with one of each kind of node the paths may meet."""
    (root / "dir").mkdir()
    (root / "file").write_text("precious")
    null_device(root / "null")
    os.mkfifo(root / "fifo")
    (root / "link").symlink_to(root / "file")
    (root / "dangling").symlink_to(root / "nowhere")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(COMPONENTS, min_size=1, max_size=5), overwrite=st.booleans())
def test_fuzzed_output_paths_are_written_or_refused_in_one_line(tmp_path_factory, parts,
                                                                 overwrite) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("out")
    _landscape(root)
    path = root.joinpath(*parts)
    kinds_before = {p.name: os.lstat(p).st_mode for p in root.iterdir()}
    try:
        checks.output_file(path, "-o", overwrite=overwrite)
        write_output(path, "{}\n", "-o")
    except UserError as exc:
        assert "\n" not in str(exc)
        return
    finally:
        for name, mode in kinds_before.items():  # no node ever changes kind
            assert stat.S_IFMT(os.lstat(root / name).st_mode) == stat.S_IFMT(mode), name
    if not (stat.S_ISCHR(os.stat(path).st_mode) or stat.S_ISFIFO(os.stat(path).st_mode)):
        assert path.read_text() == "{}\n"


def test_check_output_path_names_the_long_component() -> None:
    with pytest.raises(UserError, match="this system allows 255"):
        check_output_path("x" * 256)
    check_output_path("x" * 255)


def test_a_name_that_is_not_utf8_is_refused_before_a_file_is_written(tmp_path, capsys) -> None:
    out = tmp_path / "ff.json"
    name = os.fsdecode(b"\xff")  # what argv holds for the bytes of $'\xff'
    line = refused(["instance", "build", "gpt2-xl", "--layers", "1", "--name", name, "-o",
                    str(out)], capsys)  # fmt: skip
    assert "--name" in line and "UTF-8" in line
    assert not out.exists()


@pytest.mark.parametrize("size", [246, 250, 255])
def test_names_near_the_limit_are_written_or_one_line(tmp_path, inst_file, capsys, size) -> None:
    from slackswap.cli import main

    plan = tmp_path / ("p" * (size - 5) + ".json")
    assert main(["solve", str(inst_file), "--budget", "200%", "-o", str(plan)]) == 0
    assert plan.exists()  # the temporary file beside it fits too
    results = tmp_path / ("r" * (size - 4) + ".csv")
    argv = ["compare", str(inst_file), "--budgets", "200%", "--solvers", "vdnn", "-o",
            str(results), "--no-progress"]  # fmt: skip
    if size + len("..journal") <= 255:
        assert main(argv) == 0 and results.exists()
    else:
        assert "the files kept beside it" in refused(argv, capsys)


def test_a_path_with_a_line_break_is_named_on_one_line(tmp_path, inst_file, capsys) -> None:
    (tmp_path / "file").write_text("x")
    line = refused(["solve", str(inst_file), "--budget", "200%", "-o",
                    str(tmp_path / "file" / "a\nb.json")], capsys)  # fmt: skip
    assert "a\\nb.json" in line
    bad = tmp_path / "x\ny.json"
    bad.write_bytes(b"\xff")
    assert "x\\ny.json: not UTF-8" in refused(["instance", "info", str(bad)], capsys)


def test_a_name_holding_a_lone_surrogate_is_refused_in_one_line(tmp_path: Path) -> None:
    # From Python a str path may hold one (argv cannot): os.fsencode raised UnicodeEncodeError.
    with pytest.raises(UserError) as caught:
        check_output_path(tmp_path / "a\ud800.json", "-o")
    assert "\n" not in str(caught.value) and "not encodable" in str(caught.value)
