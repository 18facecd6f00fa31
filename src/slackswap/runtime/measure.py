"""Run one training step, with or without a plan, and measure it: loss, gradients, memory, time."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from slackswap.plan import Budget, Plan
from slackswap.runtime.checked import apply
from slackswap.runtime.memory import StorageTracker
from slackswap.runtime.stats import RunStats
from slackswap.simulator import simulate
from slackswap.torchstep.loss import default_loss
from slackswap.torchstep.state import put_back


@dataclass
class StepResult:
    """One measured step: the loss, each parameter's gradient (None where it got none), the
    tracker's peak of live activation bytes, the wall time in seconds and the runtime's stats
    (None for the unplanned step); ``names`` the parameters' names, ``buffers`` each buffer
    (batch-norm statistics) as the step left it, by name."""

    loss: torch.Tensor
    grads: list[torch.Tensor | None]
    peak_bytes: int
    step_s: float
    stats: RunStats | None
    cuda_peak_bytes: int | None = None
    op_peak_bytes: dict[int, int] | None = None  # highest live bytes per operator index
    names: list[str] = field(default_factory=list)
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)


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
    devices = sorted({p.device.index or 0 for p in params if p.is_cuda})
    for p in params:
        p.grad = None
    stats: RunStats | None = None
    with put_back(list(model.buffers())):
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
        after = {n: b.detach().clone() for n, b in model.named_buffers()}
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    for p in params:
        p.grad = None
    return StepResult(
        loss, grads, tracker.peak_bytes, step_s, stats, tracker.cuda_peak_bytes,
        dict(tracker.op_peak_bytes), [n for n, _ in model.named_parameters()], after,
    )  # fmt: skip


@dataclass
class TrainResult:
    """The model after some optimizer steps: each step's loss, and every parameter, buffer and
    optimizer state tensor by a name that says which (``parameter 'fc.weight'``, ``buffer
    'bn.running_mean'``, ``AdamW exp_avg of 'fc.weight'``)."""

    optimizer: str
    losses: list[torch.Tensor]
    state: dict[str, torch.Tensor]


def has_sparse_gradients(step: StepResult) -> bool:
    """Whether a step gave some parameter a sparse gradient (``nn.Embedding(sparse=True)``)."""
    return any(g is not None and g.is_sparse for g in step.grads)


def train_steps(
    model: torch.nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    plan: Plan | None = None,
    budget: Budget | float | str | None = None,
    *,
    steps: int = 5,
    sparse: bool = False,
    seed: int = 0,
    runtime: str | None = None,
    schedule: str | None = None,
) -> TrainResult:
    """``steps`` optimizer steps from the model's current state, each under ``plan`` when given:
    AdamW, or SGD when ``sparse`` (AdamW takes no sparse gradient). Step k runs with the RNG
    seeded ``seed + k``. Parameters, gradients, buffers and the caller's RNG state are restored
    afterwards, so a planned and an unplanned run start from the same model."""
    loss_of = loss_fn or default_loss
    named = list(model.named_parameters())
    params = [p for _, p in named]
    saved_params = [p.detach().clone() for p in params]
    saved_grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    devices = sorted({p.device.index or 0 for p in params if p.is_cuda})
    trainable = [p for p in params if p.requires_grad]
    opt: torch.optim.Optimizer
    if sparse:
        opt = torch.optim.SGD(trainable, lr=0.01)
    else:
        opt = torch.optim.AdamW(trainable, lr=1e-3)
    losses: list[torch.Tensor] = []
    try:
        with put_back(list(model.buffers())):
            with torch.random.fork_rng(devices=devices):
                for k in range(steps):
                    opt.zero_grad(set_to_none=True)
                    torch.manual_seed(seed + k)
                    if plan is None:
                        loss = loss_of(model(*inputs))
                        loss.backward()
                    else:
                        bud = 1.0 if budget is None else budget
                        with apply(plan, bud, model=model, runtime=runtime, schedule=schedule):
                            loss = loss_of(model(*inputs))
                            loss.backward()
                    losses.append(loss.detach())
                    opt.step()
            state: dict[str, torch.Tensor] = {}
            for n, p in named:
                state[f"parameter {n!r}"] = p.detach().clone()
            for n, buf in model.named_buffers():
                state[f"buffer {n!r}"] = buf.detach().clone()
            kind = type(opt).__name__
            for n, p in named:
                for key, v in opt.state.get(p, {}).items():
                    if isinstance(v, torch.Tensor):
                        state[f"{kind} {key} of {n!r}"] = v.detach().clone()
    finally:
        with torch.no_grad():
            for p, saved, g in zip(params, saved_params, saved_grads, strict=True):
                p.copy_(saved)
                p.grad = g
    return TrainResult(type(opt).__name__, losses, state)


def train_difference(a: TrainResult, b: TrainResult) -> str | None:
    """None when two training runs end bitwise identical (every loss, parameter, buffer and
    optimizer state tensor), else a phrase naming the first difference."""
    for k, (la, lb) in enumerate(zip(a.losses, b.losses, strict=True)):
        if not same_bits(la, lb):
            return f"the loss of step {k + 1}"
    if a.state.keys() != b.state.keys():
        only = sorted(a.state.keys() ^ b.state.keys())
        return f"{only[0]} (in one run only)"
    for name, t in a.state.items():
        if not same_bits(t, b.state[name]):
            return name
    return None


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


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t.to_dense() if t.is_sparse else t


def max_abs_diff(a: StepResult, b: StepResult) -> tuple[float, float]:
    """(|loss a - loss b|, largest |gradient difference| over all parameters); inf where one
    step gave a parameter a gradient and the other did not. Sparse gradients (an
    ``nn.Embedding(sparse=True)``) are compared as the dense tensors they stand for."""
    loss = float((a.loss.double() - b.loss.double()).abs())
    worst = 0.0
    for ga, gb in zip(a.grads, b.grads, strict=True):
        if ga is None or gb is None:
            if ga is not gb:
                worst = float("inf")
            continue
        if ga.numel():
            diff = (_dense(ga).double() - _dense(gb).double()).abs().max()
            worst = max(worst, float(diff))
    return loss, worst


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Identical bit for bit: dtype, layout, shape and every byte (a NaN equals itself, -0.0
    differs from 0.0); a sparse tensor by its coalesced indices and values."""
    if a.dtype != b.dtype or a.layout != b.layout or a.shape != b.shape:
        return False
    if a.is_sparse:
        a, b = a.coalesce(), b.coalesce()
        return same_bits(a.indices(), b.indices()) and same_bits(a.values(), b.values())
    if a.numel() == 0:
        return True
    return torch.equal(
        a.detach().contiguous().reshape(-1).view(torch.uint8),
        b.detach().contiguous().reshape(-1).view(torch.uint8),
    )


def step_difference(a: StepResult, b: StepResult) -> str | None:
    """None when two steps are bitwise identical (loss, every gradient, every buffer after the
    step), else a phrase naming the first difference."""
    if not same_bits(a.loss, b.loss):
        return "the loss"
    names = a.names or b.names or [f"#{i}" for i in range(len(a.grads))]
    for n, ga, gb in zip(names, a.grads, b.grads, strict=True):
        if ga is None or gb is None:
            if ga is not gb:
                return f"the gradient of {n!r} (None in one step only)"
            continue
        if not same_bits(ga, gb):
            return f"the gradient of {n!r}"
    if a.buffers.keys() != b.buffers.keys():
        only = sorted(a.buffers.keys() ^ b.buffers.keys())
        return f"buffer {only[0]!r} (in one step only)"
    for n, t in a.buffers.items():
        if not same_bits(t, b.buffers[n]):
            return f"buffer {n!r}"
    return None


def bitwise_equal(a: StepResult, b: StepResult) -> bool:
    """Loss, every gradient and every buffer after the step identical bit for bit."""
    return step_difference(a, b) is None
