"""Run one sweep job in a worker and turn whatever happens into one results row.

`run` already turns a solver's exception into an ``error`` record and a solver that overruns
its time limit by more than 10% into a ``timeout`` record. What it cannot do is stop a solver
that never comes back; the *wall-clock guard* here does, so the sweep goes on:

- in a process's main thread (the sequential runner, joblib's loky workers) it is a
  ``SIGALRM`` timer that raises `JobTimeout` inside the job. Python checks signals between
  bytecodes, so a solver stuck in one long C call (a MILP library, a numba kernel) is stopped
  when that call returns;
- elsewhere (Dask's worker threads) the job runs in a helper thread that the guard stops
  waiting for: the row says ``timeout`` and the sweep goes on, but the abandoned thread keeps
  its core until it finishes (Python cannot kill a thread).

Either way the row is ``timeout`` with the reason in ``error``. Any other failure around the
solve (an instance that fails to load, a scoring error) is an ``error`` row.

Warm-up: the first call of a compiled (numba) function in a fresh process compiles it, or loads
it from numba's cache (a second or two), which would land in the first job's planning time. So
before its first timed job with a solver, each worker warms that solver (`warm_up`: untimed, on a
one-layer instance; searches and exact solvers with a fraction of a second each). The runner
warms its own process before handing out jobs, so workers find the cache filled.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from slackswap import __version__
from slackswap.analysis.guard import JobTimeout, alarm, can_alarm
from slackswap.analysis.jobs import InstanceRef, Job
from slackswap.analysis.warmup import warm_up
from slackswap.instance import Instance
from slackswap.interrupts import tie_to_parent
from slackswap.plan import Budget
from slackswap.solvers import RunRecord, run

# Worker-local cache: a loky or Dask worker rebuilds each instance once, not once per job.
_INSTANCES: dict[tuple[str, str], Instance] = {}


def worker_instance(ref: InstanceRef, obj: Instance | None = None) -> Instance:
    """The instance of ``ref``: the object shipped with the job, else rebuilt once per worker."""
    if obj is not None:
        return obj
    if ref.obj is not None:
        return ref.obj
    key = (ref.spec_json, ref.content_hash)
    inst = _INSTANCES.get(key)
    if inst is None:
        inst = ref.load()
        if len(_INSTANCES) > 64:
            _INSTANCES.clear()
        _INSTANCES[key] = inst
    return inst


def execute_in_worker(job: Job, instance: Instance | None, parent_pid: int) -> dict[str, Any]:
    """`execute` in a worker process of ``parent_pid`` that must not outlive it (see
    `die_with_parent`)."""
    die_with_parent(parent_pid)
    return execute(job, instance)


def die_with_parent(parent_pid: int) -> None:
    """Have this worker process end when the process that started it dies (see
    `slackswap.interrupts.tie_to_parent`; the loky initializer has usually done it already)."""
    tie_to_parent(parent_pid)


def execute(job: Job, instance: Instance | None = None) -> dict[str, Any]:
    """Run ``job`` and return its results row (never raises for the job's own failure)."""
    t0 = time.perf_counter()
    if job.job_timeout and not can_alarm():
        row = _in_thread(job, instance, job.job_timeout, t0)
    else:
        try:
            if job.job_timeout:
                with alarm(job.job_timeout):
                    row = _run_job(job, instance)
            else:
                row = _run_job(job, instance)
        except JobTimeout as exc:
            row = failure_row(job, "timeout", str(exc), time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a row
            row = failure_row(job, "error", _describe(exc), time.perf_counter() - t0)
    row.update(job.columns())
    row["wall_s"] = time.perf_counter() - t0
    return row


def _run_job(job: Job, instance: Instance | None) -> dict[str, Any]:
    inst = worker_instance(job.instance, instance)
    solver: Any = job.solver.obj if job.solver.obj is not None else job.solver.name
    options = dict(job.solver.options) or None
    warm_up([solver])
    rec = run(
        inst,
        job.budget,
        solver,
        time_limit=job.time_limit,
        seed=job.seed,
        options=options,
        find_min_budget=job.find_min_budget,
    )
    row = rec.to_row()
    if job.solver.obj is None:
        row["solver"] = job.solver.label  # the label the job key uses (options spelled out)
    return row


def _in_thread(job: Job, instance: Instance | None, seconds: float, t0: float) -> dict[str, Any]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["row"] = _run_job(job, instance)
        except BaseException as exc:  # noqa: BLE001 - reported as the job's row
            box["exc"] = exc

    th = threading.Thread(target=target, name=f"slackswap-job-{job.job_id}", daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        msg = f"wall-clock guard: the job ran past {seconds:g} s (its thread was abandoned)"
        return failure_row(job, "timeout", msg, time.perf_counter() - t0)
    if "exc" in box:
        return failure_row(job, "error", _describe(box["exc"]), time.perf_counter() - t0)
    return dict(box["row"])


def _describe(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def failure_row(job: Job, status: str, message: str, elapsed_s: float) -> dict[str, Any]:
    """A row for a job that produced no `RunRecord` (guard, load failure, lost worker)."""

    row: dict[str, Any] = dict.fromkeys(RunRecord.ROW_KEYS)
    row.update(
        instance=job.instance.label,
        instance_hash=job.instance.content_hash,
        solver=job.solver.label,
        seed=job.seed,
        status=status,
        stopped_by="wall-clock guard" if status == "timeout" else "error",
        error=message,
        reason=message.splitlines()[0] if message else status,
        plan_s=elapsed_s,
        time_limit_s=job.time_limit,
        solver_config="{}",
    )
    try:
        inst = worker_instance(job.instance)
        nbytes = Budget.parse(job.budget).bytes_for(inst)
        row.update(
            budget_bytes=nbytes,
            budget_fraction=nbytes / inst.peak_bytes,
            ideal_s=inst.ideal_step_s,
            version=__version__,
        )
    except Exception:  # noqa: BLE001 - the row stands without the budget columns
        pass
    return row
