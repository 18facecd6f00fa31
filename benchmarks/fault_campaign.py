"""Fault campaign: random Ctrl-C into ``solve`` and ``compare --jobs 2``, and ``kill -9`` of a
``compare --jobs 2`` running genetic-search jobs. For each run: the exit status, whether stderr
ended with exactly the one line ``slackswap: interrupted`` (progress lines aside) and held no
traceback, the seconds from the signal to the exit, the processes of its group still running
5 s after, and the results rows lost (a row the progress reported that is not in the file, a
duplicate, or a file that no longer reads).

Ctrl-C goes to the whole process group, as a terminal sends it. Linux only (``/proc``).

    PYTHONPATH=src python benchmarks/fault_campaign.py --solve 100 --compare 20 --kill 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
LINE = "slackswap: interrupted"
SOLVERS = ("ga", "cpsat", "milp", "vdnn", "slackswap")
COMPARE = ["compare", "gpt2-xl", "--budgets", "0.5,0.6,0.7", "--solvers", "ga,vdnn",
           "--time-limit", "2", "--jobs", "2"]  # fmt: skip
KILLED = ["compare", "gpt2-xl", "--budgets", "0.4,0.5,0.6,0.7,0.8,0.9", "--solvers", "ga",
          "--time-limit", "3", "--jobs", "2"]  # fmt: skip


def _start(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-m", "slackswap", *argv], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


def _alive(pgid: int) -> int:
    n = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            n += 1
    return n


def _lingering(pgid: int) -> int:
    """Processes of the group alive 5 s after the leader ended (looked at early, waited for
    only while some remain)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5.0:
        if _alive(pgid) == 0:
            return 0
        time.sleep(0.25)
    return _alive(pgid)


def _stderr_ok(err: str) -> bool:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[")]
    # progress, and the command's own last line (a Ctrl-C after it returned ends with 130 too)
    lines = [ln for ln in lines if not ln.startswith(("solve:", "sweep:", "compare:", "results:"))]
    return lines == [LINE] and "Traceback" not in err and "Exception ignored" not in err


def _reported(err: str) -> int:
    return sum(1 for ln in err.splitlines() if ln.startswith("["))


def _rows(path: Path) -> tuple[int, int, bool]:
    """(rows, duplicate job ids, readable)."""
    if not path.exists():
        return 0, 0, True
    sys.path.insert(0, str(SRC))
    from slackswap.analysis.results import read_rows
    from slackswap.errors import UserError

    try:
        import csv

        with open(path, encoding="utf-8") as fh:
            ids = [r["job_id"] for r in csv.DictReader(fh)]
        read_rows(path)
    except (UserError, KeyError, ValueError):
        return 0, 0, False
    return len(ids), len(ids) - len(set(ids)), True


def ctrl_c_solve(rng: random.Random, work: Path) -> dict[str, Any]:
    solver = rng.choice(SOLVERS)
    argv = ["solve", "gpt2-xl", "--budget", "0.5", "--solver", solver, "--time-limit", "6"]
    offset = rng.uniform(0.0, 3.0)
    proc = _start(argv, work)
    time.sleep(offset)
    finished_first = proc.poll() is not None
    os.killpg(proc.pid, signal.SIGINT) if not finished_first else None
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=120)
    return {
        "kind": "ctrl-c solve", "solver": solver, "offset_s": round(offset, 3),
        "rc": proc.returncode, "exit_s": round(time.monotonic() - t0, 3),
        "one_line": _stderr_ok(err), "finished_first": finished_first,
        "lingering": _lingering(proc.pid), "rows_lost": 0,
        "stderr_tail": err.strip().splitlines()[-3:],
    }  # fmt: skip


def ctrl_c_compare(rng: random.Random, work: Path, i: int, longest: float = 20.0) -> dict[str, Any]:
    out = work / f"c{i}.csv"
    offset = rng.uniform(0.3, longest)
    proc = _start([*COMPARE, "-o", str(out)], work)
    time.sleep(offset)
    finished_first = proc.poll() is not None
    os.killpg(proc.pid, signal.SIGINT) if not finished_first else None
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=300)
    rows, dups, readable = _rows(out)
    reported = _reported(err)
    return {
        "kind": "ctrl-c compare --jobs 2", "offset_s": round(offset, 3), "rc": proc.returncode,
        "exit_s": round(time.monotonic() - t0, 3), "one_line": _stderr_ok(err),
        "finished_first": finished_first, "lingering": _lingering(proc.pid),
        "rows_lost": max(0, reported - rows) + dups + (0 if readable else reported),
        "rows": rows, "reported": reported, "stderr_tail": err.strip().splitlines()[-3:],
    }  # fmt: skip


def kill_compare(rng: random.Random, work: Path, i: int) -> dict[str, Any]:
    out = work / f"k{i}.csv"
    proc = _start([*KILLED, "-o", str(out)], work)
    t_first = None
    t0 = time.monotonic()
    delay = rng.uniform(0.0, 3.0)
    while proc.poll() is None and time.monotonic() - t0 < 240:
        if t_first is None and out.exists() and _rows(out)[0] >= 1:
            t_first = time.monotonic()
        if t_first is not None and time.monotonic() - t_first >= delay:
            break
        time.sleep(0.05)
    finished_first = proc.poll() is not None
    if not finished_first:
        os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    lingering = _lingering(proc.pid)
    if lingering:  # leave the machine as found
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    rows, dups, readable = _rows(out)
    reported = _reported(err)
    return {
        "kind": "kill -9 compare --jobs 2 (ga)", "after_first_row_s": round(delay, 3),
        "rc": proc.returncode, "finished_first": finished_first, "lingering": lingering,
        "rows_lost": max(0, reported - rows) + dups + (0 if readable else reported),
        "rows": rows, "reported": reported,
    }  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(r["kind"] for r in runs):
        rs = [r for r in runs if r["kind"] == kind]
        signalled = [r for r in rs if not r["finished_first"]]
        s: dict[str, Any] = {
            "runs": len(rs),
            "signalled": len(signalled),
            "exit codes": dict(Counter(r["rc"] for r in signalled)),
            "lingering processes 5 s after": sum(r["lingering"] for r in rs),
            "runs with lingering": sum(1 for r in rs if r["lingering"]),
            "rows lost": sum(r["rows_lost"] for r in rs),
        }
        if "one_line" in rs[0]:
            s["one line (no traceback)"] = sum(1 for r in signalled if r["one_line"])
            times = sorted(r["exit_s"] for r in signalled)
            if times:
                s["exit after signal s (median, max)"] = (times[len(times) // 2], times[-1])
        out[kind] = s
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solve", type=int, default=100)
    ap.add_argument("--compare", type=int, default=20)
    ap.add_argument("--kill", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--compare-within", type=float, default=20.0,
        help="latest Ctrl-C into compare (s); a sweep done before it is not signalled",
    )  # fmt: skip
    ap.add_argument("--out", default="fault_campaign.json", help="every run, as JSON")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for i in range(args.kill):
            runs.append(kill_compare(rng, work, i))
            print(json.dumps(runs[-1]), flush=True)
        for i in range(args.compare):
            runs.append(ctrl_c_compare(rng, work, i, args.compare_within))
            print(json.dumps(runs[-1]), flush=True)
        for _ in range(args.solve):
            runs.append(ctrl_c_solve(rng, work))
            print(json.dumps(runs[-1]), flush=True)
    result = summary(runs)
    Path(args.out).write_text(json.dumps({"summary": result, "runs": runs}, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
