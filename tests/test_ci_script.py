"""`.ci/run` runs the slow suite as its own step after the fast one, and pytest's "no tests
collected" (exit 5) does not fail it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"


def _pytest_lines() -> list[str]:
    return [
        line.strip()
        for line in CI_RUN.read_text().splitlines()
        if "-m pytest" in line and not line.lstrip().startswith("#")
    ]


def test_the_slow_suite_runs_after_the_fast_suite() -> None:
    lines = _pytest_lines()
    slow = [i for i, line in enumerate(lines) if re.search(r'-m +"?slow', line)]
    assert len(slow) == 1, lines
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
