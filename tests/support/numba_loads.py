"""Run a script in a fresh Python process that counts numba's compiles and cache loads.

Each compile or cache load of a numba function takes numba's compiler lock, so a listener on
that event counts them; a fresh process has nothing loaded, so what the count says is what the
script made numba do. The script reads ``count[0]`` and prints one JSON line last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: Put before the script: ``count[0]`` is numba's compiles and cache loads so far.
COUNTING = """
from numba.core import event

count = [0]
class Count(event.Listener):
    def on_start(self, ev): count[0] += 1
    def on_end(self, ev): pass
event.register("numba:compiler_lock", Count())
"""


def run_counting(script: str, *args: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """Run ``script`` (after `COUNTING`) with ``args`` in a fresh process that imports this
    checkout's slackswap; the JSON of its last line of output, and its stderr."""
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = SRC + os.pathsep + full.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", COUNTING + script, *args], env=full, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr
