"""Plans inside torch.compile: the compiled step's joint graph as an `Instance`, a partitioner
that applies keep / recompute / offload through PyTorch's min-cut partitioner, and the checks of
the compiled step against torch's own partitioner.

`slackswap.compile.compile(model, inputs, loss_fn, budget, solver, backend)` is the entry point.
This module imports no torch; its submodules do.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["compile", "profile_compiled"]


def _step() -> types.ModuleType:
    import slackswap.compile.step as step  # lazy: imports torch, an optional dependency

    return step


def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - the name users look for
    """See `slackswap.compile.step.compile`."""
    return _step().compile(*args, **kwargs)


def profile_compiled(*args: Any, **kwargs: Any) -> Any:
    """See `slackswap.compile.profile.profile_compiled`."""
    return _step().profile_compiled(*args, **kwargs)


class _CallableModule(types.ModuleType):
    """``slackswap.compile`` is this package and the entry point: calling it compiles."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return compile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
