"""Cost of slackswap.runtime's hooks on CPU, and measured against simulated step time on a GPU.

CPU part: the tests' tiny GPT (with dropout); median wall time of the unplanned step, of the same
step under the runtime with every tensor kept (the hooks, the operator numbering and the
matching, no copies) and under all-swap (synchronous copies); the overhead divided by the saved
tensors the step packs. GPU part (only where CUDA is available): the tests' default GPT profiled
with ``--timing measured``, then keep-all, SlackSwap at 50% and 30% of P, offload-sync,
offload-overlap and ``torch.autograd.graph.save_on_cpu``, each run for real (median of
``--repeat`` steps) beside the simulator's prediction for the same plan. Prints Markdown rows.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_runtime.py --repeat 20
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import profiling_factories as pf  # noqa: E402

from slackswap.plan import SWAP, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import apply  # noqa: E402
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import run  # noqa: E402


def _time_step(model: Any, inputs: Any, loss_fn: Any, plan: Plan | None, budget: Any,
               repeat: int, cuda: bool = False, ctx: Any = None) -> float:  # fmt: skip
    """Median seconds of one forward + backward under ``plan`` (or ``ctx``, or nothing)."""
    times = []
    for _ in range(repeat + 1):  # the first one warms up
        for p in model.parameters():
            p.grad = None
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if plan is not None:
            with apply(plan, budget, model=model):
                loss_fn(model(*inputs)).backward()
        elif ctx is not None:
            with ctx():
                loss_fn(model(*inputs)).backward()
        else:
            loss_fn(model(*inputs)).backward()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def cpu_overhead(repeat: int) -> None:
    model, inputs, loss_fn = pf.gpt_dropout()
    inst = profile_step(model, inputs, loss_fn)
    packs = 0

    def count(t: torch.Tensor) -> torch.Tensor:
        nonlocal packs
        packs += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        loss_fn(model(*inputs)).backward()
    plain = _time_step(model, inputs, loss_fn, None, None, repeat)
    keep = _time_step(model, inputs, loss_fn, Plan.keep_all(inst), 1.0, repeat)
    swap = Plan(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8))
    swapped = _time_step(model, inputs, loss_fn, swap, 1.0, repeat)
    print(f"CPU ({platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads), tiny GPT with dropout: {inst.n_ops} operators, "
          f"{packs} saved-tensor packs, {inst.n_tensors} saved tensors, median of {repeat}")  # fmt: skip
    print("| step | median ms | overhead ms | per pack us | per operator us |")
    print("|---|---|---|---|---|")
    for label, t in (("unplanned", plain), ("keep-all under apply", keep), ("all-swap", swapped)):
        over = t - plain
        print(f"| {label} | {t * 1e3:.2f} | {over * 1e3:.2f} | {over / packs * 1e6:.0f} | "
              f"{over / inst.n_ops * 1e6:.0f} |")  # fmt: skip


def gpu_steps(repeat: int) -> None:
    model, inputs, loss_fn = pf.gpt()
    model = model.cuda()
    inputs = tuple(t.cuda() for t in inputs)
    targets = torch.roll(inputs[0], -1, dims=1)

    def loss_cuda(logits: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(
            logits.view(-1, logits.shape[-1]), targets.view(-1)
        )

    gpu = "h100" if "H100" in torch.cuda.get_device_name() else "a100"
    inst = profile_step(model, inputs, loss_cuda, gpu=gpu, timing="measured")
    print(f"GPU {torch.cuda.get_device_name()}: tests' GPT, {inst}")
    print("| plan | budget | simulated ms | measured ms | simulated peak MB | swapped MB |")
    print("|---|---|---|---|---|---|")
    cases: list[tuple[str, Any, Any]] = [("keep-all", Plan.keep_all(inst), 1.0)]
    for b in (0.5, 0.3):
        rec = run(inst, b, "slackswap")
        if rec.plan is not None:
            cases.append((f"slackswap {b:.0%}", rec.plan, b))
    for solver in ("offload-sync", "offload-overlap"):
        rec = run(inst, 1.0, solver, find_min_budget=False)
        if rec.plan is not None:
            cases.append((solver, rec.plan, 1.0))
    for label, plan, b in cases:
        sim = simulate(inst, plan, b)
        t = _time_step(model, inputs, loss_cuda, plan, b, repeat, cuda=True)
        print(f"| {label} | {b:.0%} | {sim.step_s * 1e3:.3f} | {t * 1e3:.3f} | "
              f"{sim.peak_bytes / 1e6:.1f} | {plan.swap_bytes / 1e6:.1f} |")  # fmt: skip
    t = _time_step(model, inputs, loss_cuda, None, None, repeat, cuda=True,
                   ctx=lambda: torch.autograd.graph.save_on_cpu(pin_memory=True))  # fmt: skip
    print(f"| save_on_cpu (every tensor) | - | - | {t * 1e3:.3f} | - | - |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="timed steps per case (median)")
    args = ap.parse_args()
    cpu_overhead(args.repeat)
    if torch.cuda.is_available():
        gpu_steps(args.repeat)
    else:
        print("no CUDA device: GPU part skipped")


if __name__ == "__main__":
    main()
