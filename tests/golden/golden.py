"""Golden metrics: run a case, compare with the recorded values, regenerate a solver's file.

Each registered solver has ``tests/golden/<solver>.json``::

    {"solver": "slackswap",
     "cases": [{"instance": {"model": "gpt2-xl", "layers": 6, "seq": 128, "batch": 2},
                "budget": 0.7, "seed": 0, "time_limit": null, "options": {},
                "expect": {"status": "feasible", "throughput": [0.9712, 0.005], ...}}]}

A metric is ``[value, tolerance]`` (same unit; a ``null`` value means the run has none, e.g. no
step for an infeasible case); ``status`` must match exactly, and so must ``found_by`` (where an
exact solver's plan came from, ``record.info["found_by"]``) when a file pins it. Exact solvers
also pin ``lower_bound_s``, the bound their engine proved. A file may pin fewer metrics: the search solvers (``ga``,
``ga-random``) pin only status and throughput (tolerance 0.03), since their plans drift with their
seed plans and operators while their quality should not. Regenerate after a deliberate change:

    .venv/bin/python tests/golden/golden.py SOLVER [SOLVER ...]

which writes the current values with the default tolerances below (say why in the commit).

A new built-in solver needs no command: the first test run without ``CI`` in the environment
records its file from `DEFAULT_CASES` (`record_missing`) and says so in a warning; check the
values and commit the file. In CI (``CI`` set) a missing file fails the run instead, so no
golden file is ever written unseen.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

#: metric -> (relative, absolute) tolerance used when a file is (re)generated.
TOLERANCES = {
    "throughput": (0.0, 0.005),
    "step_s": (0.005, 1e-6),
    "recompute_s": (0.01, 1e-6),
    "fwd_stall_s": (0.02, 2e-5),
    "bwd_stall_s": (0.02, 2e-5),
    "d2h_bytes": (0.02, 1e4),
    "swap_bytes": (0.02, 1e4),
    "recompute_bytes": (0.02, 1e4),
}

#: The default cases every solver file starts from (small instances, two budgets).
DEFAULT_CASES = (
    [
        {"instance": {"model": "gpt2-xl", "layers": 6, "seq": 128, "batch": 2}, "budget": b}
        for b in (0.8, 0.4)
    ]
    + [
        {"instance": {"model": "llama-7b", "layers": 2, "seq": 256, "batch": 1}, "budget": b}
        for b in (0.8, 0.5)
    ]
    + [{"instance": {"model": "bert-large", "layers": 4, "seq": 128, "batch": 2}, "budget": 0.5}]
)

#: Tolerance (relative, absolute) of a pinned lower bound, seconds.
BOUND_TOLERANCE = (0.001, 1e-9)

_INSTANCES: dict[str, Any] = {}


def instance(spec: dict[str, Any]) -> Any:
    from slackswap.instances.catalog import build_model

    key = json.dumps(spec, sort_keys=True)
    if key not in _INSTANCES:
        _INSTANCES[key] = build_model(**spec)
    return _INSTANCES[key]


def run_case(solver: str, case: dict[str, Any]) -> dict[str, Any]:
    """The record's row for one case, plus ``found_by`` from the solver's info (or None)."""
    from slackswap.solvers import run

    rec = run(
        instance(case["instance"]),
        case["budget"],
        solver,
        time_limit=case.get("time_limit"),
        seed=case.get("seed", 0),
        options=case.get("options") or {},
    )
    return {**rec.to_row(), "found_by": rec.info.get("found_by")}


def mismatches(expect: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """What differs beyond tolerance ("" list when the row matches)."""
    out = []
    if row["status"] != expect["status"]:
        out.append(f"status {row['status']} != {expect['status']} ({row.get('error')})")
    if "found_by" in expect and row.get("found_by") != expect["found_by"]:
        out.append(f"found_by {row.get('found_by')!r} != {expect['found_by']!r}")
    metrics = ((k, v) for k, v in expect.items() if k not in ("status", "found_by"))
    for key, (value, tol) in metrics:
        got = row.get(key)
        if value is None or got is None:
            if value is not got:
                out.append(f"{key} {got} != {value}")
        elif abs(got - value) > tol:
            out.append(f"{key} {got:.6g} != {value:.6g} +- {tol:.3g}")
    return out


def regenerate(solver: str, here: Path = HERE) -> Path:
    path = here / f"{solver}.json"
    cases = json.loads(path.read_text())["cases"] if path.exists() else DEFAULT_CASES
    out_cases = []
    for case in cases:
        case = {k: v for k, v in case.items() if k != "expect"}
        row = run_case(solver, case)
        expect: dict[str, Any] = {"status": row["status"]}
        for key, (rel, ab) in TOLERANCES.items():
            v = row.get(key)
            expect[key] = [v, None if v is None else max(ab, rel * abs(v))]
        if row.get("found_by") is not None:
            expect["found_by"] = row["found_by"]
        if row.get("lower_bound_s") is not None:
            v, (rel, ab) = row["lower_bound_s"], BOUND_TOLERANCE
            expect["lower_bound_s"] = [v, max(ab, rel * abs(v))]
        out_cases.append({**case, "expect": expect})
    text = json.dumps({"solver": solver, "cases": out_cases}, indent=1)
    # One metric per line: "[value, tolerance]" pairs collapsed.
    text = re.sub(
        r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text
    )
    path.write_text(text + "\n")
    return path


class GoldenMissing(Exception):
    """A built-in solver has no golden file where none may be recorded (CI)."""


def in_ci(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` is a CI run's (``CI`` set, and not to false or 0)."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def record_missing(
    names: Iterable[str], *, here: Path = HERE, environ: Mapping[str, str] = os.environ
) -> list[Path]:
    """Record the golden file of each solver in ``names`` that has none, from the default cases,
    and return the files written. In CI nothing is recorded: `GoldenMissing` names the solvers
    and the command that records them, so a file is always one a person ran and committed."""
    missing = [n for n in names if not (here / f"{n}.json").exists()]
    if missing and in_ci(environ):
        raise GoldenMissing(
            f"no golden file for {', '.join(missing)} and CI records none: run "
            f"`python tests/golden/golden.py {' '.join(missing)}` and commit "
            + ", ".join(f"tests/golden/{n}.json" for n in missing)
        )
    return [regenerate(n, here) for n in missing]


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(regenerate(name))
