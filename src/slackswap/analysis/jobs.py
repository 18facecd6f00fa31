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

from slackswap.analysis import checks
from slackswap.analysis.checks import MAX_BUDGETS, sweep_size
from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.instances.catalog import build_model, load
from slackswap.models.hardware import get_gpu
from slackswap.plan import MAX_BUDGET_BYTES, Budget, PlanError, budget_too_big
from slackswap.solvers import REGISTRY
from slackswap.userdoc import unknown_keys

if TYPE_CHECKING:
    from slackswap.solvers.base import Solver

#: Most instances one model grid may build.
MAX_GRID_POINTS = 10_000
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

    inst = load(name_or_path)
    is_file = os.path.exists(name_or_path) or name_or_path.endswith(".json")
    spec = {"path": os.path.abspath(name_or_path)} if is_file else {"name": name_or_path}
    return ref_from_instance(inst, spec)


def grid_points(grid: dict[str, Any]) -> list[dict[str, Any]]:
    """The cartesian product of a model grid (``{"model": [...], "seq": [...], ...}``)."""
    unknown = unknown_keys(grid, GRID_KEYS)
    if unknown:
        raise UserError(f"grid: unknown key {unknown[0]!r} (keys: {', '.join(GRID_KEYS)})")
    if "model" not in grid:
        raise UserError("grid: 'model' is required")
    axes = {k: (v if isinstance(v, list) else [v]) for k, v in grid.items()}
    for k, values in axes.items():
        for v in values:
            _check_grid_value(k, v)
    names = list(axes)
    if math.prod(len(v) for v in axes.values()) > MAX_GRID_POINTS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in axes.items())
        raise UserError(f"grid: {sizes} make more than {MAX_GRID_POINTS:,} instances: split it")
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]


def _check_grid_value(key: str, v: Any) -> None:
    """A grid value of the right type: names are text, sizes positive integers, bandwidths
    positive finite numbers (so a typo is one line, not a traceback while building)."""
    if key in ("model", "gpu", "link"):
        ok = isinstance(v, str) and bool(v.strip())
        want = "a name"
    elif key == "link_bw_GBps":
        ok = isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < math.inf
        want = "a positive number (GB/s)"
    else:
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 2**31 - 1
        want = "a positive integer"
    if not ok:
        raise UserError(f"grid: {key}: expected {want}, got {v!r}")


def ref_from_grid_point(point: dict[str, Any]) -> InstanceRef:
    """Build one model-grid point; ``tokens`` (per batch) sets batch = max(1, tokens // seq)."""

    p = dict(point)
    tokens = p.pop("tokens", None)
    if tokens is not None:
        if not p.get("seq"):
            raise UserError(f"grid point {p}: 'tokens' needs 'seq'")
        p["batch"] = max(1, int(tokens) // int(p["seq"]))
    try:
        get_gpu(str(p.get("gpu") or "a100"))
    except KeyError as exc:
        raise UserError(f"grid point {p}: {exc.args[0]}") from None
    # The label is the instance's catalog name (every parameter that differs from the
    # model's default), so a grid point and `load(label)` are the same instance.
    inst = resolve_spec(p)
    spec = {**p, "label": inst.name}
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
        """``name`` as registered (any case), its options and time limit."""

        return cls(REGISTRY.canonical(name), tuple(sorted((options or {}).items())), time_limit)

    @classmethod
    def of_object(cls, solver: Solver, time_limit: float | None = None) -> SolverSpec:
        return cls(type(solver).key or type(solver).__name__, (), time_limit, solver)

    @property
    def uses_seed(self) -> bool:
        """False when the solver declares that the seed never changes its plan (``Tags.uses_seed``):
        a sweep then runs it once per case, whatever seeds it lists."""
        if self.obj is not None:
            return bool(getattr(type(self.obj).tags, "uses_seed", True))
        entry = REGISTRY.get(self.name)  # an unknown name is `check`'s to refuse
        return entry is None or bool(getattr(entry.tags, "uses_seed", True))

    def check(self) -> None:
        """Fail early (UserError) on an unknown solver or option, before any job starts."""
        if self.obj is not None:
            return

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
    #: The solver ignores the seed: this one job stands for every seed of the sweep.
    seed_independent: bool = False

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
            "seed_independent": int(self.seed_independent),
        }


_RANGE = re.compile(r"^\s*([^:]+):([^:]+):([^:]+)\s*$")


def parse_budgets(text: str | list[Any]) -> list[str]:
    """Budgets from ``1.0,0.9,0.5``, ``50%``, ``11GB`` or ``1.0:0.1:-0.1`` (stop included).

    Fractions come back normalised (``0.3`` not ``0.30000000000000004``) so they make stable
    job keys; byte budgets are kept as written. Each is checked by `Budget.parse` (the wording
    ``solve --budget`` uses); a range is counted before it is expanded (at most
    `checks.MAX_BUDGETS` points).
    """
    items: list[Any] = text if isinstance(text, list) else checks.comma_list(text, "budgets")
    out: list[str] = []
    for i, item in enumerate(items):
        if isinstance(item, int | float) and not isinstance(item, bool):
            out.append(_fraction(item))
            continue
        if not isinstance(item, str):
            _budget(item)  # refused with the common wording
        s = str(item).strip()
        if not s:
            if len(items) > 1:
                raise UserError(f"budgets: entry {i + 1} of {len(items)} is empty")
            continue
        m = _RANGE.match(s)
        if m:
            out.extend(_range(s, *m.groups()))
            continue
        b = _budget(s)
        out.append(budget_key(b) if b.kind == "fraction" else s)
    if not out:
        raise UserError("no budgets given")
    seen: dict[str, None] = {}
    for b in out:
        seen.setdefault(b, None)
    return list(seen)


def _budget(spec: Any) -> Any:
    return Budget.parse(spec)


def _range(whole: str, *parts: str) -> list[str]:
    vals = []
    for p in parts:
        try:
            vals.append(float(p))
        except ValueError:
            raise UserError(f"budget range {whole!r}: {p.strip()!r} is not a number") from None
    start, stop, step = vals
    if not all(math.isfinite(v) for v in vals):
        raise UserError(f"budget range {whole!r}: start, stop and step must be finite")
    if step == 0 or (stop - start) * step < 0:
        raise UserError(f"budget range {whole!r}: step {step:g} never reaches {stop:g}")
    steps = (stop - start) / step
    if not steps < MAX_BUDGETS:  # counted before it is built (also catches an overflow to inf)
        count = f"{math.floor(steps + 1e-9) + 1:,}" if math.isfinite(steps) else "too many"
        raise UserError(
            f"budget range {whole!r}: {count} budgets (at most {MAX_BUDGETS:,}): use a larger step"
        )
    n = math.floor(steps + 1e-9) + 1
    values = [round(start + i * step, 9) for i in range(n)]  # 0.1 * 3 is 0.30000000000000004
    if min(values) <= 0:
        raise UserError(f"budget range {whole!r} reaches {min(values):g}: budgets must be > 0")
    return [_fraction(v, whole) for v in values]


def _fraction(x: float, whole: object = None) -> str:
    """A fraction of P as a stable job key (``0.3``), checked by `Budget`."""

    return budget_key(Budget.parse(x) if whole is None else _budget_in(whole, x))


def budget_key(b: Budget) -> str:
    """A fraction of P as its job key (``0.3``): at most 6 decimals, a percentage above P."""
    r = round(b.value, 6)
    if r > 1:  # a bare number above 1 is refused when read back: above P is a percentage
        return f"{round(100 * b.value, 4):g}%"
    return f"{r:g}" if r > 0 else f"{b.value:.6g}"  # a tiny fraction keeps its digits


def _budget_in(whole: object, x: float) -> Any:
    try:
        return Budget.parse(x)
    except PlanError as exc:
        raise UserError(f"budget range {whole!r}: {exc}") from None


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
        """Every job, instance-major, then budget, solver and seed.

        A solver whose plan the seed never changes (``Tags.uses_seed=False``: the heuristics,
        `milp`) runs once per case, with the first seed, and its row says
        ``seed_independent = 1``: more seeds would repeat identical work."""
        self._size()
        out: list[Job] = []
        independent = {s.label: not s.uses_seed for s in self.solvers}
        first_seed = self.seeds[0] if self.seeds else 0
        for inst, budget, solver, seed in itertools.product(
            self.instances, self.budgets, self.solvers, self.seeds
        ):
            once = independent[solver.label]
            if once and seed != first_seed:
                continue
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
                    seed_independent=once,
                )
            )
        ids = [j.job_id for j in out]
        if len(set(ids)) != len(ids):
            raise UserError("the sweep names the same job twice (repeated instance or solver?)")
        return out

    def check(self) -> list[str]:
        """Refuse (UserError) anything a job would fail on, before any job runs; return warnings.

        The same checks as ``solve`` (`checks`, `Budget`, solver options), whichever entry
        point built the sweep: ``compare`` flags, a sweep file or code.
        """

        if not self.instances:
            raise UserError("no instances given")
        if not self.solvers:
            raise UserError("no solvers given")
        if not self.budgets:
            raise UserError("no budgets given")
        self._size()
        for s in self.solvers:
            s.check()
            if s.time_limit is not None:
                checks.seconds(s.time_limit, f"{s.name} time limit")
        self.seeds = [checks.seed(x, "seeds") for x in self.seeds]
        if self.time_limit is not None:
            self.time_limit = checks.seconds(self.time_limit, "time limit")
        if self.job_timeout is not None:
            self.job_timeout = checks.seconds(self.job_timeout, "job timeout")
        self.find_min_budget = checks.flag(self.find_min_budget, "min_budget")
        notes: list[str] = []
        for b in self.budgets:
            budget = Budget.parse(b)
            over = []
            for ref in self.instances:
                peak = int(ref.columns.get("instance_peak_bytes") or ref.load().peak_bytes)
                nbytes = budget.value * peak if budget.kind == "fraction" else budget.value
                if nbytes > MAX_BUDGET_BYTES:
                    raise PlanError(f"budget {b!r} of {ref.label}: {budget_too_big(nbytes)}")
                if nbytes > peak:
                    over.append((ref.label, nbytes / peak))
            if over:
                notes.append(checks.above_peak(b, over))
        return notes

    def _size(self) -> int:
        return sweep_size(
            {
                "instances": len(self.instances),
                "budgets": len(self.budgets),
                "solvers": len(self.solvers),
                "seeds": len(self.seeds),
            }
        )


def default_job_timeout(time_limit: float | None) -> float | None:
    """The hard guard for a job whose solver has ``time_limit`` seconds: 2x + 30 s, else none.

    Generous on purpose: `run` itself reports a solver that overruns its limit by more than
    10% as ``timeout``; the guard is only for a solver that does not come back at all. It also
    covers the scoring and the minimum-budget bisection (at most 5 s) after the solve.
    """
    return None if time_limit is None else 2.0 * time_limit + 30.0
