"""The private torch APIs are wrapped in two modules (`slackswap.torchstep.torchapi` for the
profiler and runtime, `slackswap.torchstep.compileapi` for the compile path), each checking
the torch version they were tested with."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from slackswap.torchstep import torchapi  # noqa: E402

SRC = Path(torchapi.__file__).resolve().parents[1]

#: A private torch name: a dotted torch path with a component starting with an underscore
#: (``torch._C``, ``torch.utils._pytree``), a storage's ``cdata`` or a node's ``_sequence_nr``,
#: or `StorageWeakRef` from torch's multiprocessing internals.
PRIVATE = re.compile(r"torch(\.\w+)*\._[A-Za-z]|\.cdata\b|_sequence_nr|multiprocessing\.reductions")


def test_the_tested_version_passes_and_others_get_one_line() -> None:
    lo, hi = torchapi.TESTED_TORCH
    assert torchapi.check_torch_version(f"{lo[0]}.{lo[1]}.0") is None
    assert torchapi.check_torch_version(f"{hi[0]}.{hi[1]}.1+cpu") is None
    for version in (f"{lo[0]}.{lo[1] - 1}.0", f"{hi[0]}.{hi[1] + 1}.0", "3.0.0", "nightly"):
        message = torchapi.check_torch_version(version)
        assert message is not None and "\n" not in message
        assert message.startswith(f"torch {version}:") and "tested with torch" in message


def test_importing_it_under_another_torch_warns_once() -> None:
    code = (
        "import warnings, torch\n"
        "torch.__version__ = '2.0.1'\n"
        "with warnings.catch_warnings(record=True) as got:\n"
        "    warnings.simplefilter('always')\n"
        "    import slackswap.torchstep.torchapi as api\n"
        "hits = [w for w in got if issubclass(w.category, api.TorchVersionWarning)]\n"
        "print(len(hits), hits[0].message if hits else '')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    count, _, message = proc.stdout.strip().partition(" ")
    assert count == "1" and message.startswith("torch 2.0.1: ")


def test_no_other_module_of_the_package_uses_a_private_torch_api() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name in ("torchapi.py", "compileapi.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if PRIVATE.search(code) and "torch.__version__" not in code:
                found.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert found == []


def test_node_keys_name_the_running_autograd_node() -> None:
    import torch

    seen: list[int] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            return x * 2

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            seen.append(torchapi.current_node_key())
            return g * 2

    x = torch.ones(3, requires_grad=True)
    y = Probe.apply(x)
    y.sum().backward()
    assert torchapi.current_node_key() == -1
    assert seen == [torchapi.node_key(y.grad_fn)]
