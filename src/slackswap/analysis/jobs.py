"""Sweep jobs: which instance, budget, solver (with options) and seed one run is.

A `Sweep` is the cartesian product instances x budgets x solvers x seeds; each element is a
`Job` with a stable ``job_id`` that results files record, so ``--resume`` can skip it. Instances
travel to workers as a *spec* (catalog name, file path or model-grid point) that the worker
rebuilds once and caches, or as the `Instance` itself when it has no spec (hand-built ones).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slackswap.problem import Instance, UserError

if TYPE_CHECKING:
    from slackswap.solvers.base import Solver

#: Keys a model-grid point may set (``build_model`` arguments plus two conveniences).
GRID_KEYS = ("model", "gpu", "link", "seq", "batch", "layers", "link_bw_GBps", "tokens")


@dataclass(frozen=True)
class InstanceRef:
    """An instance as a sweep sees it: its row label, how to rebuild it, and describing columns.

    ``spec`` is ``{"name": ...}`` (catalog), ``{"path": ...}`` (instance file) or a model-grid
    point ``{"model": ..., "gpu": ..., ...}``; empty when only ``obj`` (a hand-built instance)
    can provide it.
    """

    label: str
    content_hash: str
    spec: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Any] = field(default_factory=dict)
    obj: Instance | None = field(default=None, repr=False, compare=False)

    def load(self) -> Instance:
        if self.obj is not None:
            return self.obj
        return resolve_spec(self.spec)

    @property
    def spec_json(self) -> str:
        return json.dumps(self.spec, sort_keys=True)


def resolve_spec(spec: dict[str, Any]) -> Instance:
    """Build or load the instance a spec names (see `InstanceRef`)."""
    from slackswap.instances.catalog import build_model, load

    if "name" in spec:
        return load(spec["name"])
    if "path" in spec:
        return load(spec["path"])
    if "model" in spec:
        kw = {k: spec[k] for k in ("seq", "batch", "layers") if spec.get(k) is not None}
        bw = spec.get("link_bw_GBps")
        try:
            return build_model(
                spec["model"],
                spec.get("gpu") or "a100",
                spec.get("link"),
                link_bw_Bps=None if bw is None else float(bw) * 1e9,
                name=spec.get("label"),
                **kw,
            )
        except (KeyError, ValueError) as exc:
            raise UserError(f"model grid point {_short(spec)}: {exc}") from None
    raise UserError(f"instance spec {_short(spec)} names no catalog name, path or model")


def _short(spec: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in spec.items() if k != "label"}, sort_keys=True)


def instance_columns(inst: Instance) -> dict[str, Any]:
    """Columns that describe an instance in every results row (SI units)."""
    cfg = inst.meta.get("config", {}) if isinstance(inst.meta, dict) else {}
    return {
        "model": inst.meta.get("model") if isinstance(inst.meta, dict) else None,
        "gpu": inst.hardware.gpu,
        "link": inst.hardware.link,
        "link_bw_Bps": float(inst.hardware.link_bw_Bps),
        "seq": cfg.get("seq"),
        "batch": cfg.get("batch"),
        "layers": cfg.get("layers"),
        "n_ops": inst.n_ops,
        "n_tensors": inst.n_tensors,
        "saved_bytes": int(inst.saved_bytes),
        "instance_peak_bytes": int(inst.peak_bytes),
        "hideable_fraction": float(inst.hideable_fraction),
    }


def ref_from_instance(inst: Instance, spec: dict[str, Any] | None = None) -> InstanceRef:
    """An `InstanceRef` for a loaded instance (without a spec it travels as the object)."""
    return InstanceRef(
        label=inst.name,
        content_hash=inst.content_hash,
        spec=dict(spec or {}),
        columns=instance_columns(inst),
        obj=None if spec else inst,
    )


def ref_from_arg(name_or_path: str) -> InstanceRef:
    """An `InstanceRef` for a CLI argument or sweep-file entry: a catalog name or a file."""
    from slackswap.instances.catalog import load

    inst = load(name_or_path)
    is_file = os.path.exists(name_or_path) or name_or_path.endswith(".json")
    spec = {"path": os.path.abspath(name_or_path)} if is_file else {"name": name_or_path}
    return ref_from_instance(inst, spec)


def grid_points(grid: dict[str, Any]) -> list[dict[str, Any]]:
    """The cartesian product of a model grid (``{"model": [...], "seq": [...], ...}``)."""
    unknown = set(grid) - set(GRID_KEYS)
    if unknown:
        raise UserError(f"grid: unknown key {sorted(unknown)[0]!r} (keys: {', '.join(GRID_KEYS)})")
    if "model" not in grid:
        raise UserError("grid: 'model' is required")
    axes = {k: (v if isinstance(v, list) else [v]) for k, v in grid.items()}
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]


def ref_from_grid_point(point: dict[str, Any]) -> InstanceRef:
    """Build one model-grid point; ``tokens`` (per batch) sets batch = max(1, tokens // seq)."""
    from slackswap.models.hardware import get_gpu

    p = dict(point)
    tokens = p.pop("tokens", None)
    if tokens is not None:
        if not p.get("seq"):
            raise UserError(f"grid point {p}: 'tokens' needs 'seq'")
        p["batch"] = max(1, int(tokens) // int(p["seq"]))
    gpu = str(p.get("gpu") or "a100")
    try:
        link = p.get("link") or get_gpu(gpu).default_link
    except KeyError as exc:
        raise UserError(f"grid point {p}: {exc.args[0]}") from None
    label = f"{p['model']}@{gpu}-{link}"
    extras = [f"{k}={p[k]}" for k in ("layers", "seq", "batch") if p.get(k) is not None]
    if p.get("link_bw_GBps") is not None:
        extras.append(f"bw={float(p['link_bw_GBps']):g}GB/s")
    if extras:
        label += " " + " ".join(extras)
    spec = {**p, "label": label}
    inst = resolve_spec(spec)
    return ref_from_instance(inst, spec)


@dataclass(frozen=True)
class SolverSpec:
    """A registered solver with options, or an unregistered `Solver` object."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()
    time_limit: float | None = None  # overrides the sweep's time limit when set
    obj: Solver | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        if self.obj is not None:
            return repr(self.obj)
        if not self.options:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.options)})"

    @classmethod
    def of(
        cls, name: str, options: dict[str, Any] | None = None, time_limit: float | None = None
    ) -> SolverSpec:
        return cls(name, tuple(sorted((options or {}).items())), time_limit)

    @classmethod
    def of_object(cls, solver: Solver, time_limit: float | None = None) -> SolverSpec:
        return cls(type(solver).key or type(solver).__name__, (), time_limit, solver)

    def check(self) -> None:
        """Fail early (UserError) on an unknown solver or option, before any job starts."""
        if self.obj is not None:
            return
        from slackswap.solvers.base import REGISTRY

        REGISTRY[self.name].make(**dict(self.options))


@dataclass(frozen=True)
class Job:
    """One run: (instance, budget, solver, seed) plus the limits it runs under."""

    index: int
    instance: InstanceRef
    budget: str  # a budget spec: "0.5" (fraction of P), "11GB"
    solver: SolverSpec
    seed: int
    time_limit: float | None = None  # seconds, passed to the solver
    job_timeout: float | None = None  # seconds of wall clock before the guard stops the job
    find_min_budget: bool = True

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.instance.label, self.budget, self.solver.label, self.seed)

    @property
    def job_id(self) -> str:
        """Stable id of what the job computes: key, instance content hash and time limit."""
        blob = json.dumps(
            [*self.key, self.instance.content_hash, self.time_limit, self.find_min_budget]
        ).encode()
        return hashlib.sha1(blob).hexdigest()[:16]

    def columns(self) -> dict[str, Any]:
        """The columns a results row adds to `RunRecord.to_row()`."""
        return {
            "job_id": self.job_id,
            "budget": self.budget,
            "solver_name": self.solver.name,
            "solver_options": json.dumps(dict(self.solver.options), sort_keys=True, default=str),
            "instance_spec": self.instance.spec_json,
            **self.instance.columns,
        }


_RANGE = re.compile(r"^\s*([^:]+):([^:]+):([^:]+)\s*$")


def parse_budgets(text: str | list[Any]) -> list[str]:
    """Budgets from ``1.0,0.9,0.5``, ``50%``, ``11GB`` or ``1.0:0.1:-0.1`` (stop included).

    Fractions come back normalised (``0.3`` not ``0.30000000000000004``) so they make stable
    job keys; byte budgets are kept as written and parsed by `Budget.parse` at run time.
    """
    items: list[Any] = text if isinstance(text, list) else [t for t in text.split(",")]
    out: list[str] = []
    for item in items:
        if isinstance(item, int | float) and not isinstance(item, bool):
            out.append(_fraction(float(item), item))
            continue
        s = str(item).strip()
        if not s:
            continue
        m = _RANGE.match(s)
        if m:
            start, stop, step = (_float(g, s) for g in m.groups())
            if step == 0 or (stop - start) * step < 0:
                raise UserError(f"budget range {s!r}: step {step:g} never reaches {stop:g}")
            n = int(math.floor((stop - start) / step + 1e-9)) + 1
            out.extend(_fraction(start + i * step, s) for i in range(n))
        elif s.endswith("%"):
            out.append(_fraction(_float(s[:-1], s) / 100.0, s))
        elif re.fullmatch(r"[0-9.eE+-]+", s):
            out.append(_fraction(_float(s, s), s))
        else:
            out.append(_check_bytes(s))
    if not out:
        raise UserError("no budgets given")
    seen: dict[str, None] = {}
    for b in out:
        seen.setdefault(b, None)
    return list(seen)


def _float(text: str, whole: object) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"budget {whole!r}: {text!r} is not a number") from None


def _fraction(x: float, whole: object) -> str:
    if not math.isfinite(x) or x <= 0:
        raise UserError(f"budget {whole!r}: a fraction of the peak must be > 0, got {x:g}")
    return f"{round(x, 6):g}"


def _check_bytes(s: str) -> str:
    try:
        from slackswap.plan import Budget
    except ModuleNotFoundError:  # the plan module parses it at run time
        return s
    try:
        Budget.parse(s)
    except (ValueError, UserError) as exc:
        raise UserError(f"budget {s!r}: {exc}") from None
    return s


@dataclass
class Sweep:
    """Instances x budgets x solvers x seeds, with the limits every job runs under."""

    instances: list[InstanceRef]
    budgets: list[str]
    solvers: list[SolverSpec]
    seeds: list[int] = field(default_factory=lambda: [0])
    time_limit: float | None = None  # seconds per solve, unless a solver sets its own
    job_timeout: float | None = None  # hard wall-clock guard per job; None = derived
    find_min_budget: bool = True  # bisect the smallest feasible budget of infeasible runs
    output: str | None = None  # results file named by a sweep file

    def jobs(self) -> list[Job]:
        """Every job, instance-major, then budget, solver and seed."""
        out: list[Job] = []
        for inst, budget, solver, seed in itertools.product(
            self.instances, self.budgets, self.solvers, self.seeds
        ):
            tl = solver.time_limit if solver.time_limit is not None else self.time_limit
            out.append(
                Job(
                    index=len(out),
                    instance=inst,
                    budget=budget,
                    solver=solver,
                    seed=int(seed),
                    time_limit=tl,
                    job_timeout=self.job_timeout or default_job_timeout(tl),
                    find_min_budget=self.find_min_budget,
                )
            )
        ids = [j.job_id for j in out]
        if len(set(ids)) != len(ids):
            raise UserError("the sweep names the same job twice (repeated instance or solver?)")
        return out

    def check(self) -> None:
        for s in self.solvers:
            s.check()
        if not self.instances:
            raise UserError("no instances given")
        if not self.solvers:
            raise UserError("no solvers given")


def default_job_timeout(time_limit: float | None) -> float | None:
    """The hard guard for a job whose solver has ``time_limit`` seconds: 2x + 30 s, else none.

    Generous on purpose: `run` itself reports a solver that overruns its limit by more than
    10% as ``timeout``; the guard is only for a solver that does not come back at all. It also
    covers the scoring and the minimum-budget bisection (at most 5 s) after the solve.
    """
    return None if time_limit is None else 2.0 * time_limit + 30.0
