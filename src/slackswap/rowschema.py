"""The columns of a result row and their types: the one definition every writer and reader uses.

A run's flat row (``RunRecord.to_row``, ``compare --json``) has the `RECORD` columns; a results
file (CSV or Parquet) adds the `JOB` columns that say which job made the row and describe its
instance (``Job.columns`` fills them, ``execute`` adds ``wall_s``). Units: bytes and seconds.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["str", "float", "int"]

#: A run's flat row, in order: (column, kind).
RECORD: tuple[tuple[str, Kind], ...] = (
    ("instance", "str"),
    ("budget_fraction", "float"),
    ("budget_bytes", "int"),
    ("solver", "str"),
    ("seed", "int"),
    ("status", "str"),
    ("stopped_by", "str"),  # what ended the run: time limit, evaluations, bound reached, ...
    ("step_s", "float"),
    ("ideal_s", "float"),
    ("throughput", "float"),
    ("recompute_s", "float"),
    ("fwd_stall_s", "float"),
    ("bwd_stall_s", "float"),
    ("d2h_bytes", "float"),
    ("h2d_bytes", "float"),
    ("peak_bytes", "float"),
    ("swap_bytes", "int"),
    ("recompute_bytes", "int"),
    ("plan_s", "float"),
    ("lower_bound_s", "float"),
    ("gap", "float"),
    ("evaluations", "int"),
    ("error", "str"),
    ("instance_hash", "str"),
    ("solver_config", "str"),  # JSON text
    ("time_limit_s", "float"),
    ("runtime", "str"),
    ("claimed_step_s", "float"),
    ("min_budget_bytes", "int"),
    ("reason", "str"),
    ("version", "str"),
    ("history", "str"),  # JSON [[seconds, plans evaluated, best step s or null], ...] (searches)
)

#: What a results file adds to `RECORD`, in order: (column, kind).
JOB: tuple[tuple[str, Kind], ...] = (
    ("job_id", "str"),
    ("budget", "str"),
    ("solver_name", "str"),
    ("solver_options", "str"),  # JSON text
    ("instance_spec", "str"),  # JSON text
    ("model", "str"),
    ("gpu", "str"),
    ("link", "str"),
    ("link_bw_Bps", "float"),
    ("seq", "int"),
    ("batch", "int"),
    ("layers", "int"),
    ("n_ops", "int"),
    ("n_tensors", "int"),
    ("saved_bytes", "int"),
    ("instance_peak_bytes", "int"),
    ("hideable_fraction", "float"),
    ("seed_independent", "int"),  # 1: the solver ignores the seed, run once for all the seeds
    ("wall_s", "float"),  # set by execute, after the job ran
)

RECORD_KEYS: tuple[str, ...] = tuple(name for name, _ in RECORD)
JOB_KEYS: tuple[str, ...] = tuple(name for name, _ in JOB)
#: A results file's columns, in order (a user's own columns may follow).
COLUMNS: tuple[str, ...] = (*RECORD_KEYS, *JOB_KEYS)
FLOAT_COLUMNS: frozenset[str] = frozenset(n for n, k in (*RECORD, *JOB) if k == "float")
INT_COLUMNS: frozenset[str] = frozenset(n for n, k in (*RECORD, *JOB) if k == "int")

#: The statuses a results file may hold, the one list its readers check a ``status`` cell
#: against: every `slackswap.solvers.Status` (a test keeps the two in step), then any status an
#: older slackswap wrote that files still hold (none yet). Add a new or renamed status here.
STATUSES: frozenset[str] = frozenset({"optimal", "feasible", "infeasible", "timeout", "error"})
#: The columns every results file has and every row fills: which job, which case, what came of it.
REQUIRED_COLUMNS: tuple[str, ...] = ("job_id", "instance", "solver", "status")
