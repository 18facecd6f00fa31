"""Measured peak against budget and simulated peak, per plan, on the tests' small models (CPU).

For each case (factory of ``tests/support/profiling_factories.py``, solver, budget): profile the step,
solve, run it under the plan (`slackswap.runtime.measure.run_step`, the replayed copy schedule on
CPU) and print a Markdown row: budget, simulated peak, the tracker's measured peak, how far the
measured peak is above the budget, and the operator where measured and simulated differ most.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_runtime_budget.py
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slackswap.plan import Budget  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import BudgetWarning  # noqa: E402
from slackswap.runtime.measure import run_step, simulated_op_peaks, where_they_differ  # noqa: E402
from slackswap.solvers import run  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402

CASES = (
    ("gpt2", "slackswap", "35%"),
    ("gpt2", "slackswap", "40%"),
    ("gpt2", "ga", "54%"),
    ("gpt2_untied", "slackswap", "40%"),
    ("gpt_dropout", "slackswap", "50%"),
    ("bert", "slackswap", "50%"),
    ("torch_encoder", "slackswap", "50%"),
    ("plain_cnn", "slackswap", "50%"),
    ("checkpoint_reentrant", "slackswap", "90%"),
    ("checkpoint_reentrant", "slackswap", "93%"),
    ("lstm_deep", "slackswap", "39.11%"),
    ("lstm_deep", "swap-first", "39.11%"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=5.0, help="solver seconds")
    args = ap.parse_args()
    print("| model | solver | budget | budget B | simulated B | measured B | over B | "
          "largest difference |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    profiles: dict[str, tuple] = {}
    for name, solver, frac in CASES:
        if name not in profiles:
            made = getattr(pf, name)()
            model, inputs = made[0], made[1] if isinstance(made[1], tuple) else (made[1],)
            loss_fn = made[2] if len(made) == 3 else None
            profiles[name] = (model, inputs, loss_fn, profile_step(model, inputs, loss_fn))
        model, inputs, loss_fn, inst = profiles[name]
        b = Budget.parse(frac)
        rec = run(inst, b, solver, time_limit=args.time_limit, seed=0)
        if rec.plan is None:
            fits = rec.min_budget_bytes
            print(f"| {name} | {solver} | {frac} | {b.bytes_for(inst)} | no plan "
                  f"(smallest that fits: {fits}) | | | |")  # fmt: skip
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BudgetWarning)
            r = run_step(model, inputs, loss_fn, rec.plan, b)
        st = r.stats
        assert st is not None and r.op_peak_bytes is not None
        diff = where_they_differ(r.op_peak_bytes, simulated_op_peaks(inst, rec.plan, b), inst)
        print(f"| {name} | {solver} | {frac} | {st.budget_bytes} | {st.simulated_peak_bytes} | "
              f"{r.peak_bytes} | {max(0, r.peak_bytes - st.budget_bytes)} | {diff} |")  # fmt: skip


if __name__ == "__main__":
    main()
