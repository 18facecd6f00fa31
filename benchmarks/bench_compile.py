"""Plans inside torch.compile: torch's own partitioner, SlackSwap's plan and torch-budget's.

For the tests' GPT, PyTorch's nn.TransformerEncoder and the CNN with batch-norm, at 70%, 50% and
30% of P (the compiled instance's keep-all peak):

- ``unplanned``: torch's default min-cut partitioner (activation_memory_budget 1.0): the
  bytes its forward hands the backward and the forward operators its backward re-runs, from
  the partitioned graphs (no plan: not scored by the simulator);
- ``slackswap`` and ``torch-budget``: the plan at the budget; saved bytes and recomputed
  operators as applied by the partitioner (measured from its graphs under aot_eager; the
  check also asserts they equal the plan's), the simulated step on A100/PCIe4 and
  H100/PCIe5 (roofline times of each GPU), and with ``--cpu-step`` the median CPU step time
  compiled with inductor under the same solver's plan at the same budget made on inductor's
  own joint graph (this machine; loaded by other jobs: see ``uptime``).

    PYTHONPATH=src python benchmarks/bench_compile.py [--cpu-step] [--models gpt,encoder,cnn]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slackswap.compile.capture import capture  # noqa: E402
from slackswap.compile.profile import build_compiled_instance  # noqa: E402
from slackswap.compile.step import check_compiled, compile_planned, plan_actions  # noqa: E402
from slackswap.plan import Budget, Plan  # noqa: E402
from slackswap.profiling.blocks import find_blocks  # noqa: E402
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import run  # noqa: E402
from slackswap.torchstep.compileapi import reset_dynamo  # noqa: E402
from slackswap.torchstep.loss import default_loss  # noqa: E402
from tests.support.profiling_factories import TINY_GPT, gpt, tiny_cnn, torch_encoder  # noqa: E402

GPUS = (("a100", "pcie4"), ("h100", "pcie5"))
BUDGETS = (0.7, 0.5, 0.3)


def factories() -> dict[str, Any]:
    def cnn() -> Any:
        model, x = tiny_cnn()
        return model, (x,), None

    return {"gpt": lambda: gpt(**TINY_GPT), "encoder": torch_encoder, "cnn": cnn}


def cpu_step_s(model: Any, inputs: Any, loss_fn: Any, plan: Plan | None, repeat: int) -> float:
    """Median seconds of a forward + backward step compiled with inductor (after warm-up)."""
    reset_dynamo()
    if plan is None:
        compiled = torch.compile(model, backend="inductor")
    else:
        compiled = compile_planned(model, plan_actions(plan), "inductor")
    loss_of = loss_fn or default_loss
    times = []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        loss_of(compiled(*inputs)).backward()
        if i:
            times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    reset_dynamo()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt,encoder,cnn")
    ap.add_argument("--cpu-step", action="store_true", help="time steps under inductor (slow)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    make = factories()
    print(
        "| model | budget | plan | saved KiB | recomputed ops | A100/PCIe4 step ms | "
        "H100/PCIe5 step ms | CPU step ms (inductor) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model, inputs, loss_fn = make[name]()
        inputs = tuple(inputs) if isinstance(inputs, list | tuple) else (inputs,)
        cap = capture(model, inputs, "aot_eager")
        paths = {id(m): p for p, m in model.named_modules()}
        blocks = [paths[id(m)] for m in find_blocks(model)]
        insts = {
            gpu: build_compiled_instance(
                cap, name=f"{name}@{gpu}", gpu=gpu, link=link, block_paths=blocks
            )  # fmt: skip
            for gpu, link in GPUS
        }
        a100 = insts["a100"]
        default = next(
            d for d in a100.meta["compile"]["torch_budget"] if d["activation_memory_budget"] == 1.0
        )
        base_cpu = cpu_step_s(model, inputs, loss_fn, None, args.repeat) if args.cpu_step else None
        # Inductor partitions its own joint graph (it decomposes operators first): its plans are
        # made on its instance, at the same budget with the same solver.
        inductor = (
            build_compiled_instance(
                capture(model, inputs, "inductor"),
                name=f"{name}-inductor",
                gpu="a100",
                block_paths=blocks,
            )  # fmt: skip
            if args.cpu_step
            else None
        )
        print(
            f"| {name} | - | unplanned (torch default) | {default['saved_bytes'] / 1024:.0f} | "
            f"{default['recomputed_ops']} | - | - | "
            f"{'-' if base_cpu is None else f'{base_cpu * 1e3:.1f}'} |"
        )
        for frac in BUDGETS:
            budget = Budget.parse(frac)
            for solver in ("slackswap", "torch-budget"):
                rec = run(a100, budget, solver, time_limit=10, seed=0)
                if rec.plan is None:
                    print(f"| {name} | {frac:.0%} | {solver} | no plan ({rec.status}) | | | | |")
                    continue
                checked = check_compiled(model, inputs, loss_fn, rec.plan, "aot_eager")
                assert checked["checks_pass"], checked
                steps = []
                for gpu, _ in GPUS:
                    inst = insts[gpu]
                    plan = Plan(inst, rec.plan.actions, rec.plan.runtime)
                    sim = simulate(inst, plan, budget)
                    steps.append(f"{sim.step_s * 1e3:.4f}" if sim.feasible else "infeasible")
                cpu = "-"
                if inductor is not None:
                    own = run(inductor, budget, solver, time_limit=10, seed=0)
                    cpu = (
                        "no plan"
                        if own.plan is None
                        else f"{cpu_step_s(model, inputs, loss_fn, own.plan, args.repeat) * 1e3:.1f}"
                    )
                print(
                    f"| {name} | {frac:.0%} | {solver} | "
                    f"{checked['saved_bytes_measured'] / 1024:.0f} | "
                    f"{checked['recomputed_ops_measured']} | {steps[0]} | {steps[1]} | {cpu} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
