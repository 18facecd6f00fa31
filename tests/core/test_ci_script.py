"""`.ci/run` runs the slow suite as its own step after the fast one, and pytest's "no tests
collected" (exit 5) does not fail it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

CI_RUN = Path(__file__).resolve().parents[2] / ".ci" / "run"


def _pytest_lines() -> list[str]:
    return [
        line.strip()
        for line in CI_RUN.read_text().splitlines()
        if "-m pytest" in line and not line.lstrip().startswith("#")
    ]


def test_the_slow_suite_runs_after_the_fast_suite() -> None:
    # Two slow steps: the wall-clock-bound cases alone, then the rest; together, every slow test.
    lines = _pytest_lines()
    slow = [i for i, line in enumerate(lines) if re.search(r'-m +"?slow', line)]
    selections = [re.findall(r'-m +"?(slow[^"]*)"?', lines[i])[0] for i in slow]
    assert selections == ["slow and wallclock", "slow and not wallclock"], lines
    fast = [i for i, line in enumerate(lines) if "-m " not in line.split("-m pytest", 1)[1]]
    assert fast and fast[0] < slow[0], lines


def _wrapper() -> str:
    text = CI_RUN.read_text()
    start = text.index("pytest_allowing_none() {")
    return text[start : text.index("\n}\n", start) + 3]


def test_no_tests_collected_does_not_fail_ci_but_a_failure_does() -> None:
    def run(status: int) -> subprocess.CompletedProcess[str]:
        script = (
            f'set -euo pipefail\n{_wrapper()}pytest_allowing_none sh -c "exit {status}"\necho on'
        )
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)

    for status in (0, 5):
        done = run(status)
        assert done.returncode == 0 and done.stdout == "on\n", (status, done)
    failed = run(1)
    assert failed.returncode == 1 and failed.stdout == ""


GPU_CHECK = CI_RUN.parents[1] / "benchmarks" / "gpu_check.sh"


def test_ci_runs_the_gpu_checks_cpu_half_after_the_fast_suite() -> None:
    lines = [
        line.strip()
        for line in CI_RUN.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    dry = [i for i, line in enumerate(lines) if "benchmarks/gpu_check.sh --dry-run" in line]
    fast = [i for i, line in enumerate(lines) if line.endswith("-m pytest -q")]
    assert len(dry) == 1 and fast and fast[0] < dry[0], lines


def _gpu_check(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(GPU_CHECK), *args], capture_output=True, text=True, check=False, env=env
    )


def test_gpu_check_refuses_an_unknown_option_in_one_line() -> None:
    done = _gpu_check("--fast")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done
    assert "unknown option '--fast'" in done.stderr


def test_gpu_check_without_a_gpu_says_so_and_points_to_the_dry_run() -> None:
    import pytest

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the check would run")
    done = _gpu_check()
    assert done.returncode == 2 and "use --dry-run" in done.stderr, done
