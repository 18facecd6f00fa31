"""The torch plumbing the profiler, the runtime and the compile path share.

Value numbering (`values`), module context (`context`), the raw step record (`trace`), operator
kinds and roofline times (`costs`), and every private torch API behind one version check
(`torchapi`). It imports nothing of `profiling`, `runtime` or `compile` (an import-linter
contract says so). This module itself imports no torch: `require_torch` finds it.
"""

from __future__ import annotations

from typing import Any

from slackswap.errors import UserError

__all__ = ["TORCH_HINT", "TorchMissingError", "require_torch"]


#: How to install torch: the CPU-only wheel serves profiling and `run` on CPU (about 200 MB);
#: the default wheel on Linux carries CUDA (several GB), which only a GPU needs.
TORCH_HINT = (
    "profiling and `run` need torch: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu (CPU only), or pip install 'slackswap[torch]' "
    "(with CUDA, several GB)"
)


class TorchMissingError(UserError):
    """torch is not installed; the message says how to get it."""


def require_torch() -> Any:
    """The torch module, or `TorchMissingError` naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise TorchMissingError(TORCH_HINT) from None
    return torch
