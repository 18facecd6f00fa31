"""The private torch APIs the compile path needs, in one place, behind one version check.

AOTAutograd's backend factory (``aot_autograd``), the min-cut partitioner
(``min_cut_rematerialization_partition``) and its configuration (``torch._functorch.config``:
``activation_memory_budget``, ``enable_activation_offloading``, ``recompute_views``), the
graph CSE pass the partitioner runs first, inductor's ``custom_partitioner_fn`` and its
``CustomPartitionerFn`` base, dynamo's ``reset`` and ``explain``, and an operator's schema (is
it a view?) have no public equivalent and change between releases. Unlike `torchapi` (which
warns), the compile path refuses a torch outside `TESTED_COMPILE_TORCH`: it hands plans to
torch's partitioner, whose node-level contract (``node.meta["recompute"]``,
``node.meta["should_offload"]``) is not stable. `require_supported_torch` says so in one line.

Imported only after torch has been found (`slackswap.torchstep.require_torch`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from slackswap.errors import UserError
from slackswap.torchstep.torchapi import major_minor

__all__ = [
    "CPU_OFFLOAD_PREFIX",
    "TESTED_COMPILE_TORCH",
    "CheckpointPolicy",
    "CustomPartitionerFn",
    "UnsupportedTorchError",
    "aot_autograd",
    "default_partition",
    "graph_break_reasons",
    "graph_cse",
    "is_random_op",
    "is_view_op",
    "make_boxed_func",
    "min_cut_partition",
    "op_packet_name",
    "partitioner_config",
    "require_supported_torch",
    "reset_dynamo",
    "without_compile_caches",
]

#: Torch versions (major, minor) the compile path was tested with, both included.
TESTED_COMPILE_TORCH = ((2, 13), (2, 13))


class UnsupportedTorchError(UserError):
    """The installed torch is outside the versions the compile path was tested with."""


def unsupported_message(version: str) -> str | None:
    """None when torch ``version`` is within `TESTED_COMPILE_TORCH`, else the refusal line."""
    got = major_minor(version)
    lo, hi = TESTED_COMPILE_TORCH
    if got is not None and lo <= got <= hi:
        return None
    tested = ".".join(map(str, lo)) if lo == hi else f"{lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}"
    return (
        f"torch {version}: slackswap's compile path hands plans to torch's private partitioner "
        f"API, tested with torch {tested} only; use eager `slackswap run` (without --compile) "
        "or that torch"
    )


def require_supported_torch(version: str | None = None) -> None:
    """`UnsupportedTorchError` (one line) unless the torch ``version`` (default: the installed
    one) is one the compile path was tested with, or its private API is missing."""
    message = unsupported_message(version or torch.__version__)
    if message is None and _MISSING is not None:
        message = f"torch {torch.__version__}: a private torch API the compile path needs is missing ({_MISSING})"
    if message is not None:
        raise UnsupportedTorchError(message)


_MISSING: str | None = None
try:
    import torch._dynamo as _dynamo
    import torch._functorch.config as _functorch_config
    import torch._inductor.config as _inductor_config
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch._activation_offloading.activation_offloading import (
        CPU_OFFLOAD_PREFIX,
    )
    from torch._functorch.compile_utils import fx_graph_cse as _fx_graph_cse
    from torch._functorch.partitioners import (
        default_partition,
    )
    from torch._functorch.partitioners import (
        min_cut_rematerialization_partition as _min_cut,
    )
    from torch._inductor.custom_graph_pass import CustomPartitionerFn
    from torch.utils.checkpoint import CheckpointPolicy
except (ImportError, AttributeError) as exc:  # pragma: no cover - another torch
    _MISSING = str(exc)
    CPU_OFFLOAD_PREFIX = "cpu_offload_"
    CustomPartitionerFn = object  # type: ignore[misc, assignment]


def min_cut_partition(gm: Any, joint_inputs: Any, **kwargs: Any) -> tuple[Any, Any]:
    """PyTorch's min-cut rematerialization partitioner (``torch._functorch.partitioners``)."""
    return _min_cut(gm, joint_inputs, **kwargs)  # type: ignore[no-any-return]


def graph_cse(graph: Any) -> Any:
    """The common-subexpression pass the partitioner runs first (a new ``fx.Graph``)."""
    return _fx_graph_cse(graph)


@contextlib.contextmanager
def partitioner_config(**values: Any) -> Iterator[None]:
    """``torch._functorch.config`` patched with ``values`` (e.g. ``activation_memory_budget``,
    ``enable_activation_offloading``, ``recompute_views``) for the duration."""
    with _functorch_config.patch(**values):
        yield


def cse_enabled() -> bool:
    """Whether the partitioner runs its CSE pass first (``torch._functorch.config.cse``)."""
    return bool(_functorch_config.cse)


@contextlib.contextmanager
def without_compile_caches() -> Iterator[None]:
    """No FX graph cache and no AOTAutograd cache: every compile runs the partitioner, so what
    it decided can be measured."""
    with (
        _inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
        _functorch_config.patch(enable_autograd_cache=False, enable_remote_autograd_cache=False),
    ):
        yield


def inductor_options(partitioner: Any) -> dict[str, Any]:
    """``torch.compile(options=...)`` that make inductor partition with ``partitioner``."""
    return {"custom_partitioner_fn": partitioner}


def reset_dynamo() -> None:
    """Forget every compiled frame (``torch._dynamo.reset``): the next call compiles again."""
    _dynamo.reset()


def graph_break_reasons(fn: Callable[..., Any], *inputs: Any) -> list[str]:
    """Why dynamo split ``fn(*inputs)`` into several graphs, one line per break
    (``torch._dynamo.explain``)."""
    report = _dynamo.explain(fn)(*inputs)
    out = []
    for reason in report.break_reasons:
        where = ""
        stack = getattr(reason, "user_stack", None) or []
        if stack:
            frame = stack[-1]
            where = f" at {frame.filename}:{frame.lineno}"
        out.append(str(reason.reason).strip().splitlines()[0] + where)
    return out


def op_packet_name(target: Any) -> str:
    """The ATen packet name of an FX node's target (``addmm``), or its ``__name__``."""
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        return str(packet.__name__)
    return str(getattr(target, "__name__", target))


def is_view_op(target: Any) -> bool:
    """True when the ATen operator returns an alias of an input (a view, ``detach``, ``split``),
    read from its schema: no kernel runs, no new storage is made."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    info = schema.returns[0].alias_info
    return info is not None and not info.is_write


def is_random_op(target: Any) -> bool:
    """True for an operator that draws random numbers (dropout's ``native_dropout``, ``rand``)."""
    tags = getattr(target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags
