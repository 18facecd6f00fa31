"""The batch runner: a sweep's jobs through joblib (one machine) or Dask (a cluster).

Rows come back as jobs finish (in any order); each is appended to the results file at once
(`ResultsWriter`), shown on stderr (`JobProgress`: a bar on a terminal, a line per job when
piped) and handed to ``on_row``. ``resume=True`` skips jobs whose ``job_id`` is already in the
results file. Before the first job the compiled kernels the jobs need are compiled or loaded
here, untimed (`warm_up`), so no job's planning time pays for them.

Backends:
- ``joblib`` with ``jobs=1`` runs in this process (no pickling, the wall-clock guard is a
  signal timer); with ``jobs>1`` it uses loky worker processes, results unordered.
- ``dask`` submits to a ``dask.distributed`` scheduler (``scheduler`` address, or a `Client`),
  or starts a local cluster of ``jobs`` single-threaded worker processes when given neither.
  Instances are scattered to the workers once, so instance files need not be visible there.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from slackswap.analysis.execute import execute, execute_in_worker, failure_row
from slackswap.analysis.jobs import Job, Sweep
from slackswap.analysis.progress import JobProgress, failed
from slackswap.analysis.results import ResultsWriter, rows_to_frame
from slackswap.analysis.warmup import warm_up
from slackswap.errors import UserError
from slackswap.interrupts import (
    spawning,
    tie_to_parent,
    trackers_quiet_about_leaks,
    was_interrupted,
)

BACKENDS = ("joblib", "dask")


def run_sweep(
    sweep: Sweep | list[Job],
    *,
    results: str | os.PathLike[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    jobs: int = 1,
    backend: str = "joblib",
    scheduler: str | None = None,
    client: Any = None,
    progress: bool | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    desc: str = "sweep",
) -> pd.DataFrame:
    """Run every job (skipping those already in ``results`` when ``resume``); return all rows.

    The frame holds one row per job of the sweep, in the sweep's order, including rows found in
    the results file. An existing results file is continued (``resume``), replaced
    (``overwrite``) or refused (`ResultsWriter`). ``progress``: None shows a bar on a terminal
    and a line per finished job otherwise, True always the bar, False nothing (`JobProgress`,
    labelled ``desc``).
    """
    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    if isinstance(sweep, Sweep):
        sweep.check()
        all_jobs = sweep.jobs()
    else:
        all_jobs = list(sweep)
    if resume and results is None:
        raise UserError("--resume needs a results file (-o FILE)")

    writer = (
        ResultsWriter(results, resume=resume, overwrite=overwrite) if results is not None else None
    )
    found: dict[str, dict[str, Any]] = {}
    if writer is not None and resume:
        wanted = {j.job_id for j in all_jobs}
        found = {r["job_id"]: r for r in writer.rows if r.get("job_id") in wanted}
    pending = [j for j in all_jobs if j.job_id not in found]
    if on_row is not None:
        for j in all_jobs:
            if j.job_id in found:
                on_row(found[j.job_id])

    rows = dict(found)
    if pending:  # compile (or load) the kernels here, untimed, once for every worker
        warm_up(_solvers(pending), guard_s=_warm_up_guard(pending))
    bar = JobProgress(len(all_jobs), desc=desc, mode=progress, done=len(found))
    bar.failures = sum(1 for r in found.values() if failed(r))
    dispatched: Iterator[dict[str, Any]] = iter(())
    try:
        if pending:
            bar.start(f"{len(pending)} jobs" + (f" ({len(found)} already done)" if found else ""))
        dispatched = _dispatch(pending, jobs, backend, scheduler, client)
        for row in dispatched:
            rows[row["job_id"]] = row
            if writer is not None:
                writer.append(row)
            if on_row is not None:
                on_row(row)
            bar.finished(row)
    finally:
        # Stop the workers now (a Ctrl-C, a full disk), not when the generator is collected.
        close = getattr(dispatched, "close", None)
        try:
            if close is not None:
                close()
        finally:
            bar.close()
            if writer is not None:
                writer.close()
    ordered = [rows[j.job_id] for j in all_jobs if j.job_id in rows]
    return rows_to_frame(ordered)


def _solvers(pending: list[Job]) -> list[Any]:
    """The distinct solvers of these jobs: registry names, or the objects of unregistered ones."""
    out: dict[str, Any] = {}
    for j in pending:
        out.setdefault(j.solver.label, j.solver.name if j.solver.obj is None else j.solver.obj)
    return list(out.values())


def _warm_up_guard(pending: list[Job]) -> float | None:
    """The wall-clock guard for the runner's warm-up: the longest of the jobs' guards (None
    when a job has none)."""
    guards = [j.job_timeout for j in pending]
    return None if any(g is None for g in guards) else max(g for g in guards if g is not None)


def _dispatch(
    pending: list[Job], jobs: int, backend: str, scheduler: str | None, client: Any
) -> Iterator[dict[str, Any]]:
    if not pending:
        return iter(())
    if backend == "dask":
        return _dask(pending, jobs, scheduler, client)
    if jobs == 1:
        return (execute(j) for j in pending)
    return _joblib(pending, jobs)


def _payload(job: Job) -> Any:
    # Instances with a spec are rebuilt (once) by each worker; others travel with the job.
    return job.instance.obj if not job.instance.spec else None


def _joblib(pending: list[Job], jobs: int) -> Iterator[dict[str, Any]]:
    from joblib import Parallel, delayed
    from joblib._parallel_backends import LokyBackend
    from joblib.externals.loky.backend import resource_tracker as loky_resource_tracker

    parent = os.getpid()
    # Each worker ties itself to this process as it starts (not at its first job): a sweep
    # killed with kill -9 while workers start or idle leaves none behind.
    backend = LokyBackend(initializer=tie_to_parent, initargs=(parent,))
    par = Parallel(n_jobs=min(jobs, len(pending)), backend=backend, return_as="generator_unordered")
    # Started before `spawning`, as Python's own is there: loky's resource tracker (joblib
    # 1.5 and older) unblocks SIGINT after starting its process, and the workers started after
    # it would begin life with SIGINT unblocked (a Ctrl-C while they import: their tracebacks).
    with trackers_quiet_about_leaks():
        loky_resource_tracker.ensure_running()
    rows: Iterator[dict[str, Any]] | None = None
    try:
        # Inside the try: a Ctrl-C held by `spawning` is raised as the block ends, after
        # joblib has dispatched its first tasks, and `rows` must still be closed quietly
        # (left to the collector, it warns of them after the command's one line).
        with spawning():
            rows = par(delayed(execute_in_worker)(j, _payload(j), parent) for j in pending)
            # Start every worker now, inside `spawning` (loky would start some at a later
            # submit).
            workers = getattr(par._backend, "_workers", None)
            start = getattr(workers, "_ensure_executor_running", None)
            if start is not None:
                start()
        # Not `yield from rows`: closing this generator would close `rows` itself, with
        # joblib's warning, before `_close_quietly` could.
        for row in rows:  # noqa: UP028
            yield row
    finally:
        if rows is not None:
            _close_quietly(rows)


def _close_quietly(rows: Iterator[dict[str, Any]]) -> None:
    """Close joblib's row generator without its warning about tasks cancelled or not used.

    A sweep that stops early (a Ctrl-C, a full disk, an ``on_row`` that raises) says so in its
    own words; joblib's advice to adjust the task iterator is no news to the user, and after a
    Ctrl-C it would follow the command's one line.
    """
    close = getattr(rows, "close", None)
    if close is None:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r".*tasks .*(cancelled|not used)", category=UserWarning
        )
        close()


def _dask(
    pending: list[Job], jobs: int, scheduler: str | None, client: Any
) -> Iterator[dict[str, Any]]:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ModuleNotFoundError:
        raise UserError(
            "the dask backend needs dask.distributed: pip install 'slackswap[dask]'"
        ) from None
    own: list[Any] = []  # what this sweep started, closed at its end (the client first)
    futures: dict[Any, Job] = {}
    try:
        # Inside the try: a Ctrl-C held by `spawning` is raised as the block ends, and the
        # cluster started meanwhile must still be closed.
        if client is None:
            if scheduler:
                try:
                    client = Client(scheduler, timeout="20s")
                except (OSError, TimeoutError) as exc:
                    raise UserError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
                own.append(client)
            else:
                with spawning():
                    cluster = LocalCluster(
                        n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None
                    )
                    own.append(cluster)
                    client = Client(cluster)
                    own.insert(0, client)
                # Local workers are this process's children: tie them to it (kill -9, Ctrl-C).
                client.run(tie_to_parent)
        scattered: dict[str, Any] = {}
        for j in pending:
            h = j.instance.content_hash
            if h not in scattered:
                scattered[h] = client.scatter(j.instance.load(), broadcast=True, hash=False)
        for j in pending:
            fut = client.submit(execute, j, scattered[j.instance.content_hash], pure=False)
            futures[fut] = j
        for fut in as_completed(list(futures)):
            job = futures[fut]
            try:
                row = fut.result()
            except Exception as exc:  # noqa: BLE001 - a lost worker is this job's error row
                row = failure_row(job, "error", f"dask: {type(exc).__name__}: {exc}", 0.0)
                row.update(job.columns())
            yield row
    finally:
        if own and client is not None and was_interrupted():
            # Our own cluster stops after a Ctrl-C: its workers log each task cancelled (a
            # WARNING per task) and, once the watchdog has ended this process with the
            # scheduler in it, their failed heartbeats (an ERROR with a traceback), after
            # which the command's one line would not be the last. All of it follows from the
            # Ctrl-C: nothing is news to the user.
            _quiet_dask_logs(client)
        for fut in futures:
            if not fut.done():
                fut.cancel()
        for obj in own:
            obj.close()


def _quiet_dask_logs(client: Any) -> None:
    """Nothing more from ``distributed``'s loggers, here and in the cluster's workers."""
    _silence("distributed")
    try:
        client.run(_silence, "distributed", wait=True)
    except Exception:  # noqa: BLE001 - a worker already gone: nothing of it to quiet
        pass


def _silence(name: str) -> None:
    """Logger ``name`` and its handlers write nothing more (its children's records pass
    through its handlers; a child with a level of its own still makes them)."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.CRITICAL + 1)
    for handler in logger.handlers:
        handler.setLevel(logging.CRITICAL + 1)
