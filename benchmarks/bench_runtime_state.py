"""What correct model state and the common layers cost under slackswap.runtime (CPU).

For the tests' ResNet with batch-norm and the recurrent and checkpointed models: the median wall
time of the unplanned step and of the step under ``apply`` with every rebuildable tensor
recomputed (every rebuild replays its operators in their recorded grad mode, batch-norm
statistics on scratch copies), the rebuilds per step, and the wall time of the ``run --check``
state comparison (``--steps`` AdamW steps unplanned, then planned). Prints Markdown rows.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_runtime_state.py --repeat 20 --steps 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slackswap.plan import KEEP, RECOMP, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime.measure import (  # noqa: E402
    run_step,
    step_difference,
    train_difference,
    train_steps,
)
from tests.support import profiling_factories as pf  # noqa: E402

MODELS = ("resnet", "lstm_deep", "gru", "checkpoint_reentrant")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="steps per median")
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps of the state check")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| model | operators | unplanned ms | all-recompute ms | rebuilds | identical | "
          f"state check ({args.steps} steps x 2) s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in MODELS:
        made = getattr(pf, name)()
        model, inputs = made[0], made[1] if isinstance(made[1], tuple) else (made[1],)
        loss_fn = made[2] if len(made) == 3 else None
        inst = profile_step(model, inputs, loss_fn)
        acts = np.where(np.isfinite(inst.tensor_recompute_s), RECOMP, KEEP).astype(np.int8)
        plan = Plan(inst, acts)
        ref = run_step(model, inputs, loss_fn)
        base = [run_step(model, inputs, loss_fn).step_s for _ in range(args.repeat)]
        planned = [run_step(model, inputs, loss_fn, plan) for _ in range(args.repeat)]
        same = all(step_difference(r, ref) is None for r in planned)
        t0 = time.perf_counter()
        a = train_steps(model, inputs, loss_fn, steps=args.steps)
        b = train_steps(model, inputs, loss_fn, plan, steps=args.steps)
        check_s = time.perf_counter() - t0
        same = same and train_difference(b, a) is None
        rebuilds = planned[0].stats.rebuilds if planned[0].stats else 0
        print(
            f"| {name} | {inst.n_ops} | {statistics.median(base) * 1e3:.2f} | "
            f"{statistics.median(r.step_s for r in planned) * 1e3:.2f} | {rebuilds} | "
            f"{'yes' if same else 'NO'} | {check_s:.2f} |"
        )


if __name__ == "__main__":
    main()
