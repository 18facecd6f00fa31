"""Compile a model under a plan, and check the compiled step against torch's own partitioner.

`compile` is the user's entry point: profile the joint graph, plan it with a registered solver,
return ``torch.compile(model)`` whose partitioner applies the plan. `check_compiled` runs one
step (forward, ``loss_fn``, backward) of the model compiled with the default partitioner and
one under the plan, from the same RNG state and buffers, and reports what the partitioned
graphs do beside what the plan asked.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from slackswap.compile.capture import (
    CompileError,
    boxed,
    compile_with,
    one_line,
    user_error_in,
)
from slackswap.compile.partition import REPORTS, PlanPartitioner, partition_with_plan
from slackswap.compile.profile import profile_compiled
from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.plan import ACTION_NAMES, Budget, Plan
from slackswap.solvers.running import run
from slackswap.torchstep.compileapi import (
    aot_autograd,
    require_supported_torch,
    reset_dynamo,
    without_compile_caches,
)
from slackswap.torchstep.loss import default_loss

#: Largest |difference| of loss and gradients accepted under inductor, relative to the largest
#: |value| of the reference (at least 1): a recomputed operator is fused into other kernels
#: of the backward, which may round differently (aot_eager runs the same ATen kernels:
#: bitwise).
INDUCTOR_RTOL = 1e-4


def plan_actions(plan: Plan) -> dict[str, str]:
    """A plan as the partitioner takes it: saved-tensor key -> keep / swap / recomp."""
    names = plan.instance.tensor_name
    return {names[i]: ACTION_NAMES[int(a)] for i, a in enumerate(plan.actions)}


def compile_planned(
    model: torch.nn.Module,
    actions: Mapping[str, str],
    backend: str,
    token: str | None = None,
    offload_stream: bool = False,
) -> Any:
    """``torch.compile(model)`` whose partitioner applies ``actions`` (swaps on a CUDA side
    stream with ``offload_stream``)."""
    require_supported_torch()
    if backend == "inductor":
        return compile_with(model, backend, PlanPartitioner(actions, token, offload_stream))
    fn = functools.partial(
        partition_with_plan, actions=dict(actions), token=token, offload_stream=offload_stream
    )
    return compile_with(model, backend, fn)


def compile_default(model: torch.nn.Module, backend: str) -> Any:
    """``torch.compile(model)`` with torch's own partitioner (the reference)."""
    if backend == "aot_eager":
        return torch.compile(model, backend=aot_autograd(fw_compiler=boxed, bw_compiler=boxed))
    return torch.compile(model, backend=backend)


def compile(  # noqa: A001 - the name users look for
    model: torch.nn.Module,
    inputs: torch.Tensor | Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    budget: Budget | float | str = "50%",
    solver: str = "slackswap",
    backend: str = "inductor",
    *,
    gpu: str = "a100",
    link: str | None = None,
    time_limit: float = 10.0,
    seed: int = 0,
) -> Any:
    """``torch.compile(model, backend=backend)`` with ``solver``'s plan at ``budget`` applied
    by the partitioner; the plan and its instance are on ``.slackswap_plan``.

    ``inputs`` are example inputs of the shapes the model will be called with (the plan is
    for that graph); ``loss_fn`` is not compiled (torch.compile(model) leaves it outside).
    """
    del loss_fn  # outside the compiled graph: it does not change the plan
    inst = profile_compiled(model, inputs, backend=backend, gpu=gpu, link=link)
    b = Budget.parse(budget)
    rec = run(inst, b, solver, time_limit=time_limit, seed=seed)
    if rec.plan is None:
        raise UserError(f"solver {solver}: no plan at budget {b} ({rec.error or rec.status})")
    compiled = compile_planned(model, plan_actions(rec.plan), backend)
    compiled.slackswap_plan = rec.plan
    return compiled


@dataclass
class StepResult:
    loss: torch.Tensor
    grads: list[torch.Tensor | None]
    peak_bytes: int | None  # the allocator's peak during the step (CUDA only)


def _step(
    compiled: Any,
    model: torch.nn.Module,
    inputs: tuple[Any, ...],
    loss_fn: Callable[[Any], torch.Tensor],
    seed: int,
) -> StepResult:
    params = list(model.parameters())
    buffers = [b.detach().clone() for b in model.buffers()]
    cuda = any(p.is_cuda for p in params)
    for p in params:
        p.grad = None
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    try:
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.manual_seed(seed)
            loss = loss_fn(compiled(*inputs))
            loss.backward()
    except Exception as exc:  # noqa: BLE001 - torch.compile's errors: one line
        found = user_error_in(exc)
        if found is not None:
            raise found from None
        raise CompileError(f"the compiled step failed: {one_line(exc)}") from exc
    peak = int(torch.cuda.max_memory_allocated()) if cuda else None
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    with torch.no_grad():
        for b, saved in zip(model.buffers(), buffers, strict=True):
            b.copy_(saved)
    for p in params:
        p.grad = None
    return StepResult(loss.detach().clone(), grads, peak)


def _max_abs_diff(a: StepResult, b: StepResult) -> tuple[float, float, float]:
    loss = float((a.loss.double() - b.loss.double()).abs().max())
    grad = 0.0
    scale = max(1.0, float(b.loss.double().abs().max()))
    for x, y in zip(a.grads, b.grads, strict=True):
        if x is None or y is None:
            if (x is None) != (y is None):
                grad = float("inf")
            continue
        grad = max(grad, float((x.double() - y.double()).abs().max()))
        scale = max(scale, float(y.double().abs().max()))
    return loss, grad, scale


def _bitwise(a: StepResult, b: StepResult) -> bool:
    if not torch.equal(a.loss, b.loss):
        return False
    return all(
        (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
        for x, y in zip(a.grads, b.grads, strict=True)
    )


def check_compiled(
    model: torch.nn.Module,
    inputs: tuple[Any, ...],
    loss_fn: Callable[[Any], torch.Tensor] | None,
    plan: Plan,
    backend: str,
    *,
    seed: int = 0,
) -> dict[str, Any]:
    """One compiled step under ``plan`` beside one with torch's default partitioner: what the
    partitioned graphs do (saved bytes, offloaded bytes, recomputed forward operators) beside
    what the plan asked, and the loss and gradient differences."""
    require_supported_torch()
    loss_of = loss_fn or default_loss
    token = uuid.uuid4().hex
    actions = plan_actions(plan)
    with without_compile_caches():
        reset_dynamo()
        reference = _step(compile_default(model, backend), model, inputs, loss_of, seed)
        reset_dynamo()
        planned = _step(
            compile_planned(model, actions, backend, token), model, inputs, loss_of, seed
        )
        reset_dynamo()
    reports = REPORTS.pop(token, [])
    if len(reports) != 1:
        raise CompileError(
            f"the planned compile partitioned {len(reports)} graphs; slackswap plans exactly one"
        )
    want, got = reports[0]["planned"], reports[0]["measured"]
    loss_diff, grad_diff, scale = _max_abs_diff(planned, reference)
    bitwise = _bitwise(planned, reference)
    tolerance = 0.0 if backend == "aot_eager" else INDUCTOR_RTOL * scale
    planned_bytes = int(want["saved_bytes"])
    measured_bytes = int(got["saved_bytes"])
    rel = abs(measured_bytes - planned_bytes) / max(1, planned_bytes)
    extra = sorted(set(got["recomputed_ops"]) - set(want["recomputed_ops"]))
    missing = sorted(set(want["recomputed_ops"]) - set(got["recomputed_ops"]))
    ok = (
        len(want["recomputed_ops"]) == len(got["recomputed_ops"])
        and not extra
        and not missing
        and (planned_bytes == measured_bytes or rel <= 0.01)
        and (bitwise if backend == "aot_eager" else max(loss_diff, grad_diff) <= tolerance)
    )
    return {
        "compiled": True,
        "backend": backend,
        "graph_breaks": 0,
        "recomputed_ops_planned": len(want["recomputed_ops"]),
        "recomputed_ops_measured": len(got["recomputed_ops"]),
        "recomputed_ops_unplanned": extra[:5],
        "recomputed_ops_not_run": missing[:5],
        "saved_bytes_planned": planned_bytes,
        "saved_bytes_measured": measured_bytes,
        "saved_bytes_rel_diff": rel,
        "saved_outside_plan": got["unplanned_saved"][:5],
        "rng_state_bytes": int(got["rng_state_bytes"]),
        "offloaded_bytes_planned": int(want["offloaded_bytes"]),
        "offloaded_bytes": int(got["offloaded_bytes"]),
        "loss_abs_diff": loss_diff,
        "grad_max_abs_diff": grad_diff,
        "bitwise_identical": bitwise,
        "tolerance": tolerance,
        "measured_peak_bytes": planned.peak_bytes,
        "reference_peak_bytes": reference.peak_bytes,
        "checks_pass": ok,
    }


def instance_for(
    model: torch.nn.Module, inputs: tuple[Any, ...], backend: str, gpu: str, link: str | None
) -> Instance:
    """The compiled step's instance (see `profile_compiled`)."""
    return profile_compiled(model, inputs, backend=backend, gpu=gpu, link=link)
