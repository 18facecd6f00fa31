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


def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - the name users look for
    """See `slackswap.compile.step.compile`."""
    from slackswap.compile.step import compile as _compile

    return _compile(*args, **kwargs)


def profile_compiled(*args: Any, **kwargs: Any) -> Any:
    """See `slackswap.compile.profile.profile_compiled`."""
    from slackswap.compile.profile import profile_compiled as _profile

    return _profile(*args, **kwargs)


class _CallableModule(types.ModuleType):
    """``slackswap.compile`` is this package and the entry point: calling it compiles."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return compile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
