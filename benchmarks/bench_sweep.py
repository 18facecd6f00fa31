"""Time the Fig. 4 sweep through the batch runner (target: under 2 minutes with --jobs 2).

The sweep: BERT-Large, GPT-2 XL, Llama-7B and VGG-16 (A100, PCIe 4.0), budgets 100% to 10% of P
in steps of 10% plus 65% and 15%, every heuristic policy and ablation in the registry, one seed, results
appended to a fresh CSV file. The time includes starting the worker processes (their first job
loads the compiled simulator) and writing every row.

    .venv/bin/python benchmarks/bench_sweep.py --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1, help="runs (fresh results file each)")
    p.add_argument("--backend", choices=("joblib", "dask"), default="joblib")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    from slackswap.analysis.runner import run_sweep
    from slackswap.reproduce.fig4 import fig4_sweep

    sweep = fig4_sweep()
    n_jobs = len(sweep.jobs())
    walls = []
    df = None
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            df = run_sweep(
                sweep,
                results=os.path.join(tmp, "fig4.csv"),
                jobs=args.jobs,
                backend=args.backend,
                progress=False,
            )
            walls.append(time.perf_counter() - t0)
    assert df is not None
    out = {
        "jobs": n_jobs,
        "solvers": [s.name for s in sweep.solvers],
        "workers": args.jobs,
        "backend": args.backend,
        "wall_s": walls,
        "median_wall_s": statistics.median(walls),
        "failed": int(df["status"].isin(["error", "timeout"]).sum()),
        "statuses": df["status"].value_counts().to_dict(),
        "median_job_wall_ms": 1e3 * float(df["wall_s"].median()),
        "max_job_wall_ms": 1e3 * float(df["wall_s"].max()),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(
            f"Fig. 4 sweep: {n_jobs} jobs ({len(sweep.solvers)} policies) with --jobs {args.jobs} "
            f"({args.backend}): median {out['median_wall_s']:.1f} s over {len(walls)} run(s) "
            f"{[round(w, 1) for w in walls]}; per job median {out['median_job_wall_ms']:.1f} ms, "
            f"max {out['max_job_wall_ms']:.0f} ms; statuses {out['statuses']}; "
            f"load average at the end {out['load_average']}"
        )
    return 0 if out["median_wall_s"] < 120 else 1


if __name__ == "__main__":
    sys.exit(main())
