"""Inside slackswap a new solver, runtime or workload model is one new module: the registries
import the modules of their package, so nothing else is edited (CONTRIBUTING.md's recipes).

The package is copied to a temporary directory, one module is added to each registry's package,
and a subprocess with that copy first on ``PYTHONPATH`` lists and uses them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import slackswap

PACKAGE = Path(slackswap.__file__).resolve().parent

SOLVER = '''"""A toy solver: every tensor swapped."""

import numpy as np

from slackswap.plan import SWAP, Plan
from slackswap.solvers.base import Solver, Tags, register


@register("toy-all-swap", "every tensor swapped")
class ToyAllSwap(Solver):
    tags = Tags()

    def solve(self, instance, budget, *, time_limit, seed):
        return Plan(instance, np.full(instance.n_tensors, SWAP, dtype=np.int8))
'''

RUNTIME = '''"""A toy runtime: the compiled kernel with copies on the compute stream."""

from slackswap.simulator.runtimes import FWD_WAIT_EVERY_OP, H2D_ON_DEMAND, RuntimeSpec
from slackswap.simulator.runtimes import register_runtime

register_runtime(RuntimeSpec("toy-inline", "copies inline", fwd_wait=FWD_WAIT_EVERY_OP,
                             h2d_release=H2D_ON_DEMAND, lookahead_ops=0))
'''

MODEL = '''"""A toy workload model: GPT-2 XL with two layers."""

from slackswap.models.registry import register_model
from slackswap.models.transformer import build_transformer, transformer_config


def build(gpu, link, *, seq, batch, layers, link_bw_Bps, name):
    cfg = transformer_config("gpt2-xl", seq=seq, batch=batch, layers=layers or 2)
    return build_transformer(cfg, gpu, link, name=name, link_bw_Bps=link_bw_Bps)


register_model("toy-gpt", build, "GPT-2 XL, two layers")
'''

SCRIPT = """
import json
from slackswap.instances.catalog import load
from slackswap.simulator import simulate
from slackswap.simulator.runtimes import runtime_names
from slackswap.solvers import REGISTRY, run

inst = load("toy-gpt@a100")
rec = run(inst, 1.0, "toy-all-swap")
sim = simulate(inst, rec.plan, 1.0, runtime="toy-inline")
print(json.dumps({"solvers": REGISTRY.registered_names(), "runtimes": runtime_names(),
                  "layers": inst.meta["config"]["layers"], "status": str(rec.status),
                  "feasible": bool(sim.feasible)}))
"""


@pytest.fixture(scope="module")
def copy_with_new_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("src")
    pkg = root / "slackswap"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "solvers" / "toy_all_swap.py").write_text(SOLVER)
    (pkg / "simulator" / "runtime_toy_inline.py").write_text(RUNTIME)
    (pkg / "models" / "toy_gpt.py").write_text(MODEL)
    return root


def _python(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip


def test_a_new_module_in_each_package_is_registered(copy_with_new_modules: Path) -> None:
    out = _python(copy_with_new_modules, "-c", SCRIPT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "toy-all-swap" in got["solvers"] and got["solvers"][0] == "slackswap"
    assert got["runtimes"][-1] == "toy-inline"
    assert got["layers"] == 2
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
