"""The compiled rows of gpu_check.sh: the example GPT compiled with inductor on CUDA, torch's
default partitioner beside SlackSwap's plan at 50% of P (synchronous offload, then offload on a
side stream): peak ``max_memory_allocated`` over a step, median step time, and the checks.

    PYTHONPATH=src python benchmarks/bench_compile_gpu.py            # on a CUDA machine
    PYTHONPATH=src python benchmarks/bench_compile_gpu.py --dry-run  # CPU, aot_eager, tiny GPT
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.models import gpt  # noqa: E402
from slackswap.compile.step import (  # noqa: E402
    check_compiled,
    compile_default,
    compile_planned,
    instance_for,
    plan_actions,
)
from slackswap.solvers import run  # noqa: E402
from slackswap.torchstep.compileapi import reset_dynamo  # noqa: E402


def timed(compiled: Any, model: Any, inputs: Any, loss_fn: Any, repeat: int) -> tuple[float, str]:
    """Median step seconds, and the peak ``max_memory_allocated`` in MiB ("-" off CUDA)."""
    cuda = torch.cuda.is_available() and next(model.parameters()).is_cuda
    times, peak = [], 0
    for i in range(repeat + 1):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        loss_fn(compiled(*inputs)).backward()
        if cuda:
            torch.cuda.synchronize()
            peak = max(peak, torch.cuda.max_memory_allocated())
        if i:
            times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    return statistics.median(times), f"{peak / 2**20:.1f}" if cuda else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    if args.dry_run:
        model, inputs, loss_fn = gpt(layers=1, hidden=64, heads=4, mlp=128, vocab=128, seq=16)
        backend, device, streams = "aot_eager", "cpu", (False,)
    else:
        model, inputs, loss_fn = gpt(layers=8, hidden=1024, heads=16, mlp=4096, vocab=8192,
                                     seq=1024, batch=8)  # fmt: skip
        backend, device, streams = "inductor", "cuda", (False, True)
        print("GPU:", torch.cuda.get_device_name(), "| torch", torch.__version__)
    model = model.to(device)
    inputs = tuple(t.to(device) for t in inputs)
    # the loss_fn's targets live on the factory's device: move them with the model
    ids = inputs[0]
    targets = torch.roll(ids, -1, dims=1)

    def loss_of(logits: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(
            logits.view(-1, logits.shape[-1]), targets.view(-1)
        )

    del loss_fn
    inst = instance_for(model, inputs, backend, "h100", None)
    budget = 0.8 if args.dry_run else 0.5  # the one-layer GPT has little to plan at 50%
    rec = run(inst, budget, "slackswap", time_limit=10, seed=0)
    assert rec.plan is not None, rec.error or rec.reason
    checked = check_compiled(model, inputs, loss_of, rec.plan, backend)
    assert checked["checks_pass"], checked
    print("checks:", {k: checked[k] for k in (
        "recomputed_ops_planned", "recomputed_ops_measured", "saved_bytes_planned",
        "saved_bytes_measured", "offloaded_bytes_planned", "offloaded_bytes", "loss_abs_diff",
        "grad_max_abs_diff", "tolerance", "checks_pass")})  # fmt: skip
    print("| partitioner | peak max_memory_allocated MiB | step ms |")
    print("|---|---|---|")
    reset_dynamo()
    step, peak = timed(compile_default(model, backend), model, inputs, loss_of, args.repeat)
    print(f"| torch default | {peak} | {step * 1e3:.2f} |")
    for stream in streams:
        reset_dynamo()
        compiled = compile_planned(model, plan_actions(rec.plan), backend, offload_stream=stream)
        step, peak = timed(compiled, model, inputs, loss_of, args.repeat)
        kind = "side-stream offload" if stream else "synchronous offload"
        print(f"| SlackSwap {budget:.0%} ({kind}) | {peak} | {step * 1e3:.2f} |")
    reset_dynamo()


if __name__ == "__main__":
    main()
