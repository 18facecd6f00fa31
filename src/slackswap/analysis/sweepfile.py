"""Sweep files: a sweep described in TOML or YAML.

Example (TOML; the YAML form has the same keys)::

    instances = ["gpt2-xl", "my-instance.json"]    # catalog names or instance files
    budgets = "1.0:0.1:-0.1"                        # or [1.0, 0.5, "11GB"], "100%,50%"
    seeds = [0, 1]
    time_limit = 10                                 # seconds per solve
    job_timeout = 60                                # hard wall-clock guard per job (optional)
    min_budget = true                               # bisect the smallest budget when infeasible
    output = "results.csv"
    solvers = ["slackswap", "vdnn", {name = "ga", options = {pop_size = 20}, time_limit = 5}]

    [[grid]]                                        # model / GPU / link grids (any key a list)
    model = "gpt2-xl"
    gpu = ["a100", "h100"]
    link_bw_GBps = [12, 25, 50]
    layers = 4

``solvers`` may also be a table of name -> options. Relative instance paths are looked up
beside the sweep file first; a relative ``output`` is written beside the sweep file. Options given
on the ``compare`` command line override the file's.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from slackswap.analysis import checks
from slackswap.analysis.jobs import (
    InstanceRef,
    SolverSpec,
    Sweep,
    grid_points,
    parse_budgets,
    ref_from_arg,
    ref_from_grid_point,
)
from slackswap.errors import UserError
from slackswap.textfile import read_user_text
from slackswap.userdoc import check_ints, parse_yaml, unknown_keys

KEYS = (
    "instances", "grid", "budgets", "seeds", "solvers", "time_limit", "job_timeout",
    "min_budget", "output",
)  # fmt: skip


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Read a ``.toml``, ``.yaml`` or ``.yml`` sweep file; errors name the file and the key."""
    p = Path(path)
    data = _read(p)
    if not isinstance(data, dict):
        raise UserError(f"{p}: a sweep file is a table of keys ({', '.join(KEYS)})")
    unknown = unknown_keys(data, KEYS)
    if unknown:
        raise UserError(f"{p}: unknown key {unknown[0]!r} (keys: {', '.join(KEYS)})")
    try:
        return _build(p, data)
    except UserError as exc:
        raise UserError(f"{p}: {exc}") from None


def _read(p: Path) -> Any:
    if not p.exists():
        raise UserError(f"{p}: no such sweep file")
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise UserError(f"{p}: a sweep file ends in .toml, .yaml or .yml")
    text = read_user_text(p, "a sweep file")
    try:
        if suffix == ".toml":
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise UserError(f"{p}: invalid TOML ({exc})") from None
            except ValueError as exc:  # an integer of more digits than Python converts
                reason = str(exc).split(";")[0]  # not Python's advice to raise its limit
                raise UserError(f"{p}: not readable TOML ({reason})") from None
        else:
            data = parse_yaml(text, str(p))
        check_ints(data, str(p))
        if _nesting(data) > MAX_NESTING:
            raise RecursionError
        return data
    except RecursionError:
        raise UserError(f"{p}: nested too deeply to be a sweep file") from None


MAX_NESTING = 32  # lists and tables inside each other; a sweep file needs four


def _nesting(data: Any) -> int:
    """How deep lists and tables nest in ``data`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING:  # deeper than that is refused anyway
                stack.extend((c, depth + 1) for c in children)
    return deepest


def _build(p: Path, data: dict[str, Any]) -> Sweep:
    instances: list[InstanceRef] = []
    for item in _as_list(data.get("instances", []), "instances"):
        if not isinstance(item, str):
            raise UserError(f"instances: expected a name or path, got {item!r}")
        beside = p.parent / item
        instances.append(ref_from_arg(str(beside) if beside.exists() else item))
    grids = data.get("grid", [])
    for grid in grids if isinstance(grids, list) else [grids]:
        if not isinstance(grid, dict):
            raise UserError(f"grid: expected a table of model, gpu, link, ..., got {grid!r}")
        instances.extend(ref_from_grid_point(pt) for pt in grid_points(grid))
    budgets = data.get("budgets")
    if budgets is None:
        raise UserError("'budgets' is required")
    seeds = checks.seeds(_as_list(data.get("seeds", [0]), "seeds"), "seeds")
    output = data.get("output")
    if output is not None:
        if not isinstance(output, str) or not output.strip():
            raise UserError(f"output: expected a file name, got {output!r}")
        if not os.path.isabs(output):
            output = str(p.parent / output)
    return Sweep(
        instances=instances,
        budgets=parse_budgets(budgets if isinstance(budgets, list) else str(budgets)),
        solvers=parse_solvers(data.get("solvers")),
        seeds=seeds,
        time_limit=_seconds(data.get("time_limit"), "time_limit"),
        job_timeout=_seconds(data.get("job_timeout"), "job_timeout"),
        find_min_budget=checks.flag(data.get("min_budget", True), "min_budget"),
        output=output,
    )


def parse_solvers(value: Any) -> list[SolverSpec]:
    """Solvers as names, ``{name, options, time_limit}`` tables, or a table name -> options."""
    if value is None:
        raise UserError("'solvers' is required")
    if isinstance(value, dict):
        value = [{"name": k, "options": v or {}} for k, v in value.items()]
    out: list[SolverSpec] = []
    for item in _as_list(value, "solvers"):
        if isinstance(item, str):
            out.extend(SolverSpec.of(n) for n in checks.comma_list(item, "solvers") if n)
        elif isinstance(item, dict):
            extra = unknown_keys(item, ("name", "options", "time_limit"))
            if "name" not in item or extra:
                bad = extra[0] if extra else "name"
                raise UserError(f"solvers: entry {item!r}: expected name, options, time_limit "
                                f"(problem with {bad!r})")  # fmt: skip
            opts = item.get("options") or {}
            if not isinstance(opts, dict):
                raise UserError(f"solvers: {item['name']}: options must be a table")
            tl = _seconds(item.get("time_limit"), f"solvers.{item['name']}.time_limit")
            out.append(SolverSpec.of(str(item["name"]), opts, tl))
        else:
            raise UserError(f"solvers: expected a name or a table, got {item!r}")
    return out


def _as_list(v: Any, key: str) -> list[Any]:
    if isinstance(v, list):
        return v
    if isinstance(v, str | int | float | dict):
        return [v]
    raise UserError(f"{key}: expected a list, got {v!r}")


def _seconds(v: Any, key: str) -> float | None:
    return None if v is None else checks.seconds(v, key)
