"""Plug-ins: a throw-away package adds a solver, a runtime and a workload model through entry
points, without an edit of slackswap, and passes the conformance kit; bad entries are errors.

The package is installed with ``pip install --target`` into a temporary directory (never into
the shared environment) and used from a subprocess with that directory on ``PYTHONPATH``, so the
test process's registries stay as they are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import PathDistribution
from pathlib import Path

import pytest

import slackswap
from slackswap import plugins
from slackswap.plugins import PluginError
from slackswap.simulator.policies import RUNTIMES, get_runtime
from slackswap.solvers import REGISTRY

SRC = Path(slackswap.__file__).resolve().parent.parent  # the slackswap under test

SOLVER = '''
"""A toy solver: keep every tensor when the no-swap peak fits, else swap them all."""

import numpy as np

from slackswap.plan import SWAP, Plan
from slackswap.solvers.base import Solver, Tags
from slackswap.solvers.display import Display
from slackswap.solvers.registry import register


@register("toy-greedy", "keep all if P fits, else swap all", display=Display(colour="#123456",
          order=0.5, label="Toy"))
class ToyGreedy(Solver):
    tags = Tags()

    def __init__(self, *, runtime: str = "toy-sync") -> None:
        self.runtime = runtime

    def solve(self, instance, budget, *, deadline, seed):
        if budget.bytes_for(instance) >= instance.peak_bytes:
            return Plan.keep_all(instance, self.runtime)
        return Plan(instance, np.full(instance.n_tensors, SWAP, dtype=np.int8), self.runtime)
'''

RUNTIME = '''
"""A toy runtime: copies on the compute stream with a one-operator memory look-ahead."""

from slackswap.simulator.policies import (
    FWD_WAIT_EVERY_OP, H2D_ON_DEMAND, RuntimeSpec, register_runtime,
)

register_runtime(RuntimeSpec("toy-sync", "copies inline, one operator of look-ahead",
                             fwd_wait=FWD_WAIT_EVERY_OP, h2d_release=H2D_ON_DEMAND,
                             lookahead_ops=1))
'''

MODEL = '''
"""A toy workload model: one GPT-2 XL block at a short sequence."""

from slackswap.instances.catalog import build_model, register_model


def build(gpu, link, *, seq, batch, layers, link_bw_Bps, name):
    return build_model("gpt2-xl", gpu, link, seq=seq or 128, batch=batch, layers=layers or 1,
                       link_bw_Bps=link_bw_Bps, name=name or "toy-block")


register_model("toy-block", build, "one GPT-2 XL block")
'''

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "toyplug"
version = "0.1"

[tool.setuptools]
packages = ["toyplug"]

[project.entry-points."slackswap.solvers"]
toy-greedy = "toyplug.solver"

[project.entry-points."slackswap.runtimes"]
toy-sync = "toyplug.runtime"

[project.entry-points."slackswap.models"]
toy-block = "toyplug.model"
"""

#: Run in the subprocess: the conformance kit on the plug-ins, and figures' view of them.
CHECK = """
from slackswap.analysis.figures import solver_styles
from slackswap.analysis.gapanalysis import solver_order
from slackswap.instances.catalog import catalog_names
from slackswap.solvers import REGISTRY
from slackswap.testing import check_runtime, check_solver

if __name__ == "__main__":
    check_runtime("toy-sync")
    check_solver("toy-greedy")
    assert "toy-block" in catalog_names()
    styles = solver_styles(solver_order(["vdnn", "toy-greedy", "slackswap"]))
    assert len({(st["color"], st["marker"]) for st in styles.values()}) == 3
    assert solver_order(["vdnn", "toy-greedy", "slackswap"]) == ["slackswap", "toy-greedy", "vdnn"]
    assert REGISTRY["toy-greedy"].title == "Toy"
    print("KIT-OK")
"""


def _env(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*paths, SRC))
    env.pop("PYTHONHASHSEED", None)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy package, pip-installed into its own target directory."""
    root = tmp_path_factory.mktemp("toyplug")
    pkg = root / "src" / "toyplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Toy slackswap plug-ins."""\n')
    (pkg / "solver.py").write_text(SOLVER)
    (pkg / "runtime.py").write_text(RUNTIME)
    (pkg / "model.py").write_text(MODEL)
    (root / "src" / "pyproject.toml").write_text(PYPROJECT)
    target = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(root / "src")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert (target / "toyplug-0.1.dist-info" / "entry_points.txt").exists()
    return target


def test_plugin_package_passes_the_kit_and_runs_in_compare(installed: Path, tmp_path: Path) -> None:
    script = tmp_path / "check_toy.py"
    script.write_text(CHECK)
    out = subprocess.run(
        [sys.executable, str(script)], env=_env(installed), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0 and "KIT-OK" in out.stdout, out.stderr[-3000:]

    results = tmp_path / "toy.csv"
    cmd = [sys.executable, "-m", "slackswap.cli", "compare", "gpt2-xl", "toy-block",
           "--budgets", "1.0,0.6", "--solvers", "toy-greedy,slackswap", "--json",
           "--no-min-budget", "-o", str(results)]  # fmt: skip
    out = subprocess.run(cmd, env=_env(installed), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    toy = [r for r in rows if r["solver"] == "toy-greedy"]
    assert {(r["instance"], r["budget_fraction"]) for r in toy} >= {("gpt2-xl", 1.0)}
    assert {r["instance"] for r in rows} == {"gpt2-xl", "toy-block"}
    assert len(rows) == 8 and results.exists()
    for r in toy:
        assert r["status"] in ("feasible", "infeasible"), r
        assert r["runtime"] == "toy-sync", r
    at_peak = [r for r in toy if r["budget_fraction"] == 1.0]
    assert all(r["status"] == "feasible" and r["throughput"] == 1.0 for r in at_peak), at_peak


def _dist(
    root: Path,
    group: str,
    entries: dict[str, str],
    modules: dict[str, str],
    name: str = "badplug",
    more: dict[str, dict[str, str]] | None = None,
) -> Path:
    """A hand-written ``.dist-info`` for distribution ``name`` with ``entries`` in ``group``
    (and ``more``: group -> entries) and the modules ``modules`` beside it; returns the
    directory to put on ``sys.path``."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    text = ""
    for g, e in {group: entries, **(more or {})}.items():
        text += f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in e.items())
    (info / "entry_points.txt").write_text(text)
    for mod, body in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(body))
    return root


def _entries(root: Path, name: str = "badplug", group: str | None = None) -> list:  # type: ignore[type-arg]
    eps = PathDistribution(root / f"{name}-0.1.dist-info").entry_points
    return [ep for ep in eps if group is None or ep.group == group]


BAD = {
    "import error": (
        {"bad-solver": "badplug_missing_module"},
        {},
        r"bad-solver = 'badplug_missing_module' of distribution 'badplug' .*failed to load: "
        r"ModuleNotFoundError",
    ),
    "missing object": (
        {"bad-solver": "badplug_attr:nothing_here"},
        {"badplug_attr": '"""Defines no nothing_here."""\n'},
        r"bad-solver = 'badplug_attr:nothing_here' of distribution 'badplug' .*failed to load: "
        r"AttributeError",
    ),
    "registers nothing": (
        {"bad-solver": "badplug_quiet"},
        {"badplug_quiet": '"""Registers no solver."""\n'},
        r"bad-solver = 'badplug_quiet' of distribution 'badplug' .*registered no solver named "
        r"'bad-solver' \(it registered nothing",
    ),
    "clash with a built-in name": (
        {"slackswap": "badplug_clash"},
        {"badplug_clash": '"""Never imported."""\n'},
        r"slackswap = 'badplug_clash' of distribution 'badplug' .*name 'slackswap' is already "
        r"registered by slackswap",
    ),
    "registers a built-in name": (
        {"my-vdnn": "badplug_vdnn"},
        {
            "badplug_vdnn": """
            from slackswap.solvers import Solver, register
            register("vdnn")(type("V", (Solver,), {}))
            """
        },
        r"my-vdnn = 'badplug_vdnn' of distribution 'badplug' .*failed to load: ValueError: "
        r"solver 'vdnn' is already registered",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_solver_entry_is_an_error_naming_it(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries, modules, message = BAD[case]
    before = REGISTRY.names()  # the installed plug-ins load now, before the bad one is on the path
    root = _dist(tmp_path, plugins.SOLVERS, entries, modules)
    monkeypatch.syspath_prepend(str(root))
    with pytest.raises(PluginError, match=message):
        plugins.load_entries(_entries(root), REGISTRY.registered_names)
    assert REGISTRY.registered_names() == before  # nothing half-registered
    # never skipped: loading again fails again
    with pytest.raises(PluginError, match=message):
        plugins.load_entries(_entries(root), REGISTRY.registered_names)


def test_bad_runtime_entry_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_runtime(
        "barrier-free"
    )  # the installed plug-ins load now, before the bad one is on the path
    root = _dist(
        tmp_path, plugins.RUNTIMES, {"toy-rt": "badplug_rt"}, {"badplug_rt": '"""Nothing."""\n'}
    )
    monkeypatch.syspath_prepend(str(root))
    with pytest.raises(PluginError, match=r"toy-rt = 'badplug_rt' .*registered no runtime"):
        plugins.load_entries(_entries(root), RUNTIMES.keys)


def test_bad_entry_makes_the_cli_exit_2_with_one_line(tmp_path: Path) -> None:
    root = _dist(tmp_path, plugins.SOLVERS, {"bad-solver": "badplug_quiet"},
                 {"badplug_quiet": '"""Registers no solver."""\n'})  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "slackswap.cli", "solvers"], env=_env(root), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("slackswap: error: entry point bad-solver = 'badplug_quiet' of ")
    assert "distribution 'badplug'" in lines[0] and "registered no solver" in lines[0]


def test_a_misspelt_builtin_solver_module_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import slackswap.solvers as solvers

    REGISTRY.names()  # the real list loads first
    monkeypatch.setattr(
        solvers, "SOLVER_MODULES", (*solvers.SOLVER_MODULES, "slackswap.solvers.vdn")
    )
    monkeypatch.setattr(solvers, "_loaded", False)
    with pytest.raises(ModuleNotFoundError, match="slackswap.solvers.vdn"):
        solvers.load_solver_modules()


def test_a_command_module_that_fails_to_import_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from slackswap import cli

    commands = {**cli.COMMANDS, "nope": ("slackswap.commands.nope", "a command")}
    monkeypatch.setattr(cli, "COMMANDS", commands)
    parser = cli.build_parser()  # the module is imported when its command is chosen
    with pytest.raises(ModuleNotFoundError, match="slackswap.commands.nope"):
        parser.parse_args(["nope"])
    with pytest.raises(ModuleNotFoundError, match="slackswap.commands.nope"):
        cli.build_parser(every_command=True)


ORDER = (
    "slackswap", "swap-first", "recompute-only", "barriers", "vdnn", "superneurons",
    "swapadvisor", "checkpoint", "offload-sync", "offload-overlap", "ga", "ga-random", "cpsat",
    "milp",
)  # fmt: skip


def test_builtin_figure_styles_are_distinct_and_the_order_unchanged() -> None:
    from slackswap.analysis.figures import solver_style, solver_styles
    from slackswap.analysis.gapanalysis import solver_order

    styles = solver_styles(ORDER)
    assert len({(st["color"], st["marker"]) for st in styles.values()}) == len(ORDER)
    assert styles["slackswap"]["color"] == "#000000"  # first in the display order: black
    assert (
        solver_style("ga(x=1)", ["slackswap", "ga(x=1)"])
        == solver_styles(["slackswap", "ga"])["ga"]
    )  # a style is a place in the figure's order, options or not
    assert solver_order(["zeta", *reversed(ORDER), "ga(pop_size=4)"]) == [
        *ORDER[:11], "ga(pop_size=4)", *ORDER[11:], "zeta",
    ]  # fmt: skip


#: Fake registries for the tests below (their own groups, so no real registry is touched).
FAKE = """
SOLVERS = set()
RUNTIMES = set()
"""


def test_one_module_may_register_for_several_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    solvers, runtimes = "test.plugins.solvers", "test.plugins.runtimes"
    both = "import fakereg\nfakereg.SOLVERS.add('dual')\nfakereg.RUNTIMES.add('dual-rt')\n"
    root = _dist(
        tmp_path, solvers, {"dual": "dualplug_mod"}, {"fakereg": FAKE, "dualplug_mod": both},
        name="dualplug", more={runtimes: {"dual-rt": "dualplug_mod"}},
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(root))
    import fakereg  # type: ignore[import-not-found]

    plugins.load_entries(_entries(root, "dualplug", runtimes), lambda: fakereg.RUNTIMES)
    # the solver's entry finds its name registered by its own module, already imported: fine
    plugins.load_entries(_entries(root, "dualplug", solvers), lambda: fakereg.SOLVERS)
    assert fakereg.SOLVERS == {"dual"} and fakereg.RUNTIMES == {"dual-rt"}

    # another distribution claiming the same name is refused, naming the first
    other = _dist(tmp_path / "other", solvers, {"dual": "otherplug_mod"},
                  {"otherplug_mod": "import fakereg\nfakereg.SOLVERS.add('dual')\n"},
                  name="otherplug")  # fmt: skip
    monkeypatch.syspath_prepend(str(other))
    with pytest.raises(
        PluginError, match="'otherplug'.* already registered by distribution 'dualplug'"
    ):
        plugins.load_entries(_entries(other, "otherplug"), lambda: fakereg.SOLVERS)


def test_an_entry_whose_module_the_user_imported_first_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "test.plugins.early"
    root = _dist(
        tmp_path, group, {"early": "earlyplug_mod"},
        {"fakereg2": FAKE, "earlyplug_mod": "import fakereg2\nfakereg2.SOLVERS.add('early')\n"},
        name="earlyplug",
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(root))
    import earlyplug_mod  # type: ignore[import-not-found]  # noqa: F401 - registers 'early'
    import fakereg2  # type: ignore[import-not-found]

    plugins.load_entries(_entries(root, "earlyplug"), lambda: fakereg2.SOLVERS)
    assert fakereg2.SOLVERS == {"early"}
