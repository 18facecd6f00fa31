"""The private torch APIs the profiler and the runtime need, in one place.

Dispatch modes, pytree flattening, storage identity and use counts, the autograd node running
now, and dispatch below autograd have no public equivalent; they change between torch
releases without notice. Every use in the package goes through this module, which checks on
import that the installed torch is in the range these were tested with (`TESTED_TORCH`): a
torch outside it gets one `TorchVersionWarning`, and one whose API moved fails here with one
error naming the version, not somewhere inside a step.

Imported only after torch has been found (`slackswap.torchstep.require_torch`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

__all__ = [
    "TESTED_TORCH",
    "StorageWeakRef",
    "TorchDispatchMode",
    "TorchVersionWarning",
    "autocast_caching",
    "autocast_on",
    "below_autocast",
    "below_autograd",
    "check_torch_version",
    "current_node_key",
    "disable_current_modes",
    "dispatch_mode_active",
    "dispatch_mode_depth",
    "node_key",
    "set_grad_mode",
    "storage_key",
    "storage_use_count",
    "tree_flatten",
    "tree_unflatten",
]

#: Torch versions (major, minor) the private APIs below were tested with: from the first to
#: the last, both included.
TESTED_TORCH = ((2, 13), (2, 13))


class TorchVersionWarning(UserWarning):
    """The installed torch is outside the versions slackswap's private torch APIs were
    tested with."""


def major_minor(version: str) -> tuple[int, int] | None:
    """``(2, 13)`` from ``'2.13.0+cpu'``; None when the text names no version."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_torch_version(version: str) -> str | None:
    """None when torch ``version`` is within `TESTED_TORCH`, else the one-line warning text."""
    got = major_minor(version)
    lo, hi = TESTED_TORCH
    if got is not None and lo <= got <= hi:
        return None
    tested = ".".join(map(str, lo)) if lo == hi else f"{lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}"
    return (
        f"torch {version}: slackswap's profiler and runtime use private torch APIs tested with "
        f"torch {tested} only; they may fail or measure wrongly with this version"
    )


try:
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
    from torch.utils._pytree import tree_flatten, tree_unflatten

    _current_autograd_node = torch._C._current_autograd_node
    _dispatch_stack_len = torch._C._len_torch_dispatch_stack
    _storage_use_count = torch._C._storage_Use_Count
    _below_autograd = torch._C._AutoDispatchBelowAutograd
    _exclude_keys = torch._C._ExcludeDispatchKeyGuard
    _AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    for _key in dir(torch._C.DispatchKey):
        if _key.startswith("Autocast"):
            _AUTOCAST_KEYS = _AUTOCAST_KEYS | torch._C.DispatchKeySet(
                getattr(torch._C.DispatchKey, _key)
            )
    #: Whether autocast is on for some device now (one C call).
    autocast_on = torch._C._is_any_autocast_enabled
    #: Turn grad mode on or off (``torch.set_grad_enabled`` without its Python object: a
    #: rebuild sets the mode around each replayed operator whose recorded mode differs).
    set_grad_mode = torch._C._set_grad_enabled
except (ImportError, AttributeError) as exc:  # pragma: no cover - another torch
    raise ImportError(
        f"torch {torch.__version__}: a private torch API slackswap needs is missing ({exc}); "
        f"use torch {'.'.join(map(str, TESTED_TORCH[1]))}"
    ) from None

_message = check_torch_version(torch.__version__)
if _message is not None:  # pragma: no cover - the tested torch is the installed one
    warnings.warn(_message, TorchVersionWarning, stacklevel=2)


def disable_current_modes() -> AbstractContextManager[Any]:
    """A context in which no dispatch mode sees the operators issued."""
    return _disable_current_modes()  # type: ignore[no-any-return]


def dispatch_mode_active() -> bool:
    """Whether a dispatch mode (the checked path's, a `StorageTracker`) sees operators now."""
    return bool(_dispatch_stack_len())


#: How many dispatch modes see operators now (0: none), one C call: `dispatch_mode_active`
#: with no Python function around it, for a fast step's hot path.
dispatch_mode_depth: Callable[[], int] = _dispatch_stack_len


#: A context in which operators run below autograd (no graph, no saved tensors): torch's own
#: guard, with no Python function around it (a rebuild enters one each time).
below_autograd: Callable[[], AbstractContextManager[Any]] = _below_autograd


def autocast_caching() -> bool:
    """Whether ``torch.autocast`` is on now with its cache of casts (``cache_enabled=True``,
    its default): each parameter's cast is kept for the whole autocast region."""
    return bool(autocast_on() and torch.is_autocast_cache_enabled())


def below_autocast() -> AbstractContextManager[Any]:
    """A context in which operators run as they are called, not cast by ``torch.autocast``
    (for operators recorded after autocast cast them: a rebuild's replay)."""
    return _exclude_keys(_AUTOCAST_KEYS)  # type: ignore[no-any-return]


def node_key(node: Any) -> int:
    """The sequence number of autograd node ``node``."""
    return int(node._sequence_nr())


#: The id of the backward pass (autograd graph task) running now (``torch.utils.checkpoint``'s
#: own test for a reentrant backward); None where this torch has none.
_graph_task_id: Any = getattr(torch._C, "_current_graph_task_id", None)


def current_graph_task() -> int:
    """The id of the backward pass (autograd graph task) running now: a reentrant
    checkpoint's inner backward is one of its own; -1 outside one, or where torch cannot say."""
    return -1 if _graph_task_id is None else int(_graph_task_id())


def current_node_key() -> int:
    """The sequence number of the autograd node running now; -1 outside any node."""
    node = _current_autograd_node()
    return -1 if node is None else node_key(node)


def storage_key(ref: StorageWeakRef) -> int:
    """A number naming the storage behind ``ref`` while it is allocated."""
    return int(ref.cdata)


def storage_use_count(ref: StorageWeakRef) -> int:
    """How many references the storage behind ``ref`` has (its Python object included)."""
    return int(_storage_use_count(ref.cdata))
