"""`profile_step`: run one forward and backward pass of a torch module and record an instance."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.models.hardware import get_gpu, hardware
from slackswap.profiling.blocks import find_blocks
from slackswap.profiling.build import build_instance
from slackswap.profiling.recorder import Recorder
from slackswap.torchstep.loss import ProfileError, default_loss
from slackswap.torchstep.state import put_back

TIMINGS = ("roofline", "measured")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _as_inputs(example_inputs: Any) -> tuple[Any, ...]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, list | tuple):
        return tuple(example_inputs)
    raise UserError(
        f"inputs: expected a tensor or a tuple of tensors, got {type(example_inputs).__name__}"
    )


def profile_step(
    model: torch.nn.Module,
    example_inputs: torch.Tensor | Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    *,
    gpu: str = "a100",
    link: str | None = None,
    timing: str = "roofline",
    blocks: str | Sequence[torch.nn.Module] | None = None,
    name: str | None = None,
    warmup: int | None = None,
    link_bw_Bps: float | None = None,
) -> Instance:
    """Profile one training step of ``model`` into an `Instance`.

    Runs ``loss_fn(model(*inputs)).backward()`` once (default loss: the sum of the output) and
    records every operator, saved tensor and block (see `slackswap.profiling`). Operator times
    are ``"roofline"`` estimates on ``gpu`` from FLOP and byte counts, or ``"measured"`` wall
    times of each kernel on the device the step runs on (approximate: one call per operator,
    after ``warmup`` unrecorded steps, default 1). Tensor sizes are those of the step as run, in
    its dtypes. The step starts with no gradients (as after ``zero_grad()``); gradients, buffers
    (e.g. batch-norm statistics) and the RNG state are restored afterwards; the module's
    train/eval mode is left as the caller set it. ``blocks``: see `find_blocks` (an empty list:
    no blocks).
    """
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    inputs = _as_inputs(example_inputs)
    if timing not in TIMINGS:
        raise UserError(f"timing: {timing!r} is not one of {', '.join(TIMINGS)}")
    try:
        g = get_gpu(gpu)
        hw = hardware(gpu, link, link_bw_Bps)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    if warmup is None:
        warmup = 1 if timing == "measured" else 0
    block_modules = find_blocks(model, blocks)
    loss_of = loss_fn or default_loss
    devices = sorted({t.device.index or 0 for t in (*inputs, *model.parameters()) if _is_cuda(t)})
    # Inputs that require grad (a reentrant checkpoint's first block asks for one) start from
    # no gradient too: the step as a loop that sets their .grad to None runs it.
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad]
    params = list(model.parameters()) + leaves
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    try:
        with (
            put_back(list(model.buffers())),
            torch.random.fork_rng(devices=devices),
            torch.enable_grad(),
        ):
            for _ in range(warmup):
                _step(model, inputs, loss_of, None)
            for p in params:
                p.grad = None  # as after zero_grad(): the step writes gradients, no accumulate
            recorder = Recorder(model, block_modules, timing=timing == "measured")
            recorder.note_model_inputs(inputs)
            try:
                _step(model, inputs, loss_of, recorder)
            finally:
                recorder.remove_hooks()
                recorder.release()
    finally:
        for p, gr in zip(params, grads, strict=True):
            p.grad = gr
    meta = {
        "model": type(model).__name__,
        "gpu": g.key,
        "link": hw.link,
        "device": str(_device(inputs, params)),
        "torch": torch.__version__,
    }
    try:
        return build_instance(
            recorder.trace,
            name=name or f"{type(model).__name__}@{g.key}-{hw.link}",
            hardware=hw,
            gpu=g,
            timing=timing,
            meta=meta,
        )
    except ValueError as exc:
        raise ProfileError(f"profile of {type(model).__name__}: {exc}") from None


def _is_cuda(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_cuda


def _device(inputs: tuple[Any, ...], params: Sequence[torch.Tensor]) -> torch.device:
    for t in (*inputs, *params):
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")


def _step(
    model: torch.nn.Module,
    inputs: tuple[Any, ...],
    loss_of: Callable[[Any], torch.Tensor],
    rec: Recorder | None,
) -> None:
    """One forward and backward pass, recorded when ``rec`` is given; errors become one line."""
    cls = type(model).__name__
    if rec is None:
        out = _call(lambda: model(*inputs), f"forward of {cls}")
        loss = _call(lambda: loss_of(out), "loss_fn")
        _check_loss(loss)
        _call(loss.backward, "backward")
        return
    with rec, rec.saved_hooks():
        # The output is not held through backward, as in ``loss_fn(model(*inputs)).backward()``
        # (the recorder notes when the step drops each saved buffer).
        loss = _call(lambda: loss_of(_call(lambda: model(*inputs), f"forward of {cls}")), "loss_fn")
        _check_loss(loss)
        rec.start_backward()
        _call(loss.backward, "backward")
        rec.end_backward()


def _check_loss(loss: Any) -> None:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ProfileError(f"loss_fn: expected a scalar tensor, got {shape}")
    if not loss.requires_grad:
        raise ProfileError("loss_fn: the loss does not require grad (no trainable parameter used?)")


def _call(fn: Callable[[], Any], what: str) -> Any:
    try:
        return fn()
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of user code is reported in one line
        raise ProfileError(f"{what} raised {_one_line(exc)}") from exc
