"""Golden metrics of every registered solver on small instances, and the coverage check."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from golden import DEFAULT_CASES, HERE, GoldenMissing, mismatches, record_missing, run_case  # noqa: E402

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


class GoldenRecorded(UserWarning):
    """A golden file was recorded in this run: check it and commit it."""


def builtin_solvers() -> list[str]:
    """Registered solvers defined in slackswap itself (plug-ins keep their goldens, if any)."""
    return [e.name for e in REGISTRY if e.cls.__module__.startswith("slackswap.")]


def test_every_registered_solver_has_golden_cases() -> None:
    try:
        recorded = record_missing(builtin_solvers())
    except GoldenMissing as exc:
        pytest.fail(str(exc))
    for path in recorded:
        warnings.warn(
            f"recorded {path.relative_to(HERE.parent.parent)} for the new solver {path.stem!r} "
            "from the default cases: check its values and commit it",
            GoldenRecorded,
            stacklevel=1,
        )
    for path in sorted(HERE.glob("*.json")):
        data = json.loads(path.read_text())
        assert data["solver"] == path.stem and data["solver"] in REGISTRY
        assert data["cases"], f"{path.name} has no cases"


def test_a_missing_golden_file_is_recorded_from_the_default_cases(tmp_path: Path) -> None:
    (tmp_path / "slackswap.json").write_text("{}")  # present: left alone
    assert record_missing(["slackswap", "vdnn"], here=tmp_path, environ={}) == [
        tmp_path / "vdnn.json"
    ]
    assert (tmp_path / "slackswap.json").read_text() == "{}"
    new = json.loads((tmp_path / "vdnn.json").read_text())
    assert new["solver"] == "vdnn"
    assert [{k: c[k] for k in DEFAULT_CASES[0]} for c in new["cases"]] == list(DEFAULT_CASES)
    for case in new["cases"]:  # what test_golden will hold the solver to
        assert {"status", "throughput", "step_s"} <= set(case["expect"])
        assert not mismatches(case["expect"], run_case("vdnn", case))


@pytest.mark.parametrize("value", ["true", "1"])
def test_ci_never_records_a_golden_file(tmp_path: Path, value: str) -> None:
    with pytest.raises(GoldenMissing, match=r"no golden file for vdnn and CI records none"):
        record_missing(["vdnn"], here=tmp_path, environ={"CI": value})
    assert not list(tmp_path.iterdir())
    assert record_missing(["vdnn"], here=tmp_path, environ={"CI": "false"})
