"""``slackswap run``: a plan on the real step, measured against simulated; bad input exits 2."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

import torch.nn.modules.module as torch_module  # noqa: E402
from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: E402

from slackswap.cli import main  # noqa: E402

pytestmark = pytest.mark.torch

FACTORIES = Path(__file__).parent.parent / "support" / "profiling_factories.py"
EXAMPLES = Path(__file__).parent.parent.parent / "examples" / "models.py"
GPT = f"{FACTORIES}:gpt_dropout"
KEYS = {
    "instance", "solver", "budget_bytes", "device", "simulated_peak_bytes", "measured_peak_bytes",
    "keep_all_measured_peak_bytes", "simulated_step_s", "measured_step_s", "swapped_bytes",
    "recomputed_bytes", "loss_abs_diff", "grad_max_abs_diff",
}  # fmt: skip


def no_hooks() -> bool:
    return (
        torch._C._autograd._top_saved_tensors_default_hooks(False) is None
        and _get_current_dispatch_mode() is None
        and not torch_module._global_forward_pre_hooks
    )


def test_the_issue_command_runs_and_checks(capsys) -> None:
    rc = main(["run", f"{EXAMPLES}:gpt", "--budget", "40%", "--solver", "slackswap", "--check"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "bitwise identical" in out and "peak activations" in out
    # bytes through the CLI's one formatter: a unit that fits, 3 significant digits
    assert re.search(r"^peak activations +\d\.\d\d MB +\d\.\d\d MB$", out, re.M), out


def test_json_has_the_documented_keys(capsys) -> None:
    rc = main(["run", GPT, "--budget", "0.5", "--solver", "swap-first", "--check", "--json",
               "--steps", "2"])  # fmt: skip
    r = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert KEYS <= set(r)
    assert r["loss_abs_diff"] == 0.0 and r["grad_max_abs_diff"] == 0.0
    assert r["device"] == "cpu" and r["steps"] == 2
    assert r["swapped_bytes"] + r["recomputed_bytes"] > 0
    assert r["measured_peak_bytes"] < r["keep_all_measured_peak_bytes"]
    assert (
        abs(r["measured_peak_bytes"] - r["simulated_peak_bytes"]) <= 0.1 * r["simulated_peak_bytes"]
    )


def _bad(capsys, argv: list[str], match: str) -> None:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    # progress lines ("run: profiling ... ...") may come first; the error is one line
    lines = [line for line in err.strip().splitlines() if not line.endswith(" ...")]
    assert len(lines) == 1 and match in lines[0], err
    assert "Traceback" not in err
    assert no_hooks()


def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path) -> None:
    _bad(capsys, ["run", GPT, "--budget", "lots", "--solver", "slackswap"], "budget")
    _bad(capsys, ["run", GPT, "--budget", "0.5", "--solver", "nope"], "--solver 'nope'")
    _bad(capsys, ["run", GPT, "--budget", "0.5", "--steps", "0"], "--steps")
    # A budget no plan of the solver fits.
    _bad(capsys, ["run", GPT, "--budget", "1%", "--solver", "offload-sync"], "budget")
    # ... and as `solve` does, the smallest budget that fits it.
    _bad(capsys, ["run", GPT, "--budget", "1%", "--solver", "checkpoint"],
         "the smallest budget that fits it: ")  # fmt: skip
    # An instance profiled from another step: refused at the first operator that differs.
    cnn = tmp_path / "cnn.json"
    assert main(["profile", f"{FACTORIES}:tiny_cnn", "-o", str(cnn)]) == 0
    capsys.readouterr()
    _bad(capsys, ["run", GPT, "--budget", "0.6", "--instance", str(cnn)], "differs from")
    # A plan made for another instance.
    gpt_inst = tmp_path / "gpt.json"
    plan = tmp_path / "plan.json"
    assert main(["profile", GPT, "-o", str(gpt_inst)]) == 0
    assert main(["solve", str(cnn), "--budget", "0.6", "--solver", "slackswap", "-o",
                 str(plan)]) == 0  # fmt: skip
    capsys.readouterr()
    _bad(capsys, ["run", GPT, "--budget", "0.6", "--instance", str(gpt_inst), "--plan",
                  str(plan)], "plan made for instance")  # fmt: skip
