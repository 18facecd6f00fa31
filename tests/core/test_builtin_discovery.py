"""Inside slackswap a new solver, runtime or workload model is one new module: the registries
import the modules of their package, so nothing else is edited (CONTRIBUTING.md's recipes).

The package is copied to a temporary directory, the modules CONTRIBUTING.md's recipes create are
added to it (read from the document, so the recipes cannot go stale), and a subprocess with that
copy first on ``PYTHONPATH`` lists and uses them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import slackswap

PACKAGE = Path(slackswap.__file__).resolve().parent

REPO = PACKAGE.parent.parent  # src/slackswap -> the checkout, where CONTRIBUTING.md lives


def recipe_modules() -> dict[str, str]:
    """CONTRIBUTING.md's recipes: new module path -> the code block the recipe creates it with."""
    doc = (REPO / "CONTRIBUTING.md").read_text()
    paths = re.findall(r"Create `(src/slackswap/[^`]+\.py)`", doc)
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S)]
    created = dict(zip(re.findall(r"Create `([^`]+\.py)`", doc), blocks, strict=True))
    return {p: created[p] for p in paths}


SCRIPT = """
import json
from slackswap.instances.catalog import load
from slackswap.simulator import simulate
from slackswap.simulator.policies import runtime_names
from slackswap.solvers import REGISTRY, run

inst = load("gpt2-medium@a100")
rec = run(inst, 0.5, "swap-largest")
sim = simulate(inst, rec.plan, 0.5, runtime="late-prefetch")
print(json.dumps({"solvers": REGISTRY.registered_names(), "runtimes": runtime_names(),
                  "layers": inst.meta["config"]["layers"], "status": str(rec.status),
                  "feasible": bool(sim.feasible)}))
"""


@pytest.fixture(scope="module")
def copy_with_new_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("src")
    pkg = root / "slackswap"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    modules = recipe_modules()
    assert len(modules) == 3, sorted(modules)  # a solver, a runtime, a workload model
    for path, code in modules.items():
        (root / path.removeprefix("src/")).write_text(code)
    return root


def _python(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip


def test_a_new_module_in_each_package_is_registered(copy_with_new_modules: Path) -> None:
    out = _python(copy_with_new_modules, "-c", SCRIPT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "swap-largest" in got["solvers"] and got["solvers"][0] == "slackswap"
    assert "late-prefetch" in got["runtimes"]
    assert got["layers"] == 24
    assert got["status"] == "feasible" and got["feasible"]


def test_a_new_module_that_fails_to_import_is_an_error(copy_with_new_modules: Path) -> None:
    broken = copy_with_new_modules / "slackswap" / "solvers" / "toy_broken.py"
    broken.write_text("import no_such_module_anywhere\n")
    try:
        out = _python(copy_with_new_modules, "-m", "slackswap.cli", "solvers")
    finally:
        broken.unlink()
    assert out.returncode != 0
    assert "no_such_module_anywhere" in out.stderr


FAMILY_SOLVER = """
import numpy as np

from slackswap.plan import SWAP, Plan
from slackswap.solvers.base import Solver
from slackswap.solvers.registry import register


@register("swap-all-toy", "swaps every tensor")
class SwapAllToy(Solver):
    def solve(self, instance, budget, *, deadline, seed):
        return Plan(instance, np.full(instance.n_tensors, SWAP, dtype=np.int8))
"""


def test_a_new_module_in_a_solver_family_folder_is_registered(copy_with_new_modules: Path) -> None:
    module = copy_with_new_modules / "slackswap" / "solvers" / "baselines" / "swap_all_toy.py"
    module.write_text(FAMILY_SOLVER)
    code = "from slackswap.solvers import REGISTRY; print(REGISTRY.names())"
    try:
        out = _python(copy_with_new_modules, "-c", code)
    finally:
        module.unlink()
    assert out.returncode == 0, out.stderr
    assert "swap-all-toy" in out.stdout


def recipe_files() -> dict[str, str]:
    """Every file CONTRIBUTING.md's recipes create (the modules and their tests): path -> code."""
    doc = (REPO / "CONTRIBUTING.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S)]
    return dict(zip(re.findall(r"Create `([^`]+\.py)`", doc), blocks, strict=True))


@pytest.mark.parametrize("check", [["check"], ["format", "--check", "--diff"]])
def test_the_recipes_files_pass_the_lint_ci_runs(check: list[str]) -> None:
    # .ci/run runs `ruff check` and `ruff format --check` over src and tests: a file copied
    # from a recipe must pass both as it is. Each is given to ruff on stdin under its path in
    # this checkout (nothing is written there), so the project's settings and its first-party
    # imports apply as they do in CI.
    files = recipe_files()
    assert len(files) == 6, sorted(files)  # three modules, three tests
    for path, code in files.items():
        out = subprocess.run(
            [sys.executable, "-m", "ruff", *check, "--stdin-filename", path, "-"],
            input=code, capture_output=True, text=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, f"{path}:\n{out.stdout}{out.stderr}"
