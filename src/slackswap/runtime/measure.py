"""Run one training step, with or without a plan, and measure it: loss, gradients, memory, time."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from slackswap.plan import Budget, Plan
from slackswap.profiling.step import default_loss
from slackswap.runtime import RunStats, apply
from slackswap.runtime.memory import StorageTracker
from slackswap.simulator import simulate


@dataclass
class StepResult:
    """One measured step: the loss, each parameter's gradient (None where it got none), the
    tracker's peak of live activation bytes, the wall time in seconds and the runtime's stats
    (None for the unplanned step)."""

    loss: torch.Tensor
    grads: list[torch.Tensor | None]
    peak_bytes: int
    step_s: float
    stats: RunStats | None
    cuda_peak_bytes: int | None = None
    op_peak_bytes: dict[int, int] | None = None  # highest live bytes per operator index


def run_step(
    model: torch.nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    plan: Plan | None = None,
    budget: Budget | float | str | None = None,
    *,
    seed: int = 0,
    runtime: str | None = None,
    schedule: str | None = None,
) -> StepResult:
    """One step from no gradients, RNG seeded with ``seed``, under ``plan`` when given.

    The model's buffers (batch-norm statistics) and the caller's RNG state are restored
    afterwards, so steps run one after another start from the same state and compare bit for
    bit. ``budget`` defaults to P (the plan's fraction 1.0).
    """

    loss_of = loss_fn or default_loss
    params = list(model.parameters())
    buffers = [b.detach().clone() for b in model.buffers()]
    devices = sorted({p.device.index or 0 for p in params if p.is_cuda})
    for p in params:
        p.grad = None
    stats: RunStats | None = None
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            _sync(devices)
            t0 = time.perf_counter()
            with StorageTracker(params) as tracker:
                if plan is None:
                    loss = loss_of(model(*inputs))
                    loss.backward()
                else:
                    with apply(plan, 1.0 if budget is None else budget, model=model,
                               runtime=runtime, schedule=schedule,
                               tracker=tracker) as stats:  # fmt: skip
                        tracker.op_index = stats.op_index
                        loss = loss_of(model(*inputs))
                        loss.backward()
                loss = loss.detach()
            _sync(devices)
            step_s = time.perf_counter() - t0
    finally:
        with torch.no_grad():
            for b, saved in zip(model.buffers(), buffers, strict=True):
                b.copy_(saved)
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    for p in params:
        p.grad = None
    return StepResult(
        loss, grads, tracker.peak_bytes, step_s, stats, tracker.cuda_peak_bytes,
        dict(tracker.op_peak_bytes),
    )  # fmt: skip


def simulated_op_peaks(instance: Any, plan: Plan, budget: Budget | float | str) -> dict[int, int]:
    """The simulator's highest bytes in use while each operator (and the rebuilds and waits
    before it) runs, by operator index: what `StepResult.op_peak_bytes` is compared with."""
    import numpy as np

    tl = simulate(instance, plan, budget, timeline=True).timeline
    assert tl is not None
    out: dict[int, int] = {}
    order = np.argsort(tl.compute_start_s, kind="stable")
    prev_end = 0.0
    for j in order:
        o = int(tl.compute_op[j])
        lo, hi = min(prev_end, tl.compute_start_s[j]), tl.compute_end_s[j]
        a = max(int(np.searchsorted(tl.mem_time_s, lo, side="right")) - 1, 0)
        b = int(np.searchsorted(tl.mem_time_s, hi, side="left"))
        if b > a:
            out[o] = max(out.get(o, 0), int(tl.mem_bytes[a:b].max()))
        prev_end = hi
    return out


def where_they_differ(measured: dict[int, int], simulated: dict[int, int], instance: Any) -> str:
    """A line naming the operator where measured and simulated memory differ most."""
    worst, at = 0, -1
    for o in measured:  # operators that allocated nothing have no measured figure
        d = measured.get(o, 0) - simulated.get(o, 0)
        if abs(d) > abs(worst):
            worst, at = d, o
    if at < 0:
        return "no operator differs"
    return (
        f"largest difference at operator #{at} {instance.op_name[at]!r}: measured "
        f"{measured.get(at, 0)} B, simulated {simulated.get(at, 0)} B ({worst:+d} B)"
    )


def _sync(devices: list[int]) -> None:
    if devices:
        torch.cuda.synchronize()


def max_abs_diff(a: StepResult, b: StepResult) -> tuple[float, float]:
    """(|loss a - loss b|, largest |gradient difference| over all parameters); inf where one
    step gave a parameter a gradient and the other did not."""
    loss = float((a.loss.double() - b.loss.double()).abs())
    worst = 0.0
    for ga, gb in zip(a.grads, b.grads, strict=True):
        if ga is None or gb is None:
            if ga is not gb:
                worst = float("inf")
            continue
        worst = max(worst, float((ga.double() - gb.double()).abs().max()) if ga.numel() else 0.0)
    return loss, worst


def bitwise_equal(a: StepResult, b: StepResult) -> bool:
    """Loss and every gradient identical bit for bit."""
    if not torch.equal(a.loss, b.loss):
        return False
    for ga, gb in zip(a.grads, b.grads, strict=True):
        if ga is None or gb is None:
            if ga is not gb:
                return False
            continue
        if ga.dtype != gb.dtype or not torch.equal(ga, gb):
            return False
    return True
