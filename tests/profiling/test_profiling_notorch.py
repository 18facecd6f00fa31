"""Without torch: ``import slackswap`` and every module but the profiler's core still work, and
``slackswap profile`` says how to install the extra (exit 2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Makes ``import torch`` fail in the child process, as on a machine without the extra.
NO_TORCH = "import sys; sys.modules['torch'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_package_imports_without_torch() -> None:
    proc = _run(
        """
        import importlib, pkgutil
        import slackswap, slackswap.cli, slackswap.profiling
        slackswap.cli.build_parser()
        needs_torch = {"slackswap.profiling.step", "slackswap.profiling.recorder",
                       "slackswap.torchstep.torchapi", "slackswap.torchstep.values",
                       "slackswap.torchstep.context", "slackswap.torchstep.loss", "slackswap.torchstep.state",
                       "slackswap.runtime.executor", "slackswap.runtime.memory",
                       "slackswap.runtime.measure", "slackswap.runtime.copies",
                       "slackswap.runtime.rebuild", "slackswap.runtime.records",
                       "slackswap.runtime.rebuild_program", "slackswap.runtime.training",
                       "slackswap.torchstep.compileapi", "slackswap.compile.graph",
                       "slackswap.compile.partition", "slackswap.compile.capture",
                       "slackswap.compile.profile", "slackswap.compile.step",
                       "slackswap.commands.run_compiled"}
        import slackswap.runtime  # the entry point itself imports torch only when used
        for info in pkgutil.walk_packages(slackswap.__path__, "slackswap."):
            if info.name in needs_torch or info.name.startswith("slackswap.runtime.training."):
                continue
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                # Other optional extras may be missing too; only torch is this test's concern.
                assert "torch" not in str(exc), (info.name, exc)
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_profile_without_torch_names_the_extra(tmp_path) -> None:
    proc = _run(
        f"""
        from slackswap.cli import main
        sys.exit(main(["profile", "train.py:make", "-o", r"{tmp_path / "x.json"}"]))
        """
    )
    assert proc.returncode == 2
    # The CPU-only wheel first: the default one on Linux carries CUDA (6.5 GB, minutes).
    assert proc.stderr.strip() == (
        "slackswap: error: profiling and `run` need torch: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu (CPU only), or pip install 'slackswap[torch]' "
        "(with CUDA, several GB)"
    )


def test_profile_step_without_torch_is_a_user_error() -> None:
    proc = _run(
        """
        import slackswap.profiling as prof
        from slackswap.errors import UserError
        try:
            prof.profile_step
        except UserError as exc:
            print(exc)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in proc.stdout


def test_profile_refuses_an_existing_output_before_importing_torch(tmp_path) -> None:
    # Importing torch alone takes seconds: a path that will be refused is refused first.
    existing = tmp_path / "existing.json"
    existing.write_text("{}")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from slackswap.cli import main
            rc = main(["profile", "examples/models.py:gpt", "-o", {str(existing)!r}])
            print(rc, "torch" in sys.modules)
        """)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.stdout.split() == ["2", "False"], proc
    assert "the file exists; pass --overwrite" in proc.stderr


def test_the_training_path_without_torch_says_how_to_install_it() -> None:
    proc = _run(
        """
        import slackswap.runtime
        try:
            slackswap.runtime.prepare
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("TorchMissingError") and "pip install" in proc.stdout
