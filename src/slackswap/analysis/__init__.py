"""Batch runs (joblib, Dask), results files, gap analysis and figures over solver sweeps.

Typical use::

    from slackswap.analysis import Sweep, run_sweep, gaps, load_sweep
    df = run_sweep(load_sweep("sweep.toml"), results="results.csv", jobs=2)
    print(gaps(df))

Names load lazily, so plotting (matplotlib) and Dask import only when used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Job": "slackswap.analysis.jobs:Job",
    "Sweep": "slackswap.analysis.jobs:Sweep",
    "SolverSpec": "slackswap.analysis.jobs:SolverSpec",
    "InstanceRef": "slackswap.analysis.jobs:InstanceRef",
    "parse_budgets": "slackswap.analysis.jobs:parse_budgets",
    "ref_from_arg": "slackswap.analysis.jobs:ref_from_arg",
    "ref_from_instance": "slackswap.analysis.jobs:ref_from_instance",
    "ref_from_grid_point": "slackswap.analysis.jobs:ref_from_grid_point",
    "load_sweep": "slackswap.analysis.sweepfile:load_sweep",
    "run_sweep": "slackswap.analysis.runner:run_sweep",
    "read_results": "slackswap.analysis.results:read_results",
    "ResultsWriter": "slackswap.analysis.results:ResultsWriter",
    "gaps": "slackswap.analysis.gapanalysis:gaps",
    "format_gaps": "slackswap.analysis.gapanalysis:format_gaps",
    "write_report": "slackswap.analysis.report:write_report",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'slackswap.analysis' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
