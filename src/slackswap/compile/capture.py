"""Capture the joint forward+backward graph torch.compile makes of a model, per backend.

``aot_eager``: AOTAutograd with a ``partition_fn``; ``inductor``: inductor's
``custom_partitioner_fn``, which sees the joint graph after inductor's own joint-graph passes
(so its graph, and its saved tensors, can differ from aot_eager's). Capturing stops the compile
right after the joint graph is copied: nothing is compiled, nothing runs.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from slackswap.errors import UserError
from slackswap.torchstep.compileapi import (
    CustomPartitionerFn,
    aot_autograd,
    graph_break_reasons,
    inductor_options,
    make_boxed_func,
    require_supported_torch,
    reset_dynamo,
    without_compile_caches,
)

BACKENDS = ("aot_eager", "inductor")


class GraphBreakError(UserError):
    """The model compiles into several graphs; the compile path plans one."""


class CompileError(UserError):
    """torch.compile failed on the model (one line naming why)."""


@dataclass
class Captured:
    """A copy of the joint graph, the partitioner's arguments, and the backend it came from."""

    gm: Any  # torch.fx.GraphModule
    joint_inputs: Any
    kwargs: dict[str, Any]
    backend: str

    def copy(self) -> Any:
        return copy.deepcopy(self.gm)


class _Stop(Exception):
    """Raised by the capturing partitioner once the joint graph is copied."""


_CAPTURED: dict[str, Captured] = {}


def _capture_into(token: str, backend: str) -> Callable[..., Any]:
    def partition(gm: Any, joint_inputs: Any, **kwargs: Any) -> Any:
        _CAPTURED[token] = Captured(copy.deepcopy(gm), joint_inputs, dict(kwargs), backend)
        raise _Stop

    return partition


class _CapturePartitioner(CustomPartitionerFn):  # type: ignore[misc, valid-type]
    def __init__(self, token: str):
        self.token = token

    def __call__(self, gm: Any, joint_inputs: Any, **kwargs: Any) -> Any:
        return _capture_into(self.token, "inductor")(gm, joint_inputs, **kwargs)

    def uuid(self) -> Any:
        return None  # never cached: capturing must see the graph


def boxed(gm: Any, example_inputs: Any) -> Any:
    return make_boxed_func(gm)


def compile_with(model: torch.nn.Module, backend: str, partitioner: Any) -> Any:
    """``torch.compile(model)`` whose joint graph ``partitioner`` (a partition function, for
    aot_eager; a ``CustomPartitionerFn``, for inductor) splits."""
    if backend == "aot_eager":
        be = aot_autograd(fw_compiler=boxed, bw_compiler=boxed, partition_fn=partitioner)
        return torch.compile(model, backend=be)
    if backend == "inductor":
        return torch.compile(model, backend="inductor", options=inductor_options(partitioner))
    raise UserError(f"backend {backend!r}: one of {', '.join(BACKENDS)}")


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def user_error_in(exc: BaseException) -> UserError | None:
    """The `UserError` a partitioner raised, under torch's wrapping exceptions."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 20:
        if isinstance(e, UserError):
            return e
        inner = getattr(e, "inner_exception", None)
        e = inner if isinstance(inner, BaseException) else (e.__cause__ or e.__context__)
        seen += 1
    return None


def _stopped(exc: BaseException) -> bool:
    e: BaseException | None = exc
    for _ in range(20):
        if e is None:
            return False
        if isinstance(e, _Stop):
            return True
        inner = getattr(e, "inner_exception", None)
        e = inner if isinstance(inner, BaseException) else (e.__cause__ or e.__context__)
    return False


def check_one_graph(model: torch.nn.Module, inputs: tuple[Any, ...]) -> None:
    """`GraphBreakError` naming the first graph break of ``model(*inputs)``."""
    try:
        reasons = graph_break_reasons(model, *inputs)
    except Exception as exc:  # noqa: BLE001 - user code under dynamo: one line
        raise CompileError(f"torch.compile could not trace the model: {one_line(exc)}") from exc
    finally:
        reset_dynamo()
    if reasons:
        raise GraphBreakError(
            f"the model compiles into {len(reasons) + 1} graphs (graph break: {reasons[0]}); "
            "slackswap plans one graph: remove the break (or use eager `slackswap run`)"
        )


def capture(model: torch.nn.Module, inputs: tuple[Any, ...], backend: str) -> Captured:
    """The joint graph ``torch.compile(model, backend=...)`` makes for ``model(*inputs)``.

    Refuses (one line) an unsupported torch, a graph break, or a model torch cannot compile.
    Buffers (batch-norm statistics) and the RNG state are left as they were.
    """
    require_supported_torch()
    if backend not in BACKENDS:
        raise UserError(f"backend {backend!r}: one of {', '.join(BACKENDS)}")
    check_one_graph(model, inputs)
    token = uuid.uuid4().hex
    partitioner: Any = _capture_into(token, backend)
    if backend == "inductor":
        partitioner = _CapturePartitioner(token)
    buffers = [b.detach().clone() for b in model.buffers()]
    reset_dynamo()
    try:
        with torch.random.fork_rng(devices=[]), without_compile_caches(), torch.enable_grad():
            compile_with(model, backend, partitioner)(*inputs)
    except Exception as exc:  # noqa: BLE001
        if not _stopped(exc):
            found = user_error_in(exc)
            if found is not None:
                raise found from None
            raise CompileError(f"torch.compile failed on the model: {one_line(exc)}") from exc
    finally:
        reset_dynamo()
        with torch.no_grad():
            for b, saved in zip(model.buffers(), buffers, strict=True):
                b.copy_(saved)
    got = _CAPTURED.pop(token, None)
    if got is None:
        raise CompileError(
            "torch.compile made no joint graph of the model (no parameter needs a gradient?)"
        )
    return got
