"""numba's compiled code is cached once per user for the same sources (`slackswap.numbacache`):
a second checkout of the same version loads it instead of compiling again, and an edit of a
module the compiled code imports makes a new cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import slackswap
from slackswap import numbacache

PACKAGE = Path(slackswap.__file__).resolve().parent
KERNEL = PACKAGE / "simulator" / "kernel.py"

#: In a fresh process: simulate once, and report numba's compiles and where the kernel's cache is.
PROBE = textwrap.dedent(
    """
    import json
    from numba.core import event
    compiles = []
    class Count(event.Listener):
        def on_start(self, ev):
            compiles.append(1)
        def on_end(self, ev):
            pass
    event.register("numba:compile", Count())
    import numpy as np
    import slackswap
    from slackswap.simulator import kernel, simulate
    import sys
    if sys.argv[1:] == ["run"]:
        inst = slackswap.build_model("gpt2-xl", layers=1)
        simulate(inst, np.zeros(inst.n_tensors, dtype=np.int8), 1.0)
    print(json.dumps({"compiles": len(compiles),
                      "cache": kernel.run_batch._cache._cache_path,
                      "file": slackswap.__file__}))
    """
)


def _probe(src: Path, *, run: bool = True, **env: str) -> dict:
    """The probe in a fresh process on ``src``; ``run``: simulate once (else only import the
    kernel, whose cache is chosen when its functions are defined: nothing compiles)."""
    full = {**os.environ, "PYTHONPATH": str(src), **env}
    if "NUMBA_CACHE_DIR" not in env:  # the shared cache, whatever this shell set
        full.pop("NUMBA_CACHE_DIR", None)
    argv = [sys.executable, "-c", PROBE, *(["run"] if run else [])]
    out = subprocess.run(argv, capture_output=True, text=True, env=full,
                         timeout=600, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def second_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package copied elsewhere, without its ``__pycache__`` (another clone of it)."""
    root = tmp_path_factory.mktemp("clone") / "src"
    shutil.copytree(PACKAGE, root / "slackswap", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_hash_is_the_sources_not_the_place(second_checkout: Path) -> None:
    here = numbacache.sources_hash(str(KERNEL))
    copy = second_checkout / "slackswap" / "simulator" / "kernel.py"
    # Each process hashes its own checkout's files, by relative path and content.
    assert len(here) == 20
    assert _hash_in(second_checkout, copy) == _hash_in(PACKAGE.parent, KERNEL) == here


def _hash_in(src: Path, file: Path) -> str:
    code = f"from slackswap import numbacache; print(numbacache.sources_hash({str(file)!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(src)}, check=True)  # fmt: skip
    return out.stdout.strip()


def test_an_edit_of_an_imported_module_changes_the_hash(tmp_path: Path) -> None:
    # The kernel inlines plan.py's action codes: a change there must not load old code.
    root = tmp_path / "src"
    shutil.copytree(PACKAGE, root / "slackswap", ignore=shutil.ignore_patterns("__pycache__"))
    kernel = root / "slackswap" / "simulator" / "kernel.py"
    before = _hash_in(root, kernel)
    plan = root / "slackswap" / "plan.py"
    plan.write_text(plan.read_text() + "\n# an edit\n")
    assert _hash_in(root, kernel) != before
    # ... while a module the kernel never imports leaves it alone
    after = _hash_in(root, kernel)
    cli = root / "slackswap" / "cli.py"
    cli.write_text(cli.read_text() + "\n# an edit\n")
    assert _hash_in(root, kernel) == after


def test_a_second_checkout_loads_what_the_first_compiled(second_checkout: Path) -> None:
    first = _probe(PACKAGE.parent)  # fills the shared cache if it is cold
    assert Path(first["cache"]).is_relative_to(numbacache.shared_root())
    again = _probe(second_checkout)
    assert Path(again["file"]).is_relative_to(second_checkout)  # really the other checkout
    assert again["cache"] == first["cache"]
    assert again["compiles"] == 0, again


def test_numba_cache_dir_set_by_the_user_is_kept(tmp_path: Path) -> None:
    got = _probe(PACKAGE.parent, run=False, NUMBA_CACHE_DIR=str(tmp_path))
    assert Path(got["cache"]).is_relative_to(tmp_path)


def test_the_user_cache_dir_follows_the_platform_rules(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SLACKSWAP_CACHE_DIR", str(tmp_path / "own"))
    assert numbacache.user_cache_dir() == tmp_path / "own"
    monkeypatch.delenv("SLACKSWAP_CACHE_DIR")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert numbacache.user_cache_dir() == tmp_path / "xdg" / "slackswap"
    assert numbacache.shared_root().parent.name == slackswap.__version__


def test_each_numba_version_has_a_cache_of_its_own(monkeypatch) -> None:
    # numba drops an index another numba version wrote: one folder for two numbas would make
    # each environment compile again after the other ran.
    import numba

    here = numbacache.shared_root()
    assert here.name == f"numba-{numba.__version__}"
    monkeypatch.setattr(numba, "__version__", "0.59.0")
    assert numbacache.shared_root() == here.parent / "numba-0.59.0"
