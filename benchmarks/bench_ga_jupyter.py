"""Benchmark: the genetic search run from a Jupyter kernel, with island workers and in turn.

A Jupyter kernel runs several threads, so the search may not fork its island workers there: it
starts fresh interpreters (forkserver, else spawn) when the time limit leaves room for their
start-up, and otherwise takes the islands' generations in turn in the kernel's thread. This runs
one ``ga`` search each way in a real kernel (nbclient) and prints plans scored, planning seconds
and the best step. Needs the test extras (nbclient, ipykernel).

    .venv/bin/python benchmarks/bench_ga_jupyter.py [--model gpt2-xl] [--budget 0.2] [--seconds 15]
"""

from __future__ import annotations

import argparse
import ast
import sys

CELL = """
import threading, slackswap
from slackswap.solvers import run
from slackswap.solvers.genetic._islands import worker_start_method
inst = slackswap.load({model!r})
run("ga", inst, {budget}, seed=0, options={{"max_generations": 1}})  # warm the compiled kernels
rows = [threading.active_count(), worker_start_method()]
for processes in (True, False):
    r = run("ga", inst, {budget}, time_limit={seconds}, seed=0, options={{"processes": processes}})
    rows.append((processes, r.status.value, r.evaluations, r.plan_s, r.step_s))
print(repr(rows))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2-xl")
    ap.add_argument("--budget", type=float, default=0.2)
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args(argv)
    import nbclient
    import nbformat

    code = CELL.format(model=args.model, budget=args.budget, seconds=args.seconds)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs if o["output_type"] == "stream")
    threads, method, *runs = ast.literal_eval(text.strip().splitlines()[-1])
    print(f"kernel threads: {threads}; island workers start by: {method}")
    print(f"{'mode':<16} {'status':<9} {'plans':>9} {'plan s':>7} {'plans/s':>8} {'best ms':>9}")
    for processes, status, plans, plan_s, step_s in runs:
        mode = "workers" if processes else "in turn"
        best = f"{1e3 * step_s:.3f}" if step_s is not None else "-"
        print(
            f"{mode:<16} {status:<9} {plans:>9,} {plan_s:>7.2f} {plans / plan_s:>8,.0f} {best:>9}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
