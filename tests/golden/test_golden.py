"""Golden metrics of every registered solver on small instances, and the coverage check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from golden import HERE, mismatches, run_case  # noqa: E402

from slackswap.solvers import REGISTRY  # noqa: E402

FILES = sorted(HERE.glob("*.json"))


def _cases() -> list[tuple[str, int]]:
    out = []
    for path in FILES:
        data = json.loads(path.read_text())
        out += [(data["solver"], k) for k in range(len(data["cases"]))]
    return out


@pytest.mark.parametrize(("solver", "k"), _cases())
def test_golden(solver: str, k: int) -> None:
    case = json.loads((HERE / f"{solver}.json").read_text())["cases"][k]
    row = run_case(solver, case)
    assert not mismatches(case["expect"], row), mismatches(case["expect"], row)


def test_every_registered_solver_has_golden_cases() -> None:
    missing = [n for n in REGISTRY.names() if not (HERE / f"{n}.json").exists()]
    assert not missing, (
        f"no golden file for {missing}: run tests/golden/golden.py {' '.join(missing)}"
    )
    for path in FILES:
        data = json.loads(path.read_text())
        assert data["solver"] == path.stem and data["solver"] in REGISTRY
        assert data["cases"], f"{path.name} has no cases"
