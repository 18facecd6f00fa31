"""The reports' solves as batch jobs: through the runner `compare` uses (joblib or Dask, with
its warm-up, wall-clock guard and progress on stderr), not a loop of their own."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from slackswap.analysis.jobs import (
    Job,
    SolverSpec,
    budget_key,
    default_job_timeout,
    ref_from_arg,
)
from slackswap.analysis.progress import add_progress_arguments
from slackswap.analysis.runner import run_sweep
from slackswap.console import add_execution_arguments
from slackswap.plan import Budget

#: One solve: (catalog model, budget as a fraction of P, registered solver, time limit seconds).
Case = tuple[str, float, str, float | None]


def add_batch_arguments(p: argparse.ArgumentParser) -> None:
    """``--jobs`` (default 1: the solves one after another, as the paper's timings assume),
    ``--backend``, ``--scheduler``, ``--progress`` / ``--no-progress``."""
    add_execution_arguments(p)
    add_progress_arguments(p)


def run_cases(
    cases: Sequence[Case], *, seed: int = 0, args: argparse.Namespace | None = None, desc: str
) -> dict[tuple[str, float, str], dict[str, Any]]:
    """Each case's results row (`RunRecord.to_row` plus the job's columns), by (model, budget,
    solver). The minimum-budget bisection is off, as in the reports' own solves."""

    refs: dict[str, Any] = {}
    jobs: list[Job] = []
    keys: dict[str, tuple[str, float, str]] = {}
    for model, frac, solver, limit in cases:
        if model not in refs:
            refs[model] = ref_from_arg(model)
        job = Job(
            index=len(jobs),
            instance=refs[model],
            budget=budget_key(Budget.fraction(frac)),
            solver=SolverSpec.of(solver),
            seed=seed,
            time_limit=limit,
            job_timeout=default_job_timeout(limit),
            find_min_budget=False,
        )
        jobs.append(job)
        keys[job.job_id] = (model, frac, solver)
    rows: dict[tuple[str, float, str], dict[str, Any]] = {}

    def keep(row: dict[str, Any]) -> None:
        rows[keys[row["job_id"]]] = row

    run_sweep(
        jobs,
        jobs=getattr(args, "jobs", 1),
        backend=getattr(args, "backend", "joblib"),
        scheduler=getattr(args, "scheduler", None),
        progress=getattr(args, "progress", False),
        on_row=keep,
        desc=desc,
    )
    return rows
