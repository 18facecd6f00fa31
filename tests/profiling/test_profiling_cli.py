"""``slackswap profile``: a factory spec in, an instance file out; bad input exits 2, one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # noqa: F401  CI installs torch: a missing torch there must fail, not skip
else:
    pytest.importorskip("torch")

import slackswap  # noqa: E402
from slackswap.cli import main  # noqa: E402

pytestmark = pytest.mark.torch

FACTORIES = Path(__file__).parent.parent / "support" / "profiling_factories.py"
EXAMPLES = Path(__file__).parent.parent.parent / "examples" / "models.py"


def test_profile_script_factory(tmp_path, capsys) -> None:
    out = tmp_path / "cnn.json"
    rc = main(["profile", f"{EXAMPLES}:cnn", "-o", str(out), "--gpu", "v100", "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    inst = slackswap.load(str(out))
    assert summary["n_blocks"] == 3 == inst.meta["n_blocks"]
    assert summary["saved_bytes"] == inst.saved_bytes > 0
    assert inst.hardware.gpu == "v100" and inst.hardware.link == "pcie3"
    assert inst.meta["source"] == f"{EXAMPLES}:cnn"


def test_profile_module_factory_with_options(tmp_path, monkeypatch, capsys) -> None:
    # A module of the working directory, as ``python -m`` would find it.
    (tmp_path / "mymodels.py").write_text(
        "import torch\n"
        "def make():\n"
        "    model = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(3)))\n"
        "    return model, torch.randn(4, 8), lambda out: (out ** 2).mean()\n"
    )
    monkeypatch.chdir(tmp_path)
    rc = main(
        [
            "profile",
            "mymodels:make",
            "-o",
            "mlp.json",
            "--link",
            "pcie5",
            "--gpu",
            "h100",
            "--name",
            "mlp",
            "--blocks",
            "Linear",
        ]
    )
    assert rc == 0
    assert "wrote mlp.json: mlp," in capsys.readouterr().out
    inst = slackswap.load("mlp.json")
    assert inst.name == "mlp" and inst.hardware.link_bw_Bps == 50e9
    assert inst.meta["block_modules"] == ["0", "1", "2"]


@pytest.mark.parametrize(
    "spec,message",
    [
        ("{f}:not_a_module", "not a torch.nn.Module"),
        ("{f}:broken", "forward of Broken raised ValueError: shape mismatch"),
        ("{f}", "expected SCRIPT_OR_MODULE:FACTORY"),
        ("{f}:no_such_factory", "has no attribute 'no_such_factory'"),
        ("{f}:TINY_GPT", "not a callable"),
        ("missing_dir/train.py:make", "no such script"),
        ("no_such_pkg.models:make", "no such module or script"),
    ],
)
def test_bad_factory_exits_2_with_one_line(spec, message, tmp_path, capsys) -> None:
    rc = main(["profile", spec.format(f=FACTORIES), "-o", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2
    # a progress line ("profile: ... ...") may come first; the error is one line
    lines = [line for line in err.splitlines() if not line.endswith(" ...")]
    assert len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "x.json").exists()


def test_unknown_gpu_exits_2(tmp_path, capsys) -> None:
    rc = main(["profile", f"{EXAMPLES}:cnn", "-o", str(tmp_path / "x.json"), "--gpu", "z80"])
    assert rc == 2 and "unknown GPU 'z80'" in capsys.readouterr().err


def test_factory_that_raises_exits_2(tmp_path, capsys) -> None:
    script = tmp_path / "bad.py"
    script.write_text("def make():\n    raise RuntimeError('no data here')\n")
    rc = main(["profile", f"{script}:make", "-o", str(tmp_path / "x.json")])
    assert rc == 2
    assert "the factory raised RuntimeError: no data here" in capsys.readouterr().err
